package replication

import (
	"slices"
	"testing"
)

// quietWithin ticks until every live replica is quiet, at most limit ticks.
func (c *cluster) quietWithin(limit int) {
	c.t.Helper()
	c.tickUntil(limit, "every live replica quiet", func() bool {
		for _, id := range c.ids {
			if r := c.nodes[id].replica; r != nil && !r.Quiet() {
				return false
			}
		}
		return true
	})
}

// quietLimit bounds how long a caught-up group takes to go quiet: its idle
// ticks, and a tick for the followers' answers to land.
const quietLimit = quiesceIdleTicks + 2

// TestIdleGroupGoesQuiet: once everything is committed and applied on
// every replica, the group stops sending anything, however long it idles,
// and its leader stays the leader.
func TestIdleGroupGoesQuiet(t *testing.T) {
	c := newCluster(t, 3)
	c.elect(1)
	c.propose(1, "a", "b")
	c.quietWithin(quietLimit)
	term := c.replica(1).Status().Term

	before := c.sent
	for range 20 * electionLimit {
		c.tick()
	}
	if got := c.sent - before; got != 0 {
		t.Errorf("a quiet group sent %d messages in %d ticks, want none", got, 20*electionLimit)
	}
	if st := c.replica(1).Status(); c.leader() != 1 || st.Term != term || !st.Quiet {
		t.Errorf("after idling: leader %d at term %d (quiet %v), want 1 at term %d, quiet", c.leader(), st.Term, st.Quiet, term)
	}
	for _, id := range []uint64{2, 3} {
		if st := c.replica(id).Status(); st.Leader != 1 || st.Term != term {
			t.Errorf("replica %d follows %d at term %d, want 1 at term %d", id, st.Leader, st.Term, term)
		}
	}
}

// TestQuietGroupWakesOnAProposal: a proposal to a quiet leader commits on
// every replica without a tick, and the woken leader keeps its leadership
// through CheckQuorum's next checks although it sent no heartbeat while
// quiet. The group goes quiet again after.
func TestQuietGroupWakesOnAProposal(t *testing.T) {
	c := newCluster(t, 3)
	c.elect(1)
	c.propose(1, "a")
	c.quietWithin(quietLimit)
	term := c.replica(1).Status().Term
	for range 3 * electionLimit {
		c.tick()
	}

	c.propose(1, "b", "c")
	for _, id := range c.ids {
		if n := c.nodes[id]; n.applied != c.replica(1).Status().Commit {
			t.Errorf("replica %d applied %d, want the commit index %d without a tick", id, n.applied, c.replica(1).Status().Commit)
		}
	}
	for i := range 3 * electionLimit {
		c.tick()
		if i%3 == 0 {
			c.propose(1, "tick")
		}
		if st := c.replica(1).Status(); st.State.String() != "StateLeader" || st.Term != term {
			t.Fatalf("%d ticks after waking, replica 1 is %v at term %d, want the leader at term %d", i+1, st.State, st.Term, term)
		}
	}
	c.quietWithin(quietLimit)
	if got := c.committedRecords(); len(got) != 3+3*electionLimit/3 || !slices.Equal(got[:3], []string{"a", "b", "c"}) {
		t.Errorf("committed records %q, want a, b, c and a tick record every third tick", got)
	}
	c.requireConverged()
}

// TestQuietGroupWakesOnARestartedFollower: a follower that restarts does
// not know the leader; its campaign wakes the quiet group instead of
// deposing the leader, it learns the leader from the heartbeats that
// follow, and the group goes quiet again. A follower that is down keeps
// the group awake: the leader goes on heartbeating it.
func TestQuietGroupWakesOnARestartedFollower(t *testing.T) {
	c := newCluster(t, 3)
	c.elect(1)
	c.propose(1, "a")
	c.quietWithin(quietLimit)
	term := c.replica(1).Status().Term

	c.kill(3)
	c.restart(3)
	c.tickUntil(3*electionLimit, "replica 3 follows replica 1", func() bool { return c.replica(3).Status().Leader == 1 })
	c.quietWithin(quietLimit)
	if st := c.replica(1).Status(); c.leader() != 1 || st.Term != term {
		t.Errorf("after replica 3 restarted: leader %d at term %d, want 1 at term %d", c.leader(), st.Term, term)
	}

	c.kill(3)
	c.propose(1, "b")
	for range 3 * electionLimit {
		c.tick()
	}
	if c.replica(1).Quiet() {
		t.Fatal("the leader went quiet with replica 3 down and behind")
	}
	c.restart(3)
	c.quietWithin(3 * electionLimit)
	if c.nodes[3].applied != c.replica(1).Status().Commit {
		t.Errorf("replica 3 applied %d before the group went quiet, want %d", c.nodes[3].applied, c.replica(1).Status().Commit)
	}
	if got, want := c.committedRecords(), []string{"a", "b"}; !slices.Equal(got, want) {
		t.Errorf("committed records %q, want %q", got, want)
	}
	c.requireConverged()
}

// TestQuietGroupElectsWhenItsLeaderIsGone: the followers of a dead quiet
// leader hear nothing and notice nothing on their own; told by the
// membership (LeaderGone), they elect one of them within an election
// timeout, and nothing acknowledged is lost.
func TestQuietGroupElectsWhenItsLeaderIsGone(t *testing.T) {
	c := newCluster(t, 3)
	c.elect(1)
	c.propose(1, "a", "b")
	c.propose(1, "c")
	c.quietWithin(quietLimit)

	c.kill(1)
	for range 3 * electionLimit {
		c.tick()
	}
	if lead := c.leader(); lead != 0 {
		t.Fatalf("replica %d was elected without being told the leader is gone", lead)
	}
	c.replica(2).LeaderGone(1)
	c.replica(3).LeaderGone(1)
	c.settle()
	took := c.tickUntil(electionTicks, "a new leader", func() bool { return c.leader() != 0 })
	t.Logf("replica %d elected %d ticks after LeaderGone", c.leader(), took)
	lead := c.leader()
	c.propose(lead, "d")

	c.restart(1)
	c.tickUntil(3*electionLimit, "replica 1 follows the new leader", func() bool { return c.replica(1).Status().Leader == lead })
	c.quietWithin(3 * electionLimit)
	if got, want := c.committedRecords(), []string{"a", "b", "c", "d"}; !slices.Equal(got, want) {
		t.Errorf("committed records %q, want %q", got, want)
	}
	c.requireConverged()
}

// TestLeaderGoneFromAnotherLeaderOnlyWakes: LeaderGone naming a member
// that does not lead this follower's term leaves the lease alone.
func TestLeaderGoneFromAnotherLeaderOnlyWakes(t *testing.T) {
	c := newCluster(t, 3)
	c.elect(1)
	c.propose(1, "a")
	c.quietWithin(quietLimit)
	term := c.replica(1).Status().Term
	c.replica(2).LeaderGone(3)
	c.settle()
	for range 3 * electionLimit {
		c.tick()
	}
	if st := c.replica(2).Status(); st.Leader != 1 || st.Term != term {
		t.Errorf("replica 2 follows %d at term %d, want 1 at term %d", st.Leader, st.Term, term)
	}
}

// TestQuietLeaderConfirmsAReadIndex: a read on a quiet leader wakes the
// group and is confirmed at the commit index without a tick; the group
// stays awake while a read is unconfirmed.
func TestQuietLeaderConfirmsAReadIndex(t *testing.T) {
	c := newCluster(t, 3)
	c.elect(1)
	c.propose(1, "a")
	c.quietWithin(quietLimit)
	commit := c.replica(1).Status().Commit

	c.replica(1).ReadIndex(7)
	c.settle()
	got := map[uint64]uint64{}
	c.replica(1).TakeReadStates(func(id, index uint64) { got[id] = index })
	if got[7] != commit || len(got) != 1 {
		t.Fatalf("a quiet leader confirmed reads %v, want read 7 at the commit index %d", got, commit)
	}
	c.quietWithin(quietLimit)

	c.partition([]uint64{1}, []uint64{2, 3})
	c.replica(1).ReadIndex(8)
	c.settle()
	c.tick()
	c.tick()
	c.tick()
	if c.replica(1).Quiet() {
		t.Error("the leader went quiet with read 8 unconfirmed")
	}
}

// TestQuietGroupWithoutAGoneReplica: a replica whose member left does not
// keep the group awake: the others go quiet without it and send it
// nothing. When it comes back, its campaign wakes the group, it catches
// up, and the group goes quiet with it.
func TestQuietGroupWithoutAGoneReplica(t *testing.T) {
	c := newCluster(t, 3)
	c.elect(1)
	c.propose(1, "a")
	c.kill(3)
	c.gone[3] = true
	c.propose(1, "b")
	c.quietWithin(quietLimit)
	if got := c.replica(1).QuietWith(); !slices.Equal(got, []uint64{2}) {
		t.Errorf("the leader went quiet with %v, want [2]", got)
	}
	before := c.sent
	for range 3 * electionLimit {
		c.tick()
	}
	if got := c.sent - before; got != 0 {
		t.Errorf("a quiet group with replica 3 gone sent %d messages, want none", got)
	}

	delete(c.gone, 3)
	c.restart(3)
	c.tickUntil(3*electionLimit, "replica 3 catches up", func() bool { return c.nodes[3].applied == c.replica(1).Status().Commit })
	c.quietWithin(3 * electionLimit)
	if got := c.replica(1).QuietWith(); !slices.Equal(got, []uint64{2, 3}) {
		t.Errorf("the leader went quiet with %v, want [2 3]", got)
	}
	if got, want := c.committedRecords(), []string{"a", "b"}; !slices.Equal(got, want) {
		t.Errorf("committed records %q, want %q", got, want)
	}
	c.requireConverged()
}

// TestFollowerStaysAwakeUnderAGoneLeader: a quiesce heartbeat stepped
// after the owner says the leader's member is gone (it was on its way
// when the member died) does not quiet the follower: the owner's news
// came once, before it, so nothing would wake the follower again.
func TestFollowerStaysAwakeUnderAGoneLeader(t *testing.T) {
	c := newCluster(t, 3)
	c.elect(1)
	c.propose(1, "a")
	c.gone[1] = true // as the followers' owners see it
	c.tickUntil(quietLimit, "the leader quiet", func() bool { return c.replica(1).Quiet() })
	c.settle()
	for _, id := range []uint64{2, 3} {
		if c.replica(id).Quiet() {
			t.Errorf("replica %d went quiet under a leader whose member is gone", id)
		}
	}
}
