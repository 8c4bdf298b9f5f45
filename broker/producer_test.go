package broker_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/getfelix/felix-go/broker"
	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/config"
	"github.com/getfelix/felix-go/wire"
)

// The broker's part of idempotent producers: producer_init and the
// boundary's checks of a producer id. What the shard does with sequences
// is in idempotent_test.go.

// initProducer asks for a producer id on a raw control stream.
func initProducer(ctx context.Context, ctrl *brokertest.RawStream, id uint64) (uint64, error) {
	if err := ctrl.Send(&wire.ProducerInit{RequestID: id}); err != nil {
		return 0, err
	}
	msg, err := ctrl.ReadMessage(ctx)
	if err != nil {
		return 0, err
	}
	switch m := msg.(type) {
	case *wire.ProducerInitOK:
		if m.RequestID != id {
			return 0, fmt.Errorf("producer_init %d answered for request %d", id, m.RequestID)
		}
		return m.ProducerID, nil
	case *wire.ErrorMsg:
		return 0, &wire.Error{Code: m.Code, Retry: m.Retry, Message: m.Message}
	}
	return 0, fmt.Errorf("producer_init answered %T %+v", msg, msg)
}

// idemPublish sends one idempotent publish on st and returns its ack or
// its refusal.
func idemPublish(ctx context.Context, st *brokertest.RawStream, id, producer, seq uint64, scope wire.Scope, payloads ...string) (*wire.Ack, *wire.PublishRefused, error) {
	p := &wire.Publish{RequestID: id, Ack: wire.AckPerBatch, Idempotent: true, ProducerID: producer, Sequence: seq, Scope: scope}
	for _, pl := range payloads {
		p.Payloads = append(p.Payloads, []byte(pl))
	}
	if err := st.Write(wire.AppendPublish(nil, p)); err != nil {
		return nil, nil, err
	}
	h, body, err := st.ReadFrame(ctx)
	if err != nil {
		return nil, nil, err
	}
	if h.Flags == 0 {
		msg, err := wire.DecodeMessage(body)
		r, ok := msg.(*wire.PublishRefused)
		if err != nil || !ok || r.RequestID != id {
			return nil, nil, fmt.Errorf("idempotent publish %d answered %T %+v (%v)", id, msg, msg, err)
		}
		return nil, r, nil
	}
	a, err := wire.DecodeAck(h.Flags, body)
	if err != nil || a.RequestID != id {
		return nil, nil, fmt.Errorf("idempotent publish %d acked %+v (%v)", id, a, err)
	}
	return &a, nil, nil
}

// rawSession is a raw connection of tenant with its control stream and a
// publish stream.
func rawSession(t *testing.T, ctx context.Context, b *broker.Broker, cfg config.Config, tenant string) (ctrl, pub *brokertest.RawStream) {
	t.Helper()
	rc := brokertest.DialRaw(t, b, cfg)
	ctrl, msg, err := rc.Handshake(ctx, tenant)
	if _, ok := msg.(*wire.AuthOK); err != nil || !ok {
		t.Fatalf("handshake as %s: %T %+v, %v", tenant, msg, msg, err)
	}
	pub, err = rc.OpenStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return ctrl, pub
}

func createDurable(t *testing.T, ctx context.Context, b *broker.Broker, cfg config.Config, tenant, name string, shards uint32) {
	t.Helper()
	c := brokertest.DialOptions(t, b, cfg, client.Options{Tenant: tenant})
	if _, err := c.CreateStream(ctx, client.Stream{Name: name}, client.StreamConfig{Durable: true, Shards: shards}); err != nil {
		t.Fatal(err)
	}
}

// TestProducerInit: producer_init gives distinct ids, which the broker
// still knows after a restart; an id it never gave out is refused
// unknown_producer at the boundary, as a PublishRefused, writing nothing.
func TestProducerInit(t *testing.T) {
	cfg := brokertest.Config(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := brokertest.Start(t, cfg)
	createDurable(t, ctx, b, cfg, "default", "idem", 1)
	ctrl, _ := rawSession(t, ctx, b, cfg, "default")
	first, err := initProducer(ctx, ctrl, 1)
	if err != nil {
		t.Fatal(err)
	}
	second, err := initProducer(ctx, ctrl, 2)
	if err != nil {
		t.Fatal(err)
	}
	if first == second {
		t.Fatalf("two producer_init gave the same id %d", first)
	}
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	b = brokertest.Start(t, cfg)
	_, pub := rawSession(t, ctx, b, cfg, "default")
	scope := wire.Scope{Tenant: "default", Namespace: "default", Stream: "idem"}
	unknown := first ^ second ^ 1
	if unknown == first || unknown == second {
		unknown++
	}
	a, refused, err := idemPublish(ctx, pub, 1, unknown, 0, scope, "never written")
	if err != nil {
		t.Fatal(err)
	}
	if refused == nil || refused.Reason != wire.ReasonUnknownProducer {
		t.Fatalf("a publish with an id never given out: ack %+v refusal %+v, want unknown_producer", a, refused)
	}
	a, refused, err = idemPublish(ctx, pub, 2, first, 0, scope, "r0")
	if err != nil {
		t.Fatal(err)
	}
	if refused != nil || a.Err != nil || !a.HasOffset || a.Offset != 0 {
		t.Fatalf("a publish with an id given out before the restart: ack %+v (err %v) refusal %+v, want written at 0", a, a.Err, refused)
	}
}

// TestProducerOfAnotherTenant: a producer id is its tenant's; another
// tenant using it is forbidden, and nothing is written.
func TestProducerOfAnotherTenant(t *testing.T) {
	cfg := brokertest.Config(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := brokertest.Start(t, cfg)
	createDurable(t, ctx, b, cfg, "b", "idem", 1)
	ctrlA, _ := rawSession(t, ctx, b, cfg, "a")
	idA, err := initProducer(ctx, ctrlA, 1)
	if err != nil {
		t.Fatal(err)
	}
	_, pubB := rawSession(t, ctx, b, cfg, "b")
	scope := wire.Scope{Tenant: "b", Namespace: "default", Stream: "idem"}
	a, refused, err := idemPublish(ctx, pubB, 1, idA, 0, scope, "stolen")
	if err != nil {
		t.Fatal(err)
	}
	if refused != nil || a.Err == nil || a.Err.Code != wire.CodeForbidden {
		t.Fatalf("tenant b publishing with tenant a's producer: ack %+v refusal %+v, want forbidden", a, refused)
	}
	c := brokertest.DialOptions(t, b, cfg, client.Options{Tenant: "b"})
	page, err := c.Read(ctx, client.Stream{Name: "idem"}, 0, client.ReadOptions{})
	if err != nil || len(page.Records) != 0 {
		t.Fatalf("stream after the refusal: %d records (%v), want none", len(page.Records), err)
	}
}

// TestProducerInitNeedsPublish: producer_init needs a stream.publish grant
// somewhere in the tenant.
func TestProducerInitNeedsPublish(t *testing.T) {
	cfg := brokertest.Config(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := brokertest.Start(t, cfg)
	for _, tc := range []struct {
		grant string
		want  error
	}{
		{"stream.subscribe:*/*", wire.ErrForbidden},
		{"stream.publish:orders/created", nil},
	} {
		rc := brokertest.DialRaw(t, b, cfg)
		ctrl, msg, err := rc.HandshakeToken(ctx, "default", brokertest.Token(t, cfg, "default", tc.grant))
		if _, ok := msg.(*wire.AuthOK); err != nil || !ok {
			t.Fatalf("handshake: %T %+v, %v", msg, msg, err)
		}
		_, err = initProducer(ctx, ctrl, 1)
		if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("producer_init with only %s: %v, want %v", tc.grant, err, tc.want)
		}
	}
}

// TestProducerInMemoryStream: an idempotent publish to an in-memory stream
// is refused (its sequences would not outlive the shard).
func TestProducerInMemoryStream(t *testing.T) {
	cfg := brokertest.Config(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := brokertest.Start(t, cfg)
	ctrl, pub := rawSession(t, ctx, b, cfg, "default")
	id, err := initProducer(ctx, ctrl, 1)
	if err != nil {
		t.Fatal(err)
	}
	a, refused, err := idemPublish(ctx, pub, 1, id, 0, wire.Scope{Tenant: "default", Namespace: "default", Stream: "implicit"}, "x")
	if err != nil {
		t.Fatal(err)
	}
	if refused != nil || a.Err == nil || a.Err.Code != wire.CodeInvalidRequest {
		t.Fatalf("an idempotent publish to an in-memory stream: ack %+v refusal %+v, want invalid_request", a, refused)
	}
}
