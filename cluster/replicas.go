package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cespare/xxhash/v2"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/getfelix/felix-go/wire"
)

// Replicated shards (StreamDef.Replicas > 1). Each is a raft group over a
// replica set: the rendezvous top-R of the live members that are not
// draining when the shard is first placed, written once, create-if-absent,
// under replicas/<t>/<ns>/<s>/<n>. The set does not follow membership:
// a member that dies stays in it, and its replica catches up when it comes
// back (the group keeps a quorum meanwhile). Every member of the set runs
// its replica (Hooks.Replica); the group's raft leader writes the owner
// record on its own lease (ClaimLeader) so that clients find it. That
// record is a routing hint only: a replicated shard is fenced by raft (a
// leader commits only with a quorum, and CheckQuorum steps a cut-off
// leader down), never by the owner record or its lease.

// ReplicaSet is a replicated shard's members, each with its raft id in the
// shard's group (1 to R at creation; a replica added later takes the next
// id: ids are never reused).
type ReplicaSet struct {
	Members []Replica `json:"members"`
	// Initial are the raft ids the group was made with: only they start
	// it from an empty log (raft's bootstrap); a replica added later joins
	// the running group. Empty means every member (sets written before
	// replicas could move).
	Initial []uint64 `json:"initial,omitempty"`
	// Move, while set, is a replica moving: the leader adds Add (a learner
	// until it caught up, then a voter), then removes Remove, then writes
	// the set without Move (MoveReplica, FinishMove).
	Move *ReplicaMove `json:"move,omitempty"`
}

// ReplicaMove is one replica leaving a set for another member.
type ReplicaMove struct {
	Add    Replica `json:"add"`
	Remove Replica `json:"remove"`
}

// All is every replica the set names, a moving one's new place included.
func (s ReplicaSet) All() []Replica {
	if s.Move == nil {
		return s.Members
	}
	return append(slices.Clone(s.Members), s.Move.Add)
}

// Bootstraps says whether raft id starts the group from an empty log.
func (s ReplicaSet) Bootstraps(id uint64) bool {
	if len(s.Initial) == 0 {
		_, in := s.nodeOf(s.Members, id)
		return in
	}
	return slices.Contains(s.Initial, id)
}

func (s ReplicaSet) nodeOf(rs []Replica, id uint64) (string, bool) {
	for _, r := range rs {
		if r.ID == id {
			return r.Node, true
		}
	}
	return "", false
}

// Replica is one member of a replica set.
type Replica struct {
	ID   uint64 `json:"id"`
	Node string `json:"node"`
}

// Has reports whether node is in the set (or joining it), and its raft id.
func (s ReplicaSet) Has(node string) (uint64, bool) {
	for _, r := range s.All() {
		if r.Node == node {
			return r.ID, true
		}
	}
	return 0, false
}

// NodeOf is the member with raft id id (a joining one included).
func (s ReplicaSet) NodeOf(id uint64) (string, bool) { return s.nodeOf(s.All(), id) }

func (k keys) replicas() string              { return k.prefix + "/replicas/" }
func (k keys) replicaSet(sk ShardKey) string { return k.replicas() + shardPath(sk) }
func (k keys) streamReplicas(s wire.Scope) string {
	return k.replicas() + s.String() + "/"
}

// replicated reports whether key's stream is replicated. Callers hold mu.
func (s *state) replicated(key ShardKey) bool {
	d, ok := s.defs[key.Scope]
	return ok && d.Durable && d.Replicas > 1
}

// planReplicaSet picks a new replicated shard's set from candidates: the
// members holding the fewest replicas (load), ties broken by rendezvous
// score so every member computes the same set, with no two in one zone
// while candidates span enough zones (zoneOf). Fewer live members than R:
// none yet.
func planReplicaSet(key ShardKey, replicas int, candidates []memberRecord, load map[string]int) (ReplicaSet, bool) {
	if len(candidates) < replicas {
		return ReplicaSet{}, false
	}
	ranked := slices.Clone(candidates)
	score := func(m memberRecord) uint64 { return xxhash.Sum64String(m.NodeID + "\x00" + key.String()) }
	slices.SortFunc(ranked, func(a, b memberRecord) int {
		if c := cmp.Compare(load[a.NodeID], load[b.NodeID]); c != 0 {
			return c
		}
		return cmp.Compare(score(b), score(a))
	})
	set := ReplicaSet{}
	inZone := map[string]int{}
	for len(set.Members) < replicas {
		// The best-ranked member of a zone holding the fewest of the set.
		pick := -1
		for i, m := range ranked {
			if pick < 0 || inZone[zoneOf(m)] < inZone[zoneOf(ranked[pick])] {
				pick = i
			}
		}
		m := ranked[pick]
		ranked = slices.Delete(ranked, pick, pick+1)
		inZone[zoneOf(m)]++
		id := uint64(len(set.Members) + 1)
		set.Members = append(set.Members, Replica{ID: id, Node: m.NodeID})
		set.Initial = append(set.Initial, id)
	}
	return set, true
}

// zoneOf is a member's zone; a member without one is a zone of its own.
func zoneOf(m memberRecord) string {
	if m.Zone == "" {
		return "\x00" + m.NodeID
	}
	return m.Zone
}

// placeReplicaSets writes the sets of replicated shards that have none,
// planned in shard order with each member's replica count as it grows.
func (n *Node) placeReplicaSets() {
	n.mu.RLock()
	var unplaced []ShardKey
	for scope, def := range n.state.defs {
		if !def.Durable || def.Replicas <= 1 {
			continue
		}
		for shard := range def.Shards {
			key := ShardKey{Scope: scope, Shard: shard}
			if _, ok := n.state.replicaSets[key]; !ok {
				unplaced = append(unplaced, key)
			}
		}
	}
	var todo []ShardKey
	var sets []ReplicaSet
	if len(unplaced) > 0 {
		slices.SortFunc(unplaced, compareKeys)
		candidates := n.state.candidates()
		load := n.state.replicaLoad()
		for _, key := range unplaced {
			if data, isState := GroupDataShard(key); isState {
				// With its data shard's replicas (groups.go).
				if set, ok := n.state.groupReplicaSet(data); ok {
					todo, sets = append(todo, key), append(sets, set)
				}
				continue
			}
			if set, ok := planReplicaSet(key, n.state.defs[key.Scope].Replicas, candidates, load); ok {
				todo, sets = append(todo, key), append(sets, set)
				for _, r := range set.Members {
					load[r.Node]++
				}
			}
		}
	}
	n.mu.RUnlock()
	n.writeReplicaSets(todo, sets)
}

// replicaLoad counts the replicas each member holds (a moving replica's
// new place included). Callers hold mu.
func (s *state) replicaLoad() map[string]int {
	load := map[string]int{}
	for _, set := range s.replicaSets {
		for _, r := range set.All() {
			load[r.Node]++
		}
	}
	return load
}

// notZoneSpread counts the replicated shards with two replicas in one
// zone although the live members span enough zones to spread them.
// Callers hold mu.
func (s *state) notZoneSpread() int {
	live := map[string]bool{}
	for _, m := range s.members {
		live[zoneOf(m)] = true
	}
	n := 0
	for key, set := range s.replicaSets {
		if !s.replicated(key) {
			continue
		}
		zones := map[string]bool{}
		for _, r := range set.Members {
			m, ok := s.members[r.Node]
			if !ok {
				m = s.lost[r.Node].rec
				m.NodeID = r.Node
			}
			zones[zoneOf(m)] = true
		}
		if len(zones) < min(len(set.Members), len(live)) {
			n++
		}
	}
	return n
}

// hostReplicas tells the broker of every replicated shard this member is
// in the set of. It runs on each state change and each reconcile round, so
// a replica that stopped (its storage failed) is started again.
func (n *Node) hostReplicas() {
	if n.cfg.Hooks.Replica == nil {
		return
	}
	n.mu.RLock()
	var mine []ShardKey
	for key, set := range n.state.replicaSets {
		if _, ok := set.Has(n.cfg.NodeID); ok && n.state.replicated(key) {
			mine = append(mine, key)
		}
	}
	n.mu.RUnlock()
	for _, key := range mine {
		n.cfg.Hooks.Replica(key)
	}
}

// ReplicaSet returns a replicated shard's set, once written.
func (n *Node) ReplicaSet(key ShardKey) (ReplicaSet, bool) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	set, ok := n.state.replicaSets[key]
	return set, ok
}

// MemberAddr is a live member's felix/1 address for clients.
func (n *Node) MemberAddr(node string) (string, bool) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	m, ok := n.state.members[node]
	return m.Addr, ok
}

// PlaceReplica is Place for a replicated shard: nil when this member is in
// its set (its replica serves; whether it leads is raft's to say), else
// not_leader naming the leader that claimed the shard, or
// shard_unavailable while the set is written or a leader elected.
func (n *Node) PlaceReplica(key ShardKey) error {
	if !n.ready.Load() {
		return unavailable(key, "not_ready", "member %s has not joined the cluster yet (etcd %v); try another member", n.cfg.NodeID, n.cfg.Endpoints)
	}
	n.mu.RLock()
	set, hasSet := n.state.replicaSets[key]
	rec, owned := n.state.owners[key]
	n.mu.RUnlock()
	if _, in := set.Has(n.cfg.NodeID); hasSet && in {
		return nil
	}
	if owned {
		return notLeader(key, rec.wire())
	}
	n.poke()
	if !hasSet {
		e := unavailable(key, "not_assigned", "replicated shard %s is being placed (it needs as many live members as replicas); retry", key)
		e.Cause = ErrNotAssigned
		return e
	}
	return unavailable(key, "electing", "replicated shard %s has no leader yet; retry", key)
}

// ClaimLeader makes this member the owner of record of a replicated shard
// whose raft group elected it in term, on this member's current lease,
// unless a record of a later term is there. The leader calls it on
// becoming leader and again on every status tick: it writes only while
// the mirror has no such record, which is after an election and after
// etcd expired the lease the record was on (a member cut off from etcd, or
// an etcd outage, past the TTL: the member joins again on a new lease, and
// its records went with the old one). Without the repeat a leader whose
// record went stayed unnamed for as long as it led. It does not block: the
// write runs in the background, one at a time per shard, each bounded to
// 3 s; a lost race only means a stale routing hint until the next claim.
func (n *Node) ClaimLeader(key ShardKey, term uint64) {
	if !n.ready.Load() || n.ctx.Err() != nil {
		return // no lease to write on: claimed once the member joined again
	}
	lease := n.lease.Load()
	n.mu.RLock()
	rec, ok := n.state.owners[key]
	n.mu.RUnlock()
	if ok && (rec.Term > term || rec.Term == term && rec.NodeID == n.cfg.NodeID && rec.Lease == lease) {
		return
	}
	if _, busy := n.claiming.LoadOrStore(key, struct{}{}); busy {
		return
	}
	n.done.Add(1)
	go func() {
		defer n.done.Done()
		defer n.claiming.Delete(key)
		ctx, cancel := context.WithTimeout(n.ctx, 3*time.Second)
		defer cancel()
		for !n.claimOnce(ctx, key, term) {
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
}

// claimOnce tries the claim once; false means try again.
func (n *Node) claimOnce(ctx context.Context, key ShardKey, term uint64) bool {
	k := n.keys.owner(key)
	res, err := n.etcd.Get(ctx, k)
	if err != nil {
		return false
	}
	cond := clientv3.Compare(clientv3.CreateRevision(k), "=", 0)
	if len(res.Kvs) > 0 {
		if old, err := decode[ownerRecord](res.Kvs[0].Value); err == nil && old.Term >= term && old.NodeID != n.cfg.NodeID {
			return true // a later leader claimed it
		}
		cond = clientv3.Compare(clientv3.ModRevision(k), "=", res.Kvs[0].ModRevision)
	}
	lease := n.lease.Load()
	n.mu.RLock()
	addr := n.state.members[n.cfg.NodeID].Addr
	n.mu.RUnlock()
	if addr == "" {
		addr = n.cfg.Addr
	}
	rec := ownerRecord{NodeID: n.cfg.NodeID, Addr: addr, Lease: lease, Term: term}
	tx, err := n.etcd.Txn(ctx).If(cond).Then(clientv3.OpPut(k, encode(rec), clientv3.WithLease(clientv3.LeaseID(lease)))).Commit()
	if err != nil || !tx.Succeeded {
		return false
	}
	n.log.Info().Str("shard", key.String()).Uint64("term", term).Msg("replica is the shard's leader; clients are routed here")
	return true
}

// LiveMembers counts the members whose lease is live, this one included
// once joined.
func (n *Node) LiveMembers() int {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return len(n.state.members)
}

// ErrMoveRefused matches (errors.Is) a replica move the set refuses.
var ErrMoveRefused = errors.New("cluster: replica move refused")

// MoveReplica starts moving key's replica on member from to member to
// (live, not in the set): it writes the move into the replica set, and the
// shard's leader carries it out (it adds to, then removes from, and
// FinishMove writes the set without the move). One move per shard at a
// time.
func (n *Node) MoveReplica(ctx context.Context, key ShardKey, from, to string) error {
	if err := n.updateSet(ctx, key, moveChange(n, key, from, to)); err != nil {
		return err
	}
	n.moveGroupState(ctx, key, from, to) // groups.go
	return nil
}

// moveChange is MoveReplica's change to key's set.
func moveChange(n *Node, key ShardKey, from, to string) func(*ReplicaSet) error {
	return func(set *ReplicaSet) error {
		rm, in := set.idOf(from)
		switch {
		case set.Move != nil:
			return fmt.Errorf("%w: %s is already moving a replica from %s to %s", ErrMoveRefused, key, set.Move.Remove.Node, set.Move.Add.Node)
		case !in:
			return fmt.Errorf("%w: %s has no replica on %s", ErrMoveRefused, key, from)
		}
		if _, there := set.Has(to); there {
			return fmt.Errorf("%w: %s already has a replica on %s", ErrMoveRefused, key, to)
		}
		if _, live := n.MemberAddr(to); !live {
			return fmt.Errorf("%w: %s is not a live member", ErrMoveRefused, to)
		}
		if len(set.Initial) == 0 {
			for _, r := range set.Members {
				set.Initial = append(set.Initial, r.ID)
			}
		}
		next := uint64(0)
		for _, r := range set.Members {
			next = max(next, r.ID)
		}
		set.Move = &ReplicaMove{Add: Replica{ID: next + 1, Node: to}, Remove: Replica{ID: rm, Node: from}}
		return nil
	}
}

// FinishMove writes key's replica set without its move once the group's
// membership has the new replica and not the old one (the leader calls it).
func (n *Node) FinishMove(ctx context.Context, key ShardKey) error {
	return n.updateSet(ctx, key, func(set *ReplicaSet) error {
		if set.Move == nil {
			return nil
		}
		mv := set.Move
		set.Members = append(slices.DeleteFunc(set.Members, func(r Replica) bool { return r.ID == mv.Remove.ID }), mv.Add)
		set.Move = nil
		return nil
	})
}

func (s ReplicaSet) idOf(node string) (uint64, bool) {
	for _, r := range s.Members {
		if r.Node == node {
			return r.ID, true
		}
	}
	return 0, false
}

// updateSet changes key's replica set with change, conditional on the
// record not having changed since it was read.
func (n *Node) updateSet(ctx context.Context, key ShardKey, change func(*ReplicaSet) error) error {
	k := n.keys.replicaSet(key)
	res, err := n.etcd.Get(ctx, k)
	if err != nil {
		return fmt.Errorf("cluster: read the replica set of %s: %w", key, err)
	}
	if len(res.Kvs) == 0 {
		return fmt.Errorf("%w: %s has no replica set (not a replicated shard, or not placed yet)", ErrMoveRefused, key)
	}
	set, err := decode[ReplicaSet](res.Kvs[0].Value)
	if err != nil {
		return fmt.Errorf("cluster: the replica set of %s: %w", key, err)
	}
	if err := change(&set); err != nil {
		return err
	}
	tx, err := n.etcd.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", res.Kvs[0].ModRevision)).
		Then(clientv3.OpPut(k, encode(set))).Commit()
	switch {
	case err != nil:
		return fmt.Errorf("cluster: write the replica set of %s: %w", key, err)
	case !tx.Succeeded:
		return fmt.Errorf("%w: the replica set of %s changed meanwhile; try again", ErrMoveRefused, key)
	}
	return nil
}

// FinishMoveAsync is FinishMove in the background, tracked by the node (its
// Stop waits for it), bounded to 3 s; done gets the outcome.
func (n *Node) FinishMoveAsync(key ShardKey, done func(error)) {
	n.done.Add(1)
	go func() {
		defer n.done.Done()
		ctx, cancel := context.WithTimeout(n.ctx, 3*time.Second)
		defer cancel()
		done(n.FinishMove(ctx, key))
	}()
}

// Draining reports whether an operator is draining this member: its
// replicas hand their leadership to others.
func (n *Node) Draining() bool {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.state.draining[n.cfg.NodeID]
}
