package member

import (
	"context"
	"slices"
	"sync/atomic"

	"github.com/getfelix/felix-go/cluster"
	"github.com/getfelix/felix-go/replication"
	"github.com/getfelix/felix-go/streams"
	"github.com/getfelix/felix-go/wire"
)

// Consumer groups in a cluster. A group's actor on shard N runs where the
// state shard N of <ns>/__felix.groups.<stream> is served, since it is
// the only writer of the group's state (invariant 13) and a write is a
// publish to that shard:
//   - unreplicated: on the state shard's owner, which placement makes the
//     data shard's owner (cluster/groups.go); the registry refuses either
//     shard elsewhere with not_leader naming it;
//   - replicated: on the state shard's raft leader, once it applied an
//     entry of its own term (so every state record its predecessors
//     committed is applied, and the actor's replay sees them; the same
//     rule makes the shard take publishes, invariant 12). It reads data
//     shard N from its own replica, which holds the same committed
//     records (the replica sets are copies). The state group's leadership
//     follows the data shard's (followDataLeader), so the member that
//     takes a shard's publishes also hands out its group records.
// An actor started in one term serves only while its member leads in that
// term: it answers not_leader and stops otherwise, and writes nothing
// after (groupLive), so a deposed leader's actor never writes over its
// successor's state. The successor's actor replays the committed state:
// cursors, dead letters, seeks and deletions carry over; claims (records
// handed out and not settled) and acknowledgements the cursor did not
// cover yet lived in the old actor's memory, so those records are handed
// out again.

// replicaView is what a replica shows outside its shard's goroutine: its
// role as last observed and the term of the last entry it applied.
type replicaView struct {
	role        atomic.Pointer[viewRole]
	appliedTerm atomic.Uint64
}

type viewRole struct {
	leading bool
	// lead is the leader's raft id (0: none known); term the role's.
	lead, term uint64
}

// observe records a role (the shard's goroutine, after each Ready).
func (v *replicaView) observe(leading bool, lead, term uint64) {
	if r := v.role.Load(); r == nil || r.leading != leading || r.lead != lead || r.term != term {
		v.role.Store(&viewRole{leading: leading, lead: lead, term: term})
	}
}

// serving reports the term this replica leads in once it applied an entry
// of that term, or false.
func (v *replicaView) serving() (uint64, bool) {
	r := v.role.Load()
	if r == nil || !r.leading || v.appliedTerm.Load() != r.term {
		return 0, false
	}
	return r.term, true
}

// RaftLeader is the cluster node's RaftLeader: this member's replica's
// last observed view of key's raft leader (its raft id, 0 when none is
// known or there is no replica here) and term. It reads only the view's
// atomics, so the node may ask under its lock.
func (m *Member) RaftLeader(key cluster.ShardKey) (leader, term uint64) {
	v, ok := m.views.Load(key)
	if !ok {
		return 0, 0
	}
	r := v.(*replicaView).role.Load()
	if r == nil {
		return 0, 0
	}
	return r.lead, r.term
}

// addReplicaView registers the view of a replica being opened.
func (m *Member) addReplicaView(key cluster.ShardKey) *replicaView {
	v := &replicaView{}
	m.views.Store(key, v)
	return v
}

// dropReplicaView forgets a closed replica's view (only its own: a newer
// replica of the shard may have registered since).
func (m *Member) dropReplicaView(key cluster.ShardKey, v *replicaView) {
	v.role.Store(nil)
	m.views.CompareAndDelete(key, v)
}

// GroupLive says whether this member serves the consumer groups of a
// replicated state shard: when its replica leads and caught up, it
// returns the group actor's Handles.Live for that term. Otherwise the
// refusal: not_leader naming the shard's owner record when it names
// another member, else shard_unavailable while the group elects or the
// new leader catches up (both retryable).
func (m *Member) GroupLive(ctx context.Context, state streams.Def, shard uint32) (func() error, error) {
	key := cluster.ShardKey{Scope: state.Scope, Shard: shard}
	if v, ok := m.views.Load(key); ok {
		if term, ok := v.(*replicaView).serving(); ok {
			return m.groupLive(v.(*replicaView), term, key, state.Shards), nil
		}
	}
	return nil, m.groupElsewhere(ctx, key, state.Shards)
}

// groupElsewhere is the refusal of a group request for a replicated state
// shard this member does not serve.
func (m *Member) groupElsewhere(ctx context.Context, key cluster.ShardKey, shards uint32) error {
	node := m.host.Node()
	if node == nil {
		return wire.NewError(wire.CodeShardUnavailable, "not_ready: this member is still starting; try another member")
	}
	owners, err := node.Owners(ctx, cluster.ShardDef{Scope: key.Scope, Shards: shards, Durable: true})
	if err == nil && int(key.Shard) < len(owners) {
		if o := owners[key.Shard]; o.Available && o.Owner.NodeID != node.ID() && o.Owner.Addr != "" {
			e := wire.NewError(wire.CodeNotLeader, "the consumer groups of %s are served by member %s at %s", key, o.Owner.NodeID, o.Owner.Addr)
			owner := o.Owner
			e.Owner = &owner
			return e
		}
	}
	return wire.NewError(wire.CodeShardUnavailable, "electing: the consumer groups of %s wait for their shard's leader (electing, or catching up); retry", key)
}

// groupLive is a replicated group actor's Handles.Live: nil while this
// member still serves the state shard in term, else the refusal.
func (m *Member) groupLive(v *replicaView, term uint64, key cluster.ShardKey, shards uint32) func() error {
	return func() error {
		if t, ok := v.serving(); ok && t == term {
			return nil
		}
		// Asked in the actor's Receive: the owners as known now, no wait
		// for a placement.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		return m.groupElsewhere(ctx, key, shards)
	}
}

// followDataLeader moves a state shard's raft leadership to the member
// leading its data shard, as that member's own data replica sees it
// (called by the state shard's leader on its status tick). Nothing moves
// while the data shard has no leader, while it leads here, or when the
// data leader is no voter of the state group (the sets differ after a
// data replica moved).
func (s *shardReplica) followDataLeader(st replication.Status) {
	data, ok := cluster.GroupDataShard(s.key)
	if !ok || s.node.Draining() {
		return // draining: the balance plan hands it away instead (balance.go)
	}
	v, ok := s.m.views.Load(data)
	if !ok {
		return
	}
	r := v.(*replicaView).role.Load()
	if r == nil || r.leading || r.lead == 0 {
		return
	}
	dataSet, ok := s.node.ReplicaSet(data)
	if !ok {
		return
	}
	leader, ok := dataSet.NodeOf(r.lead)
	if !ok {
		return
	}
	to, ok := s.set.Has(leader)
	voters, _ := s.r.Membership()
	// Only to a replica heard from lately: raft drops proposals while a
	// transfer is pending (up to an election timeout), so a transfer to a
	// member that died, which the data replica here may still name, would
	// only hold up the group's state writes.
	if ok && to != st.ID && slices.Contains(voters, to) && s.heard(to, st.Active[to]) {
		s.r.TransferLeadership(to)
	}
}
