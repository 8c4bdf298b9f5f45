package cluster

import (
	"context"

	"github.com/getfelix/felix-go/wire"
)

// Node is this broker's membership in the cluster.
type Node struct{}

// ShardDef is what placement needs to know of a stream.
type ShardDef struct {
	Scope   wire.Scope
	Shards  uint32
	Durable bool
}

// Owners returns each shard's owner.
func (n *Node) Owners(ctx context.Context, def ShardDef) ([]wire.ShardOwner, error) {
	panic("wip")
}
