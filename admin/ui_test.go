package admin_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/getfelix/felix-go/admin/ui/browsertest"
	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/config"
)

// Tests of the live tree page (GET /ui) in a real browser: Debian's
// chromium, driven with chromedp through browsertest.

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
	p := browsertest.Open(t, r.ctx, "http://"+r.b.AdminAddr().String()+"/ui")

	p.Do("wait for a feeder row", chromedp.WaitVisible(chromedp.CSS(feederRow)))
	kinds := browsertest.Eval[[]string](p, `[...new Set([...document.querySelectorAll("tr.actor")].map(r => r.dataset.kind))].sort()`)
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
	depthOnPage := func() int { return p.CellInt(feederRow, `r.querySelector(".depth").dataset.depth`) }
	p.Await("feeder depth 0", func() bool { return depthOnPage() == 0 })
	r.publish(r.st, isoBatches, isoPer, isoSize)
	r.awaitFanouts(isoBatches, 1)
	r.awaitFeederDepth(capacity)
	p.Await(fmt.Sprintf("feeder depth %d (its capacity)", capacity), func() bool { return depthOnPage() == capacity })
	// The QUIC window the frozen client left open can absorb every batch
	// so far (it grows with the connection's measured rate), so publish
	// into the full queue until drop_new refuses one: by count or, when
	// the egress byte bound is reached first, by bytes ("N + M by bytes").
	for extra := 0; r.value("felix_sub_queue_dropped_total") == 0; extra++ {
		if extra == isoBatches {
			t.Fatalf("a full drop_new feeder dropped nothing after %d more batches", extra)
		}
		r.publish(r.st, 1, isoPer, isoSize)
		r.awaitFanouts(isoBatches+extra+1, 1)
	}
	const droppedOnPage = `parseInt(r.querySelector(".dropped").textContent)`
	p.Await("the feeder's drops", func() bool { return p.CellInt(feederRow, droppedOnPage) > 0 })

	const lane = `tr.actor[data-path="felix/lanes/lane-0"]`
	if n := p.CellInt(lane, `r.querySelector(".restarts").textContent`); n != 0 {
		t.Fatalf("lane-0 shows %d restarts before any kill", n)
	}
	p.Do("click lane-0's panic button", chromedp.Click(chromedp.CSS(lane+` button.kill[data-mode="panic"]`)))
	p.Await("lane-0 restarted", func() bool { return p.CellInt(lane, `r.querySelector(".restarts").textContent`) == 1 })
	if a, _ := brokertest.ActorAt(r.b, "felix/lanes/lane-0"); a.Restarts != 1 || a.LastFailure == nil {
		t.Errorf("broker: lane-0 restarts %d, last failure %v; want 1 and the chaos panic", a.Restarts, a.LastFailure)
	}
	p.Await("lane-0's last failure", func() bool {
		return browsertest.Eval[string](p, `document.querySelector('`+lane+` .fail').textContent`) != ""
	})
	browsertest.Screenshot(t, p, "ui.png")
}

// checkFilters: the stream filter leaves only the actors whose path or
// labels name the stream (its shard and the feeder of its subscription);
// the kind filter leaves only that kind. Both are cleared after.
func checkFilters(t *testing.T, p *browsertest.Page) {
	t.Helper()
	const visible = `[...document.querySelectorAll("tr.actor")].filter(r => r.offsetParent !== null).map(r => r.dataset.kind).sort()`
	p.Do("type a stream filter", chromedp.SendKeys(chromedp.CSS("#stream"), "iso"))
	if got := browsertest.Eval[[]string](p, visible); !slices.Equal(got, []string{"feeder", "shard"}) {
		t.Errorf("stream filter iso shows kinds %v, want [feeder shard]", got)
	}
	browsertest.Eval[bool](p, `(() => { const s = document.getElementById("stream"); s.value = ""; return s.dispatchEvent(new Event("input")) })()`)
	got := browsertest.Eval[[]string](p, `(() => { const k = document.getElementById("kind"); k.value = "lane"; k.dispatchEvent(new Event("change")); return `+visible+` })()`)
	if len(got) == 0 || slices.ContainsFunc(got, func(k string) bool { return k != "lane" }) {
		t.Errorf("kind filter lane shows kinds %v, want only lanes", got)
	}
	browsertest.Eval[bool](p, `(() => { const k = document.getElementById("kind"); k.value = ""; return k.dispatchEvent(new Event("change")) })()`)
}

// TestUIStaticWithoutToken: with jwt auth and chaos off, the page and its
// config load without a token (they hold no broker state) while
// /debug/actors still refuses; the config says a token is needed and chaos
// is off, so the page hides the kill buttons; / redirects to /ui.
func TestUIStaticWithoutToken(t *testing.T) {
	b, _ := adminBroker(t, "")
	hc := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	t.Cleanup(hc.CloseIdleConnections)
	get := func(path string) (*http.Response, string) {
		t.Helper()
		return adminFetch(t, hc, b, "", path)
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
	b, cfg := adminBroker(t, "")
	ctx := brokertest.Context(t, 60*time.Second)
	p := browsertest.Open(t, ctx, brokertest.AdminURL(t, b, "/ui"))
	p.Await("the refusal without a token", func() bool {
		return browsertest.Eval[bool](p, `document.getElementById("status").classList.contains("err") && document.querySelectorAll("tr.actor").length === 0`)
	})
	p.Do("type the token", chromedp.SendKeys(chromedp.CSS("#token"), brokertest.Token(t, cfg, "default", "node.view:*")))
	p.Do("wait for the tree", chromedp.WaitVisible(chromedp.CSS(`tr.actor[data-kind="lane"]`)))
	if n := browsertest.Eval[int](p, `[...document.querySelectorAll("button.kill")].filter(b => b.offsetParent !== null).length`); n != 0 {
		t.Errorf("%d kill buttons visible with chaos off", n)
	}
}

// TestUIStream: the stream page of a two-shard durable stream shows both
// shards, one subscriber on the shard it subscribed to, the group with its
// part on each shard; after publishes it shows the next offsets grow to
// what was published and a sparkline with a non-zero rate. The tree page
// links the shard's stream label to this page.
func TestUIStream(t *testing.T) {
	b, cfg := adminBroker(t, "none")
	ctx := brokertest.Context(t, 60*time.Second)
	c := brokertest.Dial(t, b, cfg)
	st := ordersStream(t, ctx, c)

	// From the tree: the shard's stream label is a link to its page.
	p := browsertest.Open(t, ctx, brokertest.AdminURL(t, b, "/ui"))
	link := `tr.actor[data-kind="shard"] td.labels a.stream-link[href$="stream=orders"]`
	p.Do("wait for a shard's stream link", chromedp.WaitVisible(chromedp.CSS(link)))
	p.Do("follow it", chromedp.Click(chromedp.CSS(link)))
	// Polled rather than WaitVisible: the click navigates, and a query
	// begun on the tree's document would not see the stream page's.
	p.Await("the stream page's shards", func() bool { return browsertest.Eval[int](p, `document.querySelectorAll("tr.shard").length`) == 2 })
	if u := browsertest.Eval[string](p, `location.pathname + location.search`); u != "/ui/stream?tenant=default&ns=default&stream=orders" {
		t.Errorf("the link led to %s", u)
	}
	// The frame's style sheet is its own file (shared with the cache page),
	// which the page's Content-Security-Policy must let in.
	if bg := browsertest.Eval[string](p, `getComputedStyle(document.querySelector("header")).backgroundColor`); bg != "rgb(29, 35, 48)" {
		t.Errorf("the stream page's header is %s: /ui/pages.css did not apply", bg)
	}
	// The groups' state stream is the broker's own: its label is no link
	// (its page would be refused).
	p.Do("back to the tree", chromedp.Navigate(brokertest.AdminURL(t, b, "/ui")))
	p.Await("the groups' state shard", func() bool {
		return browsertest.Eval[int](p, `[...document.querySelectorAll('tr.actor[data-kind="shard"] td.labels')].filter(td => td.textContent.includes("__felix.")).length`) > 0
	})
	if n := browsertest.Eval[int](p, `document.querySelectorAll('a.stream-link[href*="__felix."]').length`); n != 0 {
		t.Errorf("%d links to the broker's own streams", n)
	}
	p.Do("to the stream page", chromedp.Click(chromedp.CSS(link)))
	p.Await("the stream page again", func() bool { return browsertest.Eval[int](p, `document.querySelectorAll("tr.shard").length`) == 2 })

	const next = `(() => [...document.querySelectorAll("tr.shard td.next")].reduce((s, td) => s + Number(td.dataset.next), 0))()`
	p.Await("next offsets 0", func() bool { return browsertest.Eval[int](p, next) == 0 })
	subs := func(shard int) int {
		return p.CellInt(fmt.Sprintf(`tr.shard[data-shard="%d"]`, shard), `r.querySelector("td.subs").dataset.count`)
	}
	p.Await("one subscriber on shard 1", func() bool { return subs(1) == 1 })
	if n := subs(0); n != 0 {
		t.Errorf("shard 0 shows %d subscribers, want 0", n)
	}
	p.Await("the group on both shards", func() bool {
		return browsertest.Eval[int](p, `document.querySelectorAll('tr.group[data-group="billing"]').length`) == 2
	})

	const records = 60
	publishKeyed(t, ctx, c, st, records)
	p.Await(fmt.Sprintf("next offsets adding up to %d", records), func() bool { return browsertest.Eval[int](p, next) == records })
	p.Await("a sparkline with a rate", func() bool {
		return browsertest.Eval[bool](p, `[...document.querySelectorAll("tr.shard svg.spark")].some(s => Number(s.dataset.max) > 0)`)
	})
	p.Await("the group's lag", func() bool {
		return browsertest.Eval[int](p, `[...document.querySelectorAll('tr.group[data-group="billing"] td.lag')].reduce((s, td) => s + Number(td.textContent), 0)`) == records
	})
	browsertest.Screenshot(t, p, "ui-stream.png")
}

// TestUICache: the tree page lists a cache with its running shards and,
// live, its watch count (up when a prefix watch starts, one per shard)
// and its keys; the cache's link opens its page, which shows both shards,
// the watches, a write rate once puts come, and the watches gone once the
// watch is closed.
func TestUICache(t *testing.T) {
	b, cfg := adminBroker(t, "none")
	ctx := brokertest.Context(t, 90*time.Second)
	c := makeCache(t, ctx, b, cfg, "default", "sessions", false)
	k := client.Cache{Name: "sessions"}
	put := func(n int) {
		t.Helper()
		for i := range n {
			if _, err := c.Put(ctx, k, fmt.Sprintf("user/%d", i), []byte("v"), client.PutOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	put(1) // the shard of user/0 runs: the cache is in the tree

	p := browsertest.Open(t, ctx, brokertest.AdminURL(t, b, "/ui"))
	const row = `tr.cache[data-cache="default/default/sessions"]`
	p.Do("wait for the cache's row", chromedp.WaitVisible(chromedp.CSS(row)))
	watchesOnPage := func() int { return p.CellInt(row, `Number(r.querySelector("td.watches").dataset.watches)`) }
	if n := watchesOnPage(); n != 0 {
		t.Errorf("the caches list shows %d watches before any", n)
	}
	w, err := c.Watch(ctx, k, client.WatchPrefix("user/"), client.WatchFrom{})
	if err != nil {
		t.Fatal(err)
	}
	p.Await("2 watches (a prefix watch's, one per shard)", func() bool { return watchesOnPage() == 2 })
	put(10)
	p.Await("10 keys", func() bool { return p.CellInt(row, `Number(r.querySelector("td.keys").dataset.keys || -1)`) == 10 })
	if n := browsertest.Eval[int](p, `document.querySelectorAll('tr.actor[data-kind="shard"] a.cache-link').length`); n != 2 {
		t.Errorf("%d shard rows of the tree link to the cache page, want 2", n)
	}

	p.Do("open the cache's page", chromedp.Click(chromedp.CSS(row+" a.cache-link")))
	p.Await("the cache page's shards", func() bool { return browsertest.Eval[int](p, `document.querySelectorAll("tr.shard").length`) == 2 })
	if u := browsertest.Eval[string](p, `location.pathname + location.search`); u != "/ui/cache?tenant=default&ns=default&cache=sessions" {
		t.Errorf("the link led to %s", u)
	}
	if bg := browsertest.Eval[string](p, `getComputedStyle(document.querySelector("header")).backgroundColor`); bg != "rgb(29, 35, 48)" {
		t.Errorf("the cache page's header is %s: /ui/pages.css did not apply", bg)
	}
	const watches = `(() => [...document.querySelectorAll("tr.shard td.watches")].reduce((s, td) => s + Number(td.dataset.count), 0))()`
	p.Await("a watch on each shard", func() bool { return browsertest.Eval[int](p, watches) == 2 })
	put(40)
	p.Await("a write rate", func() bool {
		return browsertest.Eval[bool](p, `[...document.querySelectorAll("tr.shard td.writes svg.spark")].some(s => Number(s.dataset.max) > 0)`)
	})
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	p.Await("no watch once closed", func() bool { return browsertest.Eval[int](p, watches) == 0 })
	browsertest.Screenshot(t, p, "ui-cache.png")
}
