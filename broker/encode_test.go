package broker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/streams"
	"github.com/getfelix/felix-go/wire"
)

// TestEncodeOncePerBatch proves invariant 2: a publish batch is encoded at
// most once per frame shape whatever the fanout. Subscribers are spread over
// 4 connections so the shared frame crosses feeders, lanes and writers.
func TestEncodeOncePerBatch(t *testing.T) {
	for _, fanout := range []int{1, 10, 100} {
		t.Run(fmt.Sprintf("fanout=%d", fanout), func(t *testing.T) {
			cfg := brokertest.Config(t)
			// Lossless queues: this test counts encodes, and a lane drop under
			// a fanout burst on a loaded machine is legal under drop_new.
			cfg.SubscriberQueuePolicy = "block"
			cfg.SubscriberLaneQueuePolicy = "block"
			b := brokertest.Start(t, cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			conns := make([]*client.Client, 4)
			for i := range conns {
				conns[i] = brokertest.Dial(t, b, cfg)
			}
			st := client.Stream{Name: "fan"}
			subs := make([]*client.Subscription, fanout)
			for i := range subs {
				var err error
				if subs[i], err = conns[i%len(conns)].Subscribe(ctx, st, client.SubscribeOptions{}); err != nil {
					t.Fatalf("subscribe %d: %v", i, err)
				}
			}
			const batches = 5
			before := streams.TotalEncodes()
			for i := range batches {
				payloads := [][]byte{[]byte(fmt.Sprintf("b%d-0", i)), []byte(fmt.Sprintf("b%d-1", i))}
				if err := conns[0].PublishBatch(ctx, st, payloads, client.PublishOptions{Ack: wire.AckPerBatch}); err != nil {
					t.Fatalf("publish batch %d: %v", i, err)
				}
			}
			for i, sub := range subs {
				for j := range 2 * batches {
					ev, err := sub.Next(ctx)
					if err != nil {
						t.Fatalf("subscriber %d event %d: %v", i, j, err)
					}
					if want := fmt.Sprintf("b%d-%d", j/2, j%2); string(ev.Payload) != want {
						t.Fatalf("subscriber %d event %d = %q, want %q", i, j, ev.Payload, want)
					}
				}
			}
			if got := streams.TotalEncodes() - before; got != batches {
				t.Fatalf("fanout %d: %d encodes for %d batches, want exactly one per batch", fanout, got, batches)
			}
		})
	}
}
