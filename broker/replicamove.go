package broker

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/getfelix/felix-go/cluster"
	"github.com/getfelix/felix-go/replication"
	"github.com/getfelix/felix-go/wire"
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

// The admin endpoint's replica routes.

// shardKeyOf reads ?stream=TENANT/NS/STREAM&shard=N.
func shardKeyOf(r *http.Request) (cluster.ShardKey, error) {
	parts := strings.Split(r.URL.Query().Get("stream"), "/")
	if len(parts) != 3 {
		return cluster.ShardKey{}, fmt.Errorf("name the stream: ?stream=TENANT/NAMESPACE/STREAM")
	}
	scope := wire.Scope{Tenant: parts[0], Namespace: parts[1], Stream: parts[2]}
	if err := scope.Validate(); err != nil {
		return cluster.ShardKey{}, err
	}
	shard, err := strconv.ParseUint(r.URL.Query().Get("shard"), 10, 32)
	if err != nil {
		return cluster.ShardKey{}, fmt.Errorf("name the shard: ?shard=N (%v)", err)
	}
	return cluster.ShardKey{Scope: scope, Shard: uint32(shard)}, nil
}

// handleReplicaSet answers GET /debug/cluster/replicas: a shard's replica
// set, with its move while one is under way.
func (b *Broker) handleReplicaSet(w http.ResponseWriter, r *http.Request) {
	node, key, ok := b.replicaRequest(w, r)
	if !ok {
		return
	}
	set, found := node.ReplicaSet(key)
	if !found {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": key.String() + " has no replica set (not a replicated shard, or not placed yet)"})
		return
	}
	writeJSON(w, http.StatusOK, set)
}

// handleMoveReplica answers POST /debug/cluster/move-replica: it starts
// moving a shard's replica from one member to another (&from=A&to=B).
func (b *Broker) handleMoveReplica(w http.ResponseWriter, r *http.Request) {
	node, key, ok := b.replicaRequest(w, r)
	if !ok {
		return
	}
	from, to := r.URL.Query().Get("from"), r.URL.Query().Get("to")
	if from == "" || to == "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "name both members: &from=A&to=B (felix cluster ls lists them)"})
		return
	}
	if err := node.MoveReplica(r.Context(), key, from, to); err != nil {
		status := http.StatusServiceUnavailable
		if errors.Is(err, cluster.ErrMoveRefused) {
			status = http.StatusConflict
		}
		writeJSON(w, status, map[string]string{"error": err.Error()})
		return
	}
	b.log.Warn().Str("shard", key.String()).Str("from", from).Str("to", to).Msg("replica move requested")
	writeJSON(w, http.StatusAccepted, map[string]string{"shard": key.String(), "from": from, "to": to})
}

func (b *Broker) replicaRequest(w http.ResponseWriter, r *http.Request) (*cluster.Node, cluster.ShardKey, bool) {
	node := b.node.Load()
	if node == nil {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "this broker is not a cluster member (start it with --cluster-etcd)"})
		return nil, cluster.ShardKey{}, false
	}
	key, err := shardKeyOf(r)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return nil, cluster.ShardKey{}, false
	}
	return node, key, true
}
