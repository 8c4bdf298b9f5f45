package metrics

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// OffsetSource is a durable shard's log as the offset gauges read it.
type OffsetSource interface {
	StartOffset() uint64
	NextOffset() uint64
	// Committed is the end a reader may see: past every record the
	// stream's durability promises.
	Committed() uint64
	// Closed says the log is gone: the collector forgets it.
	Closed() bool
}

var (
	shardLabels     = []string{"tenant", "namespace", "stream", "shard"}
	startOffsetDesc = prometheus.NewDesc("felix_stream_shard_start_offset", "A durable shard's first retained offset, for the streams metrics_streams names.", shardLabels, nil)
	nextOffsetDesc  = prometheus.NewDesc("felix_stream_shard_next_offset", "A durable shard's next offset (records appended), for the streams metrics_streams names.", shardLabels, nil)
	committedDesc   = prometheus.NewDesc("felix_stream_shard_committed_offset", "A durable shard's committed end (what readers may see), for the streams metrics_streams names.", shardLabels, nil)
)

// shardOffsets reads the tracked shards' offsets at scrape time, so the
// publish path pays nothing for them.
type shardOffsets struct {
	mu struct {
		sync.Mutex
		logs map[shardKey]OffsetSource
	}
}

type shardKey struct {
	tenant, namespace, stream string
	shard                     uint32
}

func (c *shardOffsets) Describe(ch chan<- *prometheus.Desc) {
	ch <- startOffsetDesc
	ch <- nextOffsetDesc
	ch <- committedDesc
}

func (c *shardOffsets) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, src := range c.mu.logs {
		if src.Closed() {
			delete(c.mu.logs, k)
			continue
		}
		labels := []string{k.tenant, k.namespace, k.stream, strconv.FormatUint(uint64(k.shard), 10)}
		ch <- prometheus.MustNewConstMetric(startOffsetDesc, prometheus.GaugeValue, float64(src.StartOffset()), labels...)
		ch <- prometheus.MustNewConstMetric(nextOffsetDesc, prometheus.GaugeValue, float64(src.NextOffset()), labels...)
		ch <- prometheus.MustNewConstMetric(committedDesc, prometheus.GaugeValue, float64(src.Committed()), labels...)
	}
}

// TrackShard reports shard's offsets from src until src is closed, if
// tenant/namespace/stream has series of its own (metrics_streams). A
// shard opened again replaces its old log.
func (l *Latency) TrackShard(tenant, namespace, stream string, shard uint32, src OffsetSource) {
	s := l.streams
	if s == nil || !s.enabled() {
		return
	}
	if labels, ok := s.labels(tenant, namespace, stream); !ok || labels[0] == OtherStream {
		return
	}
	c := s.offsets
	c.mu.Lock()
	c.mu.logs[shardKey{tenant, namespace, stream, shard}] = src
	c.mu.Unlock()
}
