// Package member is a cluster member's raft and peer side: the replicas of
// replicated shards this member runs (replication.Replica over each
// shard's own log, behind streams.Replica), their raft groups on the peer
// link between members (Peers), the snapshot service that serves this
// member's segment files and copies a leader's for a replica behind its
// compaction point, replica moves carried out by a shard's leader, the
// replica status view (replication_status and the felix_replication_*
// metrics), and the replica role view consumer groups are served from.
//
// The broker assembles it: it makes the Member in New, handing it a Host,
// starts the peer link once before its cluster node joins (StartPeers)
// and closes it after the shards stopped (ClosePeers), and gives the
// streams registry its hooks (PrepareReplicaDir and ReplicatedLog inside
// its OpenLog, OpenReplica, RemoveShardData). The rules its callers keep:
//   - a replica belongs to its shard's goroutine: the shard calls
//     OpenReplica, then every streams.Replica method, then Close, on that
//     goroutine alone, and PrepareReplicaDir and RemoveShardData for that
//     shard from it too;
//   - the peer link calls a group's handler on a connection's reader
//     goroutine, so a handler never blocks: a replica's posts to its
//     shard's inbox, dropping when it is full (raft sends again);
//   - ReplicasFor, Statuses, GroupLive and Peers are safe from any
//     goroutine: they read the views the replicas publish, never ask a
//     shard.
//
// Member knows no actor tree and no broker: what it needs of the broker
// is Host.
package member

import (
	"sync"
	"sync/atomic"

	"github.com/rs/zerolog"

	"github.com/getfelix/felix-go/cluster"
	"github.com/getfelix/felix-go/metrics"
	"github.com/getfelix/felix-go/persistence"
	"github.com/getfelix/felix-go/streams"
)

// Host is what a member needs of the broker that runs it.
type Host interface {
	// LogDir is where a shard's log lives; a replica keeps its raft state
	// and its staged snapshot copies beside the log's segments.
	LogDir(def streams.Def, shard uint32) string
	// LogConfig is a durable stream's log configuration: a snapshot copy
	// is checked by opening it as a log with it.
	LogConfig(def streams.Def) (persistence.Config, error)
	// Node is the member's cluster node: nil until the broker made it, and
	// for a single broker. Safe from any goroutine.
	Node() *cluster.Node
	// Metrics is the broker's metrics; read once, in New.
	Metrics() *metrics.Metrics
	// Log is the broker's logger; read once, in New.
	Log() zerolog.Logger
}

// Member is one broker's raft and peer side.
type Member struct {
	host    Host
	log     zerolog.Logger
	metrics *metrics.Metrics
	// status is the latest view of each replica this member runs
	// (replstatus.go).
	status replicaStatuses
	// watches are the open replicas a member's loss is pushed to
	// (liveness.go).
	watches replicaWatches
	// views is each replica's role, for consumer groups
	// (cluster.ShardKey → *replicaView, groupcluster.go).
	views sync.Map
	// peers is the member's peer link (peers.go); nil without one.
	peers atomic.Pointer[Peers]
	// snaps serves and copies replicas' segments for snapshots
	// (snapshots.go); set before peers is, so a replica that found the
	// link finds it.
	snaps *snapshots
	// balance is the member's leadership plan (balance.go).
	balance balancer
}

// New makes a member over host and registers its replication metrics.
func New(host Host) *Member {
	m := &Member{host: host, log: host.Log(), metrics: host.Metrics()}
	m.metrics.Registry.MustRegister(replicationCollector{&m.status})
	return m
}
