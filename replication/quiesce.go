package replication

import (
	"bytes"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
)

// An idle group goes quiet, as CockroachDB quiesces a range: its leader
// stops ticking (no heartbeats) and its followers stop their election
// timers, so a member with thousands of idle shards does no per-shard work
// at rest. etcd raft has no quiescence of its own; a quiet replica simply
// does not call raft's Tick.
//
// The leader decides (quiesceDecision): once everything in its log is
// committed, applied and matched by every follower, each replicating and
// heard from, and nothing waits on it (a proposal, a read, a leadership
// transfer) for quiesceIdleTicks ticks in a row, it sends each follower a
// heartbeat marked with quiesceContext instead of ticking. A follower
// steps it as any heartbeat and goes quiet only if it then agrees with the
// leader on the term, the leader and the log position (followerAgrees);
// otherwise it stays awake, times out, and its campaign wakes the leader.
//
// Anything else wakes a replica: any message stepped other than that
// heartbeat and its answer, a proposal, a ReadIndex, a conf change, a
// transfer, a campaign, and Wake or LeaderGone from the owner, which
// watches the cluster's membership: a quiet group has no heartbeats to
// notice a dead leader by, so its owner must say so.
//
// CheckQuorum stays on. A quiet leader's election clock is frozen with its
// followers marked active by their answers to the quiesce heartbeat, so
// the first quorum check after it wakes counts them, and it does not step
// down for heartbeats it never sent. A quiet follower's clock is frozen
// too, inside the leader's lease: it ignores a pre-vote (as raft does
// within a lease) but wakes, so a restarted replica's campaign wakes the
// group and is refused only until the lease runs out again. LeaderGone
// ends the lease at once (electionTicks ticks), so the follower grants
// votes and campaigns after its own randomised remainder, as it would
// have had the heartbeats stopped.

// quiesceContext marks the leader's last heartbeat before it goes quiet.
// raft echoes a heartbeat's context in its answer, and a leader ignores
// an answer whose context names no pending read (ReadIndex's are 8
// bytes).
var quiesceContext = []byte("felix/quiesce")

// quiesceIdleTicks is how many ticks in a row a leader's group must be
// idle before it goes quiet: a group written to every tick or two stays
// awake rather than sending a quiesce round between writes.
const quiesceIdleTicks = 2

// groupView is what a leader's quiesce decision reads: its own state and
// each other replica's progress, from raft's status.
type groupView struct {
	leader                     bool
	lastIndex, commit, applied uint64
	// awaiting are proposals without an index yet; reads are ReadIndex
	// requests not confirmed yet; transferring is a leadership transfer
	// under way.
	awaiting, reads int
	transferring    bool
	hasReady        bool
	peers           []peerView
}

// peerView is one other replica's progress, as the leader tracks it.
type peerView struct {
	id           uint64
	match        uint64
	replicating  bool // raft's StateReplicate: not probing, not snapshotting
	recentActive bool
	// gone: the owner says the replica's member left the cluster
	// (Config.PeerGone). The group may go quiet without it: if it comes
	// back, its campaign wakes the group.
	gone bool
}

// quiesceDecision says whether the group may go quiet now, and if not,
// why not: the reason is for tests and traces.
func quiesceDecision(v groupView) (bool, string) {
	switch {
	case !v.leader:
		return false, "not leader"
	case v.hasReady:
		return false, "ready pending"
	case v.awaiting > 0:
		return false, "proposals pending"
	case v.reads > 0:
		return false, "reads pending"
	case v.transferring:
		return false, "transfer under way"
	case v.commit < v.lastIndex:
		return false, "uncommitted entries"
	case v.applied < v.commit:
		return false, "unapplied entries"
	}
	for _, p := range v.peers {
		switch {
		case p.gone:
			continue
		case !p.recentActive:
			return false, "replica not heard from"
		case !p.replicating:
			return false, "replica not replicating"
		case p.match < v.lastIndex:
			return false, "replica behind"
		}
	}
	return true, ""
}

// followerAgrees says whether a follower that stepped the leader's quiesce
// heartbeat m may go quiet: it follows m's sender in m's term, and its log
// ends at the commit index m carried, which it has committed. A follower
// with another view stays awake: its election timer runs, and its
// campaign, if it comes to one, wakes the group.
func followerAgrees(st raft.BasicStatus, lastIndex uint64, m raftpb.Message) bool {
	return st.RaftState == raft.StateFollower && st.Lead == m.From && st.Term == m.Term &&
		st.Commit == m.Commit && lastIndex == m.Commit
}

func isQuiesceHeartbeat(m raftpb.Message) bool {
	return m.Type == raftpb.MsgHeartbeat && bytes.Equal(m.Context, quiesceContext)
}

func isQuiesceAnswer(m raftpb.Message) bool {
	return m.Type == raftpb.MsgHeartbeatResp && bytes.Equal(m.Context, quiesceContext)
}

// leaderView reads the leader's groupView from raft without allocating a
// Progress map (WithProgress visits it in place).
func (r *Replica) leaderView() groupView {
	st := r.rn.BasicStatus()
	last, _ := r.storage.LastIndex()
	if st.Term != r.readTerm {
		r.reads, r.readTerm = 0, st.Term // reads of an old term are gone
	}
	v := groupView{
		leader: st.RaftState == raft.StateLeader, lastIndex: last, commit: st.Commit, applied: st.Applied,
		awaiting: len(r.awaiting), reads: r.reads, transferring: st.LeadTransferee != 0,
		hasReady: r.rn.HasReady(), peers: r.peerScratch[:0],
	}
	r.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
		if id != st.ID {
			gone := r.peerGone != nil && r.peerGone(id)
			v.peers = append(v.peers, peerView{id: id, match: pr.Match, replicating: pr.State == tracker.StateReplicate, recentActive: pr.RecentActive, gone: gone})
		}
	})
	r.peerScratch = v.peers
	return v
}

// maybeQuiesce runs on a leader's tick: after quiesceIdleTicks idle ticks
// it queues the quiesce heartbeats, which the next Ready sends, and goes
// quiet. It reports whether it did.
func (r *Replica) maybeQuiesce() bool {
	v := r.leaderView()
	if ok, _ := quiesceDecision(v); !ok {
		r.idleTicks = 0
		return false
	}
	if r.idleTicks++; r.idleTicks < quiesceIdleTicks {
		return false
	}
	st := r.rn.BasicStatus()
	r.quietWith = r.quietWith[:0]
	for _, p := range v.peers {
		if p.gone {
			continue
		}
		r.quietWith = append(r.quietWith, p.id)
		r.outbox = append(r.outbox, raftpb.Message{
			Type: raftpb.MsgHeartbeat, From: st.ID, To: p.id, Term: st.Term,
			Commit: v.commit, Context: quiesceContext,
		})
	}
	r.quiet = true
	r.quiesces++
	return true
}

// stepQuiesceHeartbeat steps the leader's quiesce heartbeat like any other
// (raft answers it and moves the commit index), then quiets this follower
// if it agrees with the leader.
func (r *Replica) stepQuiesceHeartbeat(m raftpb.Message) error {
	r.Wake()
	if err := r.rn.Step(m); err != nil {
		return err
	}
	last, _ := r.storage.LastIndex()
	// A heartbeat from a leader whose member the owner already said is
	// gone (it arrived late): staying awake, the follower elects.
	r.quiet = followerAgrees(r.rn.BasicStatus(), last, m) && (r.peerGone == nil || !r.peerGone(m.From))
	if r.quiet {
		r.quiesces++
	}
	return nil
}

// Wake ends the group's quiet on this replica: a leader ticks (and
// heartbeats) again from the next Tick, a follower runs its election
// timer. Waking a replica that is not quiet only restarts the leader's
// count of idle ticks.
func (r *Replica) Wake() {
	r.quiet = false
	r.idleTicks = 0
}

// LeaderGone tells a follower that its leader's member left the cluster
// (its lease expired, or it said it leaves): the follower wakes and ends
// the leader's lease at once, so it grants votes and campaigns after the
// rest of its randomised election timeout rather than a full one. A
// leader, or a follower of another leader, is only woken.
func (r *Replica) LeaderGone(lead uint64) {
	if r.err != nil {
		return
	}
	r.Wake()
	st := r.rn.BasicStatus()
	if st.RaftState != raft.StateFollower || st.Lead != lead || lead == 0 {
		return
	}
	for range electionTicks {
		r.rn.Tick()
		if r.rn.BasicStatus().RaftState != raft.StateFollower {
			return // its timeout came first: it campaigns
		}
	}
}

// Quiet reports whether the replica is quiet: it does not tick.
func (r *Replica) Quiet() bool { return r.quiet }

// Quiesces counts the times the replica went quiet: an owner that saw it
// quiet with the same count twice knows nothing woke it in between, so
// nothing in its group changed.
func (r *Replica) Quiesces() uint64 { return r.quiesces }

// QuietWith is, on a quiet leader, the replicas it went quiet with (those
// not gone): the owner wakes it if one of them goes. The slice is the
// Replica's; it must not be kept or modified.
func (r *Replica) QuietWith() []uint64 {
	if !r.quiet {
		return nil
	}
	return r.quietWith
}
