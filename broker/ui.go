package broker

import (
	"embed"
	"net/http"
)

// uiFiles is the live tree page: plain HTML, CSS and JavaScript, embedded so
// the admin endpoint serves it with no build step and no external asset.
//
//go:embed ui/index.html
var uiFiles embed.FS

// uiConfig tells the page what the broker allows, so it shows only what
// works: the chaos buttons only with --chaos, the token field only when the
// debug routes need a token.
type uiConfig struct {
	Chaos     bool `json:"chaos"`
	NeedToken bool `json:"need_token"`
}

// uiRoutes serves the page and its config without a token: they hold no
// broker state. The page's script reads /debug/actors (node.view) and
// posts to /debug/chaos/kill (node.manage) with the token the user pastes.
func (b *Broker) uiRoutes(mux *http.ServeMux) {
	page, err := uiFiles.ReadFile("ui/index.html")
	if err != nil {
		panic("broker: the embedded ui/index.html is missing: " + err.Error()) // a build defect, not input
	}
	mux.HandleFunc("GET /ui", func(w http.ResponseWriter, _ *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Cache-Control", "no-cache")
		// Everything the page needs is inline and same-origin.
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:")
		h.Set("X-Content-Type-Options", "nosniff")
		_, _ = w.Write(page)
	})
	mux.HandleFunc("GET /ui/config", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, uiConfig{Chaos: b.cfg.Chaos, NeedToken: b.cfg.Auth != "none"})
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui", http.StatusFound)
	})
}
