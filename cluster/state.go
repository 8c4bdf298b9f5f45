package cluster

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/getfelix/felix-go/wire"
)

// state mirrors the cluster's records in etcd. Only the node's loop
// changes it, under Node.mu.
type state struct {
	rev      int64 // the etcd revision the mirror is at
	members  map[string]memberRecord
	draining map[string]bool
	defs     map[wire.Scope]StreamDef
	owners   map[ShardKey]ownerRecord
	homes    map[ShardKey]string
	// replicaSets are the replicated shards' sets (replicas.go).
	replicaSets map[ShardKey]ReplicaSet
	// owned are the shards this member owns under its current lease.
	owned map[ShardKey]*Ownership
	// lastOwner remembers who owned a shard that has none now, so the
	// member that takes it can log where it came from.
	lastOwner map[ShardKey]string
	// lost are the members this one saw leave or be lost (their record
	// vanished) that have not joined again, with when it last saw them,
	// so that Status shows them down rather than not at all. Kept for
	// this member's life only.
	lost map[string]lostMember
}

// lostMember is a member whose record vanished, and when.
type lostMember struct {
	rec      memberRecord
	lastSeen time.Time
}

func newState() state {
	return state{
		members: map[string]memberRecord{}, draining: map[string]bool{}, defs: map[wire.Scope]StreamDef{},
		owners: map[ShardKey]ownerRecord{}, homes: map[ShardKey]string{}, owned: map[ShardKey]*Ownership{},
		replicaSets: map[ShardKey]ReplicaSet{},
		lastOwner:   map[ShardKey]string{},
		lost:        map[string]lostMember{},
	}
}

// Ownership is this member's ownership of one shard, as the shard checks
// it: before it takes a publish and before it acknowledges one.
type Ownership struct {
	node  *Node
	key   ShardKey
	lease int64
	epoch int64
	// revoked is set when the shard left this member (next names where it
	// went, when known); from then on it acknowledges nothing.
	revoked atomic.Bool
	next    atomic.Pointer[wire.Owner]
}

// Epoch is the ownership's fencing epoch: the owner record's revision.
func (o *Ownership) Epoch() uint64 { return uint64(o.epoch) }

// Check says whether the shard may still acknowledge: the ownership was not
// revoked, it belongs to the member's current lease, and etcd cannot have
// expired that lease yet. Cheap: two atomic loads and a clock read.
func (o *Ownership) Check() error {
	if o.revoked.Load() {
		if next := o.next.Load(); next != nil {
			return notLeader(o.key, *next)
		}
		return unavailable(o.key, "moving", "shard %s is moving off this member; ask for its owner again (shard_owners)", o.key)
	}
	if !o.node.leaseValid(o.lease) {
		return unavailable(o.key, "fenced", "shard %s: this member's lease was not renewed in time, so another member may own the shard now; it acknowledges nothing until it has joined again", o.key)
	}
	return nil
}

// notLeader refuses a request for a shard another member owns.
func notLeader(key ShardKey, owner wire.Owner) *wire.Error {
	e := wire.NewError(wire.CodeNotLeader, "shard %s is owned by member %s at %s", key, owner.NodeID, owner.Addr)
	e.Owner = &owner
	return e
}

// unavailable refuses a request for a shard nobody can serve now; reason
// is the shard_unavailable reason (not_ready, owner_unavailable, moving…)
// that starts the message.
func unavailable(key ShardKey, reason, format string, args ...any) *wire.Error {
	return wire.NewError(wire.CodeShardUnavailable, "%s: %s", reason, fmt.Sprintf(format, args...))
}

// serve follows the cluster until the lease is lost or the node stops:
// the watch keeps the mirror current, the lease is renewed, and unowned
// shards are placed.
func (n *Node) serve() {
	ctx, cancel := context.WithCancel(n.ctx)
	defer cancel()
	lost := make(chan struct{})
	go n.renew(ctx, clientv3.LeaseID(n.lease.Load()), lost)
	watch := n.watch(ctx)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	n.reconcile()
	for {
		select {
		case <-ctx.Done():
			return
		case <-lost:
			n.ready.Store(false)
			n.log.Error().Msg("the lease expired (this member was cut off from etcd or frozen past the TTL); its shards are gone; joining again")
			n.revokeAll(nil)
			return
		case res, ok := <-watch:
			if !ok || res.Err() != nil || res.Canceled {
				watch = n.resync(ctx, res.Err())
				continue
			}
			n.apply(res.Events, res.Header.Revision)
		case <-n.kick:
			n.reconcile()
		case <-tick.C:
			n.reconcile()
		}
	}
}

func (n *Node) watch(ctx context.Context) clientv3.WatchChan {
	return n.etcd.Watch(clientv3.WithRequireLeader(ctx), n.keys.prefix+"/", clientv3.WithPrefix(),
		clientv3.WithRev(n.state.rev+1), clientv3.WithPrevKV())
}

// resync reloads the whole state after the watch failed (etcd restarted,
// or compacted past the mirror's revision) and watches again from there.
func (n *Node) resync(ctx context.Context, cause error) clientv3.WatchChan {
	for ctx.Err() == nil {
		n.log.Warn().AnErr("cause", cause).Msg("watch on etcd ended; reloading the cluster state")
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		rev, err := n.load(lctx)
		cancel()
		if err == nil {
			n.state.rev = rev
			return n.watch(ctx)
		}
		cause = err
		n.sleep(time.Second)
	}
	return nil
}

// load reads every record and replaces the mirror with them, telling the
// broker what changed since the last mirror (definitions, shards gained
// and lost). It returns the revision read.
func (n *Node) load(ctx context.Context) (int64, error) {
	res, err := n.etcd.Get(ctx, n.keys.prefix+"/", clientv3.WithPrefix())
	if err != nil {
		return 0, fmt.Errorf("cluster: load state: %w", err)
	}
	evs := make([]*clientv3.Event, 0, len(res.Kvs))
	for _, kv := range res.Kvs {
		evs = append(evs, &clientv3.Event{Type: mvccpb.PUT, Kv: kv})
	}
	// Definitions first: whether an owner record fences a shard depends on
	// its stream's definition (replicated or not), and keys come sorted,
	// owners/ before streams/.
	streamsPrefix := n.keys.streams()
	slices.SortStableFunc(evs, func(a, b *clientv3.Event) int {
		as, bs := strings.HasPrefix(string(a.Kv.Key), streamsPrefix), strings.HasPrefix(string(b.Kv.Key), streamsPrefix)
		switch {
		case as && !bs:
			return -1
		case bs && !as:
			return 1
		}
		return 0
	})
	n.mu.Lock()
	old := n.state
	n.state = newState()
	n.state.owned, n.state.lastOwner, n.state.lost = old.owned, old.lastOwner, old.lost
	n.mu.Unlock()
	n.apply(evs, res.Header.Revision)
	// What the reload no longer has: definitions deleted and shards lost
	// while the watch was down.
	var gone []wire.Scope
	var due dueHooks
	n.mu.Lock()
	for scope := range old.defs {
		if _, ok := n.state.defs[scope]; !ok {
			gone = append(gone, scope)
		}
	}
	for key, o := range n.state.owned {
		if rec, ok := n.state.owners[key]; !ok || rec.NodeID != n.cfg.NodeID || rec.Lease != o.lease {
			n.loseLocked(key, ownerOf(rec, ok), &due)
		}
	}
	// Members that went while the watch was down were last seen by the
	// mirror it replaces.
	for id, rec := range old.members {
		if _, ok := n.state.members[id]; !ok && id != n.cfg.NodeID {
			n.state.lost[id] = lostMember{rec: rec, lastSeen: time.Now().UTC()}
		}
	}
	n.notifyLocked()
	n.mu.Unlock()
	due.run()
	if len(gone) > 0 && n.cfg.Hooks.Defs != nil {
		n.cfg.Hooks.Defs(nil, gone)
	}
	return res.Header.Revision, nil
}

func ownerOf(rec ownerRecord, ok bool) *wire.Owner {
	if !ok {
		return nil
	}
	w := rec.wire()
	return &w
}

// apply brings the mirror up to date with a batch of events.
func (n *Node) apply(evs []*clientv3.Event, rev int64) {
	var put []StreamDef
	var deleted []wire.Scope
	membersChanged, unowned, sets := false, false, false
	var due dueHooks
	n.mu.Lock()
	for _, ev := range evs {
		key := string(ev.Kv.Key)
		rest, kind := n.classify(key)
		switch kind {
		case "members":
			membersChanged = true
			n.applyMember(rest, ev)
		case "drain":
			n.state.draining[rest] = ev.Type == mvccpb.PUT
			if ev.Type == mvccpb.DELETE {
				delete(n.state.draining, rest)
			}
		case "streams":
			if scope, ok := parseScope(rest); ok {
				if ev.Type == mvccpb.DELETE {
					delete(n.state.defs, scope)
					deleted = append(deleted, scope)
				} else if d, err := decode[StreamDef](ev.Kv.Value); err == nil {
					n.state.defs[scope] = d
					put = append(put, d)
				}
			}
		case "owners":
			if sk, ok := parseShardKey(rest); ok {
				n.applyOwner(sk, ev, &due)
				unowned = unowned || ev.Type == mvccpb.DELETE
			}
		case "producers":
			if id, err := strconv.ParseUint(rest, 10, 64); err == nil && ev.Type == mvccpb.PUT && n.cfg.Hooks.Producer != nil {
				tenant := string(ev.Kv.Value)
				due.add(func() { n.cfg.Hooks.Producer(id, tenant) })
			}
		case "replicas":
			if sk, ok := parseShardKey(rest); ok {
				n.applyReplicaSet(sk, ev)
				sets = true
			}
		case "homes":
			if sk, ok := parseShardKey(rest); ok {
				if ev.Type == mvccpb.DELETE {
					delete(n.state.homes, sk)
				} else {
					n.state.homes[sk] = string(ev.Kv.Value)
				}
			}
		}
	}
	n.state.rev = rev
	members, owned := len(n.state.members), len(n.state.owned)
	n.notifyLocked()
	n.mu.Unlock()
	due.run()
	if (len(put) > 0 || len(deleted) > 0) && n.cfg.Hooks.Defs != nil {
		n.cfg.Hooks.Defs(put, deleted)
	}
	if membersChanged && n.cfg.Hooks.Members != nil {
		n.cfg.Hooks.Members(members)
	}
	if n.cfg.Hooks.Owned != nil {
		n.cfg.Hooks.Owned(owned)
	}
	if len(put) > 0 || membersChanged || unowned || sets {
		n.poke()
	}
}

// classify splits a key into its kind (the first element after the
// prefix) and the rest.
func (n *Node) classify(key string) (rest, kind string) {
	rel, ok := strings.CutPrefix(key, n.keys.prefix+"/")
	if !ok {
		return "", ""
	}
	kind, rest, _ = strings.Cut(rel, "/")
	return rest, kind
}

func (n *Node) applyMember(id string, ev *clientv3.Event) {
	if ev.Type == mvccpb.DELETE {
		if rec, was := n.state.members[id]; was && id != n.cfg.NodeID {
			n.log.Warn().Str("member", id).Msg("member left or was lost (its lease ended); its in-memory shards move to the others")
			n.state.lost[id] = lostMember{rec: rec, lastSeen: time.Now().UTC()}
		}
		delete(n.state.members, id)
		return
	}
	rec, err := decode[memberRecord](ev.Kv.Value)
	if err != nil {
		n.log.Warn().Err(err).Str("member", id).Msg("unreadable member record; ignored")
		return
	}
	if _, known := n.state.members[id]; !known && id != n.cfg.NodeID && n.ready.Load() {
		n.log.Info().Str("member", id).Str("addr", rec.Addr).Msg("member joined")
	}
	n.state.members[id] = rec
	delete(n.state.lost, id)
}

// applyOwner records a shard's owner and works out what it means here:
// a shard placed on this member is gained; one that left it is lost.
func (n *Node) applyOwner(sk ShardKey, ev *clientv3.Event, due *dueHooks) {
	if ev.Type == mvccpb.DELETE {
		if prev, ok := n.state.owners[sk]; ok {
			n.state.lastOwner[sk] = prev.NodeID
		}
		delete(n.state.owners, sk)
		if _, mine := n.state.owned[sk]; mine {
			n.loseLocked(sk, nil, due)
		}
		return
	}
	rec, err := decode[ownerRecord](ev.Kv.Value)
	if err != nil {
		return
	}
	rec.epoch = ev.Kv.ModRevision
	prev, hadPrev := n.state.owners[sk]
	n.state.owners[sk] = rec
	if n.state.replicated(sk) {
		return // a routing hint: raft, not the record, fences the shard
	}
	mine := rec.NodeID == n.cfg.NodeID && rec.Lease == n.lease.Load()
	o, owned := n.state.owned[sk]
	switch {
	case mine && (!owned || o.epoch != rec.epoch):
		if owned {
			n.loseLocked(sk, nil, due)
		}
		from := n.state.lastOwner[sk]
		if hadPrev {
			from = prev.NodeID
		}
		n.gainLocked(sk, rec, from, due)
	case !mine && owned:
		w := rec.wire()
		n.loseLocked(sk, &w, due)
	}
	delete(n.state.lastOwner, sk)
}

func (n *Node) gainLocked(sk ShardKey, rec ownerRecord, from string, due *dueHooks) {
	n.state.owned[sk] = &Ownership{node: n, key: sk, lease: rec.Lease, epoch: rec.epoch}
	ev := n.log.Info().Str("shard", sk.String()).Int64("epoch", rec.epoch).Str("to", n.cfg.NodeID)
	if from != "" && from != n.cfg.NodeID {
		ev.Str("from", from).Msg("shard moved here")
		if n.cfg.Hooks.Moved != nil {
			due.add(func() { n.cfg.Hooks.Moved("in") })
		}
		return
	}
	ev.Msg("shard placed here")
}

// loseLocked fences and forgets an owned shard, and queues telling the
// broker on due: the fence is up before the hook runs.
func (n *Node) loseLocked(sk ShardKey, next *wire.Owner, due *dueHooks) {
	o, ok := n.state.owned[sk]
	if !ok {
		return
	}
	if next != nil {
		o.next.Store(next)
	}
	o.revoked.Store(true)
	delete(n.state.owned, sk)
	ev := n.log.Info().Str("shard", sk.String()).Str("from", n.cfg.NodeID)
	if next != nil {
		ev = ev.Str("to", next.NodeID)
	}
	ev.Msg("shard moved away")
	if n.cfg.Hooks.Moved != nil {
		due.add(func() { n.cfg.Hooks.Moved("out") })
	}
	if n.cfg.Hooks.Lost != nil {
		due.add(func() { n.cfg.Hooks.Lost(sk, next) })
	}
}

// dueHooks are the hook calls a change made under mu owes: the changer
// makes them (run) once it released mu, so no hook runs under the node's
// lock and the lock order gains no edge from what a hook takes.
type dueHooks []func()

func (d *dueHooks) add(call func()) { *d = append(*d, call) }

// run makes the calls in the order they were owed.
func (d dueHooks) run() {
	for _, call := range d {
		call()
	}
}

// revokeAll loses every owned shard (the lease is gone, or the member leaves).
func (n *Node) revokeAll(next *wire.Owner) {
	var due dueHooks
	n.mu.Lock()
	for sk := range n.state.owned {
		n.loseLocked(sk, next, &due)
	}
	n.notifyLocked()
	owned := len(n.state.owned)
	n.mu.Unlock()
	due.run()
	if n.cfg.Hooks.Owned != nil {
		n.cfg.Hooks.Owned(owned)
	}
}

// notifyLocked wakes everyone waiting for a state change.
func (n *Node) notifyLocked() {
	close(n.changed)
	n.changed = make(chan struct{})
}

// poke asks the loop to place shards soon, without waiting.
func (n *Node) poke() {
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

func (n *Node) memberCount() int {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return len(n.state.members)
}

func (n *Node) applyReplicaSet(sk ShardKey, ev *clientv3.Event) {
	if ev.Type == mvccpb.DELETE {
		delete(n.state.replicaSets, sk)
		return
	}
	if set, err := decode[ReplicaSet](ev.Kv.Value); err == nil {
		n.state.replicaSets[sk] = set
	}
}
