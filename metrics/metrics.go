// Package metrics owns the broker's Prometheus metrics: their names, labels
// and help, and a collector that reads live mailbox depths at scrape time so
// the data path pays nothing for gauges. Names are felix_<what>_<unit>
// (felix_sub_queue_dropped_total and friends); dashboards depend on them,
// so a name, once shipped, does not change.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/getfelix/felix-go/actors"
)

// Metrics is one broker's set of metrics, registered in its own registry
// (never the global one, so two brokers in one process do not collide).
type Metrics struct {
	Registry *prometheus.Registry

	PublishRequests   *prometheus.CounterVec // tenant, result
	PublishedMessages *prometheus.CounterVec // tenant
	PublishedBytes    *prometheus.CounterVec // tenant
	PublishOverloaded *prometheus.CounterVec // tenant

	DeliveredMessages prometheus.Counter
	DeliveredBytes    prometheus.Counter

	SubQueueEnqueued    prometheus.Counter
	SubQueueDropped     prometheus.Counter
	SubQueueByteDropped prometheus.Counter
	SubQueueDropOld     prometheus.Counter
	SubQueueBlocked     prometheus.Counter
	SubBlockEvicted     prometheus.Counter
	LaneDropped         prometheus.Counter
	WriterRefused       prometheus.Counter

	// Cache compactions: records and bytes removed from durable caches'
	// logs, compactions committed, and the last one's duration.
	CacheCompactions              prometheus.Counter
	CacheCompactionRecordsRemoved prometheus.Counter
	CacheCompactionBytesRemoved   prometheus.Counter
	CacheCompactionLastSeconds    prometheus.Gauge

	ShardsBlocked   prometheus.Gauge
	Connections     *prometheus.CounterVec // event: accepted, refused, auth_timeout, closed
	ConnectionsOpen prometheus.Gauge
	Subscriptions   prometheus.Gauge
	// SubscriptionsLagged counts durable subscriptions ended as lagged.
	SubscriptionsLagged prometheus.Counter
	// Cache watches: open now, changes taken into their queues, and
	// watches ended lagged (a change their full queue refused).
	CacheWatches       prometheus.Gauge
	CacheWatchEvents   prometheus.Counter
	CacheWatchesLagged prometheus.Counter
	// AuthRefused counts refused credentials and operations, by reason.
	AuthRefused *prometheus.CounterVec
	// QuotaRefused counts what a quota or limit refused, by limit (the knob).
	QuotaRefused *prometheus.CounterVec
	// AuthFailures counts failed authentications that were checked, and
	// AuthThrottled attempts refused unchecked (auth_failure_burst), by
	// front end.
	AuthFailures, AuthThrottled *prometheus.CounterVec

	ActorRestarts *prometheus.CounterVec // kind, directive

	// The cluster (zero on a single broker): live members, the shards this
	// member owns, and shards that moved to or from it.
	NodeCount   prometheus.Gauge
	ShardsOwned prometheus.Gauge
	// NotZoneSpread counts the cluster's replicated shards with two
	// replicas in one zone while the live members span enough zones.
	NotZoneSpread prometheus.Gauge
	ShardMoves    *prometheus.CounterVec // direction: in, out

	// Replicated shards: leader changes seen by this member's replicas,
	// and raft messages the peer link dropped (raft sends them again).
	LeaderChanges prometheus.Counter
	// LeaderHandOvers counts the leadership transfers this member's
	// leaders asked raft for to balance the members (member/balance.go).
	LeaderHandOvers    prometheus.Counter
	ReplicationDropped prometheus.Counter
	// ReplicaFailures counts this member's replicas that stopped because
	// their storage failed (they start again from their log).
	ReplicaFailures prometheus.Counter
	// Snapshots: sent by this member's leaders to followers behind their
	// compaction point, and installed by its followers.
	SnapshotsSent, SnapshotsInstalled prometheus.Counter

	dir *actors.Directory
}

// Mailboxes is the actor directory whose live mailboxes the gauges read.
func (m *Metrics) Mailboxes() *actors.Directory { return m.dir }

// New builds and registers every metric. dir is the broker's actor
// directory, whose live mailboxes the depth gauges read at scrape time;
// budget, when set, is the broker-wide subscriber queue byte budget.
func New(dir *actors.Directory, budget *actors.ByteBudget) *Metrics {
	r := prometheus.NewRegistry()
	f := func(c prometheus.Collector) { r.MustRegister(c) }
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
		f(c)
		return c
	}
	vec := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
		f(c)
		return c
	}
	gauge := func(name, help string) prometheus.Gauge {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
		f(g)
		return g
	}
	m := &Metrics{
		Registry:                      r,
		PublishRequests:               vec("felix_publish_requests_total", "Publish requests by tenant and result (ok, overloaded, error).", "tenant", "result"),
		PublishedMessages:             vec("felix_tenant_published_messages_total", "Records admitted to a shard, by tenant.", "tenant"),
		PublishedBytes:                vec("felix_publish_bytes_total", "Payload bytes admitted to a shard, by tenant.", "tenant"),
		PublishOverloaded:             vec("felix_publish_overloaded_total", "Publishes refused as overloaded after publish_queue_wait_timeout_ms on a full shard.", "tenant"),
		DeliveredMessages:             counter("felix_delivered_messages_total", "Records written to subscribers' event streams (one per record per subscriber)."),
		DeliveredBytes:                counter("felix_delivered_bytes_total", "Frame bytes written to subscribers' event streams."),
		SubQueueEnqueued:              counter("felix_sub_queue_enqueued_total", "Batches accepted into subscriber queues."),
		SubQueueDropped:               counter("felix_sub_queue_dropped_total", "Batches refused by a full subscriber queue (drop_new), by count or bytes."),
		SubQueueByteDropped:           counter("felix_sub_queue_byte_dropped_total", "The subset of felix_sub_queue_dropped_total refused by subscriber_queue_max_bytes or the broker-wide total."),
		SubQueueDropOld:               counter("felix_sub_queue_drop_old_total", "Queued batches evicted to make room for newer ones (drop_old)."),
		SubQueueBlocked:               counter("felix_sub_queue_blocked_total", "Fanouts in which a shard waited on a full subscriber (block)."),
		SubBlockEvicted:               counter("felix_sub_block_evicted_total", "Subscribers a shard removed for staying full past subscriber_block_max_wait_ms (block)."),
		LaneDropped:                   counter("felix_lane_queue_dropped_total", "Deliveries lost in a writer lane that stopped (chaos, a crash loop); lanes never drop under load."),
		WriterRefused:                 counter("felix_conn_writer_refused_total", "Deliveries whose connection writer had already stopped."),
		CacheCompactions:              counter("felix_cache_compactions_total", "Compactions of a durable cache shard's log committed."),
		CacheCompactionRecordsRemoved: counter("felix_cache_compaction_records_removed_total", "Records compaction removed from durable caches' logs (superseded changes below the horizon)."),
		CacheCompactionBytesRemoved:   counter("felix_cache_compaction_bytes_removed_total", "Bytes compaction removed from durable caches' logs."),
		CacheCompactionLastSeconds:    gauge("felix_cache_compaction_last_seconds", "How long the last committed cache compaction took, both passes and the swap."),
		ShardsBlocked:                 gauge("felix_shards_blocked", "Shards waiting right now on a full subscriber (policy block)."),
		Connections:                   vec("felix_connections_total", "Connection events: accepted, refused, displaced (closed unauthenticated to admit a newer one, max_preauth_connections), auth_timeout, closed.", "event"),
		ConnectionsOpen:               gauge("felix_connections_open", "Connections that completed the QUIC handshake and are open."),
		Subscriptions:                 gauge("felix_subscriptions", "Live subscriptions."),
		AuthRefused:                   vec("felix_auth_refused_total", "Refused credentials and operations: no_token, invalid_token, wrong_tenant, expired, forbidden, scram_refused (a Kafka SCRAM login); on the admin endpoint also foreign_host, cross_origin, not_json.", "reason"),
		QuotaRefused:                  vec("felix_quota_refused_total", "Connections, publishes, subscriptions and streams refused by a limit, by the limit's knob.", "limit"),
		AuthFailures:                  vec("felix_auth_failures_total", "Failed authentications (felix/1 auth and re-authentication, Kafka SASL) whose credential was checked, by front end (felix1, kafka).", "frontend"),
		AuthThrottled:                 vec("felix_auth_throttled_total", "Authentications refused unchecked because their address had failed auth_failure_burst times (auth_throttled), by front end.", "frontend"),
		SubscriptionsLagged:           counter("felix_subscriptions_lagged_total", "Durable subscriptions ended as lagged (a gap they did not get); clients resume from the offset they were given."),
		CacheWatches:                  gauge("felix_cache_watches", "Open cache watches (each also counts in felix_subscriptions)."),
		CacheWatchEvents:              counter("felix_cache_watch_events_total", "Cache changes taken into watches' queues (one per change per watch it matched)."),
		CacheWatchesLagged:            counter("felix_cache_watches_lagged_total", "Cache watches ended lagged: their full queue refused a change; clients resume from the version they were given."),
		ActorRestarts:                 vec("felix_actor_restarts_total", "Supervisor decisions on failed actors, by actor kind and directive.", "kind", "directive"),
		NodeCount:                     gauge("felix_node_count", "Live members of the cluster, as this member sees them (0 on a single broker)."),
		ShardsOwned:                   gauge("felix_shards_owned", "Shards this cluster member owns."),
		NotZoneSpread:                 gauge("felix_shards_not_zone_spread", "Replicated shards of the cluster (as this member mirrors it) with two replicas in one cluster_zone although the live members span enough zones to spread them; a member without a zone counts as a zone of its own."),
		ShardMoves:                    vec("felix_shard_moves_total", "Shards that moved to (in) or away from (out) this member: a member lost, a drain, a lost lease.", "direction"),
		LeaderChanges:                 counter("felix_replication_leader_changes_total", "Leader changes this member's replicas saw (each replica counts each change it learns of)."),
		LeaderHandOvers:               counter("felix_replication_leader_handovers_total", "Leadership transfers this member's replicas asked raft for, to spread leadership evenly over the members or off a draining one."),
		ReplicationDropped:            counter("felix_replication_messages_dropped_total", "Raft messages for other members dropped by a full or unknown peer link; raft sends again what it needs."),
		ReplicaFailures:               counter("felix_replica_failures_total", "Replicas on this member that stopped because their log failed (a write or fsync error); each starts again from its log, and is reported here until its disk works."),
		SnapshotsSent:                 counter("felix_replication_snapshots_sent_total", "Snapshots this member's leaders sent to followers behind their compaction point (each followed by the follower copying the leader's segments)."),
		SnapshotsInstalled:            counter("felix_replication_snapshots_installed_total", "Copies of a leader's segments this member's replicas installed in place of their log."),
		dir:                           dir,
	}
	f(collectors.NewGoCollector())
	f(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	f(&mailboxCollector{dir: dir, budget: budget})
	return m
}

var (
	depthDesc = prometheus.NewDesc("felix_mailbox_depth", "Messages queued in live mailboxes, summed by actor kind.", []string{"kind"}, nil)
	bytesDesc = prometheus.NewDesc("felix_mailbox_bytes", "Payload bytes queued in live mailboxes, summed by actor kind.", []string{"kind"}, nil)
	peakDesc  = prometheus.NewDesc("felix_mailbox_peak_bytes", "The largest byte peak any live mailbox of the kind has reached.", []string{"kind"}, nil)
	countDesc = prometheus.NewDesc("felix_mailboxes", "Live mailboxes (so live actors) by kind.", []string{"kind"}, nil)
	totalDesc = prometheus.NewDesc("felix_sub_queue_total_bytes", "Bytes held against subscriber_queue_max_bytes_total (0 when it is off).", nil, nil)
)

type mailboxCollector struct {
	dir    *actors.Directory
	budget *actors.ByteBudget
}

func (c *mailboxCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- depthDesc
	ch <- bytesDesc
	ch <- peakDesc
	ch <- countDesc
	ch <- totalDesc
}

func (c *mailboxCollector) Collect(ch chan<- prometheus.Metric) {
	for kind, t := range c.dir.Totals() {
		k := string(kind)
		ch <- prometheus.MustNewConstMetric(depthDesc, prometheus.GaugeValue, float64(t.Depth), k)
		ch <- prometheus.MustNewConstMetric(bytesDesc, prometheus.GaugeValue, float64(t.Bytes), k)
		ch <- prometheus.MustNewConstMetric(peakDesc, prometheus.GaugeValue, float64(t.PeakBytes), k)
		ch <- prometheus.MustNewConstMetric(countDesc, prometheus.GaugeValue, float64(t.Mailboxes), k)
	}
	ch <- prometheus.MustNewConstMetric(totalDesc, prometheus.GaugeValue, float64(c.budget.Used()))
}

// KindTotals is the per-kind sum of live mailboxes the gauges report.
type KindTotals = actors.KindTotals
