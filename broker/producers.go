package broker

import (
	"context"
	"errors"
	"time"

	"github.com/getfelix/felix-go/auth"
	"github.com/getfelix/felix-go/metadata"
	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/wire"
)

// InitProducer implements service.Session. The principal must be allowed
// to publish somewhere in its tenant (a stream.publish grant on any
// namespace/stream): an id is not tied to a stream, so the publishes
// themselves are checked stream by stream as any other, and the id only
// has to be the connection's tenant's.
func (c *conn) InitProducer(ctx context.Context) (uint64, error) {
	p := c.principal.Load()
	if err := c.b.gate.Live(p, time.Now()); err != nil {
		return 0, err
	}
	if !mayPublishSomewhere(p) {
		c.b.metrics.AuthRefused.WithLabelValues("forbidden").Inc()
		return 0, wire.WrapError(wire.CodeForbidden, auth.ErrNotPermitted, "%s on any stream of tenant %q (producer_init)", auth.ActionStreamPublish, c.client.Tenant)
	}
	tenant := c.client.Tenant
	if c.b.clustered() {
		node := c.b.node.Load()
		if node == nil {
			return 0, wire.NewError(wire.CodeShardUnavailable, "not_ready: this member is still starting; try another member")
		}
		// In etcd, where every member learns it: a producer may publish
		// through any member.
		return c.b.producers.Create(tenant, func(id uint64) (bool, error) { return node.CreateProducer(ctx, id, tenant) })
	}
	return c.b.producers.Create(tenant, func(id uint64) (bool, error) {
		err := c.b.store.PutProducer(metadata.ProducerDef{ID: id, Tenant: tenant, CreatedAt: time.Now().UTC()})
		if errors.Is(err, metadata.ErrProducerExists) {
			return false, nil
		}
		if err != nil {
			return false, wire.WrapError(wire.CodeStorage, err, "record producer id")
		}
		return true, nil
	})
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
	tenant, ok := c.b.producers.Tenant(p.Producer.ID)
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
		c.b.producers.Add(id, tenant)
	}
	return tenant, found, err
}

// errProducerInMemory refuses an idempotent publish to an in-memory stream:
// its sequences would not survive the shard, so retries could not be safe.
var errProducerInMemory = wire.NewError(wire.CodeInvalidRequest, "idempotent producers publish only to durable streams")
