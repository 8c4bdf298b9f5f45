package broker

import (
	"context"

	"github.com/rs/zerolog"

	"github.com/getfelix/felix-go/cluster"
	"github.com/getfelix/felix-go/member"
	"github.com/getfelix/felix-go/metrics"
	"github.com/getfelix/felix-go/persistence"
	"github.com/getfelix/felix-go/streams"
	"github.com/getfelix/felix-go/wire"
)

// memberHost is what the broker hands its member (member.Host): the
// durable logs' directories and configuration, the cluster node, the
// metrics and the logger, and nothing else of the broker.
type memberHost struct{ b *Broker }

var _ member.Host = memberHost{}

func (h memberHost) LogDir(def streams.Def, shard uint32) string { return h.b.logs.Dir(def, shard) }

func (h memberHost) LogConfig(def streams.Def) (persistence.Config, error) {
	return h.b.logs.Config(def), nil
}

func (h memberHost) Node() *cluster.Node       { return h.b.node.Load() }
func (h memberHost) Metrics() *metrics.Metrics { return h.b.metrics }
func (h memberHost) Log() zerolog.Logger       { return h.b.log }

// Replication implements service.Session.
func (c *conn) Replication(ctx context.Context, scope wire.Scope) (string, []wire.ShardReplication, error) {
	info, err := c.Stream(ctx, scope) // its permission check, and the stream must exist
	if err != nil {
		return "", nil, err
	}
	node := ""
	if n := c.b.node.Load(); n != nil {
		node = n.ID()
	}
	return node, c.b.member.Statuses(scope, info.Shards), nil
}
