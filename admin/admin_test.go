package admin_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/getfelix/felix-go/admin"
	"github.com/getfelix/felix-go/broker"
	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
)

// scraped sums the samples of the Prometheus text exposition body whose
// name is name and whose labels contain every one of labels (each written
// as in the exposition, e.g. `kind="feeder"`). found says whether any matched.
func scraped(body, name string, labels ...string) (sum float64, found bool) {
	for line := range strings.Lines(body) {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			continue
		}
		id, val := line[:sp], line[sp+1:]
		series, rest, hasLabels := strings.Cut(id, "{")
		if series != name {
			continue
		}
		ok := true
		for _, l := range labels {
			if !hasLabels || !strings.Contains(rest, l) {
				ok = false
				break
			}
		}
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(val, 64)
		if err != nil {
			continue
		}
		sum += v
		found = true
	}
	return sum, found
}

// TestAdminEndpoint: /live and /ready answer 200, /metrics exposes the
// broker's metrics, and its counters move with traffic.
func TestAdminEndpoint(t *testing.T) {
	cfg := brokertest.Config(t)
	cfg.Admin = "127.0.0.1:0"
	b := brokertest.Start(t, cfg)
	ctx := brokertest.Context(t, 30*time.Second)
	hc := &http.Client{Timeout: 5 * time.Second}
	t.Cleanup(hc.CloseIdleConnections)
	base := "http://" + b.AdminAddr().String()
	if host := strings.Split(b.AdminAddr().String(), ":")[0]; host != "127.0.0.1" {
		t.Fatalf("admin bound %s, want loopback", b.AdminAddr())
	}

	for _, path := range []string{"/live", "/ready"} {
		code, body, err := brokertest.Get(ctx, hc, base+path)
		if err != nil || code != http.StatusOK {
			t.Fatalf("GET %s = %d %q %v, want 200", path, code, body, err)
		}
	}
	scrape := func() string {
		t.Helper()
		code, body, err := brokertest.Get(ctx, hc, base+"/metrics")
		if err != nil || code != http.StatusOK {
			t.Fatalf("GET /metrics = %d %v", code, err)
		}
		return body
	}

	pub := brokertest.Dial(t, b, cfg)
	st := client.Stream{Name: "admin"}
	sub, err := brokertest.Dial(t, b, cfg).Subscribe(ctx, st, client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Warm up so every series exists, then read the counters.
	if err := pub.Publish(ctx, st, []byte("warm"), client.PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	brokertest.ExpectNext(t, ctx, "subscriber", sub, "warm")
	type probe struct {
		name   string
		labels []string
	}
	probes := []probe{
		{"felix_publish_requests_total", []string{`result="ok"`}},
		{"felix_sub_queue_enqueued_total", nil},
		{"felix_delivered_messages_total", nil},
		{"felix_tenant_published_messages_total", []string{`tenant="default"`}},
	}
	// Delivery is counted when the broker's write returns, which can be
	// just after the client has the event: wait for the warm-up to count.
	awaitScrape := func(what string, cond func(body string) bool) string {
		t.Helper()
		var body string
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := brokertest.Await(wctx, func() bool { body = scrape(); return cond(body) }); err != nil {
			t.Fatalf("waiting for %s on /metrics: %v", what, err)
		}
		return body
	}
	before := awaitScrape("the warm-up delivery", func(body string) bool {
		v, _ := scraped(body, "felix_delivered_messages_total")
		return v >= 1
	})
	// Each needs a sample, not just its name somewhere in the text: a HELP
	// line can name another metric (felix_sub_queue_byte_dropped_total's
	// names felix_sub_queue_dropped_total).
	for _, want := range []probe{
		{"felix_publish_requests_total", nil}, {"felix_sub_queue_enqueued_total", nil},
		{"felix_delivered_messages_total", nil}, {"felix_mailbox_depth", []string{`kind="feeder"`}},
		{"felix_connections_open", nil}, {"felix_sub_queue_dropped_total", nil},
		{"felix_lane_queue_dropped_total", nil}, {"felix_mailbox_bytes", nil}, {"felix_sub_queue_total_bytes", nil},
	} {
		if _, ok := scraped(before, want.name, want.labels...); !ok {
			t.Errorf("/metrics has no sample of %s%v", want.name, want.labels)
		}
	}
	// Tenant-labelled counters (felix_publish_overloaded_total,
	// felix_publish_requests_total{result="overloaded"}) have no series
	// until their first event; alerts must treat absent as zero.
	if _, ok := scraped(before, "felix_publish_overloaded_total"); ok {
		t.Errorf("felix_publish_overloaded_total has a series before any overload")
	}
	if open, _ := scraped(before, "felix_connections_open"); open != 2 {
		t.Errorf("felix_connections_open = %v with two clients connected", open)
	}
	if n, _ := scraped(before, "felix_mailboxes", `kind="feeder"`); n != 1 {
		t.Errorf(`felix_mailboxes{kind="feeder"} = %v with one subscription`, n)
	}

	const n = 10
	for i := range n {
		if err := pub.Publish(ctx, st, []byte(seq(i)), client.PublishOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		brokertest.ExpectNext(t, ctx, "subscriber", sub, seq(i))
	}
	after := awaitScrape(fmt.Sprintf("%d more deliveries", n), func(body string) bool {
		v0, _ := scraped(before, "felix_delivered_messages_total")
		v1, _ := scraped(body, "felix_delivered_messages_total")
		return v1-v0 >= n
	})
	for _, p := range probes {
		v0, _ := scraped(before, p.name, p.labels...)
		v1, ok := scraped(after, p.name, p.labels...)
		if !ok || v1-v0 != n {
			t.Errorf("%s%v moved %v -> %v after %d single-message publishes to one subscriber, want +%d", p.name, p.labels, v0, v1, n, n)
		}
	}
}

// TestAdminReadyWhileStopping: /ready turns 503 as soon as Stop begins,
// while the connections are still being closed, and the endpoint is gone
// after Stop. The broker's log holds Stop there: a connection's end is
// logged (at debug) before the transport's Close returns, and the log
// writer below does not return from that line until the test has asked
// /ready, so the question lands in the not-ready window every time.
func TestAdminReadyWhileStopping(t *testing.T) {
	cfg := brokertest.Config(t)
	cfg.Admin = "127.0.0.1:0"
	gate := &logGate{line: `"message":"connection closed"`, reached: make(chan struct{}), release: make(chan struct{})}
	b := brokertest.Start(t, cfg, broker.WithLogger(zerolog.New(gate).Level(zerolog.DebugLevel)))
	ctx := brokertest.Context(t, 30*time.Second)
	hc := &http.Client{Timeout: 5 * time.Second}
	t.Cleanup(hc.CloseIdleConnections)
	url := "http://" + b.AdminAddr().String() + "/ready"
	c := brokertest.Dial(t, b, cfg)
	if _, err := c.Subscribe(ctx, client.Stream{Name: "ready"}, client.SubscribeOptions{}); err != nil {
		t.Fatal(err)
	}
	if code, body, err := brokertest.Get(ctx, hc, url); err != nil || code != http.StatusOK {
		t.Fatalf("/ready before Stop = %d %q %v, want 200", code, body, err)
	}

	gate.arm()
	stopped := make(chan error, 1)
	go func() { stopped <- b.Stop(ctx) }()
	select {
	case <-gate.reached:
	case err := <-stopped:
		t.Fatalf("Stop returned (%v) without closing the client's connection", err)
	case <-ctx.Done():
		t.Fatal("Stop never closed the client's connection")
	}
	// Twice: once not ready, it stays so.
	for i := range 2 {
		if code, body, err := brokertest.Get(ctx, hc, url); err != nil || code != http.StatusServiceUnavailable {
			gate.open()
			t.Fatalf("/ready %d while Stop closes the connections = %d %q %v, want 503", i+1, code, body, err)
		}
	}
	gate.open()
	if err := <-stopped; err != nil {
		t.Fatalf("broker.Stop: %v", err)
	}
	if _, _, err := brokertest.Get(ctx, hc, url); err == nil {
		t.Errorf("admin endpoint still answers after Stop")
	}
}

// logGate is a log writer that, once armed, holds the first write
// containing line until open: the goroutine logging it waits there.
type logGate struct {
	line    string
	armed   atomic.Bool
	once    sync.Once
	reached chan struct{}
	release chan struct{}
	opened  sync.Once
}

func (g *logGate) arm()  { g.armed.Store(true) }
func (g *logGate) open() { g.opened.Do(func() { close(g.release) }) }

func (g *logGate) Write(p []byte) (int, error) {
	if g.armed.Load() && strings.Contains(string(p), g.line) {
		held := false
		g.once.Do(func() { held = true; close(g.reached) })
		if held {
			<-g.release
		}
	}
	return len(p), nil
}

// TestAdminEndpointAuth: the probes and /metrics are open; the tree needs a
// bearer token with node.view and the chaos route one with node.manage,
// refused 401 (with a Bearer challenge) without a valid token and 403 with
// one lacking the right, each with a JSON message that says which.
func TestAdminEndpointAuth(t *testing.T) {
	cfg := brokertest.Config(t)
	cfg.Admin = "127.0.0.1:0"
	cfg.Chaos = true
	b := brokertest.Start(t, cfg)
	ctx := brokertest.Context(t, 30*time.Second)
	hc := &http.Client{Timeout: 5 * time.Second}
	t.Cleanup(hc.CloseIdleConnections)
	base := "http://" + b.AdminAddr().String()

	do := func(method, path, authz string) (int, http.Header, string) {
		t.Helper()
		var body io.Reader
		if method == http.MethodPost {
			body = strings.NewReader(`{"kind":"feeder"}`)
		}
		req, err := http.NewRequestWithContext(ctx, method, base+path, body)
		if err != nil {
			t.Fatal(err)
		}
		if authz != "" {
			req.Header.Set("Authorization", authz)
		}
		if method == http.MethodPost {
			req.Header.Set("Content-Type", "application/json")
		}
		res, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer res.Body.Close()
		data, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		return res.StatusCode, res.Header, string(data)
	}

	for _, path := range []string{"/live", "/ready", "/metrics"} {
		if code, _, body := do(http.MethodGet, path, ""); code != http.StatusOK {
			t.Errorf("GET %s with no token = %d %q, want 200: it stays open", path, code, body)
		}
	}

	bearer := func(grants ...string) string { return "Bearer " + brokertest.Token(t, cfg, "default", grants...) }
	tests := []struct {
		name, method, path, authz string
		want                      int
		wantBody                  string
	}{
		{"tree, no token", http.MethodGet, "/debug/actors", "", http.StatusUnauthorized, "needs a bearer token with node.view"},
		{"tree, not a bearer header", http.MethodGet, "/debug/actors", "Basic YWRtaW46YWRtaW4=", http.StatusUnauthorized, "Bearer TOKEN"},
		{"tree, garbage token", http.MethodGet, "/debug/actors", "Bearer not-a-token", http.StatusUnauthorized, "token refused"},
		{"tree, stream rights only", http.MethodGet, "/debug/actors", bearer("stream.publish:default/x"), http.StatusForbidden, "--grant node.view:*"},
		{"tree, node.view", http.MethodGet, "/debug/actors", bearer("node.view:*"), http.StatusOK, `"actors"`},
		{"tree, admin token", http.MethodGet, "/debug/actors", "Bearer " + brokertest.AdminToken(t, cfg), http.StatusOK, `"actors"`},
		{"kill, no token", http.MethodPost, "/debug/chaos/kill", "", http.StatusUnauthorized, "node.manage"},
		{"kill, node.view", http.MethodPost, "/debug/chaos/kill", bearer("node.view:*"), http.StatusForbidden, "--grant node.manage:*"},
		{"kill, node.manage", http.MethodPost, "/debug/chaos/kill", bearer("node.manage:*"), http.StatusOK, `"killed"`},
		{"kill, admin token", http.MethodPost, "/debug/chaos/kill", "Bearer " + brokertest.AdminToken(t, cfg), http.StatusOK, `"killed"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, hdr, body := do(tt.method, tt.path, tt.authz)
			if code != tt.want || !strings.Contains(body, tt.wantBody) {
				t.Errorf("%s %s = %d %q, want %d with %q", tt.method, tt.path, code, body, tt.want, tt.wantBody)
			}
			if code != http.StatusOK && hdr.Get("Content-Type") != "application/json" {
				t.Errorf("refusal's Content-Type = %q, want application/json", hdr.Get("Content-Type"))
			}
			if challenge := hdr.Get("WWW-Authenticate"); (code == http.StatusUnauthorized) != strings.HasPrefix(challenge, "Bearer ") {
				t.Errorf("%d with WWW-Authenticate %q: want a Bearer challenge exactly on 401", code, challenge)
			}
		})
	}
}

// TestAdminEndpointAuthNone: a broker with auth none serves the debug routes
// to anyone, as it serves every client.
func TestAdminEndpointAuthNone(t *testing.T) {
	cfg := brokertest.Config(t)
	cfg.Admin = "127.0.0.1:0"
	cfg.Auth = "none"
	b := brokertest.Start(t, cfg)
	ctx := brokertest.Context(t, 30*time.Second)
	if got := brokertest.DebugActors(t, ctx, b, cfg, ""); len(got) == 0 {
		t.Errorf("GET /debug/actors under auth none listed no actors")
	}
}

// TestAdminClosesIdleConnections: the admin endpoint closes a keep-alive
// connection that sends nothing more, and one that never sends a request;
// 19 980 idle connections used to stay open for 40 s and more.
func TestAdminClosesIdleConnections(t *testing.T) {
	defer admin.SetIdleTimeout(200 * time.Millisecond)()
	cfg := brokertest.Config(t)
	cfg.Admin = "127.0.0.1:0"
	b := brokertest.Start(t, cfg)
	conn, err := net.Dial("tcp", b.AdminAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := fmt.Fprintf(conn, "GET /live HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(conn)
	res, err := http.ReadResponse(rd, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	// Kept alive, then idle: the server closes it (EOF) within the idle
	// timeout; the deadline only bounds the test.
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := rd.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("an idle keep-alive connection after 200 ms idle timeout: read %v, want EOF (closed by the server)", err)
	}
}

// TestAdminPprof: with pprof on, the admin endpoint serves Go's profiles to
// a node.view token (401 without one); with it off (the default) there is
// no such route.
func TestAdminPprof(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprint("pprof=", on), func(t *testing.T) {
			cfg := brokertest.Config(t)
			cfg.Admin = "127.0.0.1:0"
			cfg.Pprof = on
			b := brokertest.Start(t, cfg)
			hc := &http.Client{Timeout: 10 * time.Second}
			t.Cleanup(hc.CloseIdleConnections)
			get := func(path, token string) (int, string) {
				t.Helper()
				res, body := adminFetch(t, hc, b, token, path)
				return res.StatusCode, body
			}
			code, body := get("/debug/pprof/goroutine?debug=1", brokertest.AdminToken(t, cfg))
			switch {
			case on && (code != http.StatusOK || !strings.Contains(body, "goroutine profile")):
				t.Fatalf("pprof on: goroutine profile = %d %.80q, want 200 and the profile", code, body)
			case !on && code != http.StatusNotFound:
				t.Fatalf("pprof off: /debug/pprof/goroutine = %d, want 404", code)
			}
			if on {
				if code, _ := get("/debug/pprof/heap", ""); code != http.StatusUnauthorized {
					t.Fatalf("pprof with no token = %d, want 401", code)
				}
				if code, _ := get("/debug/pprof/profile?seconds=1", brokertest.AdminToken(t, cfg)); code != http.StatusOK {
					t.Fatalf("a 1 s CPU profile = %d, want 200", code)
				}
			}
		})
	}
}
