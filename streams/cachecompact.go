package streams

import (
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/cache"
)

// Compaction of a durable cache shard's log. Below a horizon it keeps what
// cache.Planner decides (the newest History changes per key, counters
// folded), every record at its own offset, so the log has gaps.
//
// The horizon: a record newer than the resume window
// (ShardConfig.CacheResumeWindow, cache_resume_window_ms) is never
// compacted, so a watcher that disconnected less than that long ago can
// resume past it from its version; the horizon is also held below the
// log's committed end and its active segment (persistence never rewrites
// that one, and every record below the horizon must pass the planner: one
// left as written could be a put-if naming a version the planner dropped).
// The floor, the lowest version a watch may resume from (cacheFloor), is
// the log's start until compaction runs, then its last horizon; it only
// rises, and survives a restart (the log keeps the horizon).
//
// When: on the expiry tick, once the records below the horizon are at least
// twice what compaction can keep of them (History per key and tombstone,
// one per counter: an upper bound the index knows without reading the
// log), and the log grew by as many records as the last compaction kept
// since it ran, so compaction's work per write stays bounded.
//
// Off the shard's path: a worker goroutine replays the records below the
// horizon into a planner (the first pass), then has the log write the
// compacted copies of the sealed segments (the second); the shard commits
// the swap when the worker's result arrives (a message), between writes,
// and drops the index's tombstones below the horizon in the same step. A
// shard that stops first stops the worker and removes its copies.
//
// A replicated shard's log is raft's: each replica compacts its own, the
// same rule on each, entry by entry (the log keeps each entry's index,
// term and span), and its horizon is also held below Replica.
// CompactableEnd, so nothing raft may still send a follower, or truncate,
// is rewritten. Horizons differ between replicas (the resume window reads
// each one's clock, the compaction points differ); reads are by key from
// the index, which compaction leaves as it was on each, so only a watch's
// resume sees where a replica's floor is. While a follower may be copying
// the replica's segment files (Replica.CopyingSegments: a snapshot sent
// or a chunk served lately) no compaction starts, and one prepared is
// given up rather than committed, so no file is swapped between two
// chunks of a copy.

// CompactableLog is a Log whose sealed segments compaction can rewrite
// (the broker's adapter over persistence.Log). A shard whose log is not
// one never compacts.
type CompactableLog interface {
	Log
	// SealedEnd is the offset below which every record is in a sealed
	// segment: compaction's horizon never passes it.
	SealedEnd() uint64
	// PrepareCompaction writes the compacted copies of the sealed segments
	// below horizon, asking keep about every record below it; safe from
	// any goroutine, changes nothing until Commit.
	PrepareCompaction(horizon uint64, keep func(offset uint64, value []byte) ([]byte, bool, error)) (PreparedCompaction, error)
	// CompactedBelow is the last committed compaction's horizon (0: none).
	CompactedBelow() uint64
}

// PreparedCompaction is a compaction written and not yet swapped in.
type PreparedCompaction interface {
	// Horizon is where it was prepared below.
	Horizon() uint64
	// Commit swaps the copies in: crash-safe, all or nothing.
	Commit() (CompactionStats, error)
	// Abort removes the copies.
	Abort() error
}

// CompactionStats is what one compaction removed.
type CompactionStats struct {
	Segments       int
	RecordsRemoved int
	BytesRemoved   int64
}

// CacheCompacted reports one compaction a cache shard committed, for
// metrics (ShardConfig.OnCacheCompacted).
type CacheCompacted struct {
	CompactionStats
	Horizon uint64
	// Took is the worker's time, both passes, and the commit's.
	Took time.Duration
}

// DefaultCacheResumeWindow is cache_resume_window_ms's default: an hour
// of a cache's writes stays whole for watchers to resume into.
const DefaultCacheResumeWindow = time.Hour

// minCompactionGrowth is the least the log grows between two compactions,
// so a cache of a few keys is not rewritten on every tick.
const minCompactionGrowth = 1024

// errCompactionStopped ends a worker whose shard stops.
var errCompactionStopped = errors.New("streams: the shard stopped during compaction")

// cacheCompaction is a cache shard's compaction state, the shard's alone.
type cacheCompaction struct {
	history int
	// records counts the records in the log: every one applied, less
	// those compactions removed.
	records int
	// growAfter: the next compaction waits for the log to reach it.
	growAfter uint64
	running   bool
	// count, last and lastAt: the compactions committed since the shard
	// started, the last one and when (cachestatus.go).
	count  int
	last   *CacheCompacted
	lastAt time.Time
	worker worker
	result chan *compactionResult // capacity 1: the worker's one answer
}

// compactionResult is a worker's answer.
type compactionResult struct {
	prep    PreparedCompaction
	horizon uint64
	err     error
	started time.Time
}

// cacheCompactionDone wakes the shard for a worker's result.
type cacheCompactionDone struct{ actors.ControlMessage }

var cacheCompactionDoneMessage = &cacheCompactionDone{}

// CacheFloor asks a cache shard for its floor (cacheFloor), answered with
// *CacheReadResult.
type CacheFloor struct{ actors.ControlMessage }

func (s *shard) handleCacheFloor(ctx actor.Context) {
	if err := s.cacheReadable(); err != nil {
		ctx.Respond(&CacheReadResult{Err: err})
		return
	}
	ctx.Respond(&CacheReadResult{Floor: s.cacheFloor()})
}

// cacheFloor is the lowest version a watch may resume from on this cache
// shard: below it compaction may have dropped changes, and a watch asking
// for less must start again from a snapshot. The log's start until
// compaction runs, then the last compaction's horizon; it never goes back,
// also across restarts.
func (s *shard) cacheFloor() uint64 { return s.cache.index.ResumableFrom() }

// compactedBelow is the log's compaction horizon, 0 for a log that never
// compacts.
func compactedBelow(log Log) uint64 {
	if cl, ok := log.(CompactableLog); ok {
		return cl.CompactedBelow()
	}
	return 0
}

// maybeCompactCache starts a compaction worker when the rule in this
// file's doc says one is due.
func (s *shard) maybeCompactCache() {
	if s.cache == nil || s.log == nil || s.stopping || s.cache.compaction.running || s.copyingSegments() {
		return
	}
	log, ok := s.log.(CompactableLog)
	if !ok {
		return
	}
	c := &s.cache.compaction
	next := log.NextOffset()
	st := s.cache.index.Stats()
	keepable := c.history*(st.Keys+st.Tombstones) + st.Counters
	// Cheap checks first: the horizon costs a lookup in the log, and
	// this runs every tick on every cache shard.
	if next < c.growAfter || c.records < 2*keepable {
		return
	}
	horizon, err := s.cacheHorizon(log)
	if err != nil {
		s.logger.Warn().Err(err).Msg("cache compaction horizon")
		return
	}
	// No record at or above the horizon was ever removed: compaction
	// removes only below its horizons, which never pass this one.
	below := c.records - int(next-horizon)
	if horizon <= s.cacheFloor() || below < 2*keepable || below <= 0 {
		return
	}
	c.running = true
	from, history, started := log.StartOffset(), c.history, time.Now()
	c.worker = startWorker(func(quit <-chan struct{}) {
		prep, err := compactCacheLog(quit, log, from, horizon, history)
		c.result <- &compactionResult{prep: prep, horizon: horizon, err: err, started: started}
		s.root.Send(s.self, cacheCompactionDoneMessage)
	})
}

// cacheHorizon is where compaction may reach now: below the resume
// window, the committed end and the active segment, and on a replicated
// shard what raft no longer serves.
func (s *shard) cacheHorizon(log CompactableLog) (uint64, error) {
	horizon := min(log.Committed(), log.SealedEnd())
	if s.repl != nil {
		horizon = min(horizon, s.repl.replica.CompactableEnd())
	}
	if w := s.cfg.CacheResumeWindow; w > 0 {
		recent, err := log.OffsetForTime(time.Now().Add(-w))
		if err != nil {
			return 0, err
		}
		horizon = min(horizon, recent)
	}
	return horizon, nil
}

// compactCacheLog is the worker: the planner's two passes over the log
// below horizon, the second writing the copies. It runs on its own
// goroutine and touches nothing of the shard's.
func compactCacheLog(quit <-chan struct{}, log CompactableLog, from, horizon uint64, history int) (PreparedCompaction, error) {
	p := cache.NewPlanner(horizon, history)
	for off := from; off < horizon; {
		select {
		case <-quit:
			return nil, errCompactionStopped
		default:
		}
		page, err := log.Read(off, cacheRebuildRecords, cacheRebuildBytes)
		if err != nil {
			return nil, err
		}
		for _, rec := range page.Records {
			if rec.Offset >= horizon {
				break
			}
			r, err := cache.DecodeRecord(rec.Value)
			if err != nil {
				return nil, fmt.Errorf("record at %d: %w", rec.Offset, err)
			}
			p.Observe(rec.Offset, &r)
		}
		if page.Next <= off {
			break
		}
		off = page.Next
	}
	prep, err := log.PrepareCompaction(horizon, func(offset uint64, value []byte) ([]byte, bool, error) {
		select {
		case <-quit:
			return nil, false, errCompactionStopped
		default:
		}
		r, err := cache.DecodeRecord(value)
		if err != nil {
			return nil, false, fmt.Errorf("record at %d: %w", offset, err)
		}
		out, ok := p.Decide(offset, &r)
		if !ok {
			return nil, false, nil
		}
		enc, err := cache.AppendRecord(nil, &out)
		return enc, err == nil, err
	})
	if err != nil {
		return nil, err
	}
	if prep.Horizon() != horizon {
		// The planner decided for another horizon: its choice does not
		// hold for this one.
		return nil, errors.Join(fmt.Errorf("streams: compaction prepared below %d, planned below %d", prep.Horizon(), horizon), prep.Abort())
	}
	return prep, nil
}

// handleCacheCompactionDone commits a worker's compaction, between writes:
// the log swaps the segments in and the index drops what the log no
// longer holds, in one step of the shard.
func (s *shard) handleCacheCompactionDone() {
	if s.cache == nil || !s.cache.compaction.running {
		return
	}
	c := &s.cache.compaction
	res := <-c.result // the worker sent it before this message
	c.worker.stop()
	c.running = false
	c.growAfter = s.log.NextOffset() + uint64(max(c.records, minCompactionGrowth))
	if res.err != nil {
		s.logger.Warn().Err(res.err).Msg("cache compaction")
		return
	}
	if s.copyingSegments() {
		// A follower may be copying the files the commit would swap:
		// the next tick after the copy prepares again.
		c.growAfter = 0
		if err := res.prep.Abort(); err != nil {
			s.logger.Warn().Err(err).Msg("abort cache compaction")
		}
		return
	}
	stats, err := res.prep.Commit()
	if err != nil {
		s.logger.Error().Err(err).Msg("cache compaction commit")
		s.stopIfLogFailed()
		return
	}
	s.cache.index.Compacted(res.horizon)
	c.records -= stats.RecordsRemoved
	c.growAfter = s.log.NextOffset() + uint64(max(c.records, minCompactionGrowth))
	took := time.Since(res.started)
	s.logger.Debug().Uint64("horizon", res.horizon).Int("records_removed", stats.RecordsRemoved).
		Int64("bytes_removed", stats.BytesRemoved).Dur("took", took).Msg("cache compacted")
	done := &CacheCompacted{CompactionStats: stats, Horizon: res.horizon, Took: took}
	c.count, c.last, c.lastAt = c.count+1, done, time.Now()
	if s.cfg.OnCacheCompacted != nil {
		s.cfg.OnCacheCompacted(done)
	}
}

// copyingSegments says a follower may be copying this replica's segment
// files: no compaction starts or commits meanwhile, so none swaps a file
// between two of the copy's chunks.
func (s *shard) copyingSegments() bool {
	return s.repl != nil && s.repl.replica.CopyingSegments()
}

// stopCacheCompaction stops a running worker and removes what it wrote,
// before the shard closes its log.
func (s *shard) stopCacheCompaction() {
	if s.cache == nil || !s.cache.compaction.running {
		return
	}
	c := &s.cache.compaction
	c.worker.stop()
	c.running = false
	select {
	case res := <-c.result:
		if res.prep != nil {
			if err := res.prep.Abort(); err != nil {
				s.logger.Warn().Err(err).Msg("abort cache compaction")
			}
		}
	default:
	}
}
