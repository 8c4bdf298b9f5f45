package cluster

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/getfelix/felix-go/wire"
)

// storeTimeout bounds one write of a definition: the registry waits for it
// inside its Receive, so an etcd that stopped answering must not hold it.
const storeTimeout = 3 * time.Second

// CreateDef writes a stream's definition unless one exists, and returns
// what etcd holds afterwards: d, or the existing definition (the caller
// compares settings). An explicit definition replaces an implicit one.
func (n *Node) CreateDef(ctx context.Context, d StreamDef) (StreamDef, error) {
	if !n.ready.Load() {
		return StreamDef{}, unavailable(ShardKey{Scope: d.Scope()}, "not_ready", "member %s has not joined the cluster yet; try another member", n.cfg.NodeID)
	}
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	k := n.keys.stream(d.Scope())
	for range 5 {
		res, err := n.etcd.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
			Then(clientv3.OpPut(k, encode(d))).
			Else(clientv3.OpGet(k)).Commit()
		if err != nil {
			return StreamDef{}, wire.WrapError(wire.CodeStorage, err, "write the definition of %s to etcd", d.Scope())
		}
		if res.Succeeded {
			return d, nil
		}
		kvs := res.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 {
			continue // deleted meanwhile
		}
		old, err := decode[StreamDef](kvs[0].Value)
		if err != nil {
			return StreamDef{}, wire.WrapError(wire.CodeStorage, err, "read the definition of %s from etcd", d.Scope())
		}
		if !old.Implicit || d.Implicit {
			return old, nil
		}
		rep, err := n.etcd.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(k), "=", kvs[0].ModRevision)).
			Then(clientv3.OpPut(k, encode(d))).Commit()
		if err != nil {
			return StreamDef{}, wire.WrapError(wire.CodeStorage, err, "write the definition of %s to etcd", d.Scope())
		}
		if rep.Succeeded {
			return d, nil
		}
	}
	return StreamDef{}, wire.NewError(wire.CodeShardUnavailable, "the definition of %s kept changing under the create; retry", d.Scope())
}

// DeleteDef deletes a stream's definition with its shards' owners and
// homes: every member stops its shards when it sees the delete.
func (n *Node) DeleteDef(ctx context.Context, scope wire.Scope) error {
	if !n.ready.Load() {
		return unavailable(ShardKey{Scope: scope}, "not_ready", "member %s has not joined the cluster yet; try another member", n.cfg.NodeID)
	}
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	_, err := n.etcd.Txn(ctx).Then(
		clientv3.OpDelete(n.keys.stream(scope)),
		clientv3.OpDelete(n.keys.streamOwners(scope), clientv3.WithPrefix()),
		clientv3.OpDelete(n.keys.streamHomes(scope), clientv3.WithPrefix()),
		clientv3.OpDelete(n.keys.streamReplicas(scope), clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return wire.WrapError(wire.CodeStorage, err, "delete the definition of %s in etcd", scope)
	}
	return nil
}

// CreateProducer records an idempotent producer id with its tenant,
// unless the id is taken: every member learns it through the watch
// (Hooks.Producer), so a producer may publish through any member.
func (n *Node) CreateProducer(ctx context.Context, id uint64, tenant string) (created bool, err error) {
	if !n.ready.Load() {
		return false, wire.NewError(wire.CodeShardUnavailable, "not_ready: member %s has not joined the cluster yet; try another member", n.cfg.NodeID)
	}
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	k := n.keys.producer(id)
	res, err := n.etcd.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, tenant)).Commit()
	if err != nil {
		return false, wire.WrapError(wire.CodeStorage, err, "record producer id in etcd")
	}
	return res.Succeeded, nil
}

// Drain marks a member to hand its in-memory shards to the others; it
// takes no new shards from then on, until it restarts.
func (n *Node) Drain(ctx context.Context, node string) error {
	n.mu.RLock()
	_, live := n.state.members[node]
	n.mu.RUnlock()
	if !live {
		return wire.NewError(wire.CodeNotFound, "no live member %q (felix cluster ls lists them)", node)
	}
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	if _, err := n.etcd.Put(ctx, n.keys.drain(node), time.Now().UTC().Format(time.RFC3339)); err != nil {
		return wire.WrapError(wire.CodeStorage, err, "write the drain mark of %s", node)
	}
	return nil
}

// ProducerTenant reads an idempotent producer id's tenant from etcd, for a
// member whose watch has not delivered the id yet (it was given out a
// moment ago through another member). found is false for an id no member
// gave out.
func (n *Node) ProducerTenant(ctx context.Context, id uint64) (tenant string, found bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	res, err := n.etcd.Get(ctx, n.keys.producer(id))
	if err != nil {
		return "", false, wire.WrapError(wire.CodeShardUnavailable, err, "read producer id %d from etcd; retry", id)
	}
	if len(res.Kvs) == 0 {
		return "", false, nil
	}
	return string(res.Kvs[0].Value), true, nil
}
