package broker_test

import (
	"context"
	"testing"
	"time"

	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/wire"
)

// These tests need the shard's part of idempotent producers (sequences
// checked and remembered in the log): they are the tests of what
// a producer's sequence does to the stream.

// countRecords reads a one-shard stream's whole log.
func countRecords(t *testing.T, ctx context.Context, c *client.Client, st client.Stream) []string {
	t.Helper()
	var out []string
	for from := uint64(0); ; {
		page, err := c.Read(ctx, st, from, client.ReadOptions{})
		if err != nil {
			t.Fatalf("read from %d: %v", from, err)
		}
		for _, r := range page.Records {
			out = append(out, string(r.Payload))
		}
		if len(page.Records) == 0 || page.Next >= page.Committed {
			return out
		}
		from = page.Next
	}
}

// TestIdempotentResendAfterRestart: a re-send of an acknowledged batch
// after a broker restart (the shard's producer state rebuilt from the log)
// is answered with its original offset and writes nothing.
func TestIdempotentResendAfterRestart(t *testing.T) {
	cfg := brokertest.Config(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := brokertest.Start(t, cfg)
	createDurable(t, ctx, b, cfg, "default", "idem", 1)
	scope := wire.Scope{Tenant: "default", Namespace: "default", Stream: "idem"}
	ctrl, pub := rawSession(t, ctx, b, cfg, "default")
	producer, err := initProducer(ctx, ctrl, 1)
	if err != nil {
		t.Fatal(err)
	}
	for seq, want := range []uint64{0, 2} {
		a, refused, err := idemPublish(ctx, pub, uint64(seq+1), producer, uint64(seq), scope, "a", "b")
		if err != nil || refused != nil || a.Err != nil || a.Offset != want {
			t.Fatalf("sequence %d: ack %+v refusal %+v (%v), want written at %d", seq, a, refused, err, want)
		}
	}
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	b = brokertest.Start(t, cfg)
	_, pub = rawSession(t, ctx, b, cfg, "default")
	a, refused, err := idemPublish(ctx, pub, 1, producer, 1, scope, "a", "b")
	if err != nil || refused != nil || a.Err != nil || !a.HasOffset || a.Offset != 2 {
		t.Fatalf("re-sent sequence 1 after a restart: ack %+v refusal %+v (%v), want its original offset 2", a, refused, err)
	}
	a, refused, err = idemPublish(ctx, pub, 2, producer, 2, scope, "c")
	if err != nil || refused != nil || a.Err != nil || a.Offset != 4 {
		t.Fatalf("sequence 2: ack %+v refusal %+v (%v), want written at 4", a, refused, err)
	}
	if got := countRecords(t, ctx, brokertest.Dial(t, b, cfg), client.Stream{Name: "idem"}); len(got) != 5 {
		t.Fatalf("the log holds %q, want 5 records (the re-send wrote nothing)", got)
	}
}

// TestIdempotentSequenceRefusals: a sequence that skips is refused
// sequence_gap with the expected one, a remembered sequence with other
// content sequence_reused; neither writes anything, and the producer goes
// on from the expected sequence.
func TestIdempotentSequenceRefusals(t *testing.T) {
	cfg := brokertest.Config(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := brokertest.Start(t, cfg)
	createDurable(t, ctx, b, cfg, "default", "idem", 1)
	scope := wire.Scope{Tenant: "default", Namespace: "default", Stream: "idem"}
	ctrl, pub := rawSession(t, ctx, b, cfg, "default")
	producer, err := initProducer(ctx, ctrl, 1)
	if err != nil {
		t.Fatal(err)
	}
	if a, refused, err := idemPublish(ctx, pub, 1, producer, 0, scope, "first"); err != nil || refused != nil || a.Err != nil {
		t.Fatalf("sequence 0: ack %+v refusal %+v (%v)", a, refused, err)
	}
	a, refused, err := idemPublish(ctx, pub, 2, producer, 2, scope, "skipped ahead")
	if err != nil || refused == nil || refused.Reason != wire.ReasonSequenceGap || refused.Expected != 1 {
		t.Fatalf("sequence 2 after 0: ack %+v refusal %+v (%v), want sequence_gap expecting 1", a, refused, err)
	}
	a, refused, err = idemPublish(ctx, pub, 3, producer, 0, scope, "other content")
	if err != nil || refused == nil || refused.Reason != wire.ReasonSequenceReused {
		t.Fatalf("sequence 0 again with other content: ack %+v refusal %+v (%v), want sequence_reused", a, refused, err)
	}
	if a, refused, err := idemPublish(ctx, pub, 4, producer, 1, scope, "second"); err != nil || refused != nil || a.Err != nil || a.Offset != 1 {
		t.Fatalf("sequence 1: ack %+v refusal %+v (%v), want written at 1", a, refused, err)
	}
	got := countRecords(t, ctx, brokertest.Dial(t, b, cfg), client.Stream{Name: "idem"})
	if len(got) != 2 || got[0] != "first" || got[1] != "second" {
		t.Fatalf("the log holds %q, want [first second] (the refused batches wrote nothing)", got)
	}
}
