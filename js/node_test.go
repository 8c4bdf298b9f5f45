package js_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/getfelix/felix-go/broker"
	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/config"
	"github.com/getfelix/felix-go/internal/quicconf"
)

// TestNode runs the JavaScript client's own tests (node --test test/)
// against a real broker over WebSocket. FELIXTEST_REQUIRE_NODE=1 (CI)
// fails instead of skipping when node or the ws package (npm ci) is
// missing.
func TestNode(t *testing.T) {
	node, err := exec.LookPath("node")
	if err == nil {
		_, err = os.Stat(filepath.Join("node_modules", "ws", "package.json"))
	}
	if err != nil {
		if os.Getenv("FELIXTEST_REQUIRE_NODE") == "1" {
			t.Fatalf("node and js/node_modules (npm ci in js/) are required: %v", err)
		}
		t.Skipf("no node or no js/node_modules (run npm ci in js/): %v", err)
	}
	cfg := brokertest.Config(t)
	cfg.BrowserListen = "127.0.0.1:0"
	h := &harness{t: t, cfg: cfg}
	h.start()
	t.Cleanup(h.stop)
	// The broker's ws port is kept across restarts, so the client's URL holds.
	h.cfg.BrowserListen = h.b.BrowserAddr().String()
	ctx := brokertest.Context(t, 2*time.Minute)
	for _, name := range []string{"js-durable", "js-resume"} {
		if _, err := h.dial(ctx).CreateStream(ctx, client.Stream{Name: name}, client.StreamConfig{Durable: true}); err != nil {
			t.Fatal(err)
		}
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctl := &http.Server{Handler: http.HandlerFunc(h.restart)}
	go func() { _ = ctl.Serve(ln) }()
	t.Cleanup(func() { _ = ctl.Close() })

	cmd := exec.CommandContext(ctx, node, "--test", "test/")
	cmd.Env = append(os.Environ(),
		"FELIX_WS_URL=ws://"+h.cfg.BrowserListen+"/",
		"FELIX_TOKEN="+brokertest.Token(t, cfg, "default"),
		"FELIX_CONTROL_URL=http://"+ln.Addr().String(),
	)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test: %v\n%s", err, out)
	}
	t.Logf("node --test:\n%s", out)
}

// harness owns the broker the Node tests use, restarting it on request.
type harness struct {
	t   *testing.T
	cfg config.Config
	mu  sync.Mutex
	b   *broker.Broker
}

func (h *harness) start() {
	b, err := broker.New(h.cfg)
	if err == nil {
		err = b.Start()
	}
	if err != nil {
		h.t.Fatalf("start the broker: %v", err)
	}
	h.b = b
}

func (h *harness) stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.b.Stop(ctx); err != nil {
		h.t.Errorf("stop the broker: %v", err)
	}
}

func (h *harness) dial(ctx context.Context) *client.Client {
	c, err := client.Dial(ctx, h.b.Addr().String(), client.Options{CAFile: filepath.Join(h.cfg.DataDir, quicconf.CertFile), Token: brokertest.Token(h.t, h.cfg, "default")})
	if err != nil {
		h.t.Fatalf("client.Dial: %v", err)
	}
	h.t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// restart stops the broker, starts it again on the same data directory and
// WebSocket port, and publishes n records after-0.. to stream with the Go
// client, answering once they are acked.
func (h *harness) restart(w http.ResponseWriter, r *http.Request) {
	n, _ := strconv.Atoi(r.URL.Query().Get("n"))
	st := client.Stream{Name: r.URL.Query().Get("stream")}
	h.stop()
	h.mu.Lock()
	b, err := broker.New(h.cfg)
	if err == nil {
		err = b.Start()
	}
	if err != nil {
		h.mu.Unlock()
		http.Error(w, fmt.Sprintf("restart: %v", err), http.StatusInternalServerError)
		return
	}
	h.b = b
	h.mu.Unlock()
	ctx, cancel := context.WithTimeout(r.Context(), 20*time.Second)
	defer cancel()
	c := h.dial(ctx)
	for i := range n {
		if err := c.Publish(ctx, st, fmt.Appendf(nil, "after-%d", i), client.PublishOptions{}); err != nil {
			http.Error(w, fmt.Sprintf("publish after-%d: %v", i, errors.Unwrap(err)), http.StatusInternalServerError)
			return
		}
	}
}
