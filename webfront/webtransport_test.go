package webfront_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/getfelix/felix-go/broker"
	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/config"
	"github.com/getfelix/felix-go/webfront"
	"github.com/getfelix/felix-go/wire"
)

func startWTBroker(t *testing.T) (*broker.Broker, config.Config, []byte) {
	cfg := brokertest.Config(t)
	cfg.BrowserListen = "127.0.0.1:0"
	cfg.BrowserWebTransportListen = "127.0.0.1:0"
	cfg.Admin = "127.0.0.1:0"
	cfg.BrowserAllowedOrigins = "https://app.example.com"
	cfg.MaxFrameBytes = 1 << 20
	b := brokertest.Start(t, cfg)
	return b, cfg, webTransportHash(t, b)
}

// readRecords reads subscription sub's events until n records arrived,
// checking that they are at offsets from, from+1, ...
func readRecords(ctx context.Context, t *testing.T, wt *wtClient, sub uint64, from uint64, n int) []string {
	t.Helper()
	var got []string
	for len(got) < n {
		ev, err := wt.nextEvents(ctx, sub)
		if err != nil {
			t.Fatalf("after %d records: %v", len(got), err)
		}
		if ev.Sub != sub || !ev.Offsets {
			t.Fatalf("events %+v on subscription %d's stream: want its id, with offsets", ev, sub)
		}
		for i, p := range ev.Payloads {
			if off := ev.Base + uint64(i); off != from+uint64(len(got)) {
				t.Fatalf("record %q at offset %d, want %d", p, off, from+uint64(len(got)))
			}
			got = append(got, string(p))
		}
	}
	return got
}

// TestWebTransportSubscribePublishRead: over WebTransport, with the
// certificate trusted by the hash /ui/config gives, a session subscribed
// from earliest to a durable stream gets every record the Go client
// publishes, in order with offsets, on the subscription's own stream; its
// acked publish reaches a Go subscriber at the offset its ack named; a
// read returns the range; an unsubscribe finishes the stream, then says
// ended.
func TestWebTransportSubscribePublishRead(t *testing.T) {
	b, cfg, hash := startWTBroker(t)
	ctx := brokertest.Context(t, 30*time.Second)
	gc := brokertest.Dial(t, b, cfg)
	st := client.Stream{Name: "orders"}
	if _, err := gc.CreateStream(ctx, st, client.StreamConfig{Durable: true}); err != nil {
		t.Fatal(err)
	}
	wt, err := dialWT(t, ctx, b, "https://app.example.com", hash)
	if err != nil {
		t.Fatal(err)
	}
	wt.mustCall(ctx, &webfront.Request{Op: webfront.OpAuth, Tenant: "default", Token: brokertest.Token(t, cfg, "default")})
	sub := wt.mustCall(ctx, &webfront.Request{Op: webfront.OpSubscribe, Namespace: "default", Stream: "orders", Start: "earliest"})
	if !sub.Durable || sub.Sub == 0 {
		t.Fatalf("subscribe reply = %+v, want a durable subscription", sub)
	}
	const n = 200
	for i := range n {
		if err := gc.Publish(ctx, st, fmt.Appendf(nil, "m%d", i), client.PublishOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i, p := range readRecords(ctx, t, wt, sub.Sub, 0, n) {
		if p != fmt.Sprintf("m%d", i) {
			t.Fatalf("record %d = %q, want m%d", i, p, i)
		}
	}

	gsub, err := gc.Subscribe(ctx, st, client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pub := wt.mustCall(ctx, &webfront.Request{Op: webfront.OpPublish, Namespace: "default", Stream: "orders", Payloads: [][]byte{[]byte("from-browser")}})
	if !pub.Durable || pub.Offset != n {
		t.Fatalf("publish reply = %+v, want durable at offset %d", pub, n)
	}
	ev, err := gsub.Next(ctx)
	if err != nil || string(ev.Payload) != "from-browser" || ev.Offset != n {
		t.Fatalf("Go subscriber got %q at %d (%v), want from-browser at %d", ev.Payload, ev.Offset, err, n)
	}
	if got := readRecords(ctx, t, wt, sub.Sub, n, 1); got[0] != "from-browser" {
		t.Fatalf("the session's own publish came back as %q", got[0])
	}

	page := wt.mustCall(ctx, &webfront.Request{Op: webfront.OpRead, Namespace: "default", Stream: "orders", From: 10, Max: 5})
	if len(page.Records) != 5 || page.Records[0].Offset != 10 || string(page.Records[4].Value) != "m14" || page.Next != 15 {
		t.Fatalf("read from 10, max 5 = %+v, want m10..m14, next 15", page)
	}

	un := wt.call(ctx, &webfront.Request{Op: webfront.OpUnsubscribe, Sub: sub.Sub})
	if un.Error != nil {
		t.Fatalf("unsubscribe: %+v", *un.Error)
	}
	str, _ := wt.events(ctx, sub.Sub)
	if rest, err := io.ReadAll(str); err != nil || len(rest) != 0 {
		t.Fatalf("the events stream after unsubscribe: %d more bytes, %v; want it finished", len(rest), err)
	}
	if rep, err := wt.nextEnded(ctx); err != nil || rep.Sub != sub.Sub || rep.Code != 0 {
		t.Fatalf("ended %+v, %v; want subscription %d, code 0", rep, err, sub.Sub)
	}
}

// TestWebTransportRefusals: a wrong token, a foreign origin, and frames
// over pre_auth_max_frame_bytes and max_frame_bytes each end the session
// with a code and a reason that say why (1008, or 1009 for a frame too
// large, as over WebSocket); the admin page's origin is let through.
func TestWebTransportRefusals(t *testing.T) {
	b, cfg, hash := startWTBroker(t)
	ctx := brokertest.Context(t, 30*time.Second)
	dial := func(t *testing.T, origin string) *wtClient {
		wt, err := dialWT(t, ctx, b, origin, hash)
		if err != nil {
			t.Fatal(err)
		}
		return wt
	}
	t.Run("wrong token", func(t *testing.T) {
		// The refusal's reply may be lost to the session's close, which
		// resets the control stream; the close's reason says it all.
		wt := dial(t, "")
		wt.send(&webfront.Request{Op: webfront.OpAuth, Tenant: "default", Token: "not-a-token"})
		if se := wt.closedWith(ctx); se.ErrorCode != 1008 || !strings.HasPrefix(se.Message, "unauthenticated: token refused") {
			t.Fatalf("close = %d %q, want 1008 unauthenticated: token refused", se.ErrorCode, se.Message)
		}
	})
	t.Run("foreign origin", func(t *testing.T) {
		wt := dial(t, "https://evil.example.net")
		rep := wt.call(ctx, &webfront.Request{Op: webfront.OpAuth, Tenant: "default", Token: brokertest.Token(t, cfg, "default")})
		if rep.Error == nil || rep.Error.Name != "forbidden" || !strings.Contains(rep.Error.Message, "origin https://evil.example.net is not in browser_allowed_origins") {
			t.Fatalf("auth from a foreign origin = %+v, want forbidden naming the origin", rep)
		}
		if se := wt.closedWith(ctx); se.ErrorCode != 1008 || !strings.Contains(se.Message, "origin https://evil.example.net is not in browser_allowed_origins") {
			t.Fatalf("close = %d %q, want 1008 naming the origin", se.ErrorCode, se.Message)
		}
	})
	t.Run("admin page origin", func(t *testing.T) {
		wt := dial(t, "http://localhost:"+portOf(b.AdminAddr().String()))
		wt.mustCall(ctx, &webfront.Request{Op: webfront.OpAuth, Tenant: "default", Token: brokertest.Token(t, cfg, "default")})
	})
	t.Run("oversized before auth", func(t *testing.T) {
		wt := dial(t, "")
		big := make([]byte, cfg.PreAuthMaxFrameBytes+1)
		big[0] = webfront.KindControl
		_ = wt.sendRaw(big)
		if se := wt.closedWith(ctx); se.ErrorCode != 1009 || !strings.Contains(se.Message, "over the limit") {
			t.Fatalf("close = %d %q, want 1009 frame too large", se.ErrorCode, se.Message)
		}
	})
	t.Run("oversized after auth", func(t *testing.T) {
		wt := dial(t, "")
		wt.mustCall(ctx, &webfront.Request{Op: webfront.OpAuth, Tenant: "default", Token: brokertest.Token(t, cfg, "default")})
		big := make([]byte, cfg.MaxFrameBytes+1)
		big[0] = webfront.KindControl
		_ = wt.sendRaw(big)
		if se := wt.closedWith(ctx); se.ErrorCode != 1009 || !strings.Contains(se.Message, fmt.Sprintf("%d bytes is over the limit of %d", len(big), cfg.MaxFrameBytes)) {
			t.Fatalf("close = %d %q, want 1009 naming the size and max_frame_bytes", se.ErrorCode, se.Message)
		}
	})
	t.Run("garbage frame", func(t *testing.T) {
		wt := dial(t, "")
		wt.mustCall(ctx, &webfront.Request{Op: webfront.OpAuth, Tenant: "default", Token: brokertest.Token(t, cfg, "default")})
		if err := wt.sendRaw([]byte{webfront.KindControl, 0xdf, 0xff, 0xff, 0xff, 0xff}); err != nil {
			t.Fatal(err)
		}
		rep, err := wt.next(ctx)
		if err != nil || rep.Error == nil || rep.Error.Code != uint16(wire.CodeInvalidRequest) {
			t.Fatalf("a map claiming 4G entries got %+v, %v; want invalid_request, the session open", rep, err)
		}
		if rep := wt.call(ctx, &webfront.Request{Op: webfront.OpRead, Namespace: "default", Stream: "s", Max: 1}); rep.Error == nil || rep.Error.Name != "not_found" {
			t.Fatalf("a read after it = %+v, want an answer (not_found)", rep)
		}
	})
}

// TestWebTransportSlowSubscriber: a session that never reads its events
// stream slows neither another session nor another subscription of its
// own: each subscription is a stream of its own, with its own flow control
// and its own bounded queue.
func TestWebTransportSlowSubscriber(t *testing.T) {
	b, cfg, hash := startWTBroker(t)
	ctx := brokertest.Context(t, 60*time.Second)
	gc := brokertest.Dial(t, b, cfg)
	token := brokertest.Token(t, cfg, "default")
	slow, err := dialWT(t, ctx, b, "", hash)
	if err != nil {
		t.Fatal(err)
	}
	fast, err := dialWT(t, ctx, b, "", hash)
	if err != nil {
		t.Fatal(err)
	}
	slow.mustCall(ctx, &webfront.Request{Op: webfront.OpAuth, Tenant: "default", Token: token})
	fast.mustCall(ctx, &webfront.Request{Op: webfront.OpAuth, Tenant: "default", Token: token})
	frozen := slow.mustCall(ctx, &webfront.Request{Op: webfront.OpSubscribe, Namespace: "default", Stream: "feed"})
	sibling := slow.mustCall(ctx, &webfront.Request{Op: webfront.OpSubscribe, Namespace: "default", Stream: "other"})
	reader := fast.mustCall(ctx, &webfront.Request{Op: webfront.OpSubscribe, Namespace: "default", Stream: "feed"})

	// 400 x 32 KiB is 12.5 MiB: many times a stream's receive window
	// (4 MiB at most), so the frozen stream fills and stays full.
	const n = 400
	payload := bytes.Repeat([]byte("x"), 32<<10)
	feed, other := client.Stream{Name: "feed"}, client.Stream{Name: "other"}
	errs := make(chan error, 1)
	go func() {
		for i := range n {
			p := append(fmt.Appendf(nil, "%06d", i), payload...)
			if err := gc.Publish(ctx, feed, p, client.PublishOptions{}); err != nil {
				errs <- err
				return
			}
		}
		errs <- nil
	}()
	for i := 0; i < n; {
		ev, err := fast.nextEvents(ctx, reader.Sub)
		if err != nil {
			t.Fatalf("the fast session after %d of %d records: %v", i, n, err)
		}
		for _, p := range ev.Payloads {
			if want := fmt.Sprintf("%06d", i); string(p[:6]) != want {
				t.Fatalf("the fast session's record %d is %q, want %s", i, p[:6], want)
			}
			i++
		}
	}
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	// The frozen subscription's session still answers, and its other
	// subscription still delivers.
	if err := gc.Publish(ctx, other, []byte("sibling"), client.PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	ev, err := slow.nextEvents(ctx, sibling.Sub)
	if err != nil || string(ev.Payloads[0]) != "sibling" {
		t.Fatalf("the frozen session's other subscription got %v, %v; want sibling", ev, err)
	}
	if rep := slow.call(ctx, &webfront.Request{Op: webfront.OpUnsubscribe, Sub: frozen.Sub}); rep.Error != nil {
		t.Fatalf("unsubscribing the frozen subscription: %+v", *rep.Error)
	}
}

// TestWebTransportPreAuthPool: a QUIC connection holds a place among
// unauthenticated connections from its handshake; at
// max_preauth_connections the oldest is closed with a reason that says so
// to admit the newer one, and a connection gives its place back once
// authenticated.
func TestWebTransportPreAuthPool(t *testing.T) {
	cfg := brokertest.Config(t)
	cfg.BrowserListen, cfg.BrowserWebTransportListen, cfg.Admin = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.MaxPreAuthConnections = 1
	b := brokertest.Start(t, cfg)
	hash := webTransportHash(t, b)
	ctx := brokertest.Context(t, 30*time.Second)
	token := brokertest.Token(t, cfg, "default")

	authed, err := dialWT(t, ctx, b, "", hash)
	if err != nil {
		t.Fatal(err)
	}
	authed.mustCall(ctx, &webfront.Request{Op: webfront.OpAuth, Tenant: "default", Token: token})
	oldest, err := dialWT(t, ctx, b, "", hash)
	if err != nil {
		t.Fatal(err)
	}
	newer, err := dialWT(t, ctx, b, "", hash)
	if err != nil {
		t.Fatal(err)
	}
	if se := oldest.closedWith(ctx); se.ErrorCode != 1008 || !strings.HasPrefix(se.Message, "limit_exceeded: max_preauth_connections reached") {
		t.Fatalf("the oldest unauthenticated session closed with %d %q, want 1008 limit_exceeded", se.ErrorCode, se.Message)
	}
	newer.mustCall(ctx, &webfront.Request{Op: webfront.OpAuth, Tenant: "default", Token: token})
	// The authenticated one kept its session throughout.
	if rep := authed.call(ctx, &webfront.Request{Op: webfront.OpRead, Namespace: "default", Stream: "s", Max: 1}); rep.Error == nil || rep.Error.Name != "not_found" {
		t.Fatalf("the authenticated session answered %+v, want an answer (not_found)", rep)
	}
}
