package broker_test

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
	"testing"
	"time"

	"github.com/getfelix/felix-go/broker"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/internal/brokertest"
)

// httpGet fetches url and returns the status code and body.
func httpGet(ctx context.Context, hc *http.Client, url string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	res, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	return res.StatusCode, string(body), err
}

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
	ctx := testCtx(t, 30*time.Second)
	hc := &http.Client{Timeout: 5 * time.Second}
	t.Cleanup(hc.CloseIdleConnections)
	base := "http://" + b.AdminAddr().String()
	if host := strings.Split(b.AdminAddr().String(), ":")[0]; host != "127.0.0.1" {
		t.Fatalf("admin bound %s, want loopback", b.AdminAddr())
	}

	for _, path := range []string{"/live", "/ready"} {
		code, body, err := httpGet(ctx, hc, base+path)
		if err != nil || code != http.StatusOK {
			t.Fatalf("GET %s = %d %q %v, want 200", path, code, body, err)
		}
	}
	scrape := func() string {
		t.Helper()
		code, body, err := httpGet(ctx, hc, base+"/metrics")
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
	expectNext(t, ctx, "subscriber", sub, "warm")
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
		expectNext(t, ctx, "subscriber", sub, seq(i))
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
// before connections are closed, and the endpoint is gone after Stop.
func TestAdminReadyWhileStopping(t *testing.T) {
	cfg := brokertest.Config(t)
	cfg.Admin = "127.0.0.1:0"
	b := brokertest.Start(t, cfg)
	ctx := testCtx(t, 30*time.Second)
	hc := &http.Client{Timeout: 5 * time.Second}
	t.Cleanup(hc.CloseIdleConnections)
	url := "http://" + b.AdminAddr().String() + "/ready"
	// Connections with subscriptions give Stop some work, so the window
	// between "not ready" and "endpoint closed" is wide enough to see.
	for i := range 20 {
		c := brokertest.Dial(t, b, cfg)
		if _, err := c.Subscribe(ctx, client.Stream{Name: fmt.Sprint("ready-", i)}, client.SubscribeOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// Several pollers, so a request is in flight at any moment of Stop.
	// Each keeps its own answers: one poller's requests are sequential, so
	// its answers are in time order.
	const pollers = 3
	statuses := make([][]int, pollers)
	var wg, started sync.WaitGroup
	stop := make(chan struct{})
	started.Add(pollers)
	for p := range pollers {
		wg.Go(func() {
			for i := 0; ; i++ {
				code, _, err := httpGet(ctx, hc, url)
				if err == nil {
					statuses[p] = append(statuses[p], code)
				}
				if i == 0 {
					started.Done()
				}
				if err != nil {
					return // the endpoint closed
				}
				select {
				case <-stop:
					return
				default:
				}
			}
		})
	}
	started.Wait()
	stopBroker(t, ctx, b)
	close(stop)
	wg.Wait()

	if _, _, err := httpGet(ctx, hc, url); err == nil {
		t.Errorf("admin endpoint still answers after Stop")
	}
	seen := false
	for p, codes := range statuses {
		if len(codes) == 0 || codes[0] != http.StatusOK {
			t.Fatalf("poller %d: /ready before Stop answered %v, want 200 first", p, codes)
		}
		notReady := false
		for _, code := range codes {
			switch {
			case code == http.StatusServiceUnavailable:
				notReady, seen = true, true
			case code != http.StatusOK:
				t.Fatalf("poller %d: /ready answered %d: %v", p, code, codes)
			case notReady:
				t.Fatalf("poller %d: /ready went back to 200 after 503: %v", p, codes)
			}
		}
	}
	if !seen {
		t.Skipf("Stop finished before a poll of /ready landed in its not-ready window (answers %v, all 200)", statuses)
	}
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
	ctx := testCtx(t, 30*time.Second)
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
		{"tree, admin token", http.MethodGet, "/debug/actors", "Bearer " + b.AdminToken(), http.StatusOK, `"actors"`},
		{"kill, no token", http.MethodPost, "/debug/chaos/kill", "", http.StatusUnauthorized, "node.manage"},
		{"kill, node.view", http.MethodPost, "/debug/chaos/kill", bearer("node.view:*"), http.StatusForbidden, "--grant node.manage:*"},
		{"kill, node.manage", http.MethodPost, "/debug/chaos/kill", bearer("node.manage:*"), http.StatusOK, `"killed"`},
		{"kill, admin token", http.MethodPost, "/debug/chaos/kill", "Bearer " + b.AdminToken(), http.StatusOK, `"killed"`},
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
	ctx := testCtx(t, 30*time.Second)
	if got := debugActors(t, ctx, b, ""); len(got) == 0 {
		t.Errorf("GET /debug/actors under auth none listed no actors")
	}
}

// TestAdminClosesIdleConnections: the admin endpoint closes a keep-alive
// connection that sends nothing more, and one that never sends a request;
// 19 980 idle connections used to stay open for 40 s and more.
func TestAdminClosesIdleConnections(t *testing.T) {
	defer broker.SetAdminIdleTimeout(200 * time.Millisecond)()
	cfg := brokertest.Config(t)
	cfg.Admin = "127.0.0.1:0"
	b := brokertest.Start(t, cfg)
	conn, err := net.Dial("tcp", b.AdminAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := fmt.Fprintf(conn, "GET /live HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
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
			code, body := get("/debug/pprof/goroutine?debug=1", b.AdminToken())
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
				if code, _ := get("/debug/pprof/profile?seconds=1", b.AdminToken()); code != http.StatusOK {
					t.Fatalf("a 1 s CPU profile = %d, want 200", code)
				}
			}
		})
	}
}
