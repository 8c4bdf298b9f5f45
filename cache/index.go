package cache

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/google/btree"
)

// Why a record applied nothing. A refusal is the record's outcome, the
// same on every replica, not a fault.
var (
	// ErrConditionFailed is a put-if or delete-if whose condition did not
	// hold; Result.Version is the key's version (0 if absent).
	ErrConditionFailed = errors.New("cache: condition failed")
	// ErrNotFound is a delete of an absent key, or an expire record for a
	// key that changed since it expired.
	ErrNotFound = errors.New("cache: key not found")
	// ErrFull is a write that would make a key or counter past the
	// index's bound (WithMaxKeys).
	ErrFull = errors.New("cache: too many keys")
	// ErrCounterOverflow is an add that would carry a counter past the
	// int64 range; the counter keeps its value.
	ErrCounterOverflow = errors.New("cache: counter overflow")
	// ErrOffsetOrder is a record at or below an offset already applied: a
	// broken caller, since the log hands out increasing offsets.
	ErrOffsetOrder = errors.New("cache: offset not after the last applied")
)

// DefaultMaxKeys is the bound on one shard's keys and counters when
// WithMaxKeys is not given: about 1 GiB of index at 1 KiB a key.
const DefaultMaxKeys = 1 << 20

// MaxListLimit bounds one List page, and listScanFactor how many
// tombstones and expired keys a page may step over per entry it may
// return, so a page costs bounded time however the keys were deleted.
const (
	MaxListLimit   = 1000
	listScanFactor = 8
)

// maxPendingExpiries bounds the expire records Due hands out before the
// first of them applies: a burst of expiries is written in rounds.
const maxPendingExpiries = 1024

// Entry is a key as the index holds it. Value aliases the record it came
// from and is never written.
type Entry struct {
	Key     string
	Value   []byte
	Version uint64
	Expires int64 // unix nanoseconds; 0 never
	// Deleted marks a tombstone: the key was deleted (or expired) at
	// Version. Tombstones are kept until compaction passes them, so a
	// watcher resuming before them sees the delete.
	Deleted bool
}

func (e *Entry) presentAt(now int64) bool {
	return e != nil && !e.Deleted && (e.Expires == 0 || e.Expires > now)
}

// Counter is a counter's total and the offset of the add that set it.
type Counter struct {
	Value   int64
	Version uint64
}

// Result is what applying one record did.
type Result struct {
	// Err says why nothing applied; nil when the record applied.
	Err error
	// Version is the key's version after the record: its offset if it
	// applied, else the key's current version when Present.
	Version uint64
	// Present says whether the key is present after the record (by the
	// record's clock); a version of 0 is a real one, the log's first.
	Present bool
	// Prev is the key's entry before the record when it was present by
	// the record's clock: the value a delete removed, or a put replaced.
	Prev *Entry
	// Counter is a counter's total after an add or a set.
	Counter int64
	// Changes are the key changes watchers see, in op order: a put, a
	// delete or an expiry is one, a commit one per op that changed a key.
	Changes []Entry
	// Event is a commit's event.
	Event []byte
	// Kind is the record's kind, whether or not it applied: a watcher
	// tells an expiry's delete from a delete by it.
	Kind Kind
}

// Expiry names a key whose expiry passed, at the version that expired:
// the shard writes it as a KindExpire record.
type Expiry struct {
	Key     string
	Version uint64
}

type expiryItem struct {
	at  int64
	key string
}

// Index is one shard's key index. It is not safe for concurrent use: the
// shard that owns it is its only caller.
type Index struct {
	// keys holds every key with a live entry or a tombstone.
	keys *btree.BTreeG[*Entry]
	// expiries holds the live entries with an expiry, soonest first.
	expiries *btree.BTreeG[expiryItem]
	// pending maps a key to the version Due handed out for it, until a
	// record for the key applies.
	pending  map[string]uint64
	counters map[string]*Counter
	// live counts present keys (expired ones until their expire record
	// applies) and counters, against maxKeys.
	live       int
	tombstones int
	maxKeys    int
	applied    uint64
	hasApplied bool
	// resumableFrom is the lowest version a watcher may resume from:
	// compaction dropped records below it.
	resumableFrom uint64
}

// Option configures an Index.
type Option func(*Index)

// WithMaxKeys bounds the keys and counters of the index, overriding
// DefaultMaxKeys; a write that would make one more is refused (ErrFull).
// Every replica must use the same bound, since it decides what applies.
func WithMaxKeys(n int) Option {
	return func(x *Index) { x.maxKeys = n }
}

// New returns an empty index.
func New(opts ...Option) *Index {
	x := &Index{
		keys:     btree.NewG(32, func(a, b *Entry) bool { return a.Key < b.Key }),
		expiries: btree.NewG(32, func(a, b expiryItem) bool { return a.at < b.at || (a.at == b.at && a.key < b.key) }),
		pending:  map[string]uint64{},
		counters: map[string]*Counter{},
		maxKeys:  DefaultMaxKeys,
	}
	for _, o := range opts {
		o(x)
	}
	return x
}

// Replay decodes one record of the log and applies it at offset: how a
// shard rebuilds the index on open.
func (x *Index) Replay(offset uint64, payload []byte) (Result, error) {
	r, err := DecodeRecord(payload)
	if err != nil {
		return Result{}, fmt.Errorf("record at %d: %w", offset, err)
	}
	return x.Apply(offset, &r), nil
}

// Apply applies r, the record at offset. Offsets must increase.
func (x *Index) Apply(offset uint64, r *Record) Result {
	if x.hasApplied && offset <= x.applied {
		return Result{Err: ErrOffsetOrder}
	}
	x.applied, x.hasApplied = offset, true
	res := x.apply(offset, r)
	res.Kind = r.Kind
	return res
}

func (x *Index) apply(offset uint64, r *Record) Result {
	switch r.Kind {
	case KindPut:
		return x.applyPut(offset, r)
	case KindDelete:
		return x.applyDelete(offset, r)
	case KindExpire:
		return x.applyExpire(offset, r)
	case KindCounterAdd, KindCounterSet:
		return x.applyCounter(offset, r)
	case KindCommit:
		return x.applyCommit(offset, r)
	}
	return Result{Err: fmt.Errorf("%w: kind %d", ErrBadRecord, r.Kind)}
}

func (x *Index) applyPut(offset uint64, r *Record) Result {
	cur := x.entry(r.Key)
	if res, ok := checkCond(cur, r.Cond, r.At); !ok {
		return res
	}
	if !cur.counted() && x.live >= x.maxKeys {
		return refusal(ErrFull, cur, r.At)
	}
	res := Result{Version: offset, Present: true, Prev: cur.prevAt(r.At)}
	e := x.set(&Entry{Key: r.Key, Value: r.Value, Version: offset, Expires: r.Expires})
	res.Changes = []Entry{*e}
	return res
}

func (x *Index) applyDelete(offset uint64, r *Record) Result {
	cur := x.entry(r.Key)
	if res, ok := checkCond(cur, r.Cond, r.At); !ok {
		return res
	}
	if !cur.presentAt(r.At) {
		return Result{Err: ErrNotFound}
	}
	res := Result{Version: offset, Prev: cur}
	res.Changes = []Entry{*x.set(&Entry{Key: r.Key, Version: offset, Deleted: true})}
	return res
}

func (x *Index) applyExpire(offset uint64, r *Record) Result {
	cur := x.entry(r.Key)
	if v, ok := x.pending[r.Key]; ok && v == r.Version {
		delete(x.pending, r.Key)
	}
	if !cur.counted() || cur.Version != r.Version {
		return refusal(ErrNotFound, cur, r.At)
	}
	res := Result{Version: offset, Prev: cur}
	res.Changes = []Entry{*x.set(&Entry{Key: r.Key, Version: offset, Deleted: true})}
	return res
}

func (x *Index) applyCounter(offset uint64, r *Record) Result {
	c := x.counters[r.Key]
	if c == nil && x.live >= x.maxKeys {
		return Result{Err: ErrFull}
	}
	total := r.Delta
	if r.Kind == KindCounterAdd && c != nil {
		if (r.Delta > 0 && c.Value > math.MaxInt64-r.Delta) || (r.Delta < 0 && c.Value < math.MinInt64-r.Delta) {
			return Result{Err: ErrCounterOverflow, Version: c.Version, Present: true, Counter: c.Value}
		}
		total = c.Value + r.Delta
	}
	if c == nil {
		x.live++
	}
	x.counters[r.Key] = &Counter{Value: total, Version: offset}
	return Result{Version: offset, Present: true, Counter: total}
}

func (x *Index) applyCommit(offset uint64, r *Record) Result {
	grows := 0
	for _, op := range r.Ops {
		if !op.Delete && !x.entry(op.Key).counted() {
			grows++
		}
	}
	// All or nothing: a commit that would overflow the index changes no
	// key. Deletes in the same commit do not make room, so the check needs
	// no order among the ops.
	if grows > 0 && x.live+grows > x.maxKeys {
		return Result{Err: ErrFull}
	}
	res := Result{Version: offset, Event: r.Event}
	for _, op := range r.Ops {
		cur := x.entry(op.Key)
		if op.Delete && !cur.presentAt(r.At) {
			continue
		}
		e := &Entry{Key: op.Key, Value: op.Value, Version: offset, Expires: op.Expires, Deleted: op.Delete}
		res.Changes = append(res.Changes, *x.set(e))
	}
	return res
}

// checkCond judges c against cur by the record's clock; when it fails,
// the result to answer with.
func checkCond(cur *Entry, c Cond, at int64) (Result, bool) {
	switch c.Kind {
	case CondAbsent:
		if cur.presentAt(at) {
			return Result{Err: ErrConditionFailed, Version: cur.Version, Present: true}, false
		}
	case CondVersion:
		if !cur.presentAt(at) || cur.Version != c.Version {
			return refusal(ErrConditionFailed, cur, at), false
		}
	}
	return Result{}, true
}

// counted says whether e counts against the bound: present, or expired
// and not yet deleted.
func (e *Entry) counted() bool { return e != nil && !e.Deleted }

// refusal is a result that applied nothing, with the key as it stands.
func refusal(err error, cur *Entry, at int64) Result {
	if !cur.presentAt(at) {
		return Result{Err: err}
	}
	return Result{Err: err, Version: cur.Version, Present: true}
}

func (e *Entry) prevAt(now int64) *Entry {
	if !e.presentAt(now) {
		return nil
	}
	return e
}

func (x *Index) entry(key string) *Entry {
	e, _ := x.keys.Get(&Entry{Key: key})
	return e
}

// set replaces key's entry with e (entries are never changed in place:
// readers may hold the old one) and keeps the counts, the expiry order and
// the pending expiries in step.
func (x *Index) set(e *Entry) *Entry {
	old, had := x.keys.ReplaceOrInsert(e)
	if had {
		if old.Deleted {
			x.tombstones--
		} else {
			x.live--
		}
		if !old.Deleted && old.Expires != 0 {
			x.expiries.Delete(expiryItem{at: old.Expires, key: old.Key})
		}
	}
	if e.Deleted {
		x.tombstones++
	} else {
		x.live++
	}
	if !e.Deleted && e.Expires != 0 {
		x.expiries.ReplaceOrInsert(expiryItem{at: e.Expires, key: e.Key})
	}
	delete(x.pending, e.Key)
	return e
}

// Get returns key's entry if it is present at now.
func (x *Index) Get(key string, now int64) (Entry, bool) {
	e := x.entry(key)
	if !e.presentAt(now) {
		return Entry{}, false
	}
	return *e, true
}

// Lookup is one key of StateGet.
type Lookup struct {
	Key   string
	Entry Entry
	Found bool
}

// StateGet reads keys as of one applied offset, which it returns: what a
// commit wrote is seen whole or not at all.
func (x *Index) StateGet(keys []string, now int64) ([]Lookup, uint64) {
	out := make([]Lookup, 0, len(keys))
	for _, k := range keys {
		e, ok := x.Get(k, now)
		out = append(out, Lookup{Key: k, Entry: e, Found: ok})
	}
	return out, x.applied
}

// List returns up to limit keys present at now that start with prefix and
// sort after after, in key order; a limit of 0, or past MaxListLimit, is
// MaxListLimit. next is where the following page starts (pass it as
// after), "" when the prefix is done.
func (x *Index) List(prefix, after string, limit int, now int64) (page []Entry, next string) {
	if limit <= 0 || limit > MaxListLimit {
		limit = MaxListLimit
	}
	budget := limit * listScanFactor
	from := prefix
	if after >= from {
		from = after + "\x00"
	}
	x.keys.AscendGreaterOrEqual(&Entry{Key: from}, func(e *Entry) bool {
		if !strings.HasPrefix(e.Key, prefix) {
			next = ""
			return false
		}
		if len(page) == limit || budget == 0 {
			return false
		}
		budget--
		next = e.Key
		if e.presentAt(now) {
			page = append(page, *e)
		}
		return true
	})
	if next != "" && !x.hasKeyAfter(prefix, next) {
		next = ""
	}
	return page, next
}

func (x *Index) hasKeyAfter(prefix, key string) bool {
	found := false
	x.keys.AscendGreaterOrEqual(&Entry{Key: key + "\x00"}, func(e *Entry) bool {
		found = strings.HasPrefix(e.Key, prefix)
		return false
	})
	return found
}

// Matching returns the entries present at now that a watch of key (or,
// with prefix, of every key starting with key) covers, in key order: a
// retained watch's snapshot. It stops after limit entries or once their
// keys and values pass limitBytes, and complete says whether it got them
// all; tombstones and expired keys cost a step each, so a snapshot's time
// is bounded by what the index holds under the prefix.
func (x *Index) Matching(key string, prefix bool, now int64, limit int, limitBytes int64) (entries []Entry, complete bool) {
	if !prefix {
		e, ok := x.Get(key, now)
		if !ok {
			return nil, true
		}
		return []Entry{e}, true
	}
	complete = true
	var bytes int64
	x.keys.AscendGreaterOrEqual(&Entry{Key: key}, func(e *Entry) bool {
		if !strings.HasPrefix(e.Key, key) {
			return false
		}
		if !e.presentAt(now) {
			return true
		}
		bytes += int64(len(e.Key) + len(e.Value))
		if len(entries) == limit || bytes > limitBytes {
			complete = false
			return false
		}
		entries = append(entries, *e)
		return true
	})
	return entries, complete
}

// Counter returns counter key's total.
func (x *Index) Counter(key string) (Counter, bool) {
	c := x.counters[key]
	if c == nil {
		return Counter{}, false
	}
	return *c, true
}

// Due returns up to limit keys whose expiry passed at now, soonest first,
// for the shard to write as expire records. A key handed out is not handed
// out again until a record for it applies or ForgetPendingExpiries.
func (x *Index) Due(now int64, limit int) []Expiry {
	var out []Expiry
	x.expiries.Ascend(func(it expiryItem) bool {
		if it.at > now || len(out) >= limit || len(x.pending) >= maxPendingExpiries {
			return false
		}
		if _, ok := x.pending[it.key]; ok {
			return true
		}
		e := x.entry(it.key)
		x.pending[it.key] = e.Version
		out = append(out, Expiry{Key: it.key, Version: e.Version})
		return true
	})
	return out
}

// ForgetPendingExpiries makes Due hand out again the keys it handed out:
// for a shard that became leader, whose earlier expire records may never
// have reached the log.
func (x *Index) ForgetPendingExpiries() { clear(x.pending) }

// Compacted tells the index that the log below horizon was compacted: it
// drops the tombstones there (their records are gone, so a restart would
// not rebuild them either) and refuses resumes below it.
func (x *Index) Compacted(horizon uint64) {
	var drop []*Entry
	x.keys.Ascend(func(e *Entry) bool {
		if e.Deleted && e.Version < horizon {
			drop = append(drop, e)
		}
		return true
	})
	for _, e := range drop {
		x.keys.Delete(e)
		x.tombstones--
	}
	x.resumableFrom = max(x.resumableFrom, horizon)
}

// ResumableFrom is the lowest version a watcher may resume from; a watch
// asking for less must start again from a snapshot.
func (x *Index) ResumableFrom() uint64 { return x.resumableFrom }

// Stats counts what the index holds.
type Stats struct {
	Keys, Tombstones, Counters int
	// Applied is the last offset applied; HasApplied says whether any was.
	Applied    uint64
	HasApplied bool
}

// Stats returns the index's counts.
func (x *Index) Stats() Stats {
	return Stats{
		Keys: x.live - len(x.counters), Tombstones: x.tombstones, Counters: len(x.counters),
		Applied: x.applied, HasApplied: x.hasApplied,
	}
}
