package admin_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/getfelix/felix-go/admin/ui/browsertest"
	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
)

// TestUILiveWebTransport: with browser_webtransport_listen the live page
// connects over WebTransport (trusting the broker's short-lived
// certificate by the hash /ui/config gives), says so, receives every
// record the Go client publishes, in order, with offsets, and what is
// typed into its box reaches a Go subscriber; after the broker restarts
// (a new certificate) it is back on WebTransport and resumes after the
// last offset it showed. A wrong token and a page of a foreign origin are
// refused over WebTransport with reasons that say why.
func TestUILiveWebTransport(t *testing.T) {
	cfg := liveConfig(t)
	cfg.BrowserWebTransportListen = "127.0.0.1:0"
	b := brokertest.Start(t, cfg)
	ctx := brokertest.Context(t, 90*time.Second)
	gc := brokertest.Dial(t, b, cfg)
	st := client.Stream{Name: "live-wt"}
	if _, err := gc.CreateStream(ctx, st, client.StreamConfig{Durable: true}); err != nil {
		t.Fatal(err)
	}
	token := brokertest.Token(t, cfg, "default")

	t.Run("wrong token", func(t *testing.T) {
		p := livePage(t, ctx, b.AdminAddr().String(), "live-wt", "not-a-token")
		p.Await("the refusal", func() bool { return strings.HasPrefix(p.StatusLine(), "unauthenticated: ") })
	})
	t.Run("foreign origin", func(t *testing.T) {
		// A page of another origin opens a session with the right hash and
		// its control stream, sends a frame as the client's auth, and
		// shows the answer's text (msgpack keeps strings as they are).
		hash := webTransportCertHash(t, b.AdminAddr().String())
		foreign := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprintf(w, `<p id="status">connecting</p><script>
const hash = Uint8Array.from("%s".match(/../g), (h) => parseInt(h, 16));
const wt = new WebTransport("https://%s/", { serverCertificateHashes: [{ algorithm: "sha-256", value: hash }] });
const show = (s) => { document.getElementById("status").textContent = s; };
wt.closed.catch(() => {});
wt.ready.then(async () => {
  const s = await wt.createBidirectionalStream();
  await s.writable.getWriter().write(new Uint8Array([0, 0, 0, 2, 1, 0x80]));
  const r = s.readable.getReader();
  let text = "";
  for (;;) {
    const { value, done } = await r.read();
    if (done) break;
    text += new TextDecoder().decode(value);
  }
  show(text.slice(text.indexOf("forbidden")));
}).catch((e) => show("failed: " + e));
</script>`, hash, b.BrowserWebTransportAddr())
		}))
		t.Cleanup(foreign.Close)
		p := browsertest.Open(t, ctx, foreign.URL)
		want := "origin " + foreign.URL + " is not in browser_allowed_origins"
		p.Await("the refusal naming the origin", func() bool {
			s := p.StatusLine()
			return strings.HasPrefix(s, "forbidden") && strings.Contains(s, want)
		})
	})
	t.Run("records both ways", func(t *testing.T) {
		p := livePage(t, ctx, b.AdminAddr().String(), "live-wt", token)
		p.Await("subscribed over WebTransport", func() bool {
			return strings.HasPrefix(p.StatusLine(), "subscribed (durable) over webtransport")
		})
		if got := browsertest.Eval[string](p, `document.getElementById("transport").textContent`); got != "webtransport" {
			t.Fatalf("the page says it is on %q, want webtransport", got)
		}
		// The restart gives the broker a new certificate: the page fetches
		// its hash and is back on WebTransport.
		liveRoundTrip(t, ctx, p, cfg, b, gc, st)
		if got := browsertest.Eval[string](p, `document.getElementById("transport").textContent`); got != "webtransport" {
			t.Fatalf("after the restart the page is on %q, want webtransport (title: %q)", got, browsertest.Eval[string](p, `document.getElementById("transport").title`))
		}
	})
}

// webTransportCertHash is /ui/config's webtransport_cert_sha256.
func webTransportCertHash(t *testing.T, adminAddr string) string {
	t.Helper()
	resp, err := http.Get("http://" + adminAddr + "/ui/config")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var cfg struct {
		Hash string `json:"webtransport_cert_sha256"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&cfg); err != nil || len(cfg.Hash) != 64 {
		t.Fatalf("/ui/config: hash %q, %v; want 64 hex digits", cfg.Hash, err)
	}
	return cfg.Hash
}
