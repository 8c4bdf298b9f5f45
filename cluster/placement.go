package cluster

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/cespare/xxhash/v2"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/getfelix/felix-go/wire"
)

// Placement. Every member runs the same loop: for each shard with no
// owner, it picks a member by rendezvous hashing over the live members that
// are not draining, and writes the owner record on THAT member's lease in a
// transaction that succeeds only if the shard still has no owner. Members
// racing to place a shard write the same or another live member; etcd
// keeps exactly one. An owner record lives exactly as long as its owner's
// lease, so a member that dies loses its shards when the lease expires,
// and the loop places them again. A durable shard is placed on the member
// that holds its data (its home, written with its first owner) or nowhere.

// assignment is one placement the loop will try.
type assignment struct {
	key     ShardKey
	target  memberRecord
	durable bool
	// home: a durable shard's home to write with its first owner; or the
	// home it must still have.
	home string
	// handoff: this member gives the shard away (drain); epoch is its
	// ownership's, so the write fails if the shard changed meanwhile.
	handoff bool
	epoch   int64
}

// reconcile places unowned shards and, while draining, hands owned ones over.
func (n *Node) reconcile() {
	if !n.ready.Load() {
		return
	}
	n.mu.RLock()
	plan := n.state.plan(n.cfg.NodeID)
	n.mu.RUnlock()
	for _, a := range plan {
		if n.ctx.Err() != nil {
			return
		}
		if a.handoff {
			n.handoff(a)
			continue
		}
		n.place(a)
	}
	n.placeReplicaSets()
	n.hostReplicas()
	if h := n.cfg.Hooks.NotZoneSpread; h != nil {
		n.mu.RLock()
		spread := n.state.notZoneSpread()
		n.mu.RUnlock()
		h(spread)
	}
}

// plan lists the placements to try now.
func (s *state) plan(self string) []assignment {
	candidates := s.candidates()
	var plan []assignment
	for scope, def := range s.defs {
		if def.Durable && def.Replicas > 1 {
			continue // raft groups: placed as replica sets (replicas.go)
		}
		for shard := range def.Shards {
			key := ShardKey{Scope: scope, Shard: shard}
			if rec, owned := s.owners[key]; owned {
				if rec.NodeID == self && s.draining[self] && !def.Durable {
					if t, ok := pick(key, candidates, self); ok {
						plan = append(plan, assignment{key: key, target: t, handoff: true, epoch: rec.epoch})
					}
				}
				continue
			}
			if a, ok := s.placement(key, def.Durable, candidates); ok {
				plan = append(plan, a)
			}
		}
	}
	return plan
}

// placement picks the owner of an unowned shard: a durable one's home if
// it is live, a new shard's rendezvous choice.
func (s *state) placement(key ShardKey, durable bool, candidates []memberRecord) (assignment, bool) {
	if home, ok := s.homes[key]; ok && durable {
		m, live := s.members[home]
		return assignment{key: key, target: m, durable: true, home: home}, live
	}
	if a, ok, isState := s.groupPlacement(key); isState {
		return a, ok // with its data shard (groups.go)
	}
	t, ok := pick(key, candidates, "")
	return assignment{key: key, target: t, durable: durable}, ok
}

// candidates are the live members that take new shards, in id order.
func (s *state) candidates() []memberRecord {
	out := make([]memberRecord, 0, len(s.members))
	for id, m := range s.members {
		if !s.draining[id] {
			out = append(out, m)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].NodeID < out[j].NodeID })
	return out
}

// pick is rendezvous hashing: every member computes the same choice from
// the same members, and a member leaving moves only its own shards.
func pick(key ShardKey, candidates []memberRecord, except string) (memberRecord, bool) {
	var best memberRecord
	var bestScore uint64
	found := false
	for _, m := range candidates {
		if m.NodeID == except {
			continue
		}
		// xxhash, not FNV: FNV's scores for ids that differ in one
		// character were so alike that one member got no shard.
		if score := xxhash.Sum64String(m.NodeID + "\x00" + key.String()); !found || score > bestScore {
			best, bestScore, found = m, score, true
		}
	}
	return best, found
}

// place writes a first (or next) owner for an unowned shard.
func (n *Node) place(a assignment) {
	ownerKey := n.keys.owner(a.key)
	rec := ownerRecord{NodeID: a.target.NodeID, Addr: a.target.Addr, Lease: a.target.Lease}
	conds := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(ownerKey), "=", 0)}
	ops := []clientv3.Op{clientv3.OpPut(ownerKey, encode(rec), clientv3.WithLease(clientv3.LeaseID(a.target.Lease)))}
	if a.durable {
		homeKey := n.keys.home(a.key)
		if a.home == "" {
			conds = append(conds, clientv3.Compare(clientv3.CreateRevision(homeKey), "=", 0))
			ops = append(ops, clientv3.OpPut(homeKey, a.target.NodeID))
		} else {
			conds = append(conds, clientv3.Compare(clientv3.Value(homeKey), "=", a.home))
		}
	}
	ctx, cancel := context.WithTimeout(n.ctx, 2*time.Second)
	defer cancel()
	if _, err := n.etcd.Txn(ctx).If(conds...).Then(ops...).Commit(); err != nil {
		// The target's lease ended meanwhile (it died): the next round
		// sees it gone and picks another.
		n.log.Debug().Err(err).Str("shard", a.key.String()).Str("to", a.target.NodeID).Msg("place shard")
	}
}

// handoff gives an owned shard to another member (drain). The shard stops
// acknowledging first; then the owner record is rewritten on the new
// member's lease, only if it is still this ownership's. If that fails the
// record is deleted, so the shard is placed again rather than stuck here.
func (n *Node) handoff(a assignment) {
	next := wire.Owner{NodeID: a.target.NodeID, Addr: a.target.Addr}
	var due dueHooks
	n.mu.Lock()
	n.loseLocked(a.key, &next, &due)
	n.mu.Unlock()
	due.run()
	ownerKey := n.keys.owner(a.key)
	rec := ownerRecord{NodeID: a.target.NodeID, Addr: a.target.Addr, Lease: a.target.Lease}
	ctx, cancel := context.WithTimeout(n.ctx, 2*time.Second)
	defer cancel()
	res, err := n.etcd.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(ownerKey), "=", a.epoch)).
		Then(clientv3.OpPut(ownerKey, encode(rec), clientv3.WithLease(clientv3.LeaseID(a.target.Lease)))).
		Commit()
	if err == nil && res.Succeeded {
		return
	}
	n.log.Warn().AnErr("err", err).Str("shard", a.key.String()).Str("to", a.target.NodeID).Msg("hand-off failed; releasing the shard to be placed again")
	_, _ = n.etcd.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(ownerKey), "=", a.epoch)).Then(clientv3.OpDelete(ownerKey)).Commit()
}

// Place is asked before a shard serves here (the broker's registry, on its
// own goroutine: it never blocks). It returns this member's ownership, or
// the error a client gets: not_leader naming the owner, or
// shard_unavailable while the shard is placed (retry) or while a durable
// shard's member is down.
func (n *Node) Place(key ShardKey, durable bool) (*Ownership, error) {
	if !n.ready.Load() {
		return nil, unavailable(key, "not_ready", "member %s has not joined the cluster yet (etcd %v); try another member", n.cfg.NodeID, n.cfg.Endpoints)
	}
	n.mu.RLock()
	o, mine := n.state.owned[key]
	rec, owned := n.state.owners[key]
	home, hasHome := n.state.homes[key]
	_, homeLive := n.state.members[home]
	n.mu.RUnlock()
	switch {
	case mine:
		if err := o.Check(); err != nil {
			return nil, err
		}
		return o, nil
	case owned:
		return nil, notLeader(key, rec.wire())
	case durable && hasHome && !homeLive:
		e := unavailable(key, "owner_unavailable", "durable shard %s lives on member %s, which is down; it is back when that member returns (the stream has no replicas)", key, home)
		e.Owner = &wire.Owner{NodeID: home}
		return nil, e
	}
	n.poke()
	e := unavailable(key, "not_assigned", "shard %s is being placed; retry", key)
	e.Cause = ErrNotAssigned
	return nil, e
}

// Owners returns the owner of each of a stream's shards, waiting up to
// ownersWait for shards being placed; one still unplaced (or a durable
// shard whose member is down) is reported not Available.
func (n *Node) Owners(ctx context.Context, def ShardDef) ([]wire.ShardOwner, error) {
	if !n.ready.Load() {
		return nil, unavailable(ShardKey{Scope: def.Scope}, "not_ready", "member %s has not joined the cluster yet; try another member", n.cfg.NodeID)
	}
	ctx, cancel := context.WithTimeout(ctx, ownersWait)
	defer cancel()
	for {
		n.mu.RLock()
		owners, missing := n.state.ownersOf(def, n.cfg.RaftLeader)
		changed := n.changed
		n.mu.RUnlock()
		if missing == 0 {
			return owners, nil
		}
		n.poke()
		select {
		case <-changed:
		case <-ctx.Done():
			return owners, nil
		}
	}
}

// WaitPlaced waits, up to ownersWait, until a shard has an owner, so the
// first request for a new stream's shard can be answered rather than
// refused while it is placed. It reports whether one was found.
func (n *Node) WaitPlaced(ctx context.Context, key ShardKey) bool {
	ctx, cancel := context.WithTimeout(ctx, ownersWait)
	defer cancel()
	for {
		n.mu.RLock()
		_, placed := n.state.owners[key]
		changed := n.changed
		n.mu.RUnlock()
		if placed {
			return true
		}
		n.poke()
		select {
		case <-changed:
		case <-ctx.Done():
			return false
		}
	}
}

// ErrNotAssigned matches (errors.Is) the refusal of a shard that has no
// owner yet because it is being placed.
var ErrNotAssigned = errors.New("cluster: shard not assigned yet")

// ownersWait bounds how long Owners waits for a new stream's placement:
// one etcd round trip and a watch event, normally milliseconds.
const ownersWait = 3 * time.Second

// ShardDef is what placement needs to know of a stream.
type ShardDef struct {
	Scope   wire.Scope
	Shards  uint32
	Durable bool
}

// ownersOf lists def's owners and counts the shards that could be placed
// but are not yet. A replicated shard is named by its owner record or, when
// this member's replica knows a leader of a later term than the record's
// (or there is no record), by that leader (raftLeader may be nil).
func (s *state) ownersOf(def ShardDef, raftLeader func(ShardKey) (uint64, uint64)) ([]wire.ShardOwner, int) {
	owners := make([]wire.ShardOwner, 0, def.Shards)
	missing := 0
	for shard := range def.Shards {
		key := ShardKey{Scope: def.Scope, Shard: shard}
		so := wire.ShardOwner{Shard: shard}
		rec, recorded := s.owners[key]
		if o, ok := s.raftOwner(key, rec, recorded, raftLeader); ok {
			so.Owner, so.Available = o, true
		} else if recorded {
			so.Owner, so.Available = rec.wire(), true
		} else if home, ok := s.homes[key]; ok && def.Durable {
			if _, live := s.members[home]; live {
				missing++
			}
			so.Owner = wire.Owner{NodeID: home}
		} else {
			missing++
		}
		owners = append(owners, so)
	}
	return owners, missing
}

// raftOwner is the leader of replicated shard key as this member's replica
// sees it, when that is news: the owner record (rec, if recorded) is
// missing or of an earlier term. The leader must be a live member (its
// address is its member record's). Generation is the raft term, as in a
// replica's own not_leader.
func (s *state) raftOwner(key ShardKey, rec ownerRecord, recorded bool, raftLeader func(ShardKey) (uint64, uint64)) (wire.Owner, bool) {
	if raftLeader == nil || !s.replicated(key) {
		return wire.Owner{}, false
	}
	lead, term := raftLeader(key)
	if lead == 0 || recorded && rec.Term >= term {
		return wire.Owner{}, false
	}
	node, ok := s.replicaSets[key].NodeOf(lead)
	m, live := s.members[node]
	if !ok || !live {
		return wire.Owner{}, false
	}
	return wire.Owner{NodeID: node, Addr: m.Addr, Generation: term}, true
}

// setsPerTxn is how many replica sets one etcd transaction writes at most.
// Each set is a nested create-if-absent transaction, so a set another
// member wrote first fails alone rather than the whole batch; etcd counts
// the outer transaction's ops and needs one more for each nested one, so
// under its default --max-txn-ops (128) a batch holds 127. An etcd run
// with a lower limit refuses the batch (ErrTooManyOps): it is halved and
// sent again, and the size that fits is kept for later rounds.
const setsPerTxn = 127

// writeReplicaSets writes sets[i] as key todo[i]'s replica set unless it
// has one, in as few transactions as etcd takes: placing a thousand shards
// one transaction each took minutes.
func (n *Node) writeReplicaSets(todo []ShardKey, sets []ReplicaSet) {
	for len(todo) > 0 && n.ctx.Err() == nil {
		size := min(len(todo), int(n.setBatch.Load()))
		ops := make([]clientv3.Op, size)
		for i, key := range todo[:size] {
			k := n.keys.replicaSet(key)
			ops[i] = clientv3.OpTxn(
				[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(k), "=", 0)},
				[]clientv3.Op{clientv3.OpPut(k, encode(sets[i]))}, nil)
		}
		ctx, cancel := context.WithTimeout(n.ctx, 5*time.Second)
		_, err := n.etcd.Txn(ctx).Then(ops...).Commit()
		cancel()
		if errors.Is(err, rpctypes.ErrTooManyOps) && size > 1 {
			n.setBatch.Store(int32(size / 2))
			continue
		}
		if err != nil {
			// The next round tries what is still unwritten.
			n.log.Debug().Err(err).Int("sets", size).Msg("write replica sets")
			return
		}
		todo, sets = todo[size:], sets[size:]
	}
}
