package member

import (
	"slices"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/getfelix/felix-go/replication"
)

// Moving a replica (felix cluster move-replica): the replica set names the
// move (cluster.Node.MoveReplica), and the shard's leader carries it out,
// one raft membership change at a time, checking where it stands every
// status refresh (200 ms):
//
//  1. the new replica joins as a learner: it receives the log from the
//     leader but does not vote, so a slow catch-up never costs the quorum;
//  2. once it has everything committed, it becomes a voter;
//  3. the old replica is removed (a leader that is the old replica first
//     hands the leadership to the new one);
//  4. the set is written without the move; the old member sees it is no
//     longer named, stops its replica and deletes its data.
//
// Every step is read from the applied membership, so a new leader picks
// the move up where the old one left it.

// replicaMover is a leader's progress on the set's move. Only the shard's
// goroutine calls step; finishing is also cleared by the etcd write's
// goroutine.
type replicaMover struct {
	// proposedAt is when the last membership change was proposed: raft
	// takes one at a time and drops another while one is pending.
	proposedAt time.Time
	finishing  atomic.Bool
}

// confChangeRetry is how long a proposed membership change may take to
// apply before it is proposed again (it was dropped, or the leader changed).
const confChangeRetry = 2 * time.Second

func (m *replicaMover) step(s *shardReplica, st replication.Status) {
	mv := s.set.Move
	if mv == nil {
		return
	}
	voters, learners := s.r.Membership()
	add, remove := mv.Add.ID, mv.Remove.ID
	switch {
	case !slices.Contains(voters, add) && !slices.Contains(learners, add):
		m.propose(s, raftpb.ConfChangeAddLearnerNode, add)
	case slices.Contains(learners, add):
		if st.Match[add] >= st.Commit {
			m.propose(s, raftpb.ConfChangeAddNode, add)
		}
	case slices.Contains(voters, remove) && st.ID == remove:
		// The leader leaves: the new replica leads first, then removes it.
		s.r.TransferLeadership(add)
	case slices.Contains(voters, remove):
		m.propose(s, raftpb.ConfChangeRemoveNode, remove)
	default:
		m.finish(s)
	}
}

func (m *replicaMover) propose(s *shardReplica, typ raftpb.ConfChangeType, id uint64) {
	if time.Since(m.proposedAt) < confChangeRetry {
		return
	}
	m.proposedAt = time.Now()
	node, _ := s.set.NodeOf(id)
	if err := s.r.ProposeConfChange(raftpb.ConfChange{Type: typ, NodeID: id}); err != nil {
		s.log.Warn().Err(err).Str("replica", node).Msg("replica move: membership change not proposed; trying again")
		return
	}
	s.log.Info().Str("change", typ.String()).Str("replica", node).Uint64("id", id).Msg("replica move: membership change proposed")
}

// finish writes the set without the move, in the background (an etcd
// write must not block the shard).
func (m *replicaMover) finish(s *shardReplica) {
	if !m.finishing.CompareAndSwap(false, true) {
		return
	}
	log := s.log
	from, to := s.set.Move.Remove.Node, s.set.Move.Add.Node
	s.node.FinishMoveAsync(s.key, func(err error) {
		defer m.finishing.Store(false)
		if err != nil {
			log.Warn().Err(err).Msg("replica move: could not write the replica set; trying again")
			return
		}
		log.Info().Str("from", from).Str("to", to).Msg("replica moved")
	})
}
