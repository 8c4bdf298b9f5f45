// Package admin owns the broker's admin HTTP endpoint: its routes, the
// bearer-token checks on them, and the live pages.
//
// The probes (/live, /ready) and /metrics are open to whoever reaches the
// endpoint (loopback by default). The debug routes (/debug/actors,
// /debug/stream, /debug/cache, /debug/cluster/..., /debug/pprof/ with
// pprof on) need a token granting node.view; the ones that change
// something (the chaos routes /debug/chaos/kill and /debug/chaos/disk, a
// drain, a replica move) need node.manage. The pages (/ui, /ui/stream,
// /ui/cache, /ui/config) hold no broker state and are served without a
// token: their scripts call the debug routes with the token the user
// pastes.
//
// Node rights are the operator's, so they hold only in a token signed by a
// key not restricted to tenants (the broker's own key, or an auth_keys key
// without felix_tenants): such a token's node.view and node.manage reach
// every route and every tenant's streams. A token signed by a key
// restricted to tenants keeps its stream rights, but its node grants hold
// for one thing only: node.view on the routes that show one stream or
// cache of its own tenant (/debug/stream, /debug/cache,
// /debug/cluster/replicas). It is refused 403 on every route about the
// node as a whole (the tree, the cluster, pprof) and on every route that
// changes something, its own tenant's replica move included: a kill, a
// failing disk, a drain or a move lands on a member that serves every
// tenant. Whoever holds a tenant's key can thus read that tenant's stream
// and cache pages and nothing else of the node.
//
// Before any of that, every request passes the checks a browser cannot be
// made to pass on another site's behalf (origin.go): its Host must be
// localhost, an IP address or a name of Config.AllowedHosts (421
// otherwise, against DNS rebinding), and a request that changes something
// (any method but GET and HEAD) must send Content-Type: application/json
// and no Origin or the endpoint's own (415 or 403 otherwise, against
// cross-site posts). These hold under auth none too, where no token would
// stop such a request.
//
// The package reaches the broker only through service.Service's types and
// Member, the introspection the routes need, which the broker implements
// and hands to Start; it never imports the broker.
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/auth"
	"github.com/getfelix/felix-go/cluster"
	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/wire"
)

// Member is the broker as the admin routes see it beyond its service: its
// internals to show and the chaos it may be asked for. The broker
// implements it; its methods are called from the endpoint's goroutines,
// several at once.
type Member interface {
	// AuthorizeNode checks a bearer token (empty when the request sent
	// none) for action on this node, or, when tenant is not "", on that
	// tenant's streams only (auth.Principal.CheckNodeTenant: a token
	// whose key is restricted to tenants may view its own tenant's
	// streams, and nothing of the node as a whole). nil lets the request
	// through; an error wrapping wire.ErrForbidden refuses a valid token
	// without the right; any other error refuses the token itself, and
	// says what to send. With auth none every token passes.
	AuthorizeNode(token string, action auth.Action, tenant string) error
	// Ready reports whether the broker accepts connections: false once it
	// began stopping.
	Ready() bool
	// Actors lists the live supervision tree, parents before children.
	Actors() []actors.Info
	// Kill crashes or stops actors as req says (actors.Kill), or fails
	// with ErrChaosOff or one of actors.Kill's errors (ErrNoSuchActor,
	// ErrNotKillable, ErrBadKillRequest).
	Kill(req actors.KillRequest) (actors.KillResult, error)
	// FailDisk makes the durable logs' disk fail every write (or work
	// again); ErrChaosOff without --chaos.
	FailDisk(fail bool) error
	// Session is a session with every right on tenant, for a route that
	// checked the admin token already. No connection is behind it: it is
	// for the stream administration calls (Stream, ShardOwners,
	// Replication, Groups, DescribeGroupOn), not for publishing or
	// subscribing, and Close does nothing.
	Session(tenant string) service.Session
	// ShardOffsets reads a durable shard's log offsets; a shard that is
	// not running is started by the lookup, as a reader's would be.
	ShardOffsets(ctx context.Context, scope wire.Scope, shard uint32) (LogOffsets, error)
	// CacheStatus is a cache shard's status; a shard that is not running
	// is started by the lookup, as a reader's would be.
	CacheStatus(ctx context.Context, scope wire.Scope, shard uint32) (CacheShardStatus, error)
	// Cluster is the broker's cluster membership, or nil on a single
	// broker and while a member is still starting.
	Cluster() Cluster
	// PutKafkaUser adds a Kafka SCRAM user's credential for its
	// mechanism, or replaces the one the user had for it: an error
	// wrapping wire.ErrInvalidRequest says what is wrong with it, one
	// wrapping ErrNoKafkaUsers that the broker keeps no users.
	PutKafkaUser(u KafkaUser) error
	// KafkaUsers lists tenant's users' credentials (every tenant's when
	// tenant is ""), without their salts and keys.
	KafkaUsers(tenant string) ([]KafkaUser, error)
	// DeleteKafkaUser removes every credential of a user; false when it
	// had none.
	DeleteKafkaUser(tenant, user string) (bool, error)
}

// Cluster is a cluster member as the cluster routes and the pages see it;
// *cluster.Node implements it.
type Cluster interface {
	// ID is this member's node id.
	ID() string
	// Status is the cluster as this member sees it (GET /debug/cluster).
	Status(ctx context.Context) cluster.Status
	// Drain asks member node to hand its in-memory shards to the others.
	Drain(ctx context.Context, node string) error
	// Trees gathers every member's supervision tree.
	Trees(ctx context.Context) cluster.Trees
	// ReplicaSet is a replicated shard's replica set, with its move while
	// one is under way; false when key has none.
	ReplicaSet(key cluster.ShardKey) (cluster.ReplicaSet, bool)
	// MoveReplica starts moving key's replica from member from to member
	// to; cluster.ErrMoveRefused when the move may not be made.
	MoveReplica(ctx context.Context, key cluster.ShardKey, from, to string) error
}

// LogOffsets are a durable shard's log offsets: the oldest record kept,
// the next record's offset, and the end readers see.
type LogOffsets struct {
	First, Next, Committed uint64
}

// Config is what the endpoint serves and how.
type Config struct {
	// Addr is the host:port to listen on; with port 0 the system picks
	// one (Server.Addr says which).
	Addr string
	// Metrics is what /metrics exposes; nil routes no /metrics.
	Metrics *prometheus.Registry
	// Log gets the endpoint's start and stop and every chaos, drain and
	// move request (zero: zerolog's zero Logger, which writes nowhere).
	Log zerolog.Logger
	// Chaos tells the pages that the chaos routes work, so they show the
	// kill buttons; the routes themselves ask Member.Kill and
	// Member.FailDisk, which refuse without chaos.
	Chaos bool
	// NeedToken tells the pages that the debug routes need a token (the
	// broker's auth is not none), so they show the token field.
	NeedToken bool
	// Pprof routes Go's runtime profiles under /debug/pprof/ (off when
	// false).
	Pprof bool
	// Rates counts the fan-out of the streams a stream page watches; the
	// broker's fan-out hook feeds it. nil: the page shows no fan-out rate.
	Rates *FanoutRates
	// AllowedHosts are the names the endpoint answers to besides
	// localhost and IP addresses (any port); a request with another Host
	// is refused 421. Nil: none.
	AllowedHosts []string
	// BrowserPort says on which port the browser front end listens, for
	// the live page (/ui/live); nil or 0: it is off. BrowserTLS says it
	// serves wss://.
	BrowserPort func() int
	BrowserTLS  bool
	// WebTransport says on which UDP port the browser front end serves
	// WebTransport (0: off) and, when its certificate is self-signed, that
	// certificate's SHA-256 for serverCertificateHashes (nil otherwise).
	// Nil: off.
	WebTransport func() (port int, certHash []byte)
	// Refused is told why each request the endpoint's checks refused was
	// refused: no_token, invalid_token, forbidden, foreign_host,
	// cross_origin or not_json (nil: not told).
	Refused func(reason string)
}

// Server is a running admin endpoint.
type Server struct {
	ln   net.Listener
	srv  *http.Server
	done chan struct{}
}

// routes are the endpoint's handlers.
type routes struct {
	cfg Config
	m   Member
}

// idleTimeout closes a keep-alive connection that sends no request for
// this long: without it, 19 980 idle connections stayed open for 40 s. A
// var so a test can shorten it.
var idleTimeout = 10 * time.Second

// Start listens on cfg.Addr and serves the endpoint until Close.
func Start(cfg Config, m Member) (*Server, error) {
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("admin endpoint %s: %w (choose another --admin address, or --admin '' to turn it off)", cfg.Addr, err)
	}
	s := &Server{ln: ln, done: make(chan struct{})}
	rt := &routes{cfg: cfg, m: m}
	mux := http.NewServeMux()
	if reg := cfg.Metrics; reg != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	}
	// Live: the process answers. Ready: it accepts connections (false while stopping).
	mux.HandleFunc("GET /live", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /ready", func(w http.ResponseWriter, _ *http.Request) {
		if !m.Ready() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	mux.HandleFunc("GET /debug/actors", rt.requireNode(auth.ActionNodeView, rt.handleActors))
	rt.clusterRoutes(mux)
	rt.kafkaUserRoutes(mux)
	rt.uiRoutes(mux)
	// Always routed, so a request with chaos off gets a clear 403 rather than a 404.
	mux.HandleFunc("POST /debug/chaos/kill", rt.requireNode(auth.ActionNodeManage, rt.handleKill))
	mux.HandleFunc("POST /debug/chaos/disk", rt.requireNode(auth.ActionNodeManage, rt.handleDisk))
	writeTimeout := 30 * time.Second // a scrape of a busy broker's metrics takes a while
	if cfg.Pprof {
		rt.pprofRoutes(mux)
		// net/http/pprof refuses a CPU profile or trace longer than the
		// write timeout; its default profile is 30 s.
		writeTimeout = 70 * time.Second
	}
	s.srv = &http.Server{
		Handler:           rt.hostGuard(mux),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    16 << 10,
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			cfg.Log.Error().Err(err).Msg("admin endpoint stopped")
		}
	}()
	cfg.Log.Info().Str("admin", ln.Addr().String()).Msg("admin endpoint serving /metrics, /live, /ready")
	return s, nil
}

// Addr is the bound address.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Close stops the endpoint, waiting (until ctx ends) for the requests in
// flight.
func (s *Server) Close(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	<-s.done
	return err
}

// requireNode guards a debug or chaos route about the node as a whole:
// the request needs a bearer token granting action from a key not
// restricted to tenants. A missing or refused token is answered 401 with
// WWW-Authenticate (RFC 6750), a token without the right 403, each with a
// JSON {"error"} that says which. With auth none every request passes.
func (rt *routes) requireNode(action auth.Action, h http.HandlerFunc) http.HandlerFunc {
	return rt.require(action, nil, h)
}

// requireStream guards a route that shows or changes one stream, whose
// tenant tenantOf reads from the request: the token must grant action on
// that tenant's streams (Member.AuthorizeNode with the tenant).
func (rt *routes) requireStream(action auth.Action, tenantOf func(*http.Request) string, h http.HandlerFunc) http.HandlerFunc {
	return rt.require(action, tenantOf, h)
}

func (rt *routes) require(action auth.Action, tenantOf func(*http.Request) string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		token, ok := bearerToken(r.Header.Get("Authorization"))
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="felix"`)
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "unauthenticated: the Authorization header must be \"Bearer TOKEN\""})
			return
		}
		tenant := ""
		if tenantOf != nil {
			tenant = tenantOf(r)
		}
		err := rt.m.AuthorizeNode(token, action, tenant)
		switch {
		case err == nil:
			h(w, r)
		case errors.Is(err, auth.ErrNodeTenantKey):
			rt.refused("forbidden")
			writeJSON(w, http.StatusForbidden, map[string]string{"error": fmt.Sprintf(
				"%v: the token's signing key is restricted to tenants, so its %s grant does not hold here; use a token of a key that is not (felix token create on the broker's machine)", err, action)})
		case errors.Is(err, auth.ErrNodeOtherTenant):
			rt.refused("forbidden")
			writeJSON(w, http.StatusForbidden, map[string]string{"error": err.Error()})
		case errors.Is(err, wire.ErrForbidden):
			rt.refused("forbidden")
			writeJSON(w, http.StatusForbidden, map[string]string{"error": fmt.Sprintf(
				"%v: the token does not grant %s (mint one with felix token create --grant %s:*)", err, action, action)})
		default:
			challenge := `Bearer realm="felix"`
			if token != "" {
				rt.refused("invalid_token")
				challenge += `, error="invalid_token"`
			} else {
				rt.refused("no_token")
			}
			w.Header().Set("WWW-Authenticate", challenge)
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": err.Error()})
		}
	}
}

func (rt *routes) refused(reason string) {
	if rt.cfg.Refused != nil {
		rt.cfg.Refused(reason)
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

// pprofRoutes routes Go's runtime profiles (net/http/pprof) under
// /debug/pprof/, each behind a node.view token like the tree: a profile
// shows the broker's internals, and a CPU profile costs CPU while it runs.
func (rt *routes) pprofRoutes(mux *http.ServeMux) {
	view := func(h http.HandlerFunc) http.HandlerFunc { return rt.requireNode(auth.ActionNodeView, h) }
	mux.HandleFunc("GET /debug/pprof/", view(pprof.Index)) // named profiles: heap, goroutine, allocs, …
	mux.HandleFunc("GET /debug/pprof/cmdline", view(pprof.Cmdline))
	mux.HandleFunc("GET /debug/pprof/profile", view(pprof.Profile))
	mux.HandleFunc("GET /debug/pprof/symbol", view(pprof.Symbol))
	mux.HandleFunc("POST /debug/pprof/symbol", view(pprof.Symbol))
	mux.HandleFunc("GET /debug/pprof/trace", view(pprof.Trace))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
