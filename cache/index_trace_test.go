package cache

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestIndexTrace runs the scripts in testdata/*.txt against one index and
// the log it was built from. Every write is a record appended at the next
// offset (a refused one takes its offset too) and applied; it prints what
// applying answered and the changes a watcher would see. The clock is
// logical: it starts at zero and moves only by tick, and each record
// carries it. Regenerate with -rewrite; only commit the changes if you
// understand what caused them.
//
// Commands:
//
//	new [max-keys=N]                          an empty index and log
//	put key=K [value=V] [ttl=D] [if=absent|N] put, or put-if
//	del key=K [if=N]                          delete, or delete-if
//	add key=K delta=N | set key=K total=N     counter records
//	commit [event=E] [put=K:V,...] [del=K,...]
//	get key=K | counter key=K | state keys=K,...
//	ls [prefix=P] [after=K] [limit=N]
//	tick D                                    move the clock
//	expire [limit=N]                          write the expire records Due names
//	due [limit=N]                             only ask Due, keep what it named
//	write-due                                 write what due kept
//	forget-expiries                           ForgetPendingExpiries
//	replay                                    rebuild from the encoded log, compare
//	compact horizon=N [history=H]             compact the log, compare its replay
//	dump                                      every entry, tombstones, counters
func TestIndexTrace(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		var tr *indexTrace
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd == "new" {
				tr = &indexTrace{}
				d.MaybeScanArgs(t, "max-keys", &tr.maxKeys)
				tr.x = New(tr.opts()...)
				return dumpIndex(tr.x)
			}
			if tr == nil {
				d.Fatalf(t, "%s before new", d.Cmd)
			}
			return tr.run(t, d)
		})
	})
}

type stored struct {
	offset uint64
	rec    Record
}

type indexTrace struct {
	x       *Index
	log     []stored
	next    uint64
	now     time.Duration
	maxKeys int
	// horizon is the last compaction's: what a shard opening its
	// compacted log tells the index it rebuilds.
	horizon uint64
	// due is what Due named and the trace has not yet written.
	due []Expiry
}

func (tr *indexTrace) opts() []Option {
	if tr.maxKeys == 0 {
		return nil
	}
	return []Option{WithMaxKeys(tr.maxKeys)}
}

func (tr *indexTrace) run(t *testing.T, d *datadriven.TestData) string {
	switch d.Cmd {
	case "put":
		r := Record{Kind: KindPut, Key: arg(t, d, "key"), Value: []byte(optArg(t, d, "value"))}
		if ttl := durArg(t, d, "ttl"); ttl > 0 {
			r.Expires = int64(tr.now + ttl)
		}
		r.Cond = condArg(t, d)
		return tr.write(t, d, &r)
	case "del":
		r := Record{Kind: KindDelete, Key: arg(t, d, "key"), Cond: condArg(t, d)}
		return tr.write(t, d, &r)
	case "add", "set":
		r := Record{Kind: KindCounterAdd, Key: arg(t, d, "key")}
		if d.Cmd == "set" {
			r.Kind = KindCounterSet
			d.ScanArgs(t, "total", &r.Delta)
		} else {
			d.ScanArgs(t, "delta", &r.Delta)
		}
		return tr.write(t, d, &r)
	case "commit":
		return tr.write(t, d, commitArg(t, d))
	case "get":
		return showGet(arg(t, d, "key"), tr.x, int64(tr.now))
	case "counter":
		c, ok := tr.x.Counter(arg(t, d, "key"))
		if !ok {
			return "absent\n"
		}
		return fmt.Sprintf("%d @%d\n", c.Value, c.Version)
	case "state":
		return tr.state(t, d)
	case "ls":
		return tr.list(t, d)
	case "matching":
		return tr.matching(t, d)
	case "tick":
		dur, err := time.ParseDuration(d.CmdArgs[0].Key)
		if err != nil {
			d.Fatalf(t, "tick: %v", err)
		}
		tr.now += dur
		return fmt.Sprintf("now %s\n", tr.now)
	case "expire":
		tr.due = nil
		tr.askDue(t, d)
		return tr.writeDue(t, d)
	case "due":
		return tr.askDue(t, d)
	case "write-due":
		return tr.writeDue(t, d)
	case "forget-expiries":
		tr.x.ForgetPendingExpiries()
		return "ok\n"
	case "replay":
		return tr.replay(t, d)
	case "compact":
		return tr.compact(t, d)
	case "dump":
		return dumpIndex(tr.x)
	}
	d.Fatalf(t, "unknown command %s", d.Cmd)
	return ""
}

// write appends r at the next offset, through the codec, and applies it.
func (tr *indexTrace) write(t *testing.T, d *datadriven.TestData, r *Record) string {
	r.At = int64(tr.now)
	enc, err := AppendRecord(nil, r)
	if err != nil {
		return fmt.Sprintf("not written: %v\n", err)
	}
	dec, err := DecodeRecord(enc)
	if err != nil {
		d.Fatalf(t, "decode of a record just encoded: %v", err)
	}
	off := tr.next
	tr.next++
	tr.log = append(tr.log, stored{offset: off, rec: dec})
	return showResult(off, &dec, tr.x.Apply(off, &dec))
}

func (tr *indexTrace) state(t *testing.T, d *datadriven.TestData) string {
	var b strings.Builder
	ls, at := tr.x.StateGet(strings.Split(arg(t, d, "keys"), ","), int64(tr.now))
	fmt.Fprintf(&b, "as of %d\n", at)
	for _, l := range ls {
		if !l.Found {
			fmt.Fprintf(&b, "%s absent\n", l.Key)
			continue
		}
		fmt.Fprintf(&b, "%s\n", showEntry(&l.Entry))
	}
	return b.String()
}

// matching shows a retained watch's snapshot: the key's entry, or with
// prefix every present key under it, up to limit entries and bytes.
func (tr *indexTrace) matching(t *testing.T, d *datadriven.TestData) string {
	limit, bytes := 100, int64(1<<20)
	d.MaybeScanArgs(t, "limit", &limit)
	d.MaybeScanArgs(t, "bytes", &bytes)
	key, prefix := optArg(t, d, "key"), false
	if p := optArg(t, d, "prefix"); p != "" || key == "" {
		key, prefix = p, true
	}
	entries, complete := tr.x.Matching(key, prefix, int64(tr.now), limit, bytes)
	var b strings.Builder
	for i := range entries {
		fmt.Fprintf(&b, "%s\n", showEntry(&entries[i]))
	}
	if complete {
		b.WriteString("complete\n")
	} else {
		b.WriteString("incomplete\n")
	}
	return b.String()
}

func (tr *indexTrace) list(t *testing.T, d *datadriven.TestData) string {
	var limit int
	d.MaybeScanArgs(t, "limit", &limit)
	page, next := tr.x.List(optArg(t, d, "prefix"), optArg(t, d, "after"), limit, int64(tr.now))
	var b strings.Builder
	for i := range page {
		fmt.Fprintf(&b, "%s\n", showEntry(&page[i]))
	}
	if next != "" {
		fmt.Fprintf(&b, "next after %s\n", next)
	} else {
		b.WriteString("end\n")
	}
	return b.String()
}

// askDue asks Due for the keys to expire, as the shard's expiry timer
// does, and keeps them for writeDue.
func (tr *indexTrace) askDue(t *testing.T, d *datadriven.TestData) string {
	limit := 100
	d.MaybeScanArgs(t, "limit", &limit)
	due := tr.x.Due(int64(tr.now), limit)
	if len(due) == 0 {
		return "nothing due\n"
	}
	tr.due = append(tr.due, due...)
	var b strings.Builder
	for _, e := range due {
		fmt.Fprintf(&b, "due %s @%d\n", e.Key, e.Version)
	}
	return b.String()
}

// writeDue writes an expire record for each key askDue kept.
func (tr *indexTrace) writeDue(t *testing.T, d *datadriven.TestData) string {
	if len(tr.due) == 0 {
		return "nothing due\n"
	}
	var b strings.Builder
	for _, e := range tr.due {
		b.WriteString(tr.write(t, d, &Record{Kind: KindExpire, Key: e.Key, Version: e.Version}))
	}
	tr.due = nil
	return b.String()
}

// replay rebuilds an index from the encoded log and fails unless it holds
// what the live one does.
func (tr *indexTrace) replay(t *testing.T, d *datadriven.TestData) string {
	y := tr.rebuild(t, d, tr.log)
	y.Compacted(tr.horizon)
	if got, want := dumpIndex(y), dumpIndex(tr.x); got != want {
		d.Fatalf(t, "replay differs:\ngot:\n%swant:\n%s", got, want)
	}
	return fmt.Sprintf("replayed %d records: same state\n", len(tr.log))
}

func (tr *indexTrace) rebuild(t *testing.T, d *datadriven.TestData, log []stored) *Index {
	y := New(tr.opts()...)
	for _, s := range log {
		enc, err := AppendRecord(nil, &s.rec)
		if err != nil {
			d.Fatalf(t, "encode %d: %v", s.offset, err)
		}
		if _, err := y.Replay(s.offset, enc); err != nil {
			d.Fatalf(t, "replay: %v", err)
		}
	}
	return y
}

// compact plans compaction below the horizon, replaces the log with what
// it keeps, and fails unless the compacted log replays to the live state.
func (tr *indexTrace) compact(t *testing.T, d *datadriven.TestData) string {
	var horizon uint64
	history := 1
	d.ScanArgs(t, "horizon", &horizon)
	d.MaybeScanArgs(t, "history", &history)
	p := NewPlanner(horizon, history, tr.opts()...)
	for _, s := range tr.log {
		p.Observe(s.offset, &s.rec)
	}
	var b strings.Builder
	var kept []stored
	for _, s := range tr.log {
		out, keep := p.Decide(s.offset, &s.rec)
		if keep {
			kept = append(kept, stored{offset: s.offset, rec: out})
		}
		if s.offset >= horizon {
			continue
		}
		switch {
		case !keep:
			fmt.Fprintf(&b, "%d %s: dropped\n", s.offset, showRecord(&s.rec))
		case showRecord(&out) != showRecord(&s.rec):
			fmt.Fprintf(&b, "%d %s: kept as %s\n", s.offset, showRecord(&s.rec), showRecord(&out))
		default:
			fmt.Fprintf(&b, "%d %s: kept\n", s.offset, showRecord(&s.rec))
		}
	}
	tr.log, tr.horizon = kept, horizon
	tr.x.Compacted(horizon)
	y := tr.rebuild(t, d, kept)
	y.Compacted(horizon)
	if got, want := dumpIndex(y), dumpIndex(tr.x); got != want {
		d.Fatalf(t, "compacted log replays differently:\ngot:\n%swant:\n%s", got, want)
	}
	fmt.Fprintf(&b, "%d records left; the compacted log replays to the same state\n", len(kept))
	return b.String()
}

// dump prints everything the index holds but the last applied offset,
// which a compacted log may end before.
func dumpIndex(x *Index) string {
	var b strings.Builder
	x.keys.Ascend(func(e *Entry) bool {
		fmt.Fprintf(&b, "%s\n", showEntry(e))
		return true
	})
	for _, k := range sortedKeys(x.counters) {
		c := x.counters[k]
		fmt.Fprintf(&b, "counter %s = %d @%d\n", k, c.Value, c.Version)
	}
	st := x.Stats()
	fmt.Fprintf(&b, "keys %d tombstones %d counters %d resumable from %d\n", st.Keys, st.Tombstones, st.Counters, x.ResumableFrom())
	return b.String()
}

func showGet(key string, x *Index, now int64) string {
	e, ok := x.Get(key, now)
	if !ok {
		return key + " absent\n"
	}
	return showEntry(&e) + "\n"
}

func showEntry(e *Entry) string {
	if e.Deleted {
		return fmt.Sprintf("%s deleted @%d", e.Key, e.Version)
	}
	s := fmt.Sprintf("%s = %q @%d", e.Key, e.Value, e.Version)
	if e.Expires != 0 {
		s += fmt.Sprintf(" expires %s", time.Duration(e.Expires))
	}
	return s
}

func showRecord(r *Record) string {
	s := r.Kind.String()
	switch r.Kind {
	case KindPut:
		s += fmt.Sprintf(" %s=%q", r.Key, r.Value)
	case KindDelete:
		s += " " + r.Key
	case KindExpire:
		s += fmt.Sprintf(" %s@%d", r.Key, r.Version)
	case KindCounterAdd, KindCounterSet:
		s += fmt.Sprintf(" %s %d", r.Key, r.Delta)
	case KindCommit:
		if len(r.Event) > 0 {
			s += fmt.Sprintf(" event=%q", r.Event)
		}
		for _, op := range r.Ops {
			if op.Delete {
				s += " del " + op.Key
			} else {
				s += fmt.Sprintf(" %s=%q", op.Key, op.Value)
			}
		}
	}
	switch r.Cond.Kind {
	case CondAbsent:
		s += " if absent"
	case CondVersion:
		s += fmt.Sprintf(" if @%d", r.Cond.Version)
	}
	return s
}

func showResult(off uint64, r *Record, res Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s: ", off, r.Kind)
	switch {
	case res.Err != nil && res.Present:
		fmt.Fprintf(&b, "refused (%s); key at @%d", errName(res.Err), res.Version)
	case res.Err != nil:
		fmt.Fprintf(&b, "refused (%s)", errName(res.Err))
	default:
		b.WriteString("applied")
	}
	if res.Err == nil && (r.Kind == KindCounterAdd || r.Kind == KindCounterSet) {
		fmt.Fprintf(&b, ", total %d", res.Counter)
	}
	if res.Err != nil && res.Err == ErrCounterOverflow {
		fmt.Fprintf(&b, ", total stays %d", res.Counter)
	}
	if res.Prev != nil {
		fmt.Fprintf(&b, ", was %q @%d", res.Prev.Value, res.Prev.Version)
	}
	b.WriteString("\n")
	if len(res.Event) > 0 {
		fmt.Fprintf(&b, "  event %q\n", res.Event)
	}
	for i := range res.Changes {
		fmt.Fprintf(&b, "  change %s\n", showEntry(&res.Changes[i]))
	}
	return b.String()
}

func errName(err error) string {
	for _, e := range []error{ErrConditionFailed, ErrNotFound, ErrFull, ErrCounterOverflow, ErrOffsetOrder} {
		if errors.Is(err, e) {
			return strings.TrimPrefix(e.Error(), "cache: ")
		}
	}
	return err.Error()
}

func arg(t *testing.T, d *datadriven.TestData, key string) string {
	var s string
	d.ScanArgs(t, key, &s)
	return s
}

func optArg(t *testing.T, d *datadriven.TestData, key string) string {
	var s string
	d.MaybeScanArgs(t, key, &s)
	return s
}

func durArg(t *testing.T, d *datadriven.TestData, key string) time.Duration {
	s := optArg(t, d, key)
	if s == "" {
		return 0
	}
	dur, err := time.ParseDuration(s)
	if err != nil {
		d.Fatalf(t, "%s=%s: %v", key, s, err)
	}
	return dur
}

func condArg(t *testing.T, d *datadriven.TestData) Cond {
	s := optArg(t, d, "if")
	switch s {
	case "":
		return Cond{}
	case "absent":
		return Cond{Kind: CondAbsent}
	}
	var v uint64
	if _, err := fmt.Sscan(s, &v); err != nil {
		d.Fatalf(t, "if=%s: %v", s, err)
	}
	return Cond{Kind: CondVersion, Version: v}
}

func commitArg(t *testing.T, d *datadriven.TestData) *Record {
	r := &Record{Kind: KindCommit}
	if e := optArg(t, d, "event"); e != "" {
		r.Event = []byte(e)
	}
	for _, kv := range splitList(optArg(t, d, "put")) {
		k, v, _ := strings.Cut(kv, ":")
		r.Ops = append(r.Ops, Op{Key: k, Value: []byte(v)})
	}
	for _, k := range splitList(optArg(t, d, "del")) {
		r.Ops = append(r.Ops, Op{Key: k, Delete: true})
	}
	return r
}

func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
