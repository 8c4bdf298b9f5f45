package broker_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/getfelix/felix-go/broker"
	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/wire"
)

// waitShares waits until the connections' egress budgets are shared among
// want subscriptions in all, or fails after a few seconds.
func waitShares(t *testing.T, b *broker.Broker, want int64, after string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	got := b.EgressShares()
	for ; got != want && time.Now().Before(deadline); got = b.EgressShares() {
		time.Sleep(10 * time.Millisecond)
	}
	if got != want {
		t.Fatalf("after %s the egress budget is shared among %d subscriptions, want %d (a share leaked)", after, got, want)
	}
}

// TestEgressShareReturnsOnEveryEnd: a subscription's share of its
// connection's egress budget comes back however the subscription ends. It
// leaked on every path but the writer's finish: an unsubscribe during a
// replay left the connection's budget divided among one more subscription
// than it had, halving every other subscription's share for good.
func TestEgressShareReturnsOnEveryEnd(t *testing.T) {
	cfg := brokertest.Config(t)
	cfg.Chaos = true
	cfg.SubscriberQueueCapacity = 4
	b := brokertest.Start(t, cfg)
	c := brokertest.Dial(t, b, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := client.Stream{Name: "history"}
	if _, err := c.CreateStream(ctx, st, client.StreamConfig{Durable: true}); err != nil {
		t.Fatal(err)
	}
	payload := make([]byte, 1024)
	for range 200 {
		batch := make([][]byte, 64)
		for i := range batch {
			batch[i] = payload
		}
		if _, err := c.PublishResult(ctx, st, batch, client.PublishOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	keep, err := c.Subscribe(ctx, client.Stream{Name: "other"}, client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitShares(t, b, 1, "one subscription")

	t.Run("unsubscribe during replay", func(t *testing.T) {
		sub, err := c.Subscribe(ctx, st, client.SubscribeOptions{From: client.FromEarliest})
		if err != nil {
			t.Fatal(err)
		}
		if err := sub.Close(ctx); err != nil {
			t.Fatal(err)
		}
		waitShares(t, b, 1, "an unsubscribe during a 12 MiB replay")
	})
	t.Run("cursor error", func(t *testing.T) {
		_, err := c.Subscribe(ctx, st, client.SubscribeOptions{From: client.FromOffset, FromOffset: 1 << 40})
		var cursor *wire.CursorError
		if !errors.As(err, &cursor) {
			t.Fatalf("subscribe past the end: %v, want a cursor error", err)
		}
		waitShares(t, b, 1, "a refused start offset")
	})
	t.Run("feeder stopped", func(t *testing.T) {
		sub, err := c.Subscribe(ctx, st, client.SubscribeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Kill(broker.KillRequest{Path: fmt.Sprintf("felix/subscribers/sub-%d", sub.ID()), Mode: "stop"}); err != nil {
			t.Fatal(err)
		}
		if _, err := sub.Next(ctx); !errors.Is(err, client.ErrSubscriptionEnded) {
			t.Fatalf("next after its feeder stopped: %v, want ErrSubscriptionEnded", err)
		}
		waitShares(t, b, 1, "a feeder stopped")
	})
	if err := keep.Close(ctx); err != nil {
		t.Fatal(err)
	}
	waitShares(t, b, 0, "the last unsubscribe")
}
