package admin

import (
	"embed"
	"encoding/hex"
	"net"
	"net/http"
	"strconv"

	"github.com/getfelix/felix-go/auth"
	"github.com/getfelix/felix-go/js"
)

// uiFiles is the live tree page: plain HTML, CSS and JavaScript, embedded so
// the admin endpoint serves it with no build step and no external asset.
//
//go:embed ui/index.html ui/stream.html ui/cache.html ui/live.html ui/common.js ui/pages.css
var uiFiles embed.FS

// uiConfig tells the page what the broker allows, so it shows only what
// works: the chaos buttons only with --chaos, the token field only when the
// debug routes need a token; in a cluster, which member's column is this
// broker's (the only one whose actors the kill route reaches).
type uiConfig struct {
	Chaos     bool   `json:"chaos"`
	NeedToken bool   `json:"need_token"`
	NodeID    string `json:"node_id,omitempty"`
	// BrowserPort is the browser front end's port, for the live page
	// (absent: it is off); BrowserTLS says it serves wss://.
	BrowserPort int  `json:"browser_port,omitempty"`
	BrowserTLS  bool `json:"browser_tls,omitempty"`
	// WebTransportPort is the browser front end's WebTransport port
	// (absent: off); WebTransportCertHash, in hex, the SHA-256 of its
	// self-signed certificate, which a page passes as
	// serverCertificateHashes (absent: a real certificate, none needed).
	WebTransportPort     int    `json:"webtransport_port,omitempty"`
	WebTransportCertHash string `json:"webtransport_cert_sha256,omitempty"`
}

// uiRoutes serves the pages and their config without a token: they hold
// no broker state. The tree page's script reads /debug/actors, or in a
// cluster /debug/cluster/actors (node.view), and posts to
// /debug/chaos/kill (node.manage) with the token the user pastes; the
// stream page reads /debug/stream and the cache page /debug/cache
// (node.view on the stream's or the cache's tenant), routed here too; the
// tree page's caches list reads /debug/cache for each cache in the tree.
func (rt *routes) uiRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /ui", uiPage("ui/index.html", "text/html; charset=utf-8"))
	mux.HandleFunc("GET /ui/stream", uiPage("ui/stream.html", "text/html; charset=utf-8"))
	mux.HandleFunc("GET /ui/cache", uiPage("ui/cache.html", "text/html; charset=utf-8"))
	mux.HandleFunc("GET /ui/common.js", uiPage("ui/common.js", "text/javascript; charset=utf-8"))
	mux.HandleFunc("GET /ui/pages.css", uiPage("ui/pages.css", "text/css; charset=utf-8"))
	mux.HandleFunc("GET /ui/live", rt.livePage())
	mux.HandleFunc("GET /ui/felix.js", jsModule("felix.js"))
	mux.HandleFunc("GET /ui/msgpack.js", jsModule("msgpack.js"))
	mux.HandleFunc("GET /ui/config", func(w http.ResponseWriter, _ *http.Request) {
		cfg := uiConfig{Chaos: rt.cfg.Chaos, NeedToken: rt.cfg.NeedToken, BrowserTLS: rt.cfg.BrowserTLS}
		if rt.cfg.BrowserPort != nil {
			cfg.BrowserPort = rt.cfg.BrowserPort()
		}
		if rt.cfg.WebTransport != nil {
			var hash []byte
			cfg.WebTransportPort, hash = rt.cfg.WebTransport()
			cfg.WebTransportCertHash = hex.EncodeToString(hash)
		}
		if n := rt.m.Cluster(); n != nil {
			cfg.NodeID = n.ID()
		}
		writeJSON(w, http.StatusOK, cfg)
	})
	mux.HandleFunc("GET /debug/stream", rt.requireStream(auth.ActionNodeView, queryTenant, rt.handleStreamView))
	mux.HandleFunc("GET /debug/cache", rt.requireStream(auth.ActionNodeView, queryTenant, rt.handleCacheView))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui", http.StatusFound)
	})
}

// uiPage serves one embedded file.
func uiPage(name, contentType string) http.HandlerFunc {
	return servePage(mustRead(uiFiles, name), contentType, func(*http.Request) string { return "'self'" })
}

// jsModule serves one of the JavaScript client's modules (package js),
// the same files a page outside the broker imports.
func jsModule(name string) http.HandlerFunc {
	return servePage(mustRead(js.Modules, name), "text/javascript; charset=utf-8", func(*http.Request) string { return "'self'" })
}

// livePage serves /ui/live. Its socket goes to the browser front end's own
// port, which 'self' does not cover, so that origin (under the name the
// page was loaded by) is added to connect-src.
func (rt *routes) livePage() http.HandlerFunc {
	return servePage(mustRead(uiFiles, "ui/live.html"), "text/html; charset=utf-8", func(r *http.Request) string {
		port := 0
		if rt.cfg.BrowserPort != nil {
			port = rt.cfg.BrowserPort()
		}
		if port == 0 {
			return "'self'"
		}
		host := r.Host
		if h, _, err := net.SplitHostPort(r.Host); err == nil {
			host = h
		}
		scheme := "ws"
		if rt.cfg.BrowserTLS {
			scheme = "wss"
		}
		src := "'self' " + scheme + "://" + net.JoinHostPort(host, strconv.Itoa(port))
		if rt.cfg.WebTransport != nil {
			if wt, _ := rt.cfg.WebTransport(); wt != 0 {
				src += " https://" + net.JoinHostPort(host, strconv.Itoa(wt)) // connect-src covers WebTransport too
			}
		}
		return src
	})
}

func mustRead(fsys embed.FS, name string) []byte {
	b, err := fsys.ReadFile(name)
	if err != nil {
		panic("admin: the embedded " + name + " is missing: " + err.Error()) // a build defect, not input
	}
	return b
}

// servePage serves page with the headers every page gets; connect says
// where its scripts may connect.
func servePage(page []byte, contentType string, connect func(*http.Request) string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", contentType)
		h.Set("Cache-Control", "no-cache")
		// Everything the pages need is inline or same-origin (the script
		// they share, /ui/common.js; the client modules, /ui/felix.js).
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; connect-src "+connect(r)+"; img-src 'self' data:")
		h.Set("X-Content-Type-Options", "nosniff")
		_, _ = w.Write(page)
	}
}

// queryTenant is the tenant of a stream named ?tenant=T&ns=N&stream=S
// (or a cache, ?tenant=T&ns=N&cache=C).
func queryTenant(r *http.Request) string { return r.URL.Query().Get("tenant") }
