package client

import (
	"context"
	"fmt"

	"github.com/getfelix/felix-go/wire"
)

// ReplicationView is one member's view of a replicated stream: the shards
// whose replica runs there. A shard's leader has every replica's progress
// (ShardReplication.Replicas); ask it (ShardOwners names it).
type ReplicationView struct {
	Node   string
	Shards []wire.ShardReplication
}

// Replication asks the broker for its view of a replicated stream's
// shards (FeatureReplicationStatus).
func (c *Client) Replication(ctx context.Context, s Stream) (ReplicationView, error) {
	if c.features&wire.FeatureReplicationStatus == 0 {
		return ReplicationView{}, wire.NewError(wire.CodeInvalidRequest, "the broker does not offer replication status (FeatureReplicationStatus)")
	}
	scope := s.scope(c)
	id := c.nextReq.Add(1)
	res, err := c.request(ctx, id, &wire.ReplicationStatus{RequestID: id, Tenant: scope.Tenant, Namespace: scope.Namespace, Stream: scope.Stream})
	if err != nil {
		return ReplicationView{}, err
	}
	m, ok := res.(*wire.ReplicationStatusView)
	if !ok {
		return ReplicationView{}, fmt.Errorf("%w: replication_status answered with %s", ErrProtocol, res.Type())
	}
	return ReplicationView{Node: m.Node, Shards: m.Shards}, nil
}
