package broker_test

import (
	"context"
	"testing"
	"time"

	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/internal/brokertest"
	"github.com/getfelix/felix-go/wire"
)

func TestScratchConnWindow(t *testing.T) {
	cfg := brokertest.Config(t)
	b := brokertest.Start(t, cfg)
	ctx := testCtx(t, 30*time.Second)
	pub := brokertest.Dial(t, b, cfg)
	c := brokertest.DialOptions(t, b, cfg, client.Options{SubscriptionBuffer: 1})
	st := client.Stream{Name: "w"}
	if _, err := c.Subscribe(ctx, st, client.SubscribeOptions{}); err != nil {
		t.Fatal(err)
	}
	p := make([]byte, 64<<10)
	for i := 0; i < 32; i++ {
		if err := pub.PublishBatch(ctx, st, [][]byte{p}, client.PublishOptions{Ack: wire.AckPerBatch}); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("delivered bytes so far: %v", b.Metrics().Mailboxes().Totals())
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	h, err := c.Subscribe(sctx, client.Stream{Name: "other"}, client.SubscribeOptions{})
	if err != nil {
		t.Fatalf("second subscribe on the same connection: %v", err)
	}
	if err := pub.Publish(ctx, client.Stream{Name: "other"}, []byte("x"), client.PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Next(sctx); err != nil {
		t.Fatalf("healthy on same conn: %v", err)
	}
}
