package broker

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"sync"
	"time"

	"github.com/getfelix/felix-go/auth"
	"github.com/getfelix/felix-go/cluster"
	"github.com/getfelix/felix-go/metadata"
	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/wire"
)

// producerRegistry knows which tenant each idempotent producer id belongs
// to. An id is recorded in the metadata store before it is given out and
// the map is loaded at Start, so a producer outlives a restart. The
// sequences themselves are the shards' (kept in their logs): the registry
// answers only "is this id known, and whose is it", once per publish, so a
// read lock is all the hot path takes.
//
// Ids are never forgotten: a record is a few dozen bytes, and a producer
// that comes back after a long pause must not be taken for an unknown one
// by the boundary (the shard, which remembers a bounded number, answers
// sequence_expired or unknown_producer itself).
type producerRegistry struct {
	mu      sync.RWMutex
	tenants map[uint64]string
}

// load replaces the registry's content with the store's.
func (r *producerRegistry) load(defs []metadata.ProducerDef) {
	m := make(map[uint64]string, len(defs))
	for _, d := range defs {
		m[d.ID] = d.Tenant
	}
	r.mu.Lock()
	r.tenants = m
	r.mu.Unlock()
}

// tenant returns the tenant of producer id, or false when it was never given out.
func (r *producerRegistry) tenant(id uint64) (string, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	t, ok := r.tenants[id]
	return t, ok
}

// create draws a new random id for tenant, records it durably, then in
// memory: an id a client holds is always one a restarted broker knows.
func (r *producerRegistry) create(store *metadata.Store, tenant string, now time.Time) (uint64, error) {
	for range 8 { // 64 random bits: a collision is a curiosity, eight a broken generator
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return 0, wire.NewError(wire.CodeInternal, "producer id: %v", err)
		}
		id := binary.BigEndian.Uint64(b[:])
		if _, taken := r.tenant(id); taken {
			continue
		}
		err := store.PutProducer(metadata.ProducerDef{ID: id, Tenant: tenant, CreatedAt: now.UTC()})
		if errors.Is(err, metadata.ErrProducerExists) {
			continue
		}
		if err != nil {
			return 0, wire.WrapError(wire.CodeStorage, err, "record producer id")
		}
		r.mu.Lock()
		if r.tenants == nil {
			r.tenants = make(map[uint64]string)
		}
		r.tenants[id] = tenant
		r.mu.Unlock()
		return id, nil
	}
	return 0, wire.NewError(wire.CodeInternal, "producer id: eight random ids in a row were taken")
}

// add records an id another cluster member gave out (cluster.Hooks.Producer).
func (r *producerRegistry) add(id uint64, tenant string) {
	r.mu.Lock()
	if r.tenants == nil {
		r.tenants = make(map[uint64]string)
	}
	r.tenants[id] = tenant
	r.mu.Unlock()
}

// createClustered draws a new random id for tenant and records it in etcd,
// where every member learns it: a producer may publish through any member.
func (r *producerRegistry) createClustered(ctx context.Context, node *cluster.Node, tenant string) (uint64, error) {
	for range 8 {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return 0, wire.NewError(wire.CodeInternal, "producer id: %v", err)
		}
		id := binary.BigEndian.Uint64(b[:])
		created, err := node.CreateProducer(ctx, id, tenant)
		if err != nil {
			return 0, err
		}
		if created {
			r.add(id, tenant)
			return id, nil
		}
	}
	return 0, wire.NewError(wire.CodeInternal, "producer id: eight random ids in a row were taken")
}

// InitProducer implements service.Session. The principal must be allowed
// to publish somewhere in its tenant (a stream.publish grant on any
// namespace/stream): an id is not tied to a stream, so the publishes
// themselves are checked stream by stream as any other, and the id only
// has to be the connection's tenant's.
func (c *conn) InitProducer(ctx context.Context) (uint64, error) {
	p := c.principal.Load()
	if p.Expired(time.Now()) {
		c.b.metrics.AuthRefused.WithLabelValues("expired").Inc()
		return 0, wire.NewError(wire.CodeUnauthenticated, "the connection's token expired at %s; re-authenticate with a fresh token", p.Expires.UTC().Format(time.RFC3339))
	}
	if !mayPublishSomewhere(p) {
		c.b.metrics.AuthRefused.WithLabelValues("forbidden").Inc()
		return 0, wire.WrapError(wire.CodeForbidden, auth.ErrNotPermitted, "%s on any stream of tenant %q (producer_init)", auth.ActionStreamPublish, c.client.Tenant)
	}
	if c.b.clustered() {
		node := c.b.node.Load()
		if node == nil {
			return 0, wire.NewError(wire.CodeShardUnavailable, "not_ready: this member is still starting; try another member")
		}
		return c.b.producers.createClustered(ctx, node, c.client.Tenant)
	}
	return c.b.producers.create(c.b.store, c.client.Tenant, time.Now())
}

// mayPublishSomewhere reports whether the principal holds a stream.publish
// grant on some stream of its tenant.
func mayPublishSomewhere(p *auth.Principal) bool {
	if p == nil {
		return false
	}
	for _, g := range p.Grants {
		if g.Action == auth.ActionStreamPublish {
			return true
		}
	}
	return false
}

// checkProducer runs the boundary's checks on an idempotent publish after
// checkPublish: the id must be one the broker gave out (unknown_producer,
// a *wire.RefusedError answered as PublishRefused) to the publish's tenant
// (forbidden, the same answer as any other tenant's resource).
func (c *conn) checkProducer(ctx context.Context, p *service.Publish) error {
	if p.Producer == nil {
		return nil
	}
	if p.ExpectedOffset != nil {
		return wire.NewError(wire.CodeInvalidRequest, "a publish cannot be both conditional and idempotent")
	}
	tenant, ok := c.b.producers.tenant(p.Producer.ID)
	if !ok {
		var err error
		if tenant, ok, err = c.clusterProducer(ctx, p.Producer.ID); err != nil {
			return err
		}
	}
	if !ok {
		return &wire.RefusedError{Reason: wire.ReasonUnknownProducer, Message: "the broker never gave out this producer id; call producer_init"}
	}
	if tenant != p.Scope.Tenant {
		c.b.metrics.AuthRefused.WithLabelValues("forbidden").Inc()
		return wire.WrapError(wire.CodeForbidden, auth.ErrNotPermitted, "producer id of another tenant on %s", p.Scope)
	}
	return nil
}

// clusterProducer looks up an id this member does not know in etcd: another
// member may have given it out a moment ago, before this member's watch
// delivered it. A member not yet joined cannot tell, and answers not_ready
// (the producer sends again) rather than give up on an id the cluster knows.
func (c *conn) clusterProducer(ctx context.Context, id uint64) (string, bool, error) {
	node := c.b.node.Load()
	switch {
	case node == nil:
		return "", false, nil
	case !node.Ready():
		return "", false, wire.NewError(wire.CodeShardUnavailable, "not_ready: member %s has not joined the cluster yet, so it does not know producer ids; try again or another member", node.ID())
	}
	tenant, found, err := node.ProducerTenant(ctx, id)
	if err == nil && found {
		c.b.producers.add(id, tenant)
	}
	return tenant, found, err
}

// errProducerInMemory refuses an idempotent publish to an in-memory stream:
// its sequences would not survive the shard, so retries could not be safe.
var errProducerInMemory = wire.NewError(wire.CodeInvalidRequest, "idempotent producers publish only to durable streams")
