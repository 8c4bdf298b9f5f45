package streams

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/cache"
	"github.com/getfelix/felix-go/wire"
)

// Caches. A stream whose Def has Cache set is a cache: each shard keeps a
// cache.Index over its own records, and its records are cache records
// only. A write is a Publish with Cache set and goes through the publish
// pipeline as a one-record batch (so the mailbox, the ledger, durability,
// the fence and raft treat it as any publish); the shard stamps it with its
// clock, the writer's (cache.Record.At), and applies it to the index in
// publishBatch, the step every committed record passes on every replica,
// leader and follower alike. The answer carries what applying did
// (PublishResult.Cache). Reads are answered from the applied index, on a
// replicated cache by the leader only. Opening, a shard rebuilds its index
// from its log before it takes anything (a replicated one up to what its
// replica had applied; raft applies the rest).
//
// Expiry: every cacheExpiryInterval the shard that takes writes (any
// unreplicated one, a replicated one's leader) writes an expire record for
// each key Index.Due names; a failed one is handed out again next round,
// and a new leader hands out again what its predecessor may never have
// written. Duplicates are harmless: an expire record deletes only the
// version it names.
//
// Watches (cachewatch.go): each change applying a record made is encoded
// once and offered to the shard's watchers it matches. Compaction of a
// durable shard's log: cachecompact.go.

// CacheSettings make a stream a cache.
type CacheSettings struct {
	// TTL is the expiry of a put that names none; zero: none.
	TTL time.Duration
	// History is how many changes per key compaction keeps below its
	// horizon, 1 to cache.MaxHistory; the registry stores 0 as
	// cache.DefaultHistory.
	History int
}

// HistoryOrDefault reads a stored history: a definition written before
// history existed has none, and opens as one change per key.
func HistoryOrDefault(h int) int {
	if h == 0 {
		return cache.DefaultHistory
	}
	return h
}

// CacheOp is a Publish's cache write: one record, whose At (and, from
// TTL, Expires) the shard sets.
type CacheOp struct {
	Record cache.Record
	// TTL is a put's time to live; zero takes the cache's TTL.
	TTL time.Duration
	// OpTTLs, parallel to a commit's Record.Ops, are its puts' times to
	// live (zero, or past the end: the cache's TTL).
	OpTTLs []time.Duration
}

// cacheExpiryInterval is how often a cache shard looks for expired keys:
// a key is absent to reads at its expiry already, so this bounds only how
// late watchers see the delete.
const cacheExpiryInterval = time.Second

// maxExpiriesPerRound bounds the expire records one round writes, so one
// round holds the shard for a bounded time.
const maxExpiriesPerRound = 256

// cacheRebuildPage bounds one read of the log while the index is rebuilt.
const (
	cacheRebuildRecords = 1024
	cacheRebuildBytes   = 4 << 20
)

// Cache reads: each is a request answered with *CacheReadResult.

// CacheGet reads one key.
type CacheGet struct {
	actors.ControlMessage
	Key string
}

// CacheList reads a page of keys by prefix (cache.Index.List).
type CacheList struct {
	actors.ControlMessage
	Prefix, After string
	Limit         int
}

// CounterGet reads one counter.
type CounterGet struct {
	actors.ControlMessage
	Key string
}

// StateGet reads several keys as of one applied offset.
type StateGet struct {
	actors.ControlMessage
	Keys []string
}

// CacheReadResult answers a cache read; which fields count depends on the
// request.
type CacheReadResult struct {
	Entry   cache.Entry   // CacheGet
	Found   bool          // CacheGet, CounterGet
	Page    []cache.Entry // CacheList
	Next    string        // CacheList: the next page's After, "" at the end
	Counter cache.Counter // CounterGet
	Lookups []cache.Lookup
	Applied uint64 // StateGet: the offset the lookups are as of
	Floor   uint64 // CacheFloor
	Err     error
}

// expireDue is the shard's expiry tick.
type expireDue struct{ actors.ControlMessage }

var expireDueMessage = &expireDue{}

var (
	errNotACache  = wire.NewError(wire.CodeInvalidRequest, "the stream is not a cache")
	errCacheWrite = wire.NewError(wire.CodeInvalidRequest, "a cache takes cache writes only (no plain, conditional or idempotent publishes)")
)

// cacheState is a cache shard's: the index and its tick.
type cacheState struct {
	index *cache.Index
	ttl   time.Duration
	tick  *retentionTicker
	// term is the leader term expiries were handed out in (replicated).
	term uint64
	// applied is the results of the batch publishBatch applied last, for
	// deliver's answer; reused.
	applied []cache.Result
	watch   watchState // cachewatch.go
	// compaction is the log's (cachecompact.go).
	compaction cacheCompaction
	// writes and reads count the records applied and the reads answered
	// since the shard started (cachestatus.go).
	writes, reads uint64
}

func newCacheState(settings *CacheSettings, cfg ShardConfig) *cacheState {
	c := &cacheState{
		index: cache.New(), ttl: settings.TTL,
		compaction: cacheCompaction{history: max(settings.History, cache.DefaultHistory), result: make(chan *compactionResult, 1)},
	}
	c.watch.history.maxChanges = cfg.watchHistoryChanges
	return c
}

// cachePublish turns a cache write into the one-record publish the
// pipeline runs, stamped with the shard's clock, or refuses it.
func (s *shard) cachePublish(p *Publish) (*Publish, error) {
	switch {
	case s.cache == nil:
		return nil, errNotACache
	case p.Cache == nil || p.ExpectedOffset != nil || p.Producer != nil:
		return nil, errCacheWrite
	}
	r := p.Cache.Record
	r.At = s.now().UnixNano()
	ttl := p.Cache.TTL
	if ttl == 0 {
		ttl = s.cache.ttl
	}
	if r.Kind == cache.KindPut && r.Expires == 0 && ttl > 0 {
		r.Expires = r.At + int64(ttl)
	}
	if r.Kind == cache.KindCommit {
		r.Ops = s.stampOps(r.At, r.Ops, p.Cache.OpTTLs)
	}
	enc, err := cache.AppendRecord(nil, &r)
	if err != nil {
		return nil, wire.WrapError(wire.CodeInvalidRequest, err, "cache write to %s", s.scope)
	}
	return &Publish{Payloads: [][]byte{enc}, Done: p.Done, Received: p.Received}, nil
}

// stampOps gives a commit's puts their expiry by the shard's clock, in a
// copy: the caller's ops are its message's, never written.
func (s *shard) stampOps(at int64, ops []cache.Op, ttls []time.Duration) []cache.Op {
	out := make([]cache.Op, len(ops))
	for i, op := range ops {
		ttl := s.cache.ttl
		if i < len(ttls) && ttls[i] > 0 {
			ttl = ttls[i]
		}
		if !op.Delete && op.Expires == 0 && ttl > 0 {
			op.Expires = at + int64(ttl)
		}
		out[i] = op
	}
	return out
}

func (s *shard) now() time.Time {
	if s.cfg.now != nil {
		return s.cfg.now()
	}
	return time.Now()
}

// applyCache applies a committed batch's records to the index.
func (s *shard) applyCache(env *Envelope) {
	c := s.cache
	clear(c.applied)
	c.applied = c.applied[:0]
	for i, payload := range env.Payloads {
		res, err := c.index.Replay(env.Base+uint64(i), payload)
		if err != nil {
			// Only the shard writes this log, and it writes nothing it
			// cannot read: a record that does not decode is damage, and
			// the index skips it as applying nothing.
			s.logger.Error().Err(err).Msg("cache record skipped")
			res.Err = err
		}
		s.recordChanges(env.Base+uint64(i), &res)
		c.applied = append(c.applied, res)
	}
	c.compaction.records += len(env.Payloads)
	c.writes += uint64(len(env.Payloads))
}

// cacheResult is the answer to the one-record cache publish just applied.
func (s *shard) cacheResult() *cache.Result {
	if s.cache == nil || len(s.cache.applied) != 1 {
		return nil
	}
	res := s.cache.applied[0]
	return &res
}

// rebuildCache replays the log from its start up to end into a new index.
func (s *shard) rebuildCache(log Log, end uint64) error {
	if s.cache == nil {
		return nil
	}
	index := cache.New()
	start := log.StartOffset()
	// The history a resume replays is refilled as the log replays: a
	// watch resumed after a restart gets the changes it missed.
	history := watchHistory{floor: start, maxChanges: s.cache.watch.history.maxChanges}
	var changes []watchChange
	records := 0
	for from := start; from < end; {
		page, err := log.Read(from, cacheRebuildRecords, cacheRebuildBytes)
		if err != nil {
			return err
		}
		if len(page.Records) == 0 {
			break
		}
		for _, rec := range page.Records {
			if rec.Offset >= end {
				break
			}
			res, err := index.Replay(rec.Offset, rec.Value)
			if err != nil {
				return err
			}
			changes = appendChanges(changes[:0], rec.Offset, &res)
			for _, c := range changes {
				history.push(c)
			}
			records++
		}
		from = page.Next
	}
	// Records below the start are gone, and below the last compaction's
	// horizon some are: a watch may not resume there.
	index.Compacted(max(start, compactedBelow(log)))
	s.cache.index = index
	s.cache.watch.history = history
	s.cache.compaction.records = records
	return nil
}

// startCacheTicker starts the expiry tick, once the shard took its place.
func (s *shard) startCacheTicker(self *actor.PID) {
	if s.cache == nil {
		return
	}
	every := s.cfg.cacheExpiryInterval
	if every <= 0 {
		every = cacheExpiryInterval
	}
	s.cache.tick = startRetentionTicker(every, func() { s.root.Send(self, expireDueMessage) })
}

// handleExpireDue writes an expire record for each key due, through the
// pipeline, as any write.
func (s *shard) handleExpireDue() {
	if s.cache == nil || (s.open != nil && s.log == nil) || s.stopping {
		return
	}
	s.maybeCompactCache()
	if s.repl != nil {
		role := s.repl.replica.Role()
		if !role.Leader {
			return
		}
		if role.Term != s.cache.term {
			s.cache.term = role.Term
			s.cache.index.ForgetPendingExpiries()
		}
	}
	for _, due := range s.cache.index.Due(s.now().UnixNano(), maxExpiriesPerRound) {
		rec := cache.Record{Kind: cache.KindExpire, Key: due.Key, Version: due.Version}
		s.handlePublish(&Publish{Cache: &CacheOp{Record: rec}, Done: s.expiryDone})
	}
}

// expiryDone hands every pending expiry out again after a failed write:
// which of them reached the log is unknown, and a duplicate is harmless.
func (s *shard) expiryDone(res PublishResult) {
	if res.Err != nil && s.cache != nil {
		s.cache.index.ForgetPendingExpiries()
	}
}

func (s *shard) handleCacheGet(ctx actor.Context, msg *CacheGet) {
	if err := s.cacheReadable(); err != nil {
		ctx.Respond(&CacheReadResult{Err: err})
		return
	}
	s.cache.reads++
	e, ok := s.cache.index.Get(msg.Key, s.now().UnixNano())
	ctx.Respond(&CacheReadResult{Entry: e, Found: ok})
}

func (s *shard) handleCacheList(ctx actor.Context, msg *CacheList) {
	if err := s.cacheReadable(); err != nil {
		ctx.Respond(&CacheReadResult{Err: err})
		return
	}
	s.cache.reads++
	page, next := s.cache.index.List(msg.Prefix, msg.After, msg.Limit, s.now().UnixNano())
	ctx.Respond(&CacheReadResult{Page: page, Next: next})
}

func (s *shard) handleCounterGet(ctx actor.Context, msg *CounterGet) {
	if err := s.cacheReadable(); err != nil {
		ctx.Respond(&CacheReadResult{Err: err})
		return
	}
	s.cache.reads++
	c, ok := s.cache.index.Counter(msg.Key)
	ctx.Respond(&CacheReadResult{Counter: c, Found: ok})
}

func (s *shard) handleStateGet(ctx actor.Context, msg *StateGet) {
	if err := s.cacheReadable(); err != nil {
		ctx.Respond(&CacheReadResult{Err: err})
		return
	}
	s.cache.reads++
	ls, at := s.cache.index.StateGet(msg.Keys, s.now().UnixNano())
	ctx.Respond(&CacheReadResult{Lookups: ls, Applied: at})
}

// cacheReadable refuses a read the shard cannot answer from an index it
// knows current: not a cache, a log not open, a replica not leading or
// still applying its predecessors' entries.
func (s *shard) cacheReadable() error {
	switch {
	case s.cache == nil:
		return errNotACache
	case s.open != nil && s.log == nil:
		return wire.NewError(wire.CodeStorage, "the log of %s shard %d is not open", s.scope, s.n)
	case s.repl != nil:
		role := s.repl.replica.Role()
		if !role.Leader {
			return role.NotLeader
		}
		if s.repl.appliedTerm != role.Term {
			return errLeaderCatchingUp
		}
	}
	return nil
}
