package broker_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/config"
	"github.com/getfelix/felix-go/internal/brokertest"
)

// Tests of the live tree page (GET /ui) in a real browser: Debian's
// chromium, driven with chromedp. Shared: findChromium, uiPage.

// findChromium returns the browser binary, or skips the test when there is
// none, unless FELIXTEST_REQUIRE_CHROMIUM=1 (set by .ci/run) makes that a
// failure.
func findChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	if os.Getenv("FELIXTEST_REQUIRE_CHROMIUM") == "1" {
		t.Fatal("no chromium on PATH and FELIXTEST_REQUIRE_CHROMIUM=1 (install it: apt-get install -y chromium)")
	}
	t.Skip("no chromium on PATH: the browser test of /ui is skipped (apt-get install -y chromium to run it; FELIXTEST_REQUIRE_CHROMIUM=1 makes this a failure)")
	return ""
}

// uiPage is one headless chromium tab. Every browser action runs under
// ctx, so a hung page fails the test at ctx's deadline.
type uiPage struct {
	t   *testing.T
	ctx context.Context
}

func openUI(t *testing.T, ctx context.Context, url string) *uiPage {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(findChromium(t)),
		chromedp.NoSandbox, // the tests run as root
		chromedp.WindowSize(1500, 1000),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	bctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(func() {
		// Closes the browser and waits for the process, so nothing leaks.
		_ = chromedp.Cancel(bctx)
		cancelTab()
		cancelAlloc()
	})
	p := &uiPage{t: t, ctx: bctx}
	p.do("open "+url, chromedp.Navigate(url))
	return p
}

func (p *uiPage) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	if err := chromedp.Do(p.ctx, actions...); err != nil {
		p.t.Fatalf("browser: %s: %v", what, err)
	}
}

// eval runs a JavaScript expression on the page and decodes its value.
func eval[T any](p *uiPage, js string) T {
	p.t.Helper()
	v, err := chromedp.Run(p.ctx, chromedp.Evaluate[T](js))
	if err != nil {
		p.t.Fatalf("browser: evaluate %s: %v", js, err)
	}
	return v
}

// cellInt is the number in a row's cell as the page shows it (data
// attribute or text), -1 when the row is not on the page.
func (p *uiPage) cellInt(rowSel, js string) int {
	p.t.Helper()
	return eval[int](p, fmt.Sprintf(`(() => { const r = document.querySelector(%q); return r ? Number(%s) : -1 })()`, rowSel, js))
}

// await polls the page (for at most 20 s) until cond holds: the page
// updates itself on a timer, so there is no event to wait on from outside.
func (p *uiPage) await(what string, cond func() bool) {
	p.t.Helper()
	tick := time.NewTicker(50 * time.Millisecond) // the page polls every 500 ms
	defer tick.Stop()
	deadline := time.After(20 * time.Second)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			p.t.Fatalf("the page did not show %s within 20 s", what)
		}
	}
}

const feederRow = `tr.actor[data-kind="feeder"]`

// TestUITree: the page lists the tree with every data-path kind; a frozen
// subscriber's feeder depth grows on screen as batches queue behind it; the
// panic button crashes a lane, and the page shows its restart count go up.
func TestUITree(t *testing.T) {
	r := newRig(t, 90*time.Second, func(c *config.Config) {
		c.Admin = "127.0.0.1:0"
		c.Auth = "none"
		c.Chaos = true
		c.SubscriberEgressMaxBytes = 64 * kib // the frozen queue fills soon
		c.SubscriberQueueCapacity = 64
	})
	r.subscribe(r.frozenClient(), r.st, client.SubscribeOptions{})
	p := openUI(t, r.ctx, "http://"+r.b.AdminAddr().String()+"/ui")

	p.do("wait for a feeder row", chromedp.WaitVisible(chromedp.CSS(feederRow)))
	kinds := eval[[]string](p, `[...new Set([...document.querySelectorAll("tr.actor")].map(r => r.dataset.kind))].sort()`)
	for _, want := range []string{"connection_writer", "feeder", "lane", "shard", "supervisor"} {
		if !slices.Contains(kinds, want) {
			t.Errorf("the page shows kinds %v, missing %s", kinds, want)
		}
	}

	checkFilters(t, p)

	// The page shows the frozen subscription's feeder empty, then, without
	// a reload, full: far more batches than its QUIC window and egress
	// bound absorb wait in its mailbox up to the capacity (drop_new refuses
	// the rest).
	capacity := r.cfg.SubscriberQueueCapacity
	depthOnPage := func() int { return p.cellInt(feederRow, `r.querySelector(".depth").dataset.depth`) }
	p.await("feeder depth 0", func() bool { return depthOnPage() == 0 })
	r.publish(r.st, isoBatches, isoPer, isoSize)
	r.awaitFanouts(isoBatches, 1)
	r.awaitFeederDepth(capacity)
	p.await(fmt.Sprintf("feeder depth %d (its capacity)", capacity), func() bool { return depthOnPage() == capacity })
	if n := p.cellInt(feederRow, `r.querySelector(".dropped").textContent`); n <= 0 {
		t.Errorf("the page shows %d drops for a full drop_new feeder after %d batches", n, isoBatches)
	}

	const lane = `tr.actor[data-path="felix/lanes/lane-0"]`
	if n := p.cellInt(lane, `r.querySelector(".restarts").textContent`); n != 0 {
		t.Fatalf("lane-0 shows %d restarts before any kill", n)
	}
	p.do("click lane-0's panic button", chromedp.Click(chromedp.CSS(lane+` button.kill[data-mode="panic"]`)))
	p.await("lane-0 restarted", func() bool { return p.cellInt(lane, `r.querySelector(".restarts").textContent`) == 1 })
	if a, _ := actorAt(r.b, "felix/lanes/lane-0"); a.Restarts != 1 || a.LastFailure == nil {
		t.Errorf("broker: lane-0 restarts %d, last failure %v; want 1 and the chaos panic", a.Restarts, a.LastFailure)
	}
	p.await("lane-0's last failure", func() bool {
		return eval[string](p, `document.querySelector('`+lane+` .fail').textContent`) != ""
	})
	saveScreenshot(t, p)
}

// saveScreenshot writes the whole page as a PNG to FELIXTEST_UI_SCREENSHOT
// if set (docs/ui.png is made so), else to the test's artifact directory
// (kept with go test -artifacts).
func saveScreenshot(t *testing.T, p *uiPage) {
	t.Helper()
	png, err := chromedp.Run(p.ctx, chromedp.FullScreenshot(100)) // quality 100: PNG
	if err != nil {
		t.Fatalf("browser: screenshot: %v", err)
	}
	path := os.Getenv("FELIXTEST_UI_SCREENSHOT")
	if path == "" {
		path = filepath.Join(t.ArtifactDir(), "ui.png")
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatalf("save the screenshot: %v", err)
	}
	t.Logf("screenshot of /ui: %s (%d bytes)", path, len(png))
}

// checkFilters: the stream filter leaves only the actors whose path or
// labels name the stream (its shard and the feeder of its subscription);
// the kind filter leaves only that kind. Both are cleared after.
func checkFilters(t *testing.T, p *uiPage) {
	t.Helper()
	const visible = `[...document.querySelectorAll("tr.actor")].filter(r => r.offsetParent !== null).map(r => r.dataset.kind).sort()`
	p.do("type a stream filter", chromedp.SendKeys(chromedp.CSS("#stream"), "iso"))
	if got := eval[[]string](p, visible); !slices.Equal(got, []string{"feeder", "shard"}) {
		t.Errorf("stream filter iso shows kinds %v, want [feeder shard]", got)
	}
	eval[bool](p, `(() => { const s = document.getElementById("stream"); s.value = ""; return s.dispatchEvent(new Event("input")) })()`)
	got := eval[[]string](p, `(() => { const k = document.getElementById("kind"); k.value = "lane"; k.dispatchEvent(new Event("change")); return `+visible+` })()`)
	if len(got) == 0 || slices.ContainsFunc(got, func(k string) bool { return k != "lane" }) {
		t.Errorf("kind filter lane shows kinds %v, want only lanes", got)
	}
	eval[bool](p, `(() => { const k = document.getElementById("kind"); k.value = ""; return k.dispatchEvent(new Event("change")) })()`)
}

// TestUIStaticWithoutToken: with jwt auth and chaos off, the page and its
// config load without a token (they hold no broker state) while
// /debug/actors still refuses; the config says a token is needed and chaos
// is off, so the page hides the kill buttons; / redirects to /ui.
func TestUIStaticWithoutToken(t *testing.T) {
	cfg := brokertest.Config(t)
	cfg.Admin = "127.0.0.1:0"
	b := brokertest.Start(t, cfg)
	hc := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	t.Cleanup(hc.CloseIdleConnections)
	get := func(path string) (*http.Response, string) {
		t.Helper()
		res, err := hc.Get(adminURL(t, b, path))
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		return res, string(body)
	}
	if res, body := get("/ui"); res.StatusCode != http.StatusOK || !strings.Contains(body, "/debug/actors") || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") {
		t.Errorf("GET /ui: %s %q, %d bytes; want 200 text/html with the page", res.Status, res.Header.Get("Content-Type"), len(body))
	}
	if res, body := get("/ui/config"); res.StatusCode != http.StatusOK || strings.TrimSpace(body) != `{"chaos":false,"need_token":true}` {
		t.Errorf("GET /ui/config: %s %s; want 200 {\"chaos\":false,\"need_token\":true}", res.Status, body)
	}
	if res, _ := get("/"); res.StatusCode != http.StatusFound || res.Header.Get("Location") != "/ui" {
		t.Errorf("GET /: %s to %q; want 302 to /ui", res.Status, res.Header.Get("Location"))
	}
	if res, _ := get("/debug/actors"); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /debug/actors without a token: %s; want 401", res.Status)
	}
}

// TestUIToken: under jwt auth the page first shows the refusal of
// /debug/actors; with a node.view token typed into its field it shows the
// tree, and with chaos off no kill button is visible.
func TestUIToken(t *testing.T) {
	cfg := brokertest.Config(t)
	cfg.Admin = "127.0.0.1:0"
	b := brokertest.Start(t, cfg)
	ctx := testCtx(t, 60*time.Second)
	p := openUI(t, ctx, adminURL(t, b, "/ui"))
	p.await("the refusal without a token", func() bool {
		return eval[bool](p, `document.getElementById("status").classList.contains("err") && document.querySelectorAll("tr.actor").length === 0`)
	})
	p.do("type the token", chromedp.SendKeys(chromedp.CSS("#token"), brokertest.Token(t, cfg, "default", "node.view:*")))
	p.do("wait for the tree", chromedp.WaitVisible(chromedp.CSS(`tr.actor[data-kind="lane"]`)))
	if n := eval[int](p, `[...document.querySelectorAll("button.kill")].filter(b => b.offsetParent !== null).length`); n != 0 {
		t.Errorf("%d kill buttons visible with chaos off", n)
	}
}
