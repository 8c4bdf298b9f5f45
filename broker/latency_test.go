package broker_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
)

// histogramCount sums the sample counts of the histogram name's series
// whose labels include the given pairs.
func histogramCount(t *testing.T, g prometheus.Gatherer, name string, labels ...string) uint64 {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := true
			for i := 0; i < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					found = found || lp.GetName() == labels[i] && lp.GetValue() == labels[i+1]
				}
				match = match && found
			}
			if match {
				n += m.GetHistogram().GetSampleCount()
			}
		}
	}
	return n
}

// TestPublishLatencyAndStreamMetrics publishes to a durable stream that
// metrics_streams names and to an in-memory one it does not: every acked
// publish is timed by durability, every live batch written to a
// subscriber is timed once, a replay from the log is not timed, and only
// the named stream has series of its own, its shard's offsets among them.
func TestPublishLatencyAndStreamMetrics(t *testing.T) {
	cfg := brokertest.Config(t)
	cfg.MetricsStreams = "default/default/orders"
	b := brokertest.Start(t, cfg)
	reg := b.Metrics().Registry
	ctx := testCtx(t, 20*time.Second)
	c := brokertest.Dial(t, b, cfg)
	orders, other := client.Stream{Name: "orders"}, client.Stream{Name: "other"}
	if _, err := c.CreateStream(ctx, orders, client.StreamConfig{Durable: true}); err != nil {
		t.Fatal(err)
	}
	sub, err := c.Subscribe(ctx, orders, client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	delivered := func() uint64 { return histogramCount(t, reg, "felix_publish_delivery_seconds") }
	for i := range 5 {
		if _, err := c.PublishResult(ctx, orders, [][]byte{[]byte(seq(i))}, client.PublishOptions{}); err != nil {
			t.Fatal(err)
		}
		expectNext(t, ctx, "live subscriber", sub, seq(i))
		// One publish at a time is one batch, one write, one sample.
		want := uint64(i + 1)
		brokertest.Eventually(t, ctx, fmt.Sprintf("%d delivery samples", want), func() bool { return delivered() == want })
	}
	for i := range 3 {
		if _, err := c.PublishResult(ctx, other, [][]byte{[]byte(seq(i))}, client.PublishOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if got := histogramCount(t, reg, "felix_publish_ack_seconds", "durable", "true"); got != 5 {
		t.Errorf("felix_publish_ack_seconds{durable=true} has %d samples, want the 5 durable acks", got)
	}
	if got := histogramCount(t, reg, "felix_publish_ack_seconds", "durable", "false"); got != 3 {
		t.Errorf("felix_publish_ack_seconds{durable=false} has %d samples, want the 3 in-memory acks", got)
	}
	if got := brokertest.Value(t, b, "felix_stream_published_records_total", "stream", "orders"); got != 5 {
		t.Errorf("felix_stream_published_records_total{stream=orders} = %v, want 5", got)
	}
	if _, found, err := brokertest.MetricValue(reg, "felix_stream_published_records_total", "stream", "other"); found || err != nil {
		t.Errorf("a stream metrics_streams does not name has a series of its own (err %v)", err)
	}
	if got := histogramCount(t, reg, "felix_stream_publish_ack_seconds", "stream", "orders"); got != 5 {
		t.Errorf("felix_stream_publish_ack_seconds{stream=orders} has %d samples, want 5", got)
	}
	for _, name := range []string{"felix_stream_shard_next_offset", "felix_stream_shard_committed_offset"} {
		if got := brokertest.Value(t, b, name, "stream", "orders", "shard", "0"); got != 5 {
			t.Errorf("%s{stream=orders,shard=0} = %v, want 5", name, got)
		}
	}

	// A subscriber from the first offset gets the five from the log: a
	// replay, not timed. Then one live publish reaches both subscribers.
	replay, err := c.Subscribe(ctx, orders, client.SubscribeOptions{From: client.FromEarliest})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		expectNext(t, ctx, "replaying subscriber", replay, seq(i))
	}
	if _, err := c.PublishResult(ctx, orders, [][]byte{[]byte(seq(5))}, client.PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	expectNext(t, ctx, "live subscriber", sub, seq(5))
	expectNext(t, ctx, "replaying subscriber", replay, seq(5))
	// Every write is counted in felix_delivered_messages_total by the same
	// hook that times it: once it has all 12 records (5 live, 5 replayed,
	// 1 live to each), every sample is in.
	brokertest.Eventually(t, ctx, "12 delivered records", func() bool {
		return brokertest.Value(t, b, "felix_delivered_messages_total") == 12
	})
	if got := delivered(); got != 7 {
		t.Errorf("felix_publish_delivery_seconds has %d samples, want 7: the 5 live batches and the last publish's 2, no replay", got)
	}

	// An in-memory stream's subscriber from the earliest gets the replay
	// ring's backlog, whose publishes are timed in their envelopes: still
	// not a delivery sample. Then one live publish is.
	ring, err := c.Subscribe(ctx, other, client.SubscribeOptions{From: client.FromEarliest})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		expectNext(t, ctx, "ring subscriber", ring, seq(i))
	}
	if _, err := c.PublishResult(ctx, other, [][]byte{[]byte(seq(3))}, client.PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	expectNext(t, ctx, "ring subscriber", ring, seq(3))
	brokertest.Eventually(t, ctx, "16 delivered records", func() bool {
		return brokertest.Value(t, b, "felix_delivered_messages_total") == 16
	})
	if got := delivered(); got != 8 {
		t.Errorf("felix_publish_delivery_seconds has %d samples, want 8: the backlog from the replay ring is not timed", got)
	}
}
