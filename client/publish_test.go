package client_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/internal/quicconf"
)

// TestStalledShardHoldsOnlyItsOwnPublishes: a shard that stops taking
// publishes must not hold up the same client's publishes to another stream.
// The stall is a block-policy shard whose one subscriber never
// reads: its queue fills, the shard waits on it, its mailbox fills, and the
// broker's reader of every publish that follows on the same QUIC stream
// waits publish_queue_wait_timeout_ms (2 s) for each. When the client sent
// every publish on one stream, an acked publish to an idle stream queued
// behind them; with a stream per stream scope it is answered at once.
func TestStalledShardHoldsOnlyItsOwnPublishes(t *testing.T) {
	cfg := brokertest.Config(t)
	cfg.SubscriberQueuePolicy = "block"
	cfg.SubscriberLaneQueuePolicy = "block"
	cfg.SubscriberQueueCapacity = 1
	cfg.SubscriberEgressMaxBytes = 64 << 10
	cfg.PubQueueDepth = 1
	b := brokertest.Start(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	stalled, idle := client.Stream{Name: "stalled"}, client.Stream{Name: "idle"}
	frozen := brokertest.DialOptions(t, b, cfg, client.Options{SubscriptionBuffer: 1})
	if _, err := frozen.Subscribe(ctx, stalled, client.SubscribeOptions{}); err != nil {
		t.Fatalf("subscribe to %s: %v", stalled.Name, err)
	}
	pub := brokertest.Dial(t, b, cfg)

	// 64 batches of 64 KiB: several times what the frozen subscription
	// absorbs outside the broker's queues (its stream window and egress
	// share), so the shard stalls with publishes still queued behind it.
	const batches = 64
	payload := make([]byte, 64<<10)
	pubCtx, stopPub := context.WithCancel(ctx)
	defer stopPub()
	pubDone := make(chan error, 1)
	go func() {
		for range batches {
			if err := pub.Publish(pubCtx, stalled, payload, client.PublishOptions{FireAndForget: true}); err != nil {
				pubDone <- err
				return
			}
		}
		pubDone <- nil
	}()
	brokertest.Eventually(t, ctx, "the stalled stream's shard mailbox to fill", func() bool {
		return brokertest.Totals(b, actors.KindShard).Depth >= cfg.PubQueueDepth &&
			brokertest.Value(t, b, "felix_sub_queue_blocked_total") > 0
	})

	// Generous against the 2 s each queued publish of the stalled stream
	// would cost: only a publish that shares its QUIC stream misses it.
	ackCtx, ackCancel := context.WithTimeout(ctx, time.Second)
	defer ackCancel()
	if err := pub.Publish(ackCtx, idle, []byte("hello"), client.PublishOptions{}); err != nil {
		t.Fatalf("acked publish to %s while %s is stalled: %v; want its ack within 1 s", idle.Name, stalled.Name, err)
	}

	// Release the stall so the queued publishes drain and Close is quick.
	if err := frozen.Close(ctx); err != nil {
		t.Fatalf("close the frozen client: %v", err)
	}
	if err := <-pubDone; err != nil {
		t.Fatalf("fire-and-forget publishes to %s: %v", stalled.Name, err)
	}
}

// TestCloseFlushesEveryPublishStream: Close finishes every publish stream,
// the dedicated ones and the pooled one, so no stream's trailing
// fire-and-forget publishes are lost, and each scope's publishes arrive in
// the order they were issued.
func TestCloseFlushesEveryPublishStream(t *testing.T) {
	cfg := brokertest.Config(t)
	cfg.SubscriberQueuePolicy = "block"     // count every message; this is not about drops
	cfg.SubscriberLaneQueuePolicy = "block" // a CPU-starved lane may drop under drop_new
	b := brokertest.Start(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Two scopes more than the dedicated streams: both share the pooled one.
	const perScope = 500
	opts := client.Options{PublishShardStreams: 4}
	scopes := make([]client.Stream, opts.PublishShardStreams+2)
	subs := make([]*client.Subscription, len(scopes))
	reader := brokertest.Dial(t, b, cfg)
	for i := range scopes {
		scopes[i] = client.Stream{Name: fmt.Sprintf("tail-%d", i)}
		sub, err := reader.Subscribe(ctx, scopes[i], client.SubscribeOptions{})
		if err != nil {
			t.Fatalf("subscribe to %s: %v", scopes[i].Name, err)
		}
		subs[i] = sub
	}
	opts.CAFile = filepath.Join(cfg.DataDir, quicconf.CertFile)
	opts.Token = brokertest.Token(t, cfg, "default")
	pub, err := client.Dial(ctx, b.Addr().String(), opts)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	for n := range perScope {
		for _, s := range scopes {
			if err := pub.Publish(ctx, s, []byte(strconv.Itoa(n)), client.PublishOptions{FireAndForget: true}); err != nil {
				t.Fatalf("publish %d to %s: %v", n, s.Name, err)
			}
		}
	}
	if err := pub.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := pub.Err(); err != nil {
		t.Fatalf("Err after a clean Close = %v, want nil", err)
	}
	for i, sub := range subs {
		for n := range perScope {
			ev, err := sub.Next(ctx)
			if err != nil {
				t.Fatalf("%s: after %d of %d events: %v", scopes[i].Name, n, perScope, err)
			}
			if got, want := string(ev.Payload), strconv.Itoa(n); got != want {
				t.Fatalf("%s: event %d = %q, want %q", scopes[i].Name, n, got, want)
			}
		}
	}
}
