package broker

import (
	"time"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/streams"
)

// The broker's metric hooks. Each runs on an actor's or a connection's
// goroutine and only adds to counters: no locks, no waiting.

func (b *Broker) countFanout(st *streams.FanoutStats) {
	b.metrics.SubQueueEnqueued.Add(float64(st.Delivered))
	if st.BlockedFor > 0 {
		b.metrics.SubQueueBlocked.Inc()
	}
	if st.Evicted > 0 {
		b.metrics.SubBlockEvicted.Add(float64(st.Evicted))
	}
	if st.WatchDelivered > 0 {
		b.metrics.CacheWatchEvents.Add(float64(st.WatchDelivered))
	}
	b.fanoutRates.Count(st.Scope, st.Records)
}

// countSubQueueDrop is every feeder mailbox's drop hook.
func (b *Broker) countSubQueueDrop(_ any, reason actors.DropReason) {
	switch reason {
	case actors.DropFull:
		b.metrics.SubQueueDropped.Inc()
	case actors.DropBytes:
		b.metrics.SubQueueDropped.Inc()
		b.metrics.SubQueueByteDropped.Inc()
	case actors.DropEvicted:
		b.metrics.SubQueueDropOld.Inc()
	}
	// DropClosed: the subscription ended; what it had queued is not a drop.
}

func (b *Broker) countWritten(records int, bytes int64, published int64) {
	b.metrics.DeliveredMessages.Add(float64(records))
	b.metrics.DeliveredBytes.Add(float64(bytes))
	b.latency.ObserveDelivery(published, time.Now())
}

func (b *Broker) countConnection(event string) {
	b.metrics.Connections.WithLabelValues(event).Inc()
	switch event {
	case "accepted":
		b.metrics.ConnectionsOpen.Inc()
	case "closed":
		b.metrics.ConnectionsOpen.Dec()
	}
}

// countCacheCompaction is every cache shard's compaction hook.
func (b *Broker) countCacheCompaction(c *streams.CacheCompacted) {
	b.metrics.CacheCompactions.Inc()
	b.metrics.CacheCompactionRecordsRemoved.Add(float64(c.RecordsRemoved))
	// A rewrite that only dropped conditions can grow a segment a little:
	// the counter counts what went, never less than nothing.
	b.metrics.CacheCompactionBytesRemoved.Add(float64(max(c.BytesRemoved, 0)))
	b.metrics.CacheCompactionLastSeconds.Set(c.Took.Seconds())
}
