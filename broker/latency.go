package broker

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/getfelix/felix-go/config"
	"github.com/getfelix/felix-go/durable"
	"github.com/getfelix/felix-go/metrics"
	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/streams"
)

// newLatency registers the publish latency histograms, and the per-stream
// series of the streams metrics_streams names.
func newLatency(cfg config.Config, r *prometheus.Registry) (*metrics.Latency, error) {
	streams, err := metrics.ParseStreamSeries(cfg.MetricsStreams)
	if err != nil {
		return nil, err
	}
	return metrics.NewLatency(r, streams), nil
}

// openLog is openDurableLog, whose single broker's durable logs the
// per-stream offset gauges read (replicated ones report through their raft
// view instead).
func (b *Broker) openLog(def streams.Def, shard uint32) (streams.Log, bool, error) {
	log, onCommit, err := b.openDurableLog(def, shard)
	if dl, ok := log.(durable.Log); ok && err == nil {
		b.latency.TrackShard(def.Scope.Tenant, def.Scope.Namespace, def.Scope.Stream, shard, dl)
	}
	return log, onCommit, err
}

// timeAck wraps a publish's done so that its ack is timed from now into
// felix_publish_ack_seconds (and the stream's own series, when it has
// them). Refusals are not timed: they say nothing of the path's latency.
// A fire-and-forget publish (no done) has no ack to time.
func (b *Broker) timeAck(p *service.Publish, done func(service.PublishResult)) func(service.PublishResult) {
	if done == nil {
		return nil
	}
	start, scope, records := time.Now(), p.Scope, len(p.Payloads) // not p: its payloads need not outlive the admission
	return func(r service.PublishResult) {
		if r.Err == nil {
			b.latency.ObserveAck(scope.Tenant, scope.Namespace, scope.Stream, r.Durable, records, time.Since(start))
		}
		done(r)
	}
}
