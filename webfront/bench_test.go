package webfront_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/coder/websocket"

	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/webfront"
)

// BenchmarkFanout: one Go publisher, 1,000 WebSocket subscribers (Go
// clients of the browser framing, one connection each) on one in-memory
// stream, all in this process over loopback. Each op publishes one acked
// 64-byte record carrying its send time; it reports deliveries/s over the
// whole run and the p50/p99 of publish-to-delivery latency across every
// subscriber, and how many deliveries were missing (drops).
func BenchmarkFanout(b *testing.B) {
	for _, subs := range []int{1000} {
		b.Run(fmt.Sprintf("subscribers=%d", subs), func(b *testing.B) { benchFanout(b, subs) })
	}
}

func benchFanout(b *testing.B, subs int) {
	cfg := brokertest.Config(b)
	cfg.BrowserListen = "127.0.0.1:0"
	cfg.MaxConnectionsPerIP = subs + 16
	br := brokertest.Start(b, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	gc := brokertest.Dial(b, br, cfg)
	st := client.Stream{Name: "fanout"}
	token := brokertest.Token(b, cfg, "default")

	var (
		wg        sync.WaitGroup
		delivered atomic.Int64
		mu        sync.Mutex
		total     = hdrhistogram.New(1, int64(time.Minute/time.Microsecond), 3)
	)
	want := int64(b.N)
	readers := make([]*wsClient, subs)
	for i := range readers {
		ws, err := dialWS(b, ctx, br, "")
		if err != nil {
			b.Fatalf("dial subscriber %d: %v", i, err)
		}
		ws.mustCall(ctx, &webfront.Request{Op: webfront.OpAuth, Tenant: "default", Token: token}, nil)
		ws.mustCall(ctx, &webfront.Request{Op: webfront.OpSubscribe, Namespace: "default", Stream: "fanout"}, nil)
		readers[i] = ws
	}
	for _, ws := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := hdrhistogram.New(1, int64(time.Minute/time.Microsecond), 3)
			defer func() { mu.Lock(); total.Merge(h); mu.Unlock() }()
			for got := int64(0); got < want; {
				_, msg, err := ws.ws.Read(ctx)
				if err != nil {
					return
				}
				ev, err := webfront.DecodeEvents(msg)
				if err != nil {
					continue // a reply, not events
				}
				now := time.Now().UnixNano()
				for _, p := range ev.Payloads {
					_ = h.RecordValue((now - int64(binary.BigEndian.Uint64(p))) / 1e3)
				}
				got += int64(len(ev.Payloads))
				delivered.Add(int64(len(ev.Payloads)))
			}
		}()
	}
	payload := make([]byte, 64)
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		binary.BigEndian.PutUint64(payload, uint64(time.Now().UnixNano()))
		if err := gc.Publish(ctx, st, append([]byte(nil), payload...), client.PublishOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	// Every subscriber has what it will get once no delivery arrives for a second.
	for last := int64(-1); delivered.Load() != last && delivered.Load() < want*int64(subs); {
		last = delivered.Load()
		time.Sleep(time.Second) // a benchmark's settle wait, not a test's synchronisation
	}
	elapsed := time.Since(start)
	b.StopTimer()
	for _, ws := range readers {
		_ = ws.ws.Close(websocket.StatusNormalClosure, "")
	}
	cancel()
	wg.Wait()
	b.ReportMetric(float64(delivered.Load())/elapsed.Seconds(), "deliveries/s")
	b.ReportMetric(float64(total.ValueAtQuantile(50)), "p50_us")
	b.ReportMetric(float64(total.ValueAtQuantile(99)), "p99_us")
	b.ReportMetric(float64(want*int64(subs)-delivered.Load()), "missing")
}
