package webfront_test

import (
	"context"
	"testing"
	"time"

	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/webfront"
)

// BenchmarkOneSubscriber: one subscriber's rate, over felix/1 (the Go
// client, NextBatch), WebTransport and WebSocket (the browser framing's Go
// test clients), in one run on one machine. One broker in process, one
// in-memory stream, one Go publisher sending b.N acked batches of 64
// records of 128 bytes; records/s is what the subscriber received over the
// time from the first publish to its last delivery, missing what it never
// got (its queue's drop_new under a publisher faster than it).
func BenchmarkOneSubscriber(b *testing.B) {
	for _, transport := range []string{"felix1", "webtransport", "websocket"} {
		b.Run("transport="+transport, func(b *testing.B) { benchOneSubscriber(b, transport) })
	}
}

const benchBatch, benchRecordBytes = 64, 128

func benchOneSubscriber(b *testing.B, transport string) {
	cfg := brokertest.Config(b)
	cfg.BrowserListen = "127.0.0.1:0"
	cfg.BrowserWebTransportListen = "127.0.0.1:0"
	cfg.Admin = "127.0.0.1:0"
	br := brokertest.Start(b, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	gc := brokertest.Dial(b, br, cfg)
	st := client.Stream{Name: "one"}
	token := brokertest.Token(b, cfg, "default")
	want := b.N * benchBatch

	// next returns how many records the subscriber's next read brought.
	var next func(context.Context) (int, error)
	switch transport {
	case "felix1":
		sub, err := brokertest.Dial(b, br, cfg).Subscribe(ctx, st, client.SubscribeOptions{Batches: true})
		if err != nil {
			b.Fatal(err)
		}
		next = func(ctx context.Context) (int, error) {
			evs, err := sub.NextBatch(ctx)
			return len(evs), err
		}
	case "webtransport":
		wt, err := dialWT(b, ctx, br, "", webTransportHash(b, br))
		if err != nil {
			b.Fatal(err)
		}
		wt.mustCall(ctx, &webfront.Request{Op: webfront.OpAuth, Tenant: "default", Token: token})
		id := wt.mustCall(ctx, &webfront.Request{Op: webfront.OpSubscribe, Namespace: "default", Stream: "one"}).Sub
		next = func(ctx context.Context) (int, error) {
			ev, err := wt.nextEvents(ctx, id)
			if err != nil {
				return 0, err
			}
			return len(ev.Payloads), nil
		}
	case "websocket":
		ws, err := dialWS(b, ctx, br, "")
		if err != nil {
			b.Fatal(err)
		}
		ws.mustCall(ctx, &webfront.Request{Op: webfront.OpAuth, Tenant: "default", Token: token}, nil)
		ws.mustCall(ctx, &webfront.Request{Op: webfront.OpSubscribe, Namespace: "default", Stream: "one"}, nil)
		next = func(ctx context.Context) (int, error) {
			_, ev, err := ws.next(ctx)
			if err != nil || ev == nil {
				return 0, err
			}
			return len(ev.Payloads), nil
		}
	}

	received := make(chan int, 1)
	go func() {
		got := 0
		for got < want {
			// A read waits at most 5 s: once the publisher is done, what has
			// not come by then was dropped.
			rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
			n, err := next(rctx)
			rcancel()
			if err != nil {
				break
			}
			got += n
		}
		received <- got
	}()
	batch := make([][]byte, benchBatch)
	for i := range batch {
		batch[i] = make([]byte, benchRecordBytes)
	}
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		if err := gc.PublishBatch(ctx, st, batch, client.PublishOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	got := <-received
	elapsed := time.Since(start)
	if got < want {
		elapsed -= 5 * time.Second // the last read's wait for records that never came
	}
	b.StopTimer()
	b.ReportMetric(float64(got)/elapsed.Seconds(), "records/s")
	b.ReportMetric(float64(want-got), "missing")
}
