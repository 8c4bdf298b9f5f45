package admin_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/getfelix/felix-go/admin/ui/browsertest"
	"github.com/getfelix/felix-go/broker"
	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/config"
)

// Tests of the live page (GET /ui/live) in headless Chromium: it talks to
// the broker's browser front end over WebSocket with the JavaScript
// client (js/), served by the admin endpoint as /ui/felix.js.

func liveConfig(t *testing.T) config.Config {
	cfg := brokertest.Config(t)
	cfg.Admin = "127.0.0.1:0"
	cfg.BrowserListen = "127.0.0.1:0"
	cfg.MaxFrameBytes = 256 << 10 // the oversized publish is 512 KiB
	return cfg
}

// liveOffsets is the page's list as "offset:text" items.
const liveItems = `[...document.querySelectorAll("#messages li")].map(li => li.dataset.offset + ":" + li.textContent)`

func livePage(t *testing.T, ctx context.Context, adminAddr, stream, token string) *browsertest.Page {
	t.Helper()
	p := browsertest.Open(t, ctx, "http://"+adminAddr+"/ui/live?tenant=default&ns=default&stream="+stream+"&start=earliest")
	p.Do("type the token and connect", chromedp.SendKeys(chromedp.CSS("#token"), token), chromedp.Click(chromedp.CSS("#connect")))
	return p
}

func wantItems(from, to int, text func(int) string) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("%d:%s", i, text(i)))
	}
	return out
}

// TestUILive: the page receives every record the Go client publishes, in
// order, with offsets; what is typed into its box reaches a Go
// subscriber; after the broker restarts (same ports, same data) the page
// reconnects and resumes after the last offset it showed, missing and
// repeating nothing.
func TestUILive(t *testing.T) {
	cfg := liveConfig(t)
	b := brokertest.Start(t, cfg)
	ctx := brokertest.Context(t, 90*time.Second)
	gc := brokertest.Dial(t, b, cfg)
	st := client.Stream{Name: "live"}
	if _, err := gc.CreateStream(ctx, st, client.StreamConfig{Durable: true}); err != nil {
		t.Fatal(err)
	}
	p := livePage(t, ctx, b.AdminAddr().String(), "live", brokertest.Token(t, cfg, "default"))
	p.Await("subscribed", func() bool { return strings.HasPrefix(p.StatusLine(), "subscribed (durable)") })
	liveRoundTrip(t, ctx, p, cfg, b, gc, st)
	browsertest.Screenshot(t, p, "ui-live.png")
}

// liveRoundTrip is the live page's round trip on either transport, on a
// page already subscribed to st from the earliest record: 100 records
// published from Go show on the page in order with their offsets; a record
// typed into the page reaches a Go subscriber; then the broker restarts on
// the same ports (the page's origin and its socket's address hold) and the
// page shows the 20 records published after it, resuming after the last
// offset it showed, missing and repeating nothing.
func liveRoundTrip(t *testing.T, ctx context.Context, p *browsertest.Page, cfg config.Config, b *broker.Broker, gc *client.Client, st client.Stream) {
	t.Helper()
	const n = 100
	msg := func(i int) string { return fmt.Sprintf("go-%d", i) }
	for i := range n {
		if err := gc.Publish(ctx, st, []byte(msg(i)), client.PublishOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	want := wantItems(0, n, msg)
	p.Await(fmt.Sprintf("%d records", n), func() bool { return len(browsertest.Eval[[]string](p, liveItems)) >= n })
	if got := browsertest.Eval[[]string](p, liveItems); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("the page shows %v, want %v", got, want)
	}

	gsub, err := gc.Subscribe(ctx, st, client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Do("publish from the page", chromedp.SendKeys(chromedp.CSS("#payload"), "from-the-page"), chromedp.Click(chromedp.CSS(`#publish button`)))
	ev, err := gsub.Next(ctx)
	if err != nil || string(ev.Payload) != "from-the-page" || ev.Offset != n {
		t.Fatalf("the Go subscriber got %q at %d (%v), want from-the-page at %d", ev.Payload, ev.Offset, err, n)
	}
	p.Await("the page's own record", func() bool { return len(browsertest.Eval[[]string](p, liveItems)) == n+1 })

	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cfg.Admin, cfg.BrowserListen = b.AdminAddr().String(), b.BrowserAddr().String()
	if cfg.BrowserWebTransportListen != "" {
		cfg.BrowserWebTransportListen = b.BrowserWebTransportAddr().String() // the UDP port too
	}
	if err := b.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	b2 := brokertest.Start(t, cfg)
	gc2 := brokertest.Dial(t, b2, cfg)
	after := func(i int) string { return fmt.Sprintf("after-%d", i) }
	for i := n + 1; i < n+21; i++ {
		if err := gc2.Publish(ctx, st, []byte(after(i)), client.PublishOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	want = append(append(want, fmt.Sprintf("%d:from-the-page", n)), wantItems(n+1, n+21, after)...)
	p.Await("the records published after the restart", func() bool { return len(browsertest.Eval[[]string](p, liveItems)) >= len(want) })
	if got := browsertest.Eval[[]string](p, liveItems); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("after the restart the page shows %v, want %v", got, want)
	}
}

// TestUILiveRefusals: the page says why when its token is wrong and when a
// frame is over max_frame_bytes; a page of a foreign origin is refused
// with a close reason that names the origin.
func TestUILiveRefusals(t *testing.T) {
	cfg := liveConfig(t)
	b := brokertest.Start(t, cfg)
	ctx := brokertest.Context(t, 90*time.Second)

	t.Run("wrong token", func(t *testing.T) {
		p := livePage(t, ctx, b.AdminAddr().String(), "refusals", "not-a-token")
		p.Await("the refusal", func() bool { return strings.HasPrefix(p.StatusLine(), "unauthenticated: ") })
	})
	t.Run("oversized frame", func(t *testing.T) {
		p := livePage(t, ctx, b.AdminAddr().String(), "refusals", brokertest.Token(t, cfg, "default"))
		p.Await("subscribed", func() bool { return strings.HasPrefix(p.StatusLine(), "subscribed") })
		browsertest.Eval[bool](p, `(() => { document.getElementById("payload").value = "x".repeat(512 << 10); return document.getElementById("publish").requestSubmit() === undefined })()`)
		p.Await("the frame refused as too large", func() bool { return strings.HasPrefix(p.StatusLine(), "frame_too_large: ") })
	})
	t.Run("foreign origin", func(t *testing.T) {
		// A page of another origin (another port) opens a socket to the
		// browser front end and writes how it closed.
		foreign := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprintf(w, `<p id="status">connecting</p><script>
const ws = new WebSocket("ws://%s/");
ws.onclose = (e) => { document.getElementById("status").textContent = e.code + " " + e.reason; };
</script>`, b.BrowserAddr())
		}))
		t.Cleanup(foreign.Close)
		p := browsertest.Open(t, ctx, foreign.URL)
		want := "1008 forbidden: origin " + foreign.URL + " is not in browser_allowed_origins"
		p.Await("the refusal naming the origin", func() bool { return strings.HasPrefix(p.StatusLine(), want) })
	})
}
