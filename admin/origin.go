package admin

import (
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
)

// The endpoint's defence against requests a browser sends on another
// site's behalf, which no token stops under auth none (and a token does
// not exist there to stop them):
//
//   - DNS rebinding: a page of evil.example rebinds its name to 127.0.0.1
//     and reads the answers as same-origin. Its requests carry
//     Host: evil.example, so every request whose Host is not localhost, an
//     IP address or a name in Config.AllowedHosts is refused 421. Any IP
//     address passes: a rebinding page's requests carry its own name, and
//     a page served from an IP address is that address's own. That is the
//     rule of geth's --http.vhosts and Transmission's rpc-host-whitelist,
//     and it keeps the probes and a scrape working when the endpoint
//     listens on every interface and is reached at the pod's address.
//     Checking only the bound address was rejected for that reason.
//   - Cross-site request forgery: a page may POST a form or a text/plain
//     fetch to the endpoint without asking. Every request that changes
//     something (any method but GET and HEAD) must say Content-Type:
//     application/json, which a browser sends cross-origin only after a
//     CORS preflight the endpoint never grants, and must carry no Origin or
//     one whose host is the request's Host; else 415 or 403. The token
//     check comes after, as before, where auth is on.

// hostGuard wraps the endpoint's routes with the Host, Origin and
// Content-Type checks.
func (rt *routes) hostGuard(next http.Handler) http.Handler {
	allowed := make(map[string]bool, len(rt.cfg.AllowedHosts))
	for _, h := range rt.cfg.AllowedHosts {
		allowed[strings.ToLower(strings.TrimSuffix(h, "."))] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !hostAllowed(r.Host, allowed) {
			rt.refused("foreign_host")
			writeJSON(w, http.StatusMisdirectedRequest, map[string]string{"error": fmt.Sprintf(
				"this admin endpoint does not answer to Host %q: it answers to localhost, IP addresses and the names in admin_allowed_hosts (--admin-allowed-hosts); add this name there if it is the broker's own", r.Host)})
			return
		}
		if changes(r) {
			if origin := r.Header.Get("Origin"); !sameOrigin(origin, r.Host) {
				rt.refused("cross_origin")
				writeJSON(w, http.StatusForbidden, map[string]string{"error": fmt.Sprintf(
					"cross-origin request refused: Origin %q is not this endpoint (%s); a page of another site may not change the broker", origin, r.Host)})
				return
			}
			if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
				rt.refused("not_json")
				writeJSON(w, http.StatusUnsupportedMediaType, map[string]string{"error": fmt.Sprintf(
					"%s %s needs Content-Type: application/json, got %q (felix and the /ui pages send it; with curl add -H 'Content-Type: application/json')", r.Method, r.URL.Path, r.Header.Get("Content-Type"))})
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// changes reports whether r may change something, so must prove it comes
// from no other site. pprof's symbol lookup is a POST that only reads
// (go tool pprof posts addresses as text), and is left out.
func changes(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		return false
	}
	return !(r.Method == http.MethodPost && r.URL.Path == "/debug/pprof/symbol")
}

// hostAllowed reports whether a Host header names this endpoint:
// localhost, an IP address, or one of allowed (lower case, no final dot),
// on any port. An empty Host (HTTP/1.0) passes: browsers always send one.
func hostAllowed(host string, allowed map[string]bool) bool {
	if host == "" {
		return true
	}
	name := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		name = h
	}
	name = strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(name, "["), "]"), ".")
	if _, err := netip.ParseAddr(name); err == nil {
		return true
	}
	name = strings.ToLower(name)
	return name == "localhost" || allowed[name]
}

// sameOrigin reports whether origin (an Origin header, "" when absent) is
// the endpoint's own: http or https (a proxy may terminate TLS in front of
// it) on the request's Host. "null", which sandboxed and file pages send,
// is not.
func sameOrigin(origin, host string) bool {
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return false
	}
	return strings.EqualFold(u.Host, host)
}
