package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/wire"
)

// durableBench starts a broker with a durable stream "bench" (durable_fsync
// periodic, the default) and dials it; everything stops when b ends.
func durableBench(b *testing.B) (context.Context, *client.Client, client.Stream) {
	b.Helper()
	cfg := brokertest.Config(b)
	br := brokertest.Start(b, cfg)
	c := brokertest.Dial(b, br, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	b.Cleanup(cancel)
	st := client.Stream{Name: "bench"}
	if _, err := c.CreateStream(ctx, st, client.StreamConfig{Durable: true}); err != nil {
		b.Fatal(err)
	}
	return ctx, c, st
}

// BenchmarkProduceIf measures one writer pipelining conditional
// single-record batches to a durable stream (durable_fsync periodic, the
// default), each expecting where the one before ends, against the same
// writer's plain acked single-record batches (which the client may merge
// while the window is full; conditional ones never merge). Reported as
// msgs/s; run with -benchtime Nx.
func BenchmarkProduceIf(b *testing.B) {
	for _, conditional := range []bool{true, false} {
		name := "plain"
		if conditional {
			name = "conditional"
		}
		b.Run(name, func(b *testing.B) {
			ctx, c, st := durableBench(b)
			payload := [][]byte{make([]byte, 128)}
			var failed error
			promise := func(_ client.PublishResult, err error) {
				if err != nil && failed == nil {
					failed = err
				}
			}
			b.ResetTimer()
			start := time.Now()
			for i := range b.N {
				var err error
				if conditional {
					err = c.ProduceIf(ctx, st, payload, uint64(i), client.PublishOptions{}, promise)
				} else {
					err = c.Produce(ctx, st, payload, client.PublishOptions{}, promise)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			if err := c.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
			if failed != nil {
				b.Fatal(failed)
			}
		})
	}
}

// BenchmarkIdempotentPublish measures one goroutine publishing batches of
// 16 × 128-byte records sequentially to a durable stream (durable_fsync
// periodic), through an IdempotentProducer and through plain PublishResult
// calls of the same batches: the price of the producer's id and sequence
// (the goal is at most 10 % slower). Reported as msgs/s.
func BenchmarkIdempotentPublish(b *testing.B) {
	for _, idempotent := range []bool{false, true} {
		name := "plain"
		if idempotent {
			name = "idempotent"
		}
		b.Run(name, func(b *testing.B) {
			ctx, c, st := durableBench(b)
			batch := make([][]byte, 16)
			for i := range batch {
				batch[i] = make([]byte, 128)
			}
			var p *client.IdempotentProducer
			if idempotent {
				var err error
				p, err = client.NewIdempotentProducer(ctx, func(context.Context) (*client.Client, error) { return c, nil })
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				var err error
				if idempotent {
					_, err = p.Publish(ctx, st, batch, nil)
				} else {
					_, err = c.PublishResult(ctx, st, batch, client.PublishOptions{Ack: wire.AckPerBatch})
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*len(batch))/time.Since(start).Seconds(), "msgs/s")
		})
	}
}
