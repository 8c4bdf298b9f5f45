package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/wire"
)

// TestPublishIf: of two clients expecting the same offset one is written;
// the other is refused with the tail and writes nothing; the loser retries
// at the tail and is written there. An in-memory stream refuses.
func TestPublishIf(t *testing.T) {
	cfg := brokertest.Config(t)
	b := brokertest.Start(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, c := brokertest.Dial(t, b, cfg), brokertest.Dial(t, b, cfg)
	st := client.Stream{Name: "ledger"}
	if _, err := a.CreateStream(ctx, st, client.StreamConfig{Durable: true}); err != nil {
		t.Fatal(err)
	}
	off, err := a.PublishIf(ctx, st, [][]byte{[]byte("a0"), []byte("a1")}, 0, client.PublishOptions{})
	if err != nil || off != 0 {
		t.Fatalf("first writer expecting 0: offset %d, %v", off, err)
	}
	_, err = c.PublishIf(ctx, st, [][]byte{[]byte("c0")}, 0, client.PublishOptions{})
	var refused *wire.RefusedError
	if !errors.Is(err, wire.ErrOffsetMismatch) || !errors.As(err, &refused) || refused.Tail != 2 {
		t.Fatalf("second writer expecting 0 after a 2-record write: %v, want offset_mismatch with tail 2", err)
	}
	if off, err := c.PublishIf(ctx, st, [][]byte{[]byte("c0")}, refused.Tail, client.PublishOptions{}); err != nil || off != 2 {
		t.Fatalf("second writer retrying at the tail: offset %d, %v", off, err)
	}
	page, err := a.Read(ctx, st, 0, client.ReadOptions{})
	if err != nil || len(page.Records) != 3 || string(page.Records[2].Payload) != "c0" {
		t.Fatalf("the log holds %d records (%v), want a0 a1 c0", len(page.Records), err)
	}
	if _, err := a.PublishIf(ctx, client.Stream{Name: "memory"}, [][]byte{[]byte("x")}, 0, client.PublishOptions{}); !errors.Is(err, wire.ErrInvalidRequest) {
		t.Fatalf("PublishIf on an in-memory stream: %v, want invalid_request", err)
	}
}
