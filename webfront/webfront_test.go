package webfront_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/getfelix/felix-go/broker"
	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/config"
	"github.com/getfelix/felix-go/webfront"
	"github.com/getfelix/felix-go/wire"
)

func startBroker(t *testing.T) (*broker.Broker, config.Config) {
	cfg := brokertest.Config(t)
	cfg.BrowserListen = "127.0.0.1:0"
	cfg.Admin = "127.0.0.1:0"
	cfg.BrowserAllowedOrigins = "https://app.example.com"
	cfg.MaxFrameBytes = 1 << 20 // the oversized-frame test writes one more byte than this
	return brokertest.Start(t, cfg), cfg
}

// TestSubscribePublishRead: a browser connection subscribed from earliest
// to a durable stream gets every record the Go client publishes, in order,
// with offsets; its own acked publishes reach a Go subscriber with the
// offsets their acks named; a read returns the range.
func TestSubscribePublishRead(t *testing.T) {
	b, cfg := startBroker(t)
	ctx := brokertest.Context(t, 30*time.Second)
	gc := brokertest.Dial(t, b, cfg)
	st := client.Stream{Name: "orders"}
	if _, err := gc.CreateStream(ctx, st, client.StreamConfig{Durable: true}); err != nil {
		t.Fatal(err)
	}
	ws, err := dialWS(t, ctx, b, "https://app.example.com")
	if err != nil {
		t.Fatal(err)
	}
	ws.mustCall(ctx, &webfront.Request{Op: webfront.OpAuth, Tenant: "default", Token: brokertest.Token(t, cfg, "default")}, nil)
	var events []*webfront.Events
	sub := ws.mustCall(ctx, &webfront.Request{Op: webfront.OpSubscribe, Namespace: "default", Stream: "orders", Start: "earliest"}, &events)
	if !sub.Durable || sub.Sub == 0 {
		t.Fatalf("subscribe reply = %+v, want a durable subscription", sub)
	}
	const n = 200
	for i := range n {
		if err := gc.Publish(ctx, st, fmt.Appendf(nil, "m%d", i), client.PublishOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for len(got) < n {
		for _, ev := range events {
			if ev.Sub != sub.Sub || !ev.Offsets {
				t.Fatalf("events %+v: want subscription %d with offsets", ev, sub.Sub)
			}
			for i, p := range ev.Payloads {
				if off := ev.Base + uint64(i); off != uint64(len(got)) {
					t.Fatalf("record %q at offset %d, want %d", p, off, len(got))
				}
				got = append(got, string(p))
			}
		}
		events = events[:0]
		if len(got) < n {
			_, ev, err := ws.next(ctx)
			if err != nil {
				t.Fatalf("after %d records: %v", len(got), err)
			}
			if ev != nil {
				events = append(events, ev)
			}
		}
	}
	for i, p := range got {
		if p != fmt.Sprintf("m%d", i) {
			t.Fatalf("record %d = %q, want m%d", i, p, i)
		}
	}

	gsub, err := gc.Subscribe(ctx, st, client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pub := ws.mustCall(ctx, &webfront.Request{Op: webfront.OpPublish, Namespace: "default", Stream: "orders", Payloads: [][]byte{[]byte("from-browser")}}, nil)
	if !pub.Durable || pub.Offset != n {
		t.Fatalf("publish reply = %+v, want durable at offset %d", pub, n)
	}
	ev, err := gsub.Next(ctx)
	if err != nil || string(ev.Payload) != "from-browser" || ev.Offset != n {
		t.Fatalf("Go subscriber got %q at %d (%v), want from-browser at %d", ev.Payload, ev.Offset, err, n)
	}

	page := ws.mustCall(ctx, &webfront.Request{Op: webfront.OpRead, Namespace: "default", Stream: "orders", From: 10, Max: 5}, nil)
	if len(page.Records) != 5 || page.Records[0].Offset != 10 || string(page.Records[4].Value) != "m14" || page.Next != 15 {
		t.Fatalf("read from 10, max 5 = %+v, want m10..m14, next 15", page)
	}

	un := ws.call(ctx, &webfront.Request{Op: webfront.OpUnsubscribe, Sub: sub.Sub}, nil)
	if un.Error != nil {
		t.Fatalf("unsubscribe: %+v", *un.Error)
	}
}

// TestRefusals: a wrong token, a foreign origin, a first frame that is not
// auth and an oversized frame each end the connection with a status and a
// reason that say why.
func TestRefusals(t *testing.T) {
	b, cfg := startBroker(t)
	ctx := brokertest.Context(t, 30*time.Second)
	closedWith := func(ws *wsClient) websocket.CloseError {
		t.Helper()
		for {
			if _, _, err := ws.next(ctx); err != nil {
				var ce websocket.CloseError
				if !errors.As(err, &ce) {
					t.Fatalf("connection ended with %v, want a close frame", err)
				}
				return ce
			}
		}
	}

	t.Run("wrong token", func(t *testing.T) {
		ws, err := dialWS(t, ctx, b, "")
		if err != nil {
			t.Fatal(err)
		}
		rep := ws.call(ctx, &webfront.Request{Op: webfront.OpAuth, Tenant: "default", Token: "not-a-token"}, nil)
		if rep.Error == nil || rep.Error.Code != uint16(wire.CodeUnauthenticated) {
			t.Fatalf("auth with a bad token = %+v, want unauthenticated", rep)
		}
		if ce := closedWith(ws); ce.Code != websocket.StatusPolicyViolation || !strings.HasPrefix(ce.Reason, "unauthenticated") {
			t.Fatalf("close = %v, want 1008 unauthenticated", ce)
		}
	})
	t.Run("token of another tenant", func(t *testing.T) {
		ws, err := dialWS(t, ctx, b, "")
		if err != nil {
			t.Fatal(err)
		}
		rep := ws.call(ctx, &webfront.Request{Op: webfront.OpAuth, Tenant: "default", Token: brokertest.Token(t, cfg, "other")}, nil)
		if rep.Error == nil || rep.Error.Code != uint16(wire.CodeUnauthenticated) {
			t.Fatalf("auth as default with other's token = %+v, want unauthenticated", rep)
		}
	})
	t.Run("foreign origin", func(t *testing.T) {
		ws, err := dialWS(t, ctx, b, "https://evil.example.net")
		if err != nil {
			t.Fatal(err)
		}
		if ce := closedWith(ws); ce.Code != websocket.StatusPolicyViolation || !strings.Contains(ce.Reason, "origin https://evil.example.net is not in browser_allowed_origins") {
			t.Fatalf("close = %v, want 1008 naming the origin", ce)
		}
	})
	t.Run("admin page origin", func(t *testing.T) {
		ws, err := dialWS(t, ctx, b, "http://localhost:"+portOf(b.AdminAddr().String()))
		if err != nil {
			t.Fatal(err)
		}
		ws.mustCall(ctx, &webfront.Request{Op: webfront.OpAuth, Tenant: "default", Token: brokertest.Token(t, cfg, "default")}, nil)
	})
	t.Run("first frame not auth", func(t *testing.T) {
		ws, err := dialWS(t, ctx, b, "")
		if err != nil {
			t.Fatal(err)
		}
		ws.send(ctx, &webfront.Request{Op: webfront.OpSubscribe, Namespace: "default", Stream: "s"})
		if ce := closedWith(ws); ce.Code != websocket.StatusPolicyViolation || !strings.Contains(ce.Reason, "first frame must be auth") {
			t.Fatalf("close = %v, want 1008: the first frame must be auth", ce)
		}
	})
	t.Run("oversized before auth", func(t *testing.T) {
		ws, err := dialWS(t, ctx, b, "")
		if err != nil {
			t.Fatal(err)
		}
		big := make([]byte, cfg.PreAuthMaxFrameBytes+1)
		big[0] = webfront.KindControl
		_ = ws.ws.Write(ctx, websocket.MessageBinary, big)
		if ce := closedWith(ws); ce.Code != websocket.StatusMessageTooBig {
			t.Fatalf("close = %v, want 1009 (message too big)", ce)
		}
	})
	t.Run("oversized after auth", func(t *testing.T) {
		ws, err := dialWS(t, ctx, b, "")
		if err != nil {
			t.Fatal(err)
		}
		ws.mustCall(ctx, &webfront.Request{Op: webfront.OpAuth, Tenant: "default", Token: brokertest.Token(t, cfg, "default")}, nil)
		_, err = webfront.AppendRequest(nil, &webfront.Request{})
		if err != nil {
			t.Fatal(err)
		}
		big := make([]byte, cfg.MaxFrameBytes+1)
		big[0] = webfront.KindControl
		_ = ws.ws.Write(ctx, websocket.MessageBinary, big)
		if ce := closedWith(ws); ce.Code != websocket.StatusMessageTooBig {
			t.Fatalf("close = %v, want 1009 (message too big)", ce)
		}
	})
	t.Run("malformed frame after auth", func(t *testing.T) {
		ws, err := dialWS(t, ctx, b, "")
		if err != nil {
			t.Fatal(err)
		}
		ws.mustCall(ctx, &webfront.Request{Op: webfront.OpAuth, Tenant: "default", Token: brokertest.Token(t, cfg, "default")}, nil)
		if err := ws.ws.Write(ctx, websocket.MessageBinary, []byte{webfront.KindControl, 0xc1}); err != nil {
			t.Fatal(err)
		}
		rep, _, err := ws.next(ctx)
		if err != nil || rep.Error == nil || rep.Error.Code != uint16(wire.CodeInvalidRequest) {
			t.Fatalf("malformed frame answered %+v (%v), want invalid_request", rep, err)
		}
		// The connection still serves.
		ws.mustCall(ctx, &webfront.Request{Op: webfront.OpPublish, Namespace: "default", Stream: "s", Payloads: [][]byte{[]byte("x")}}, nil)
	})
}

func portOf(addr string) string { return addr[strings.LastIndexByte(addr, ':')+1:] }

// TestHistoryAfterReply: a subscription's history starts as soon as
// Subscribe returns, on a goroutine of the writer's; on one WebSocket the
// reply naming the subscription must still come first, or a browser drops
// events of an id it does not know yet.
func TestHistoryAfterReply(t *testing.T) {
	b, cfg := startBroker(t)
	ctx := brokertest.Context(t, 30*time.Second)
	gc := brokertest.Dial(t, b, cfg)
	st := client.Stream{Name: "history"}
	if _, err := gc.CreateStream(ctx, st, client.StreamConfig{Durable: true}); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if err := gc.Publish(ctx, st, fmt.Appendf(nil, "h%d", i), client.PublishOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ws, err := dialWS(t, ctx, b, "")
	if err != nil {
		t.Fatal(err)
	}
	ws.mustCall(ctx, &webfront.Request{Op: webfront.OpAuth, Tenant: "default", Token: brokertest.Token(t, cfg, "default")}, nil)
	for round := range 20 {
		var early []*webfront.Events
		sub := ws.mustCall(ctx, &webfront.Request{Op: webfront.OpSubscribe, Namespace: "default", Stream: "history", Start: "earliest"}, &early)
		for _, ev := range early {
			if ev.Sub == sub.Sub {
				t.Fatalf("round %d: events of subscription %d arrived before the reply that names it", round, sub.Sub)
			}
		}
		ws.send(ctx, &webfront.Request{Op: webfront.OpUnsubscribe, Sub: sub.Sub})
	}
}

// TestSlowBrowserSlowsNoOne: a browser that stops reading is a slow
// subscriber like any other: its own queue fills and drops under drop_new,
// while the publisher's acks and a Go subscriber of the same stream keep
// up with every record.
func TestSlowBrowserSlowsNoOne(t *testing.T) {
	cfg := brokertest.Config(t)
	cfg.BrowserListen = "127.0.0.1:0"
	cfg.SubscriberQueueCapacity = 64
	cfg.SubscriberEgressMaxBytes = 64 << 10 // the frozen connection's share fills soon
	b := brokertest.Start(t, cfg)
	ctx := brokertest.Context(t, 60*time.Second)
	gc := brokertest.Dial(t, b, cfg)
	st := client.Stream{Name: "fan"}

	frozen, err := dialWS(t, ctx, b, "")
	if err != nil {
		t.Fatal(err)
	}
	frozen.mustCall(ctx, &webfront.Request{Op: webfront.OpAuth, Tenant: "default", Token: brokertest.Token(t, cfg, "default")}, nil)
	frozen.mustCall(ctx, &webfront.Request{Op: webfront.OpSubscribe, Namespace: "default", Stream: "fan"}, nil)
	// From here nothing reads the frozen connection.

	fast, err := gc.Subscribe(ctx, st, client.SubscribeOptions{QueueCapacity: 4096})
	if err != nil {
		t.Fatal(err)
	}
	batch := make([][]byte, 16)
	for i := range batch {
		batch[i] = make([]byte, 1024)
	}
	// Far more than the socket buffers and the frozen share absorb: publish
	// until the frozen subscription's queue has dropped (at most 3000
	// batches, which the fast subscriber's queue holds whole).
	published := 0
	for ; published < 3000; published++ {
		if published%100 == 0 && published > 0 && brokertest.Value(t, b, "felix_sub_queue_dropped_total") > 0 {
			break
		}
		if err := gc.PublishBatch(ctx, st, batch, client.PublishOptions{}); err != nil {
			t.Fatalf("publish %d while a browser is frozen: %v", published, err)
		}
	}
	for n := range published * len(batch) {
		if _, err := fast.Next(ctx); err != nil {
			t.Fatalf("the Go subscriber after %d of %d events: %v", n, published*len(batch), err)
		}
	}
	if dropped := brokertest.Value(t, b, "felix_sub_queue_dropped_total"); dropped == 0 {
		t.Fatalf("the frozen browser's queue dropped nothing of %d batches; its subscription is not bounded", published)
	}
}

// TestConnectionLimit: browser connections count against the connection
// limits with felix/1's: past max_preauth_connections_per_ip a connection
// is closed at once saying limit_exceeded, and past max_connections_per_ip
// an authenticated one is refused its auth saying so.
func TestConnectionLimit(t *testing.T) {
	cfg := brokertest.Config(t)
	cfg.BrowserListen = "127.0.0.1:0"
	cfg.MaxConnectionsPerIP = 1
	cfg.MaxPreAuthConnectionsPerIP = 1
	b := brokertest.Start(t, cfg)
	ctx := brokertest.Context(t, 30*time.Second)
	wantLimit := func(what string, err error) {
		t.Helper()
		var ce websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != websocket.StatusPolicyViolation || !strings.HasPrefix(ce.Reason, "limit_exceeded: ") {
			t.Fatalf("%s ended with %v, want 1008 limit_exceeded", what, err)
		}
	}
	silent, err := dialWS(t, ctx, b, "")
	if err != nil {
		t.Fatal(err)
	}
	second, err := dialWS(t, ctx, b, "")
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = second.next(ctx)
	wantLimit("a second unauthenticated connection under max_preauth_connections_per_ip 1", err)
	silent.mustCall(ctx, &webfront.Request{Op: webfront.OpAuth, Tenant: "default", Token: brokertest.Token(t, cfg, "default")}, nil)
	third, err := dialWS(t, ctx, b, "")
	if err != nil {
		t.Fatal(err)
	}
	third.send(ctx, &webfront.Request{Op: webfront.OpAuth, Tenant: "default", Token: brokertest.Token(t, cfg, "default")})
	for err = nil; err == nil; {
		_, _, err = third.next(ctx) // the refusal's reply, then the close
	}
	wantLimit("a second authenticated connection under max_connections_per_ip 1", err)
}

// TestSilentAndExpired: a connection that sends no auth is closed at
// auth_timeout_ms saying so; a token that expires ends the connection's
// subscriptions with the token-expired code (0x11).
func TestSilentAndExpired(t *testing.T) {
	cfg := brokertest.Config(t)
	cfg.BrowserListen = "127.0.0.1:0"
	cfg.AuthTimeout = 500 * time.Millisecond
	b := brokertest.Start(t, cfg)
	ctx := brokertest.Context(t, 30*time.Second)

	silent, err := dialWS(t, ctx, b, "")
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = silent.next(ctx)
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.StatusPolicyViolation || !strings.Contains(ce.Reason, "no auth within auth_timeout_ms") {
		t.Fatalf("a silent connection ended with %v, want 1008 naming auth_timeout_ms", err)
	}

	ws, err := dialWS(t, ctx, b, "")
	if err != nil {
		t.Fatal(err)
	}
	ws.mustCall(ctx, &webfront.Request{Op: webfront.OpAuth, Tenant: "default", Token: brokertest.TokenFor(t, cfg, "default", 2*time.Second)}, nil)
	sub := ws.mustCall(ctx, &webfront.Request{Op: webfront.OpSubscribe, Namespace: "default", Stream: "expiring"}, nil)
	for {
		rep, _, err := ws.next(ctx)
		if err != nil {
			t.Fatalf("waiting for the subscription to end at the token's expiry: %v", err)
		}
		if rep != nil && rep.Op == webfront.OpEnded {
			if rep.Sub != sub.Sub || rep.Code != wire.StreamCodeUnauthenticated {
				t.Fatalf("ended = %+v, want subscription %d with code %#x", rep, sub.Sub, wire.StreamCodeUnauthenticated)
			}
			return
		}
	}
}

// TestResumeAfterRestart: after the broker restarts on the same data, a
// subscription from the offset after the last one seen gets what was
// published since, from history and live, and nothing before.
func TestResumeAfterRestart(t *testing.T) {
	cfg := brokertest.Config(t)
	cfg.BrowserListen = "127.0.0.1:0"
	b := brokertest.Start(t, cfg)
	ctx := brokertest.Context(t, 30*time.Second)
	st := client.Stream{Name: "resume"}
	gc := brokertest.Dial(t, b, cfg)
	if _, err := gc.CreateStream(ctx, st, client.StreamConfig{Durable: true}); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if err := gc.Publish(ctx, st, fmt.Appendf(nil, "before-%d", i), client.PublishOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := b.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	b = brokertest.Start(t, cfg)
	ws, err := dialWS(t, ctx, b, "")
	if err != nil {
		t.Fatal(err)
	}
	ws.mustCall(ctx, &webfront.Request{Op: webfront.OpAuth, Tenant: "default", Token: brokertest.Token(t, cfg, "default")}, nil)
	var events []*webfront.Events
	sub := ws.mustCall(ctx, &webfront.Request{Op: webfront.OpSubscribe, Namespace: "default", Stream: "resume", Start: "offset", Offset: 10}, &events)
	gc = brokertest.Dial(t, b, cfg)
	for i := range 5 {
		if err := gc.Publish(ctx, st, fmt.Appendf(nil, "after-%d", i), client.PublishOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var offsets []uint64
	for len(offsets) < 5 {
		_, ev, err := ws.next(ctx)
		if err != nil {
			t.Fatalf("after %v: %v", offsets, err)
		}
		if ev != nil && ev.Sub == sub.Sub {
			for i := range ev.Payloads {
				offsets = append(offsets, ev.Base+uint64(i))
			}
		}
	}
	if fmt.Sprint(offsets) != "[10 11 12 13 14]" {
		t.Fatalf("resumed at offset 10, got offsets %v, want [10 11 12 13 14]", offsets)
	}
}
