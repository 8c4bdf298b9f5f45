package broker_test

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/wire"
)

// BenchmarkPublishDeliver measures publish-to-delivery over loopback QUIC
// with 128-byte payloads: one publisher, fanout subscribers on their own
// connections, batches of batch messages acked per batch (pipelined). The
// subscriber queues use block so the run is lossless and every message is
// counted at every subscriber; b.N is the number of messages published.
//
//	go test -run '^$' -bench PublishDeliver -benchtime 200000x -count 5 ./broker/
func BenchmarkPublishDeliver(b *testing.B) {
	for _, tc := range []struct{ fanout, batch int }{{1, 64}, {10, 64}, {1, 1}} {
		b.Run(fmt.Sprintf("fanout=%d/batch=%d", tc.fanout, tc.batch), func(b *testing.B) {
			benchPublishDeliver(b, tc.fanout, tc.batch, 128)
		})
	}
}

// processCPU is this process's user and system CPU time so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func benchPublishDeliver(b *testing.B, fanout, batch, size int) {
	cfg := brokertest.Config(b)
	cfg.SubscriberQueuePolicy = "block"
	br := brokertest.Start(b, cfg)
	pub := brokertest.Dial(b, br, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	st := client.Stream{Name: "bench"}

	var wg sync.WaitGroup
	for i := range fanout {
		sub, err := brokertest.Dial(b, br, cfg).Subscribe(ctx, st, client.SubscribeOptions{})
		if err != nil {
			b.Fatalf("subscribe %d: %v", i, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range b.N {
				if _, err := sub.Next(ctx); err != nil {
					b.Errorf("subscriber %d: %v", i, err)
					return
				}
			}
		}()
	}
	payload := make([]byte, size)
	payloads := make([][]byte, batch)
	for i := range payloads {
		payloads[i] = payload
	}
	opts := client.PublishOptions{Ack: wire.AckPerBatch}
	b.SetBytes(int64(size))
	b.ResetTimer()
	start, cpu0 := time.Now(), processCPU(b)
	// Acked batches are pipelined: publish from a few goroutines so the
	// publisher is bounded by the in-flight budget, not by round trips.
	const publishers = 4
	var pw sync.WaitGroup
	for p := range publishers {
		pw.Add(1)
		go func() {
			defer pw.Done()
			for sent := p * batch; sent < b.N; sent += publishers * batch {
				n := min(batch, b.N-sent)
				if err := pub.PublishBatch(ctx, st, payloads[:n], opts); err != nil {
					b.Errorf("publish: %v", err)
					return
				}
			}
		}()
	}
	pw.Wait()
	wg.Wait()
	elapsed := time.Since(start)
	// CPU per message, of the whole process (broker, publisher and
	// subscribers): unlike ns/op it does not count time spent waiting for
	// the cores on a busy machine.
	b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
	b.ReportMetric(float64(b.N*fanout)/elapsed.Seconds(), "deliveries/s")
}
