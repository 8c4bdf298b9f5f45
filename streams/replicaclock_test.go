package streams

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestReplicaClockSlowsAndHurries: the clock ticks once per interval it
// was armed with, hurry brings a slow tick within ReplicaTick, and
// nothing fires after stop.
func TestReplicaClockSlowsAndHurries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var fired atomic.Int32
		c := startReplicaClock(func() { fired.Add(1) })
		expect := func(want int32, what string) {
			t.Helper()
			synctest.Wait()
			if got := fired.Load(); got != want {
				t.Fatalf("%s: %d ticks, want %d", what, got, want)
			}
		}
		time.Sleep(ReplicaTick)
		expect(1, "a new clock after ReplicaTick")
		c.arm(QuietLeaderTick)
		c.hurry() // slow: the next tick comes back within ReplicaTick
		time.Sleep(ReplicaTick)
		expect(2, "hurried right after arming slow")
		c.arm(QuietLeaderTick)
		time.Sleep(QuietLeaderTick - time.Millisecond)
		expect(2, "armed slow, just before its interval")
		time.Sleep(time.Millisecond)
		expect(3, "armed slow, at its interval")
		c.arm(QuietLeaderTick)
		time.Sleep(QuietLeaderTick / 2)
		c.hurry()
		time.Sleep(ReplicaTick)
		expect(4, "hurried half-way through a slow interval")
		c.arm(ReplicaTick)
		c.hurry() // already fast: the tick stays where it was
		time.Sleep(ReplicaTick)
		expect(5, "a fast clock hurried")
		c.arm(QuietLeaderTick)
		c.stop()
		c.hurry()
		c.arm(ReplicaTick)
		time.Sleep(time.Minute)
		expect(5, "after stop")
	})
}

func TestReplicaTickEvery(t *testing.T) {
	for _, tc := range []struct {
		quiet, leader, waiting bool
		retention, want        time.Duration
	}{
		{quiet: false, leader: true, retention: 10 * time.Second, want: ReplicaTick},
		{quiet: false, leader: false, retention: 10 * time.Second, want: ReplicaTick},
		{quiet: true, leader: true, waiting: true, retention: 10 * time.Second, want: ReplicaTick},
		{quiet: true, leader: false, waiting: true, retention: 10 * time.Second, want: ReplicaTick},
		{quiet: true, leader: true, retention: 10 * time.Second, want: QuietLeaderTick},
		{quiet: true, leader: false, retention: 10 * time.Second, want: 10 * time.Second},
		{quiet: true, leader: false, retention: 3 * time.Second, want: 3 * time.Second},
		{quiet: true, leader: false, retention: time.Millisecond, want: QuietLeaderTick},
		{quiet: true, leader: false, retention: time.Hour, want: quietFollowerMax},
	} {
		if got := replicaTickEvery(tc.quiet, tc.leader, tc.waiting, tc.retention); got != tc.want {
			t.Errorf("replicaTickEvery(quiet %v, leader %v, waiting %v, retention %v) = %v, want %v",
				tc.quiet, tc.leader, tc.waiting, tc.retention, got, tc.want)
		}
	}
}

// TestQuietShardTicksSlowly: a shard whose replica is quiet ticks it at
// the quiet leader's interval, not every ReplicaTick; a message from a
// peer that wakes the replica brings the fast tick back, and MemberGone
// reaches the replica through the inbox.
func TestQuietShardTicksSlowly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &fakeReplica{term: 1}
		spawnReplicatedShard(t, r)
		becomeLeader(t, r, 1)
		ticks := func() int {
			synctest.Wait()
			r.mu.Lock()
			defer r.mu.Unlock()
			return r.ticks
		}
		time.Sleep(10 * ReplicaTick)
		if got := ticks(); got < 9 {
			t.Fatalf("an awake replica ticked %d times in %v, want about 10", got, 10*ReplicaTick)
		}
		r.mu.Lock()
		r.quiet = true
		r.mu.Unlock()
		time.Sleep(ReplicaTick) // the tick that finds it quiet arms the slow one
		base := ticks()
		time.Sleep(10 * QuietLeaderTick)
		if got := ticks() - base; got < 9 || got > 11 {
			t.Fatalf("a quiet leader ticked %d times in %v, want about 10", got, 10*QuietLeaderTick)
		}
		// A message wakes it (the fake wakes on MemberGone): fast again.
		if !r.inbox.MemberGone("member-b") {
			t.Fatal("MemberGone was not posted")
		}
		synctest.Wait()
		base = ticks()
		time.Sleep(10 * ReplicaTick)
		if got := ticks() - base; got < 9 {
			t.Fatalf("a woken replica ticked %d times in %v, want about 10", got, 10*ReplicaTick)
		}
		r.mu.Lock()
		gone := r.gone
		r.mu.Unlock()
		if len(gone) != 1 || gone[0] != "member-b" {
			t.Fatalf("MemberGone reached the replica as %v, want [member-b]", gone)
		}
	})
}
