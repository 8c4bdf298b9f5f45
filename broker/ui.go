package broker

import (
	"embed"
	"net/http"

	"github.com/getfelix/felix-go/auth"
)

// uiFiles is the live tree page: plain HTML, CSS and JavaScript, embedded so
// the admin endpoint serves it with no build step and no external asset.
//
//go:embed ui/index.html ui/stream.html ui/common.js
var uiFiles embed.FS

// uiConfig tells the page what the broker allows, so it shows only what
// works: the chaos buttons only with --chaos, the token field only when the
// debug routes need a token; in a cluster, which member's column is this
// broker's (the only one whose actors the kill route reaches).
type uiConfig struct {
	Chaos     bool   `json:"chaos"`
	NeedToken bool   `json:"need_token"`
	NodeID    string `json:"node_id,omitempty"`
}

// uiRoutes serves the pages and their config without a token: they hold
// no broker state. The tree page's script reads /debug/actors, or in a
// cluster /debug/cluster/actors (node.view), and posts to
// /debug/chaos/kill (node.manage) with the token the user pastes; the
// stream page reads /debug/stream (node.view), routed here too.
func (b *Broker) uiRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /ui", uiPage("ui/index.html", "text/html; charset=utf-8"))
	mux.HandleFunc("GET /ui/stream", uiPage("ui/stream.html", "text/html; charset=utf-8"))
	mux.HandleFunc("GET /ui/common.js", uiPage("ui/common.js", "text/javascript; charset=utf-8"))
	mux.HandleFunc("GET /ui/config", func(w http.ResponseWriter, _ *http.Request) {
		cfg := uiConfig{Chaos: b.cfg.Chaos, NeedToken: b.cfg.Auth != "none"}
		if n := b.node.Load(); n != nil {
			cfg.NodeID = n.ID()
		}
		writeJSON(w, http.StatusOK, cfg)
	})
	mux.HandleFunc("GET /debug/stream", b.requireNode(auth.ActionNodeView, b.handleStreamView))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui", http.StatusFound)
	})
}

// uiPage serves one embedded file.
func uiPage(name, contentType string) http.HandlerFunc {
	page, err := uiFiles.ReadFile(name)
	if err != nil {
		panic("broker: the embedded " + name + " is missing: " + err.Error()) // a build defect, not input
	}
	return func(w http.ResponseWriter, _ *http.Request) {
		h := w.Header()
		h.Set("Content-Type", contentType)
		h.Set("Cache-Control", "no-cache")
		// Everything the pages need is inline or same-origin (the script
		// both share, /ui/common.js).
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self' 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:")
		h.Set("X-Content-Type-Options", "nosniff")
		_, _ = w.Write(page)
	}
}
