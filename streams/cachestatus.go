package streams

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/getfelix/felix-go/actors"
)

// A cache shard's status, for the operators' pages: what its index holds,
// its watchers, how many writes it applied and reads it answered since it
// started (the page turns two samples into rates), and its compaction.
// The counters are the shard's own fields, touched only in its Receive.

// CacheStatus asks a cache shard for its status, answered with
// *CacheStatusResult. Unlike a read it is answered on a replica that does
// not lead too: it describes the replica, not the cache's latest state.
type CacheStatus struct{ actors.ControlMessage }

// CacheStatusResult answers CacheStatus.
type CacheStatusResult struct {
	Keys, Tombstones, Counters int
	// Watchers are the watches registered with the shard.
	Watchers int
	// Writes counts the records applied (puts, deletes, counter adds,
	// commits, expiries), Reads the reads answered (gets, lists, counter
	// and state gets), both since the shard started.
	Writes, Reads uint64
	// Applied is the offset of the last record applied (HasApplied:
	// whether any was).
	Applied    uint64
	HasApplied bool
	// Floor is the lowest version a watch may resume from (CacheFloor).
	Floor uint64
	// LogRecords counts the records in the log compaction looks at;
	// Compacting says a compaction's worker runs now; Compactions counts
	// the compactions committed since the shard started, the last of
	// them LastCompaction (nil: none), at LastCompactionAt.
	LogRecords       int
	Compacting       bool
	Compactions      int
	LastCompaction   *CacheCompacted
	LastCompactionAt time.Time
	Err              error
}

func (s *shard) handleCacheStatus(ctx actor.Context) {
	switch {
	case s.cache == nil:
		ctx.Respond(&CacheStatusResult{Err: errNotACache})
		return
	case s.open != nil && s.log == nil:
		ctx.Respond(&CacheStatusResult{Err: s.cacheReadable()})
		return
	}
	c := s.cache
	st := c.index.Stats()
	res := &CacheStatusResult{
		Keys: st.Keys, Tombstones: st.Tombstones, Counters: st.Counters, Watchers: len(c.watch.watchers),
		Writes: c.writes, Reads: c.reads, Applied: st.Applied, HasApplied: st.HasApplied, Floor: s.cacheFloor(),
		LogRecords: c.compaction.records, Compacting: c.compaction.running, Compactions: c.compaction.count,
		LastCompactionAt: c.compaction.lastAt,
	}
	if last := c.compaction.last; last != nil {
		copied := *last
		res.LastCompaction = &copied
	}
	ctx.Respond(res)
}
