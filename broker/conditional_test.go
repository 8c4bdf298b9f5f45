package broker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/wire"
)

// conditional sends one publish_if on st and returns the offset it was
// written at, or the refusal. It may run off the test's goroutine, so it
// returns what went wrong instead of failing the test.
func conditional(ctx context.Context, st *brokertest.RawStream, id, expected uint64, scope wire.Scope, payload []byte) (uint64, *wire.PublishRefused, error) {
	if err := st.Write(wire.AppendPublish(nil, &wire.Publish{RequestID: id, Ack: wire.AckPerBatch, Conditional: true, Expected: expected, Scope: scope, Payloads: [][]byte{payload}})); err != nil {
		return 0, nil, err
	}
	h, body, err := st.ReadFrame(ctx)
	if err != nil {
		return 0, nil, err
	}
	if h.Flags == 0 {
		msg, err := wire.DecodeMessage(body)
		r, ok := msg.(*wire.PublishRefused)
		if err != nil || !ok || r.RequestID != id {
			return 0, nil, fmt.Errorf("conditional publish %d answered %T %+v (%v)", id, msg, msg, err)
		}
		return 0, r, nil
	}
	a, err := wire.DecodeAck(h.Flags, body)
	if err != nil || a.RequestID != id || a.Err != nil || !a.HasOffset {
		return 0, nil, fmt.Errorf("conditional publish %d acked %+v (%v, err %v), want written with an offset", id, a, err, a.Err)
	}
	return a.Offset, nil, nil
}

// TestConditionalPublishRace: writers race publish_if on one durable shard,
// each expecting the tail it last saw: exactly one wins each offset, the
// others are refused with the new tail and write nothing, and the log has
// every offset once, holding its winner's record.
func TestConditionalPublishRace(t *testing.T) {
	const writers, rounds = 8, 10000
	cfg := brokertest.Config(t)
	b := brokertest.Start(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := brokertest.Dial(t, b, cfg)
	st := client.Stream{Name: "cas"}
	if _, err := c.CreateStream(ctx, st, client.StreamConfig{Durable: true}); err != nil {
		t.Fatal(err)
	}
	scope := wire.Scope{Tenant: "default", Namespace: "default", Stream: "cas"}

	won := make([]map[uint64]string, writers) // writer -> offset -> payload it wrote there
	var wg sync.WaitGroup
	for w := range writers {
		won[w] = make(map[uint64]string)
		rc := brokertest.DialRaw(t, b, cfg)
		rc.MustHandshake(t, ctx)
		pub, err := rc.OpenStream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var tail uint64
			for id := uint64(1); tail < rounds; id++ {
				payload := fmt.Sprintf("w%d-r%d", w, id)
				off, refused, err := conditional(ctx, pub, id, tail, scope, []byte(payload))
				switch {
				case err != nil:
					t.Errorf("writer %d: %v", w, err)
					return
				case refused != nil:
					if refused.Reason != wire.ReasonOffsetMismatch || refused.Expected != tail || refused.Tail <= tail {
						t.Errorf("writer %d expecting %d refused %+v; want offset_mismatch with a later tail", w, tail, refused)
						return
					}
					tail = refused.Tail
				case off != tail:
					t.Errorf("writer %d expecting %d was written at %d", w, tail, off)
					return
				default:
					won[w][off] = payload
					tail = off + 1
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	winners := make(map[uint64]string)
	for w := range writers {
		for off, p := range won[w] {
			if prev, dup := winners[off]; dup {
				t.Fatalf("offset %d won twice: %q and %q", off, prev, p)
			}
			winners[off] = p
		}
	}
	var next uint64
	for next < rounds {
		page, err := c.Read(ctx, st, next, client.ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page.Records {
			if r.Offset != next {
				t.Fatalf("the log has offset %d where %d was due: a hole", r.Offset, next)
			}
			if want, ok := winners[r.Offset]; !ok || string(r.Payload) != want {
				t.Fatalf("offset %d holds %q; its winner wrote %q (won: %v)", r.Offset, r.Payload, want, ok)
			}
			next++
		}
		if len(page.Records) == 0 {
			break
		}
	}
	if next < rounds || len(winners) < rounds {
		t.Fatalf("the log holds %d records and %d offsets were won; want %d of each", next, len(winners), rounds)
	}
}

// TestConditionalPublishRefusals: a stale expected offset, one past the
// tail, and a conditional publish to an in-memory stream each get their
// typed answer and write nothing.
func TestConditionalPublishRefusals(t *testing.T) {
	cfg := brokertest.Config(t)
	b := brokertest.Start(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := brokertest.Dial(t, b, cfg)
	if _, err := c.CreateStream(ctx, client.Stream{Name: "d"}, client.StreamConfig{Durable: true}); err != nil {
		t.Fatal(err)
	}
	durable := wire.Scope{Tenant: "default", Namespace: "default", Stream: "d"}
	rc := brokertest.DialRaw(t, b, cfg)
	rc.MustHandshake(t, ctx)
	st, err := rc.OpenStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if off, r, err := conditional(ctx, st, 1, 0, durable, []byte("first")); err != nil || r != nil || off != 0 {
		t.Fatalf("expecting 0 on an empty stream: offset %d, refused %+v (%v)", off, r, err)
	}
	for _, expected := range []uint64{0, 5} { // stale, and past the tail
		if _, r, err := conditional(ctx, st, 2, expected, durable, []byte("no")); err != nil || r == nil || r.Tail != 1 || r.Expected != expected {
			t.Fatalf("expecting %d with the tail at 1: refused %+v (%v), want offset_mismatch with tail 1", expected, r, err)
		}
	}
	if off, r, err := conditional(ctx, st, 3, 1, durable, []byte("second")); err != nil || r != nil || off != 1 {
		t.Fatalf("expecting the tail 1: offset %d, refused %+v (%v)", off, r, err)
	}
	page, err := c.Read(ctx, client.Stream{Name: "d"}, 0, client.ReadOptions{})
	if err != nil || len(page.Records) != 2 {
		t.Fatalf("the log holds %d records (%v), want the 2 written", len(page.Records), err)
	}
	memory := wire.Scope{Tenant: "default", Namespace: "default", Stream: "mem"}
	if err := st.Write(wire.AppendPublish(nil, &wire.Publish{RequestID: 4, Ack: wire.AckPerBatch, Conditional: true, Scope: memory, Payloads: [][]byte{[]byte("x")}})); err != nil {
		t.Fatal(err)
	}
	if a := readAck(t, ctx, st); a.Err == nil || a.Err.Code != wire.CodeInvalidRequest {
		t.Fatalf("a conditional publish to an in-memory stream acked %+v (err %v), want invalid_request", a, a.Err)
	}
}
