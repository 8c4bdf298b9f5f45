package broker_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/getfelix/felix-go/broker"
	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/config"
	"github.com/getfelix/felix-go/internal/quicconf"
	"github.com/getfelix/felix-go/transport"
	"github.com/getfelix/felix-go/wire"
)

// Bad input: every case gets a typed error or a closed stream/connection,
// and a healthy client on other connections keeps publishing and receiving
// after each one (ARCHITECTURE.md, invariant 5).

// bystander is a well-behaved publisher and subscriber on connections of
// their own.
type bystander struct {
	pub *client.Client
	sub *client.Subscription
	n   int
}

func newBystander(t *testing.T, b *broker.Broker, cfg config.Config) *bystander {
	t.Helper()
	ctx := testCtx(t, 10*time.Second)
	pub := brokertest.Dial(t, b, cfg)
	subc := brokertest.Dial(t, b, cfg)
	sub, err := subc.Subscribe(ctx, client.Stream{Name: "bystander"}, client.SubscribeOptions{})
	if err != nil {
		t.Fatalf("bystander subscribe: %v", err)
	}
	h := &bystander{pub: pub, sub: sub}
	h.check(t, "at start")
	return h
}

// check publishes a few messages (acked and fire-and-forget) and waits for
// exactly them, in order.
func (h *bystander) check(t *testing.T, when string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st := client.Stream{Name: "bystander"}
	var want []string
	for i := range 3 {
		p := fmt.Sprintf("bystander-%d", h.n)
		h.n++
		o := client.PublishOptions{}
		if i == 1 {
			o.FireAndForget = true
		}
		if err := h.pub.Publish(ctx, st, []byte(p), o); err != nil {
			t.Fatalf("bystander publish %s: %v", when, err)
		}
		want = append(want, p)
	}
	for _, w := range want {
		expectNext(t, ctx, "bystander "+when, h.sub, w)
	}
	if err := h.pub.Err(); err != nil {
		t.Fatalf("bystander publisher has an asynchronous error %s: %v", when, err)
	}
}

// badInputConfig keeps the limits cheap to hit: a short auth timeout, the
// default 64 KiB pre-auth cap and a 128 KiB cap after it.
func badInputConfig(t *testing.T) config.Config {
	cfg := brokertest.Config(t)
	cfg.AuthTimeout = 300 * time.Millisecond
	cfg.MaxFrameBytes = 128 << 10
	cfg.PreAuthMaxFrameBytes = 64 << 10
	return cfg
}

func rawHeader(flags uint16, length uint32) []byte {
	return wire.AppendHeader(nil, flags, int(length))
}

// rawEnvelope builds a control frame from a type string and a raw body,
// which wire.AppendMessage cannot: it only encodes valid messages.
func rawEnvelope(t *testing.T, typ string, body []byte) []byte {
	t.Helper()
	payload, err := msgpack.Marshal([]any{typ, msgpack.RawMessage(body)})
	if err != nil {
		t.Fatal(err)
	}
	return append(rawHeader(0, uint32(len(payload))), payload...)
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// expectErrorMsg reads the next frame on s and fails unless it is an
// ErrorMsg with code and request id.
func expectErrorMsg(t *testing.T, ctx context.Context, s *brokertest.RawStream, requestID uint64, code wire.Code) *wire.ErrorMsg {
	t.Helper()
	msg, err := s.ReadMessage(ctx)
	if err != nil {
		t.Fatalf("want an error %s for request %d, read failed: %v", code, requestID, err)
	}
	e, ok := msg.(*wire.ErrorMsg)
	if !ok || e.Code != code || e.RequestID != requestID {
		t.Fatalf("got %T %+v, want ErrorMsg{request %d, code %s}", msg, msg, requestID, code)
	}
	return e
}

// expectStreamEnd fails unless the broker has finished its side of s.
func expectStreamEnd(t *testing.T, ctx context.Context, s *brokertest.RawStream) {
	t.Helper()
	h, payload, err := s.ReadFrame(ctx)
	if !errors.Is(err, io.EOF) {
		if err == nil {
			msg, _ := wire.DecodeMessage(payload)
			t.Fatalf("stream still open: got a frame (flags %#04x, %T %+v), want io.EOF", h.Flags, msg, msg)
		}
		t.Fatalf("stream end: err = %v, want io.EOF", err)
	}
}

// expectRefused fails unless the broker refuses the handshake: the control
// stream carries the typed error with code, then the connection closes with
// CloseProtocol.
func expectRefused(t *testing.T, ctx context.Context, rc *brokertest.RawConn, ctrl *brokertest.RawStream, code wire.Code) {
	t.Helper()
	msg, err := ctrl.ReadMessage(ctx)
	switch {
	case err == nil:
		if e, ok := msg.(*wire.ErrorMsg); !ok || e.Code != code {
			t.Fatalf("refused handshake answered %T %+v, want ErrorMsg with code %s", msg, msg, code)
		}
	default:
		t.Fatalf("refused handshake: no typed error before the close: %v", err)
	}
	got, isApp, cerr := rc.AppCloseCode(ctx)
	if !isApp || got != transport.CloseProtocol {
		t.Fatalf("connection closed with %v, want application error %d (CloseProtocol)", cerr, transport.CloseProtocol)
	}
}

func isTimeout(err error) bool {
	var ne interface{ Timeout() bool }
	return errors.As(err, &ne) && ne.Timeout()
}

func TestBadInput(t *testing.T) {
	cfg := badInputConfig(t)
	b := brokertest.Start(t, cfg)
	h := newBystander(t, b, cfg)
	validScope := wire.Scope{Tenant: "default", Namespace: "default", Stream: "bad-input"}

	// run runs one case on a fresh raw connection, then checks the bystander.
	run := func(name string, f func(t *testing.T, ctx context.Context, rc *brokertest.RawConn)) {
		t.Run(name, func(t *testing.T) {
			ctx := testCtx(t, 10*time.Second)
			f(t, ctx, brokertest.DialRaw(t, b, cfg))
			h.check(t, "after "+name)
		})
	}
	// authed opens a handshaken connection's new stream for a case.
	authed := func(t *testing.T, ctx context.Context, rc *brokertest.RawConn) (ctrl, st *brokertest.RawStream) {
		t.Helper()
		ctrl, _ = rc.MustHandshake(t, ctx)
		st, err := rc.OpenStream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return ctrl, st
	}
	// subscribeWorks proves a stream still serves requests.
	subscribeWorks := func(t *testing.T, ctx context.Context, s *brokertest.RawStream, id uint64) {
		t.Helper()
		if err := s.Send(&wire.Subscribe{RequestID: id, Tenant: "default", Namespace: "default", Stream: "bad-input"}); err != nil {
			t.Fatal(err)
		}
		msg, err := s.ReadMessage(ctx)
		if sub, ok := msg.(*wire.Subscribed); err != nil || !ok || sub.RequestID != id {
			t.Fatalf("subscribe after bad input answered %T %+v %v, want Subscribed{request %d}", msg, msg, err, id)
		}
	}
	// publishWorks proves a stream still takes acked publishes.
	publishWorks := func(t *testing.T, ctx context.Context, s *brokertest.RawStream, id uint64) {
		t.Helper()
		if err := s.Write(wire.AppendPublish(nil, &wire.Publish{RequestID: id, Ack: wire.AckPerBatch, Scope: validScope, Payloads: [][]byte{[]byte("ok")}})); err != nil {
			t.Fatal(err)
		}
		if a := readAck(t, ctx, s); a.RequestID != id || a.Err != nil {
			t.Fatalf("publish after bad input acked %+v (err %v), want request %d ok", a, a.Err, id)
		}
	}

	// Before the handshake.

	run("pre-auth/bad-magic", func(t *testing.T, ctx context.Context, rc *brokertest.RawConn) {
		ctrl, err := rc.OpenStream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := ctrl.Write([]byte("GET / HTTP/1.1\r\nHost: felix\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		expectRefused(t, ctx, rc, ctrl, wire.CodeInvalidRequest)
	})
	run("pre-auth/bad-version", func(t *testing.T, ctx context.Context, rc *brokertest.RawConn) {
		ctrl, _ := rc.OpenStream(ctx)
		hdr := rawHeader(0, 4)
		binary.BigEndian.PutUint16(hdr[4:], 2)
		if err := ctrl.Write(append(hdr, 1, 2, 3, 4)); err != nil {
			t.Fatal(err)
		}
		expectRefused(t, ctx, rc, ctrl, wire.CodeInvalidRequest)
	})
	run("pre-auth/unknown-flags", func(t *testing.T, ctx context.Context, rc *brokertest.RawConn) {
		ctrl, _ := rc.OpenStream(ctx)
		if err := ctrl.Write(append(rawHeader(0x0400, 1), 0)); err != nil {
			t.Fatal(err)
		}
		expectRefused(t, ctx, rc, ctrl, wire.CodeInvalidRequest)
	})
	run("pre-auth/frame-over-64KiB", func(t *testing.T, ctx context.Context, rc *brokertest.RawConn) {
		ctrl, _ := rc.OpenStream(ctx)
		// Only the header: the broker must refuse on the length alone.
		if err := ctrl.Write(rawHeader(0, uint32(cfg.PreAuthMaxFrameBytes)+1)); err != nil {
			t.Fatal(err)
		}
		expectRefused(t, ctx, rc, ctrl, wire.CodeInvalidRequest)
	})
	run("pre-auth/first-frame-subscribe", func(t *testing.T, ctx context.Context, rc *brokertest.RawConn) {
		ctrl, _ := rc.OpenStream(ctx)
		if err := ctrl.Send(&wire.Subscribe{RequestID: 1, Tenant: "default", Namespace: "default", Stream: "x"}); err != nil {
			t.Fatal(err)
		}
		expectRefused(t, ctx, rc, ctrl, wire.CodeUnauthenticated)
	})
	run("pre-auth/first-frame-publish", func(t *testing.T, ctx context.Context, rc *brokertest.RawConn) {
		ctrl, _ := rc.OpenStream(ctx)
		if err := ctrl.Write(wire.AppendPublish(nil, &wire.Publish{Scope: validScope, Payloads: [][]byte{[]byte("x")}})); err != nil {
			t.Fatal(err)
		}
		expectRefused(t, ctx, rc, ctrl, wire.CodeUnauthenticated)
	})
	run("pre-auth/unknown-message", func(t *testing.T, ctx context.Context, rc *brokertest.RawConn) {
		ctrl, _ := rc.OpenStream(ctx)
		if err := ctrl.Write(rawEnvelope(t, "hello", mustMarshal(t, map[string]any{}))); err != nil {
			t.Fatal(err)
		}
		// Not decodable as a message: invalid_request, as after the
		// handshake.
		expectRefused(t, ctx, rc, ctrl, wire.CodeInvalidRequest)
	})
	run("pre-auth/invalid-tenant", func(t *testing.T, ctx context.Context, rc *brokertest.RawConn) {
		ctrl, _, err := rc.Handshake(ctx, "a/b")
		if ctrl == nil {
			t.Fatalf("handshake: %v", err)
		}
		got, isApp, cerr := rc.AppCloseCode(ctx)
		if !isApp || got != transport.CloseProtocol {
			t.Fatalf("connection closed with %v, want CloseProtocol", cerr)
		}
	})

	// The Go client surfaces a refusal as the typed error.
	t.Run("pre-auth/client-invalid-tenant", func(t *testing.T) {
		ctx := testCtx(t, 10*time.Second)
		for _, tenant := range []string{"a/b", strings.Repeat("t", wire.MaxNameLen+1), "ténant"} {
			c, err := client.Dial(ctx, b.Addr().String(), client.Options{Tenant: tenant, CAFile: filepath.Join(cfg.DataDir, quicconf.CertFile)})
			if err == nil {
				_ = c.Close(ctx)
				t.Fatalf("Dial with tenant %q succeeded", tenant)
			}
			if !errors.Is(err, wire.ErrInvalidRequest) {
				t.Errorf("Dial with tenant %q: err = %v, want invalid_request", tenant, err)
			}
		}
		h.check(t, "after refused clients")
	})

	// Silence: closed with CloseAuthTimeout once the auth timeout passes.
	authTimeout := func(t *testing.T, ctx context.Context, rc *brokertest.RawConn, start time.Time) {
		t.Helper()
		got, isApp, err := rc.AppCloseCode(ctx)
		if !isApp || got != transport.CloseAuthTimeout {
			t.Fatalf("connection closed with %v, want application error %d (CloseAuthTimeout)", err, transport.CloseAuthTimeout)
		}
		if el := time.Since(start); el < cfg.AuthTimeout {
			t.Fatalf("closed after %s, before the %s auth timeout", el, cfg.AuthTimeout)
		}
	}
	run("silent/connect-only", func(t *testing.T, ctx context.Context, rc *brokertest.RawConn) {
		authTimeout(t, ctx, rc, time.Now())
	})
	run("silent/open-control-stream", func(t *testing.T, ctx context.Context, rc *brokertest.RawConn) {
		start := time.Now()
		if _, err := rc.OpenStream(ctx); err != nil {
			t.Fatal(err)
		}
		authTimeout(t, ctx, rc, start)
	})
	// QUIC announces a stream only with its first bytes, so the broker sees
	// this control stream, then waits for the rest of the header in vain.
	run("silent/partial-header", func(t *testing.T, ctx context.Context, rc *brokertest.RawConn) {
		start := time.Now()
		ctrl, _ := rc.OpenStream(ctx)
		if err := ctrl.Write(rawHeader(0, 10)[:5]); err != nil {
			t.Fatal(err)
		}
		authTimeout(t, ctx, rc, start)
	})
	run("silent/partial-auth", func(t *testing.T, ctx context.Context, rc *brokertest.RawConn) {
		start := time.Now()
		ctrl, _ := rc.OpenStream(ctx)
		auth, _ := wire.AppendMessage(nil, &wire.Auth{Tenant: "default"})
		if err := ctrl.Write(auth[:len(auth)-2]); err != nil {
			t.Fatal(err)
		}
		authTimeout(t, ctx, rc, start)
	})

	// After the handshake: framing errors end the stream (its frame
	// boundary is lost) with a typed error; the connection lives on.

	framingError := func(name string, frame func() []byte, onCtrl bool) {
		run("framing/"+name, func(t *testing.T, ctx context.Context, rc *brokertest.RawConn) {
			ctrl, st := authed(t, ctx, rc)
			target := st
			if onCtrl {
				target = ctrl
			}
			if err := target.Write(frame()); err != nil {
				t.Fatal(err)
			}
			expectErrorMsg(t, ctx, target, 0, wire.CodeInvalidRequest)
			expectStreamEnd(t, ctx, target)
			// The connection still serves: a new stream and, unless it
			// was the one that failed, the control stream.
			other, err := rc.OpenStream(ctx)
			if err != nil {
				t.Fatal(err)
			}
			publishWorks(t, ctx, other, 9)
			subscribeWorks(t, ctx, other, 10)
			if !onCtrl {
				subscribeWorks(t, ctx, ctrl, 11)
			}
		})
	}
	for _, onCtrl := range []bool{false, true} {
		where := "stream"
		if onCtrl {
			where = "control"
		}
		framingError("bad-magic/"+where, func() []byte { return []byte("this is not a felix frame at all") }, onCtrl)
		framingError("unknown-flags/"+where, func() []byte { return append(rawHeader(wire.FlagPublishBatch|0x8000, 1), 0) }, onCtrl)
		framingError("over-max-frame-bytes/"+where, func() []byte {
			return rawHeader(wire.FlagPublishBatch, uint32(cfg.MaxFrameBytes)+1)
		}, onCtrl)
		framingError("huge-length/"+where, func() []byte { return rawHeader(0, 0xFFFFFFFF) }, onCtrl)
	}
	// A frame over the pre-auth cap but under max_frame_bytes is fine
	// once authenticated.
	run("framing/between-caps-ok", func(t *testing.T, ctx context.Context, rc *brokertest.RawConn) {
		_, st := authed(t, ctx, rc)
		big := bytes.Repeat([]byte("x"), cfg.PreAuthMaxFrameBytes+1024)
		if err := st.Write(wire.AppendPublish(nil, &wire.Publish{RequestID: 1, Ack: wire.AckPerBatch, Scope: validScope, Payloads: [][]byte{big}})); err != nil {
			t.Fatal(err)
		}
		if a := readAck(t, ctx, st); a.RequestID != 1 || a.Err != nil {
			t.Fatalf("%d-byte publish acked %+v (err %v), want ok", len(big), a, a.Err)
		}
	})

	// Malformed publishes end their stream; other streams are untouched.

	valid := func() []byte {
		return wire.AppendPublish(nil, &wire.Publish{RequestID: 5, Ack: wire.AckPerMessage, Scope: validScope, Payloads: [][]byte{[]byte("one"), []byte("two")}})
	}
	truncate := func(frame []byte, cut int) []byte {
		out := append([]byte(nil), frame[:len(frame)-cut]...)
		binary.BigEndian.PutUint32(out[8:], uint32(len(out)-wire.HeaderLen))
		return out
	}
	// A second Auth is a re-authentication: one with no token, or for
	// another tenant, is refused, and the connection keeps its rights.
	for _, tc := range []struct {
		name string
		auth *wire.Auth
		want wire.Code
	}{
		{"reauth-no-token", &wire.Auth{Tenant: "default"}, wire.CodeUnauthenticated},
		{"reauth-garbage-token", &wire.Auth{Tenant: "default", Token: "not.a.jwt"}, wire.CodeUnauthenticated},
		{"reauth-other-tenant", &wire.Auth{Tenant: "other"}, wire.CodeInvalidRequest},
	} {
		run("control/"+tc.name, func(t *testing.T, ctx context.Context, rc *brokertest.RawConn) {
			ctrl, _ := rc.MustHandshake(t, ctx)
			f, _ := wire.AppendMessage(nil, tc.auth)
			if err := ctrl.Write(f); err != nil {
				t.Fatal(err)
			}
			expectErrorMsg(t, ctx, ctrl, 0, tc.want)
			subscribeWorks(t, ctx, ctrl, 4)
		})
	}
	for _, tc := range []struct {
		name  string
		frame func() []byte
	}{
		{"truncated-body", func() []byte { return truncate(valid(), 2) }},
		{"truncated-to-scope", func() []byte { return truncate(valid(), len(valid())-wire.HeaderLen-12) }},
		{"empty-payload", func() []byte { return rawHeader(wire.FlagPublishBatch, 0) }},
		{"trailing-bytes", func() []byte {
			f := append(valid(), 0xAA)
			binary.BigEndian.PutUint32(f[8:], uint32(len(f)-wire.HeaderLen))
			return f
		}},
		{"unknown-ack-mode", func() []byte {
			f := valid()
			f[wire.HeaderLen+8] = 7
			return f
		}},
		{"count-lies", func() []byte {
			f := wire.AppendPublish(nil, &wire.Publish{Scope: validScope, Payloads: [][]byte{[]byte("x")}})
			binary.BigEndian.PutUint32(f[len(f)-4-1-4:], 0xFFFFFFFF) // the u32 count
			return f
		}},
		{"empty-batch", func() []byte { return wire.AppendPublish(nil, &wire.Publish{Scope: validScope}) }},
		{"publish-and-event-flags", func() []byte {
			f := valid()
			binary.BigEndian.PutUint16(f[6:], wire.FlagPublishBatch|wire.FlagPublishAcked|wire.FlagEventBatch)
			return f
		}},
	} {
		run("malformed-publish/"+tc.name, func(t *testing.T, ctx context.Context, rc *brokertest.RawConn) {
			ctrl, st := authed(t, ctx, rc)
			publishWorks(t, ctx, st, 1)
			if err := st.Write(tc.frame()); err != nil {
				t.Fatal(err)
			}
			expectErrorMsg(t, ctx, st, 0, wire.CodeInvalidRequest)
			expectStreamEnd(t, ctx, st)
			other, err := rc.OpenStream(ctx)
			if err != nil {
				t.Fatal(err)
			}
			publishWorks(t, ctx, other, 2)
			subscribeWorks(t, ctx, ctrl, 3)
		})
	}
	// The client ends its stream inside a frame.
	run("malformed-publish/stream-ends-mid-frame", func(t *testing.T, ctx context.Context, rc *brokertest.RawConn) {
		ctrl, st := authed(t, ctx, rc)
		f := valid()
		if err := st.Write(f[:len(f)-3]); err != nil {
			t.Fatal(err)
		}
		if err := st.St.Close(); err != nil {
			t.Fatal(err)
		}
		expectErrorMsg(t, ctx, st, 0, wire.CodeInvalidRequest)
		expectStreamEnd(t, ctx, st)
		subscribeWorks(t, ctx, ctrl, 3)
	})

	// Requests that parse but are wrong get a typed error and the stream
	// keeps going.

	run("control/unknown-message-type", func(t *testing.T, ctx context.Context, rc *brokertest.RawConn) {
		ctrl, _ := rc.MustHandshake(t, ctx)
		if err := ctrl.Write(rawEnvelope(t, "frobnicate", mustMarshal(t, map[string]any{"request_id": 3}))); err != nil {
			t.Fatal(err)
		}
		expectErrorMsg(t, ctx, ctrl, 0, wire.CodeInvalidRequest)
		subscribeWorks(t, ctx, ctrl, 4)
	})
	for _, tc := range []struct {
		name  string
		frame func(t *testing.T) []byte
	}{
		{"subscribe-body-string", func(t *testing.T) []byte { return rawEnvelope(t, "subscribe", mustMarshal(t, "nonsense")) }},
		{"subscribe-body-wrong-types", func(t *testing.T) []byte {
			return rawEnvelope(t, "subscribe", mustMarshal(t, map[string]any{"request_id": "seven", "stream": 12}))
		}},
		{"subscribe-body-invalid-msgpack", func(t *testing.T) []byte { return rawEnvelope(t, "subscribe", []byte{0xc1}) }},
		{"subscribe-body-truncated", func(t *testing.T) []byte {
			body := mustMarshal(t, map[string]any{"request_id": 1, "tenant": "default"})
			return rawEnvelope(t, "subscribe", body[:len(body)-3])
		}},
		{"envelope-not-array", func(t *testing.T) []byte {
			p := mustMarshal(t, map[string]any{"type": "subscribe"})
			return append(rawHeader(0, uint32(len(p))), p...)
		}},
		{"payload-random-bytes", func(t *testing.T) []byte {
			p := []byte{0x92, 0xa9, 's', 'u', 'b', 's', 'c', 'r', 'i', 'b', 'e', 0xdf, 0xff, 0xff}
			return append(rawHeader(0, uint32(len(p))), p...)
		}},
		{"empty-control-payload", func(t *testing.T) []byte { return rawHeader(0, 0) }},
		{"server-message", func(t *testing.T) []byte {
			f, _ := wire.AppendMessage(nil, &wire.Subscribed{RequestID: 1, SubscriptionID: 1})
			return f
		}},
		{"event-batch-frame", func(t *testing.T) []byte { return wire.AppendEventBatch(nil, [][]byte{[]byte("x")}) }},
		{"ack-frame", func(t *testing.T) []byte { return wire.AppendAck(nil, &wire.Ack{RequestID: 1, Count: 1}) }},
	} {
		run("control/"+tc.name, func(t *testing.T, ctx context.Context, rc *brokertest.RawConn) {
			ctrl, _ := rc.MustHandshake(t, ctx)
			if err := ctrl.Write(tc.frame(t)); err != nil {
				t.Fatal(err)
			}
			expectErrorMsg(t, ctx, ctrl, 0, wire.CodeInvalidRequest)
			subscribeWorks(t, ctx, ctrl, 4)
		})
	}

	run("control/unsubscribe-unknown", func(t *testing.T, ctx context.Context, rc *brokertest.RawConn) {
		ctrl, _ := rc.MustHandshake(t, ctx)
		for i, id := range []uint64{0, 424242, ^uint64(0)} {
			if err := ctrl.Send(&wire.Unsubscribe{RequestID: uint64(20 + i), SubscriptionID: id}); err != nil {
				t.Fatal(err)
			}
			expectErrorMsg(t, ctx, ctrl, uint64(20+i), wire.CodeNotFound)
		}
		subscribeWorks(t, ctx, ctrl, 30)
	})
	// Another connection's subscription is not ours to end.
	run("control/unsubscribe-foreign", func(t *testing.T, ctx context.Context, rc *brokertest.RawConn) {
		other := brokertest.DialRaw(t, b, cfg)
		octrl, _ := other.MustHandshake(t, ctx)
		subscribeWorks(t, ctx, octrl, 1)
		// Its id is the newest: learn it from our own subscription.
		ctrl, _ := rc.MustHandshake(t, ctx)
		if err := ctrl.Send(&wire.Subscribe{RequestID: 2, Tenant: "default", Namespace: "default", Stream: "bad-input"}); err != nil {
			t.Fatal(err)
		}
		msg, err := ctrl.ReadMessage(ctx)
		mine, ok := msg.(*wire.Subscribed)
		if err != nil || !ok {
			t.Fatalf("subscribe: %T %v", msg, err)
		}
		if err := ctrl.Send(&wire.Unsubscribe{RequestID: 3, SubscriptionID: mine.SubscriptionID - 1}); err != nil {
			t.Fatal(err)
		}
		expectErrorMsg(t, ctx, ctrl, 3, wire.CodeNotFound)
	})

	// Invalid names, in every request that carries one.
	long := strings.Repeat("a", wire.MaxNameLen+1)
	for _, sc := range []struct {
		name  string
		scope wire.Scope
	}{
		{"empty-tenant", wire.Scope{Tenant: "", Namespace: "default", Stream: "s"}},
		{"empty-namespace", wire.Scope{Tenant: "default", Namespace: "", Stream: "s"}},
		{"empty-stream", wire.Scope{Tenant: "default", Namespace: "default", Stream: ""}},
		{"long-tenant", wire.Scope{Tenant: long, Namespace: "default", Stream: "s"}},
		{"long-namespace", wire.Scope{Tenant: "default", Namespace: long, Stream: "s"}},
		{"long-stream", wire.Scope{Tenant: "default", Namespace: "default", Stream: long}},
		{"slash", wire.Scope{Tenant: "default", Namespace: "default", Stream: "a/b"}},
		{"unicode", wire.Scope{Tenant: "default", Namespace: "naméspace", Stream: "s"}},
		{"emoji", wire.Scope{Tenant: "default", Namespace: "default", Stream: "\U0001F600"}},
		{"dot-dot", wire.Scope{Tenant: "..", Namespace: "default", Stream: "s"}},
		{"colon", wire.Scope{Tenant: "default", Namespace: "default", Stream: "a:b"}},
		{"nul", wire.Scope{Tenant: "default", Namespace: "default", Stream: "a\x00b"}},
	} {
		run("names/"+sc.name, func(t *testing.T, ctx context.Context, rc *brokertest.RawConn) {
			ctrl, st := authed(t, ctx, rc)
			s := sc.scope
			if err := ctrl.Send(&wire.Subscribe{RequestID: 7, Tenant: s.Tenant, Namespace: s.Namespace, Stream: s.Stream}); err != nil {
				t.Fatal(err)
			}
			expectErrorMsg(t, ctx, ctrl, 7, wire.CodeInvalidRequest)

			var out []byte
			out = wire.AppendPublish(out, &wire.Publish{RequestID: 8, Ack: wire.AckPerMessage, Scope: s, Payloads: [][]byte{[]byte("a"), []byte("b")}})
			out = wire.AppendPublish(out, &wire.Publish{RequestID: 9, Ack: wire.AckPerBatch, Scope: s, Payloads: [][]byte{[]byte("a")}})
			out = wire.AppendPublish(out, &wire.Publish{Scope: s, Payloads: [][]byte{[]byte("a")}})
			if err := st.Write(out); err != nil {
				t.Fatal(err)
			}
			for _, id := range []uint64{8, 9} {
				if a := readAck(t, ctx, st); a.RequestID != id || a.Err == nil || a.Err.Code != wire.CodeInvalidRequest {
					t.Fatalf("publish to %q acked %+v (err %v), want request %d invalid_request", s, a, a.Err, id)
				}
			}
			expectErrorMsg(t, ctx, st, 0, wire.CodeInvalidRequest) // the fire-and-forget one
			publishWorks(t, ctx, st, 10)
			subscribeWorks(t, ctx, ctrl, 11)
		})
	}
	// And through the client, for the names it can express.
	t.Run("names/client", func(t *testing.T) {
		ctx := testCtx(t, 10*time.Second)
		c := brokertest.Dial(t, b, cfg)
		for _, st := range []client.Stream{
			{Name: ""}, {Name: long}, {Name: "a/b"}, {Name: "ünïcode"},
			{Tenant: "a/b", Name: "s"}, {Namespace: long, Name: "s"}, {Namespace: "..", Name: "s"},
		} {
			if _, err := c.Subscribe(ctx, st, client.SubscribeOptions{}); !errors.Is(err, wire.ErrInvalidRequest) {
				t.Errorf("subscribe %+v: err = %v, want invalid_request", st, err)
			}
			if err := c.Publish(ctx, st, []byte("x"), client.PublishOptions{}); !errors.Is(err, wire.ErrInvalidRequest) {
				t.Errorf("publish %+v: err = %v, want invalid_request", st, err)
			}
		}
		if err := c.Publish(ctx, client.Stream{Name: "fine"}, []byte("x"), client.PublishOptions{}); err != nil {
			t.Fatalf("valid publish after invalid ones: %v", err)
		}
		h.check(t, "after invalid names through the client")
	})
}

// TestFrameCapBeforeAllocation: a header claiming a frame far above the cap
// is refused from the header alone, at a small configured cap.
func TestFrameCapBeforeAllocation(t *testing.T) {
	cfg := brokertest.Config(t)
	cfg.MaxFrameBytes = 64 << 10
	cfg.PreAuthMaxFrameBytes = 64 << 10
	b := brokertest.Start(t, cfg)
	h := newBystander(t, b, cfg)
	ctx := testCtx(t, 10*time.Second)
	for _, claim := range []uint32{64<<10 + 1, 1 << 20, 0xFFFFFFFF} {
		rc := brokertest.DialRaw(t, b, cfg)
		ctrl, _ := rc.MustHandshake(t, ctx)
		if err := ctrl.Write(rawHeader(wire.FlagPublishBatch, claim)); err != nil {
			t.Fatal(err)
		}
		e := expectErrorMsg(t, ctx, ctrl, 0, wire.CodeInvalidRequest)
		if !strings.Contains(e.Message, "too large") {
			t.Errorf("claim %d: error %q does not say the frame is too large", claim, e.Message)
		}
		expectStreamEnd(t, ctx, ctrl)
		h.check(t, fmt.Sprintf("after a %d-byte claim", claim))
	}
	// A client that sends exactly the cap is served.
	c := brokertest.Dial(t, b, cfg)
	if err := c.Publish(ctx, client.Stream{Name: "bystander"}, bytes.Repeat([]byte("x"), 60<<10), client.PublishOptions{}); err != nil {
		t.Fatalf("publish under the cap: %v", err)
	}
	expectNextLen(t, ctx, h.sub, 60<<10)
	h.check(t, "at the end")
}

func expectNextLen(t *testing.T, ctx context.Context, sub *client.Subscription, n int) {
	t.Helper()
	ev, err := sub.Next(ctx)
	if err != nil || len(ev.Payload) != n {
		t.Fatalf("next event: %d bytes, err %v; want %d bytes", len(ev.Payload), err, n)
	}
}

// TestStreamResetByClient: a client that resets its publish stream or its
// event stream ends only that stream.
func TestStreamResetByClient(t *testing.T) {
	cfg := brokertest.Config(t)
	b := brokertest.Start(t, cfg)
	h := newBystander(t, b, cfg)
	ctx := testCtx(t, 10*time.Second)
	rc := brokertest.DialRaw(t, b, cfg)
	ctrl, _ := rc.MustHandshake(t, ctx)

	st, err := rc.OpenStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f := wire.AppendPublish(nil, &wire.Publish{RequestID: 1, Ack: wire.AckPerBatch, Scope: wire.Scope{Tenant: "default", Namespace: "default", Stream: "bystander"}, Payloads: [][]byte{[]byte("half")}})
	if err := st.Write(f[:len(f)/2]); err != nil {
		t.Fatal(err)
	}
	st.St.CancelWrite(quic.StreamErrorCode(7))
	st.St.CancelRead(quic.StreamErrorCode(7))

	if err := ctrl.Send(&wire.Subscribe{RequestID: 1, Tenant: "default", Namespace: "default", Stream: "reset"}); err != nil {
		t.Fatal(err)
	}
	if msg, err := ctrl.ReadMessage(ctx); err != nil {
		t.Fatalf("subscribe: %v", err)
	} else if _, ok := msg.(*wire.Subscribed); !ok {
		t.Fatalf("subscribe answered %T %+v", msg, msg)
	}
	ev, _, err := rc.AcceptEventStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ev.St.CancelRead(quic.StreamErrorCode(7))
	h.check(t, "after resets")
	// The connection still serves.
	if err := ctrl.Send(&wire.Subscribe{RequestID: 2, Tenant: "default", Namespace: "default", Stream: "reset"}); err != nil {
		t.Fatal(err)
	}
	if msg, err := ctrl.ReadMessage(ctx); err != nil {
		t.Fatalf("subscribe after resets: %v", err)
	} else if s, ok := msg.(*wire.Subscribed); !ok || s.RequestID != 2 {
		t.Fatalf("subscribe after resets answered %T %+v", msg, msg)
	}
}

// TestOversizePublish: the client refuses a publish whose frame would be over
// the broker's max_frame_bytes with a typed error, instead of sending it and
// losing its publish stream; a frame of exactly the cap goes through.
func TestOversizePublish(t *testing.T) {
	cfg := brokertest.Config(t)
	cfg.MaxFrameBytes = 64 << 10
	b := brokertest.Start(t, cfg)
	ctx := testCtx(t, 10*time.Second)
	c := brokertest.Dial(t, b, cfg)
	subc := brokertest.Dial(t, b, cfg)
	st := client.Stream{Name: "big"}
	sub, err := subc.Subscribe(ctx, st, client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	scope := wire.Scope{Tenant: "default", Namespace: "default", Stream: "big"}
	overhead := len(wire.AppendPublish(nil, &wire.Publish{RequestID: 1, Ack: wire.AckPerMessage, Scope: scope, Payloads: [][]byte{{}}})) - wire.HeaderLen
	exact := cfg.MaxFrameBytes - overhead

	for _, tc := range []struct {
		name string
		pub  func() error
	}{
		{"acked", func() error {
			return c.Publish(ctx, st, make([]byte, exact+1), client.PublishOptions{})
		}},
		{"fire-and-forget", func() error {
			return c.Publish(ctx, st, make([]byte, exact+10), client.PublishOptions{FireAndForget: true})
		}},
		{"batch", func() error {
			return c.PublishBatch(ctx, st, [][]byte{make([]byte, exact/2), make([]byte, exact/2)}, client.PublishOptions{})
		}},
	} {
		if err := tc.pub(); !errors.Is(err, wire.ErrInvalidRequest) {
			t.Errorf("%s: oversize publish: err = %v, want invalid_request", tc.name, err)
		}
		// The client's publish stream survives.
		if err := c.Publish(ctx, st, []byte("small"), client.PublishOptions{}); err != nil {
			t.Fatalf("%s: publish after the oversize one: %v", tc.name, err)
		}
		expectNext(t, ctx, "subscriber", sub, "small")
	}
	if err := c.Publish(ctx, st, bytes.Repeat([]byte("x"), exact), client.PublishOptions{}); err != nil {
		t.Fatalf("publish of exactly max_frame_bytes: %v", err)
	}
	expectNextLen(t, ctx, sub, exact)
	if err := c.Publish(ctx, st, []byte("after"), client.PublishOptions{}); err != nil {
		t.Fatalf("publish after the exact one: %v", err)
	}
	expectNext(t, ctx, "subscriber", sub, "after")
}

// TestSubscribeBogusStart: an unknown start is refused for what it is, on
// any stream; on an in-memory stream it used to get an error about offsets
// needing a durable stream.
func TestSubscribeBogusStart(t *testing.T) {
	cfg := brokertest.Config(t)
	b := brokertest.Start(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rc := brokertest.DialRaw(t, b, cfg)
	ctrl, _ := rc.MustHandshake(t, ctx)
	if err := ctrl.Send(&wire.Subscribe{RequestID: 1, Tenant: "default", Namespace: "default", Stream: "mem", Start: "bogus"}); err != nil {
		t.Fatal(err)
	}
	e := expectErrorMsg(t, ctx, ctrl, 1, wire.CodeInvalidRequest)
	if !strings.Contains(e.Message, `start "bogus" is not latest, earliest or offset`) {
		t.Fatalf("start bogus refused with %q, want it to name the start", e.Message)
	}
}
