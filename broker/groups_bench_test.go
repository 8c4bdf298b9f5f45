package broker_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
)

// BenchmarkGroupPollAck: four consumers poll batches of 100 and ack each
// batch; b.N records of 128 B, published beforehand.
func BenchmarkGroupPollAck(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cfg := brokertest.Config(b)
	br := brokertest.Start(b, cfg)
	c := brokertest.Dial(b, br, cfg)
	st := client.Stream{Name: "bench"}
	if _, err := c.CreateStream(ctx, st, client.StreamConfig{Durable: true}); err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 128)
	for i := 0; i < b.N; i += 1000 {
		recs := make([][]byte, min(1000, b.N-i))
		for j := range recs {
			recs[j] = payload
		}
		if _, err := c.PublishResult(ctx, st, recs, client.PublishOptions{Ack: 1}); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := c.CreateGroup(ctx, st, "workers", client.GroupStart{Kind: "earliest"}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	var acked atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cc := brokertest.Dial(b, br, cfg)
			g := cc.Group(st, "workers", client.GroupOptions{})
			defer g.Close()
			for acked.Load() < int64(b.N) {
				recs, err := g.Poll(ctx, 100, 100*time.Millisecond)
				if err != nil {
					b.Error(err)
					return
				}
				if len(recs) == 0 {
					continue
				}
				if err := g.Ack(ctx, recs...); err != nil {
					b.Error(err)
					return
				}
				acked.Add(int64(len(recs)))
			}
		}()
	}
	wg.Wait()
}
