package broker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/getfelix/felix-go/auth"
	"github.com/getfelix/felix-go/wire"
)

// adminServer serves /metrics, /live and /ready over plain HTTP, open to
// whoever reaches it (loopback by default), and the debug and chaos routes,
// which need a bearer token with node.view or node.manage.
type adminServer struct {
	ln    net.Listener
	srv   *http.Server
	ready atomic.Bool
	done  chan struct{}
}

// adminIdleTimeout closes a keep-alive connection that sends no request
// for this long: without it, 19 980 idle connections stayed open for 40 s
// (issue #11). A var so a test can shorten it.
var adminIdleTimeout = 10 * time.Second

func startAdmin(addr string, reg *prometheus.Registry, log zerolog.Logger, b *Broker) (*adminServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("broker: admin endpoint %s: %w (choose another --admin address, or --admin '' to turn it off)", addr, err)
	}
	a := &adminServer{ln: ln, done: make(chan struct{})}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	// Live: the process answers. Ready: it accepts connections (false while stopping).
	mux.HandleFunc("GET /live", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /ready", func(w http.ResponseWriter, _ *http.Request) {
		if !a.ready.Load() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	mux.HandleFunc("GET /debug/actors", b.requireNode(auth.ActionNodeView, b.handleActors))
	b.clusterRoutes(mux)
	b.uiRoutes(mux)
	// Always routed, so a request with chaos off gets a clear 403 rather than a 404.
	mux.HandleFunc("POST /debug/chaos/kill", b.requireNode(auth.ActionNodeManage, b.handleKill))
	mux.HandleFunc("POST /debug/chaos/disk", b.requireNode(auth.ActionNodeManage, b.handleDisk))
	writeTimeout := 30 * time.Second // a scrape of a busy broker's metrics takes a while
	if b.cfg.Pprof {
		servePprof(mux, b)
		// net/http/pprof refuses a CPU profile or trace longer than the
		// write timeout; its default profile is 30 s.
		writeTimeout = 70 * time.Second
	}
	a.srv = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       adminIdleTimeout,
		MaxHeaderBytes:    16 << 10,
	}
	a.ready.Store(true)
	go func() {
		defer close(a.done)
		if err := a.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error().Err(err).Msg("admin endpoint stopped")
		}
	}()
	log.Info().Str("admin", ln.Addr().String()).Msg("admin endpoint serving /metrics, /live, /ready")
	return a, nil
}

// requireNode guards a debug or chaos route: the request needs a bearer
// token granting action. A missing or refused token is answered 401 with
// WWW-Authenticate (RFC 6750), a token without the right 403, each with a
// JSON {"error"} that says which. With auth none every request passes.
func (b *Broker) requireNode(action auth.Action, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		token, ok := bearerToken(r.Header.Get("Authorization"))
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="felix"`)
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "unauthenticated: the Authorization header must be \"Bearer TOKEN\""})
			return
		}
		err := b.AuthorizeNode(token, action)
		switch {
		case err == nil:
			h(w, r)
		case errors.Is(err, wire.ErrForbidden):
			b.metrics.AuthRefused.WithLabelValues("forbidden").Inc()
			writeJSON(w, http.StatusForbidden, map[string]string{"error": fmt.Sprintf(
				"%v: the token does not grant %s (mint one with felix token create --grant %s:*)", err, action, action)})
		default:
			challenge := `Bearer realm="felix"`
			if token != "" {
				b.metrics.AuthRefused.WithLabelValues("invalid_token").Inc()
				challenge += `, error="invalid_token"`
			} else {
				b.metrics.AuthRefused.WithLabelValues("no_token").Inc()
			}
			w.Header().Set("WWW-Authenticate", challenge)
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": err.Error()})
		}
	}
}

// bearerToken reads "Bearer TOKEN" (the scheme case-insensitive, RFC 6750).
// An absent header is an empty token, so AuthorizeNode says what to send;
// ok is false only for a header of another form.
func bearerToken(header string) (token string, ok bool) {
	if header == "" {
		return "", true
	}
	scheme, token, _ := strings.Cut(header, " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimSpace(token), true
}

func (a *adminServer) addr() net.Addr { return a.ln.Addr() }

func (a *adminServer) setReady(ready bool) { a.ready.Store(ready) }

func (a *adminServer) close(ctx context.Context) error {
	err := a.srv.Shutdown(ctx)
	<-a.done
	return err
}

// servePprof routes Go's runtime profiles (net/http/pprof) under
// /debug/pprof/, each behind a node.view token like the tree: a profile
// shows the broker's internals, and a CPU profile costs CPU while it runs.
func servePprof(mux *http.ServeMux, b *Broker) {
	view := func(h http.HandlerFunc) http.HandlerFunc { return b.requireNode(auth.ActionNodeView, h) }
	mux.HandleFunc("GET /debug/pprof/", view(pprof.Index)) // named profiles: heap, goroutine, allocs, …
	mux.HandleFunc("GET /debug/pprof/cmdline", view(pprof.Cmdline))
	mux.HandleFunc("GET /debug/pprof/profile", view(pprof.Profile))
	mux.HandleFunc("GET /debug/pprof/symbol", view(pprof.Symbol))
	mux.HandleFunc("POST /debug/pprof/symbol", view(pprof.Symbol))
	mux.HandleFunc("GET /debug/pprof/trace", view(pprof.Trace))
}
