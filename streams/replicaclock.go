package streams

import (
	"sync/atomic"
	"time"
)

// A replicated shard's raft clock. An awake group ticks every ReplicaTick:
// raft's heartbeats and election timers count those ticks. A quiet group
// (replication's quiesce) does not tick raft at all, so its ticks only
// refresh what the member shows of it (status, the shard's owner record,
// a move or a drain to act on) and run retention; at a thousand shards,
// ten such ticks a second each were most of a member's idle cost. So a
// quiet replica's clock slows down: a quiet leader ticks every
// QuietLeaderTick, enough to keep its owner record claimed and its status
// fresh; a quiet follower at the retention interval (at least
// QuietLeaderTick, at most quietFollowerMax). Anything that can wake the
// group (a message from a peer, a proposal, a read, a member gone) brings
// the fast tick back at once (hurry).
//
// Nothing in raft's correctness rests on the slow tick: a quiet group is
// woken explicitly, by a message or by the member (MemberGone), never by
// a tick. The clock is a timer armed for the next tick only, not a
// goroutine per shard.

// QuietLeaderTick is a quiet leader's tick.
const QuietLeaderTick = time.Second

// quietFollowerMax bounds a quiet follower's tick: a move away is noticed
// on a tick (the replica reads its replica set again), so not later than
// this.
const quietFollowerMax = 10 * time.Second

// replicaClock posts the shard its replica's ticks. Only the shard's
// goroutine arms, hurries and stops it; fire runs on the timer's.
type replicaClock struct {
	timer *time.Timer
	// every is the interval the timer was last armed with.
	every time.Duration
	// stopped is read by fire too: a tick that fires while the shard stops
	// it is not posted.
	stopped atomic.Bool
}

// startReplicaClock arms the first tick, ReplicaTick from now: a replica
// starts awake.
func startReplicaClock(post func()) *replicaClock {
	c := &replicaClock{every: ReplicaTick}
	c.timer = time.AfterFunc(ReplicaTick, func() {
		if !c.stopped.Load() {
			post()
		}
	})
	return c
}

// arm schedules the next tick every from now; the shard calls it after
// each tick. Like every method, it does nothing on a nil clock (a shard
// built by a test without one).
func (c *replicaClock) arm(every time.Duration) {
	if c == nil || c.stopped.Load() {
		return
	}
	c.every = every
	c.timer.Reset(every)
}

// hurry brings the next tick within ReplicaTick, if the clock runs slow:
// the group may be awake again.
func (c *replicaClock) hurry() {
	if c == nil || c.every == ReplicaTick || c.stopped.Load() {
		return
	}
	c.arm(ReplicaTick)
}

// ended says stop was called.
func (c *replicaClock) ended() bool { return c != nil && c.stopped.Load() }

// stop ends the clock; no tick is posted after it returns, but for one
// already firing, which the shard ignores once stopped.
func (c *replicaClock) stop() {
	if c != nil {
		c.stopped.Store(true)
		c.timer.Stop()
	}
}

// replicaTickEvery is the interval to the next tick of a replica: the
// fast tick while its group is awake or the shard waits on it (reads to
// confirm or apply, proposals to settle), else the quiet role's.
func replicaTickEvery(quiet, leader, waiting bool, retention time.Duration) time.Duration {
	switch {
	case !quiet || waiting:
		return ReplicaTick
	case leader:
		return QuietLeaderTick
	}
	return min(max(retention, QuietLeaderTick), quietFollowerMax)
}
