// Package browsertest drives the admin endpoint's pages (/ui, /ui/stream)
// in a real browser for tests: Debian's chromium, headless, through
// chromedp. It is shared by the admin package's page tests and the cluster
// page test, which runs members as processes (clustertest).
package browsertest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// FindChromium returns the browser binary, or skips the test when there is
// none, unless FELIXTEST_REQUIRE_CHROMIUM=1 (set by .ci/run) makes that a
// failure.
func FindChromium(t *testing.T) string {
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

// Page is one headless chromium tab. Every browser action runs under its
// context, so a hung page fails the test at that context's deadline.
type Page struct {
	t   *testing.T
	ctx context.Context
}

// Open starts a browser on url, in a 1500×1000 window; the test's
// cleanup closes it.
func Open(t *testing.T, ctx context.Context, url string) *Page {
	t.Helper()
	return OpenSized(t, ctx, url, 1500, 1000)
}

// OpenSized is Open in a window of width×height pixels.
func OpenSized(t *testing.T, ctx context.Context, url string, width, height int) *Page {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(FindChromium(t)),
		chromedp.NoSandbox, // the tests run as root
		chromedp.WindowSize(width, height),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	bctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(func() {
		// Closes the browser and waits for the process, so nothing leaks.
		_ = chromedp.Cancel(bctx)
		cancelTab()
		cancelAlloc()
	})
	p := &Page{t: t, ctx: bctx}
	p.Do("open "+url, chromedp.Navigate(url))
	return p
}

// Do runs browser actions; what names them in a failure.
func (p *Page) Do(what string, actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	if err := chromedp.Do(p.ctx, actions...); err != nil {
		p.t.Fatalf("browser: %s: %v (the page's status line: %q)", what, err, p.StatusLine())
	}
}

// StatusLine is what the page's status line says (an error, when its poll
// failed) and where the page is, for a failure's message.
func (p *Page) StatusLine() string {
	ctx, cancel := context.WithTimeout(p.ctx, 2*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(document.getElementById("status") || {}).textContent + " at " + location.href`))
	if err != nil {
		return "unknown: " + err.Error()
	}
	return s
}

// Eval runs a JavaScript expression on the page and decodes its value.
func Eval[T any](p *Page, js string) T {
	p.t.Helper()
	v, err := chromedp.Run(p.ctx, chromedp.Evaluate[T](js))
	if err != nil {
		p.t.Fatalf("browser: evaluate %s: %v", js, err)
	}
	return v
}

// CellInt is the number in a row's cell as the page shows it (data
// attribute or text: js, with the row as r), -1 when the row is not on the
// page.
func (p *Page) CellInt(rowSel, js string) int {
	p.t.Helper()
	return Eval[int](p, fmt.Sprintf(`(() => { const r = document.querySelector(%q); return r ? Number(%s) : -1 })()`, rowSel, js))
}

// Await polls the page (for at most 20 s) until cond holds: the pages
// update themselves on a timer, so there is no event to wait on from
// outside.
func (p *Page) Await(what string, cond func() bool) {
	p.t.Helper()
	tick := time.NewTicker(50 * time.Millisecond) // the pages poll every 500 ms or 1 s
	defer tick.Stop()
	deadline := time.After(20 * time.Second)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			p.t.Fatalf("the page did not show %s within 20 s (its status line: %q)", what, p.StatusLine())
		}
	}
}

// Screenshot writes the whole page as a PNG named name: into the
// directory of FELIXTEST_UI_SCREENSHOT if set (docs/ui.png and its
// siblings are made so; ui.png takes that exact path), else into the
// test's artifact directory (kept with go test -artifacts).
func Screenshot(t *testing.T, p *Page, name string) {
	t.Helper()
	png, err := chromedp.Run(p.ctx, chromedp.FullScreenshot(100)) // quality 100: PNG
	if err != nil {
		t.Fatalf("browser: screenshot: %v", err)
	}
	path := os.Getenv("FELIXTEST_UI_SCREENSHOT")
	switch {
	case path == "":
		path = filepath.Join(t.ArtifactDir(), name)
	case name != "ui.png":
		path = filepath.Join(filepath.Dir(path), name)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatalf("save the screenshot: %v", err)
	}
	t.Logf("screenshot of %s: %s (%d bytes)", name, path, len(png))
}
