package client_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
)

// TestBatchSubscription: a subscription read with NextBatch over a real
// broker gets every event in order; a NextBatch whose context ends
// returns its error and the next call goes on; Next refuses; Close ends a
// NextBatch that waits.
func TestBatchSubscription(t *testing.T) {
	cfg := brokertest.Config(t)
	b := brokertest.Start(t, cfg)
	c := brokertest.Dial(t, b, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := client.Stream{Name: "batches"}
	s, err := c.Subscribe(ctx, st, client.SubscribeOptions{Batches: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Next(ctx); !errors.Is(err, client.ErrReadMode) {
		t.Errorf("Next on a Batches subscription = %v, want ErrReadMode", err)
	}
	if _, open := <-s.Events(); open {
		t.Error("Events of a Batches subscription delivered an event, want it closed")
	}

	// Nothing published yet: the context ends first.
	short, stop := context.WithTimeout(ctx, 50*time.Millisecond)
	if evs, err := s.NextBatch(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("NextBatch with nothing published = %d events, %v; want context.DeadlineExceeded", len(evs), err)
	}
	stop()

	const total = 300
	var payloads [][]byte
	for i := range total {
		payloads = append(payloads, fmt.Appendf(nil, "m%03d", i))
	}
	for i := 0; i < total; i += 100 {
		if err := c.PublishBatch(ctx, st, payloads[i:i+100], client.PublishOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for got := 0; got < total; {
		evs, err := s.NextBatch(ctx)
		if err != nil {
			t.Fatalf("NextBatch after %d of %d events: %v", got, total, err)
		}
		for _, ev := range evs {
			if want := fmt.Sprintf("m%03d", got); string(ev.Payload) != want {
				t.Fatalf("event %d = %q, want %q", got, ev.Payload, want)
			}
			got++
		}
	}

	waiting := make(chan error, 1)
	go func() {
		_, err := s.NextBatch(ctx)
		waiting <- err
	}()
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-waiting:
		if !errors.Is(err, client.ErrClosed) {
			t.Errorf("a NextBatch waiting through Close = %v, want ErrClosed", err)
		}
	case <-ctx.Done():
		t.Fatal("a NextBatch waiting through Close never returned")
	}
}
