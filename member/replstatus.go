package member

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/getfelix/felix-go/cluster"
	"github.com/getfelix/felix-go/replication"
	"github.com/getfelix/felix-go/wire"
)

// replicaStatuses is the latest view of each replica this member runs,
// written by the replica (on its shard's goroutine, every other tick) and
// read by replication_status and the metrics at scrape time (at most
// 200 ms old), so neither
// has to ask a shard that may be busy.
type replicaStatuses struct {
	mu sync.Mutex
	m  map[cluster.ShardKey]wire.ShardReplication
}

func (r *replicaStatuses) put(key cluster.ShardKey, s wire.ShardReplication) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = make(map[cluster.ShardKey]wire.ShardReplication)
	}
	r.m[key] = s
}

func (r *replicaStatuses) remove(key cluster.ShardKey) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.m, key)
}

// of returns the shards of scope this member has a view of, in shard order.
func (r *replicaStatuses) of(scope wire.Scope, shards uint32) []wire.ShardReplication {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []wire.ShardReplication
	for n := range shards {
		if s, ok := r.m[cluster.ShardKey{Scope: scope, Shard: n}]; ok {
			out = append(out, s)
		}
	}
	return out
}

// statusOf converts a replica's raft status into the wire's view.
func (s *shardReplica) statusOf(st replication.Status) wire.ShardReplication {
	out := wire.ShardReplication{Shard: s.key.Shard, Term: st.Term, Commit: st.Commit, AppliedOffset: s.applied.Load(), Quiet: st.Quiet}
	out.Leader, _ = s.set.NodeOf(st.Leader)
	for _, m := range s.set.All() {
		match, ok := st.Match[m.ID]
		if !ok {
			continue
		}
		out.Replicas = append(out.Replicas, wire.ReplicaProgress{Node: m.Node, Match: match, LagRecords: st.LagRecords[m.ID], Active: s.heard(m.ID, st.Active[m.ID])})
	}
	return out
}

// heardWithin is how long after the leader last saw a replica active it
// still reports it so: raft's quorum check clears a replica's recent
// activity every election timeout, and the next heartbeat answer sets it
// again a tick later, so one sample alone flaps; a replica not seen for a
// whole election timeout is not heard from.
const heardWithin = time.Second

// heard remembers when replica id was last seen active and says whether
// that was within heardWithin.
func (s *shardReplica) heard(id uint64, active bool) bool {
	now := time.Now()
	if s.lastHeard == nil {
		s.lastHeard = make(map[uint64]time.Time)
	}
	if active {
		s.lastHeard[id] = now
		return true
	}
	at, ok := s.lastHeard[id]
	return ok && now.Sub(at) < heardWithin
}

// Statuses is the latest view of the replicas of scope's shards this
// member runs, in shard order: the leader's view carries every replica's
// progress.
func (m *Member) Statuses(scope wire.Scope, shards uint32) []wire.ShardReplication {
	return m.status.of(scope, shards)
}

var (
	lagDesc = prometheus.NewDesc("felix_replication_lag_records",
		"Records the followers of the shards this member leads lack, summed over those shards and followers.", nil, nil)
	underDesc = prometheus.NewDesc("felix_shards_under_replicated",
		"Shards this member leads with a replica it has not heard from within an election timeout (down, cut off, or its disk failed).", nil, nil)
	ledDesc   = prometheus.NewDesc("felix_replication_shards_led", "Replicated shards this member leads.", nil, nil)
	quietDesc = prometheus.NewDesc("felix_replication_quiet_replicas",
		"Replicas on this member whose group is idle and quiet: no heartbeats, no election timer, until a write, a read or a member's loss wakes it.", nil, nil)
)

// replicationCollector reads replicaStatuses at scrape time.
type replicationCollector struct{ r *replicaStatuses }

func (c replicationCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- lagDesc
	ch <- underDesc
	ch <- ledDesc
	ch <- quietDesc
}

func (c replicationCollector) Collect(ch chan<- prometheus.Metric) {
	var lag, under, led, quiet float64
	c.r.mu.Lock()
	for _, s := range c.r.m {
		if s.Quiet {
			quiet++
		}
		if len(s.Replicas) == 0 {
			continue // not the leader's view
		}
		led++
		behind := false
		for _, p := range s.Replicas {
			lag += float64(p.LagRecords)
			behind = behind || !p.Active
		}
		if behind {
			under++
		}
	}
	c.r.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(lagDesc, prometheus.GaugeValue, lag)
	ch <- prometheus.MustNewConstMetric(underDesc, prometheus.GaugeValue, under)
	ch <- prometheus.MustNewConstMetric(ledDesc, prometheus.GaugeValue, led)
	ch <- prometheus.MustNewConstMetric(quietDesc, prometheus.GaugeValue, quiet)
}
