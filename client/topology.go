package client

import (
	"context"
	"fmt"

	"github.com/getfelix/felix-go/routing"
	"github.com/getfelix/felix-go/wire"
)

// Topology is a stream's shards and the member that owns each, as one
// broker saw them (ShardOwners).
type Topology struct {
	Stream  Stream
	Shards  uint32
	Routing routing.Routing
	Durable bool
	// Owners has one entry per shard, in shard order.
	Owners []ShardOwner
}

// ShardOwner is one shard's owner. Owner.Addr is where clients reach it;
// empty means the broker that answered (a single broker owns every shard).
// Available is false when no member can serve the shard now: it is not
// placed yet, or it is durable and its member is down (Owner names that
// member).
type ShardOwner = wire.ShardOwner

// ShardFor is the shard the broker routes key to: the stream's routing
// over its shard count; no key is shard 0.
func (t Topology) ShardFor(key []byte) uint32 {
	return t.Routing.ShardFor(key, t.Shards)
}

// Owner returns shard's entry, and false when the topology has none (the
// stream has fewer shards).
func (t Topology) Owner(shard uint32) (ShardOwner, bool) {
	for _, o := range t.Owners {
		if o.Shard == shard {
			return o, true
		}
	}
	return ShardOwner{}, false
}

// ShardOwners asks the broker which member owns each shard of s. Like a
// publish, it makes s as an implicit stream when there is none. The broker
// must grant wire.FeatureShardOwners; a single broker names itself (empty
// addresses) for every shard.
func (c *Client) ShardOwners(ctx context.Context, s Stream) (Topology, error) {
	if c.features&wire.FeatureShardOwners == 0 {
		return Topology{}, wire.NewError(wire.CodeInvalidRequest, "the broker does not offer shard owners (FeatureShardOwners)")
	}
	scope := s.scope(c)
	id := c.nextReq.Add(1)
	res, err := c.request(ctx, id, &wire.ShardOwners{RequestID: id, Tenant: scope.Tenant, Namespace: scope.Namespace, Stream: scope.Stream})
	if err != nil {
		return Topology{}, err
	}
	m, ok := res.(*wire.ShardOwnersView)
	if !ok {
		return Topology{}, fmt.Errorf("%w: shard_owners answered with %s", ErrProtocol, res.Type())
	}
	rt, err := routing.Parse(m.Routing)
	if err != nil {
		return Topology{}, fmt.Errorf("%w: shard_owners of %s: %v", ErrProtocol, scope, err)
	}
	return Topology{
		Stream: Stream{Tenant: scope.Tenant, Namespace: scope.Namespace, Name: scope.Stream},
		Shards: m.Shards, Routing: rt, Durable: m.Durable, Owners: m.Owners,
	}, nil
}
