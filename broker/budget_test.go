package broker_test

import (
	"context"
	"testing"
	"time"

	"github.com/getfelix/felix-go/broker"
	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/wire"
)

// gaugeValue reads an unlabelled gauge from the broker's registry.
func gaugeValue(t *testing.T, b *broker.Broker, name string) float64 {
	t.Helper()
	families, err := b.Metrics().Registry.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s", name)
	return 0
}

// waitGauge polls a gauge until it reads want. The budget comes back on the
// connection writer's goroutine after a write the client has already seen,
// so there is no event to await from outside; the poll is bounded.
func waitGauge(t *testing.T, b *broker.Broker, name string, want float64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := gaugeValue(t, b, name)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %v after 10s, want %v", name, got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSubscriberTotalCoversUntilWrittenAndComesBack: with
// subscriber_queue_max_bytes_total set, the budget covers batches through the
// lanes and writer, and every byte comes back: after delivery, and when a
// frozen subscriber's connection closes with batches queued and in flight.
func TestSubscriberTotalCoversUntilWrittenAndComesBack(t *testing.T) {
	cfg := brokertest.Config(t)
	cfg.SubscriberQueueMaxBytesTotal = 4 << 20
	cfg.SubscriberQueueMaxBytes = 1 << 20
	b := brokertest.Start(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := client.Stream{Name: "total"}

	healthy, err := brokertest.Dial(t, b, cfg).Subscribe(ctx, st, client.SubscribeOptions{})
	if err != nil {
		t.Fatalf("subscribe healthy: %v", err)
	}
	frozenConn := brokertest.DialOptions(t, b, cfg, client.Options{SubscriptionBuffer: 1})
	if _, err := frozenConn.Subscribe(ctx, st, client.SubscribeOptions{}); err != nil {
		t.Fatalf("subscribe frozen: %v", err)
	}
	pub := brokertest.Dial(t, b, cfg)
	payload := make([]byte, 1024)
	batch := make([][]byte, 16)
	for i := range batch {
		batch[i] = payload
	}
	const batches = 400 // 6.4 MiB per subscriber: more than the total
	go func() {
		for range batches {
			if err := pub.PublishBatch(ctx, st, batch, client.PublishOptions{Ack: wire.AckPerBatch}); err != nil {
				return
			}
		}
	}()
	got, peak := 0, 0.0
	for got < batches*len(batch) {
		if _, err := healthy.Next(ctx); err != nil {
			// Under the total the healthy one may lose batches too (the
			// total gives up isolation, by design); stop at the first gap.
			break
		}
		got++
		if got%1000 == 0 {
			used := gaugeValue(t, b, "felix_sub_queue_total_bytes")
			peak = max(peak, used)
			if used > float64(cfg.SubscriberQueueMaxBytesTotal+16<<10) {
				t.Fatalf("felix_sub_queue_total_bytes = %v, over the total %d plus one batch", used, cfg.SubscriberQueueMaxBytesTotal)
			}
		}
		if got == batches*len(batch)/2 {
			break
		}
	}
	if peak == 0 {
		t.Fatal("felix_sub_queue_total_bytes never rose above 0 with a frozen subscriber: the total is not being charged")
	}
	// The frozen subscriber's connection goes away with batches queued, in
	// the lanes and in flight: all of it must come back to the budget.
	_ = frozenConn.Close(ctx)
	cancel()
	waitGauge(t, b, "felix_sub_queue_total_bytes", 0)
}
