package broker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
)

// adminServer serves /metrics, /live and /ready over plain HTTP. It binds
// loopback by default because it has no authentication.
type adminServer struct {
	ln    net.Listener
	srv   *http.Server
	ready atomic.Bool
	done  chan struct{}
}

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
	mux.HandleFunc("GET /debug/actors", b.handleActors)
	// Always routed, so a request with chaos off gets a clear 403 rather than a 404.
	mux.HandleFunc("POST /debug/chaos/kill", b.handleKill)
	a.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
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

func (a *adminServer) addr() net.Addr { return a.ln.Addr() }

func (a *adminServer) setReady(ready bool) { a.ready.Store(ready) }

func (a *adminServer) close(ctx context.Context) error {
	err := a.srv.Shutdown(ctx)
	<-a.done
	return err
}
