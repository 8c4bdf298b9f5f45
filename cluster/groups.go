package cluster

import (
	"context"
	"strings"

	"github.com/getfelix/felix-go/wire"
)

// Consumer groups' state shards go with their data shards. A group actor
// (package groups) reads data shard N and writes its state as records of
// shard N of the internal stream <ns>/__felix.groups.<stream>; it must run
// where both are served. So a state shard is never placed on its own:
//   - unreplicated (one copy on its home member): its home and owner are
//     the data shard's home, written when the state shard is first placed
//     (the data shard is placed already: a group needs its stream) and
//     never changed after, like every durable home;
//   - replicated: its replica set is a copy of the data shard's (the same
//     members under the same raft ids), written once like any set; the
//     state shard's leader hands its raft leadership to the member leading
//     the data shard (member/groupcluster.go).
// A replica move of the data shard moves the state shard's replica the
// same way (moveGroupState), so the sets stay alike; the state shard's
// leader carries its move out as any leader does.

// GroupDataShard is the data shard a consumer-group state shard goes with,
// or false for any other shard.
func GroupDataShard(key ShardKey) (ShardKey, bool) {
	name, ok := strings.CutPrefix(key.Scope.Stream, wire.GroupStreamPrefix)
	if !ok || name == "" {
		return key, false
	}
	data := key
	data.Scope.Stream = name
	return data, true
}

// groupPlacement places an unowned, homeless state shard on its data
// shard's home; false when key is no state shard. A state shard whose data
// shard has no home yet waits (ok, with no target).
func (s *state) groupPlacement(key ShardKey) (a assignment, placeable, isState bool) {
	data, isState := GroupDataShard(key)
	if !isState {
		return a, false, false
	}
	home, ok := s.homes[data]
	if !ok {
		return a, false, true
	}
	m, live := s.members[home]
	return assignment{key: key, target: m, durable: true}, live, true
}

// groupReplicaSet is a replicated state shard's set: a copy of its data
// shard's members, all of them initial (the state group is new). False
// while the data shard has no set, or a move is under way in it (copied
// after it finished, so both sets agree).
func (s *state) groupReplicaSet(data ShardKey) (ReplicaSet, bool) {
	set, ok := s.replicaSets[data]
	if !ok || set.Move != nil {
		return ReplicaSet{}, false
	}
	out := ReplicaSet{}
	for _, m := range set.Members {
		out.Members = append(out.Members, m)
		out.Initial = append(out.Initial, m.ID)
	}
	return out, true
}

// moveGroupState starts, on the consumer groups' state shard of a data
// shard whose replica moves, the same move. A state shard with no set
// (no group was used) or one that cannot take the move (its set differs)
// is left as it is, and logged: the move of the data replica stands.
func (n *Node) moveGroupState(ctx context.Context, data ShardKey, from, to string) {
	if _, isState := GroupDataShard(data); isState {
		return
	}
	state := data
	state.Scope.Stream = wire.GroupStreamPrefix + data.Scope.Stream
	n.mu.RLock()
	_, has := n.state.replicaSets[state]
	n.mu.RUnlock()
	if !has {
		return
	}
	if err := n.updateSet(ctx, state, moveChange(n, state, from, to)); err != nil {
		n.log.Warn().Err(err).Str("shard", state.String()).Msg("the consumer groups' state replica did not move with its data replica; move it by hand")
	}
}
