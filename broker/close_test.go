package broker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
)

// TestCloseDeliversTrailingFireAndForget: a client that publishes without
// acks and closes at once must not lose the tail. CloseWithError discards
// what QUIC has not sent; Close finishes the publish stream first.
func TestCloseDeliversTrailingFireAndForget(t *testing.T) {
	cfg := brokertest.Config(t)
	cfg.SubscriberQueuePolicy = "block"     // count every message; this is not about drops
	cfg.SubscriberLaneQueuePolicy = "block" // a CPU-starved lane may drop under drop_new
	b := brokertest.Start(t, cfg)
	sub, err := brokertest.Dial(t, b, cfg).Subscribe(context.Background(), client.Stream{Name: "tail"}, client.SubscribeOptions{})
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pub, err := client.Dial(ctx, b.Addr().String(), client.Options{CAFile: cfg.DataDir + "/cert.pem", Token: brokertest.Token(t, cfg, "default")})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	const n = 2000
	for i := range n {
		if err := pub.Publish(ctx, client.Stream{Name: "tail"}, []byte(fmt.Sprint(i)), client.PublishOptions{FireAndForget: true}); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	if err := pub.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := pub.Err(); err != nil {
		t.Fatalf("Err after a clean Close = %v, want nil", err)
	}
	for i := range n {
		ev, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("after %d of %d events: %v", i, n, err)
		}
		if string(ev.Payload) != fmt.Sprint(i) {
			t.Fatalf("event %d = %q, want %q", i, ev.Payload, fmt.Sprint(i))
		}
	}
}
