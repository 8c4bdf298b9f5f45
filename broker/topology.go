package broker

import (
	"context"
	"errors"

	"github.com/getfelix/felix-go/auth"
	"github.com/getfelix/felix-go/authgate"
	"github.com/getfelix/felix-go/cluster"
	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/wire"
)

// ShardOwners implements service.Session. A client that may publish,
// subscribe or manage the stream may ask; the stream is made on first use,
// as a publish would make it. A single broker owns every shard and names
// itself with an empty address ("the broker you asked"); a cluster member
// answers from the cluster's placement (cluster.go).
func (c *conn) ShardOwners(ctx context.Context, scope wire.Scope) (*service.Topology, error) {
	if err := scope.Validate(); err != nil {
		return nil, err
	}
	if err := c.authorize(auth.ActionStreamPublish, scope); err != nil && (!errors.Is(err, wire.ErrForbidden) || !authgate.MayList(c.principal.Load(), scope)) {
		return nil, err
	}
	def, err := c.stream(ctx, scope)
	if err != nil {
		return nil, err
	}
	top := &service.Topology{Scope: scope, Shards: def.Shards, Routing: def.Routing.String(), Durable: def.Durable}
	if node := c.b.node.Load(); node != nil {
		top.Owners, err = node.Owners(ctx, cluster.ShardDef{Scope: def.Scope, Shards: def.Shards, Durable: def.Durable})
		return top, err
	}
	if c.b.clustered() {
		return nil, wire.NewError(wire.CodeShardUnavailable, "not_ready: this member is still starting; try another member")
	}
	for n := range def.Shards {
		top.Owners = append(top.Owners, wire.ShardOwner{Shard: n, Available: true})
	}
	return top, nil
}
