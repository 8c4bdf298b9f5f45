package webfront

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/rs/zerolog"

	"github.com/getfelix/felix-go/service"
)

// Config is the front end's settings; the zero value of each field says
// what it means.
type Config struct {
	// Addr is the TCP address to listen on (port 0: the system picks).
	Addr string
	// TLS, when set, serves wss:// with it; nil serves ws://.
	TLS *tls.Config
	// AllowOrigin says whether a page of this origin (scheme://host[:port],
	// as browsers send it) may connect. A request without an Origin header
	// is not a browser's and is always let through: the token is what
	// authenticates, and origins only keep foreign pages from using a
	// broker on a user's network. Nil allows no browser origin.
	AllowOrigin func(origin string) bool
	// MaxFrameBytes caps a message after the auth (felix/1's
	// max_frame_bytes); PreAuthMaxFrameBytes before it.
	MaxFrameBytes        int
	PreAuthMaxFrameBytes int
	// AuthTimeout is how long a connection may take to send its auth
	// (zero: 10 s).
	AuthTimeout time.Duration
	// Admit takes a connection slot (per broker and per IP) before the
	// upgrade is served (for WebTransport: once the QUIC handshake is
	// done); release gives it back. Nil admits everything.
	Admit func(remote net.Addr, displace func()) (release func(), err error)
	// WebTransportAddr, when set, is the UDP address to serve WebTransport
	// over HTTP/3 on (port 0: the system picks), with WebTransportTLS
	// (required then; its ALPN is replaced by h3).
	WebTransportAddr string
	WebTransportTLS  *tls.Config
	Log              zerolog.Logger
}

// sessionIDBase keeps browser session ids apart from felix/1's (from 1)
// and Kafka's (from 1<<62).
const sessionIDBase = 1<<62 | 1<<61

// defaultAuthTimeout is Config.AuthTimeout's zero.
const defaultAuthTimeout = 10 * time.Second

// Server is a running WebSocket front end.
type Server struct {
	svc  service.Service
	cfg  Config
	ln   net.Listener
	http *http.Server
	wt   *webTransport // nil without WebTransportAddr

	nextID atomic.Uint64
	// ctx ends every connection when the server closes; conns waits for
	// their goroutines (hijacked connections are not http.Server's to wait for).
	ctx    context.Context
	cancel context.CancelFunc
	conns  sync.WaitGroup
	served chan struct{}
}

// Listen binds cfg.Addr and serves browsers in front of svc until Close.
func Listen(svc service.Service, cfg Config) (*Server, error) {
	if cfg.AuthTimeout == 0 {
		cfg.AuthTimeout = defaultAuthTimeout
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("webfront: listen %s: %w", cfg.Addr, err)
	}
	if cfg.TLS != nil {
		tc := cfg.TLS.Clone()
		tc.NextProtos = []string{"http/1.1"} // WebSocket upgrades over HTTP/1.1 only
		ln = tls.NewListener(ln, tc)
	}
	s := &Server{svc: svc, cfg: cfg, ln: ln, served: make(chan struct{})}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if cfg.WebTransportAddr != "" {
		if err := s.listenWebTransport(); err != nil {
			_ = ln.Close()
			return nil, err
		}
	}
	s.http = &http.Server{
		Handler: s,
		// Only the upgrade request is HTTP; its headers are small.
		ReadHeaderTimeout: cfg.AuthTimeout,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          nil,
	}
	go func() {
		defer close(s.served)
		_ = s.http.Serve(ln)
	}()
	return s, nil
}

// Addr is the bound address.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// WebTransportAddr is the bound UDP address of WebTransport, or nil when
// it is off.
func (s *Server) WebTransportAddr() net.Addr {
	if s.wt == nil {
		return nil
	}
	return s.wt.udp.LocalAddr()
}

// Close stops accepting, ends every connection (each closes its session)
// and waits for them, or for ctx.
func (s *Server) Close(ctx context.Context) error {
	s.cancel()
	err := s.http.Shutdown(ctx)
	<-s.served
	if s.wt != nil {
		s.wt.close()
	}
	done := make(chan struct{})
	go func() { s.conns.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return errors.Join(err, ctx.Err())
	}
	return err
}

// ServeHTTP upgrades one request and serves the connection until it ends.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Counted before the upgrade hijacks the connection: until then
	// http.Server.Shutdown waits for this request, so Close's Wait cannot
	// miss a connection that is being upgraded.
	s.conns.Add(1)
	defer s.conns.Done()
	origin := r.Header.Get("Origin")
	originOK := origin == "" || (s.cfg.AllowOrigin != nil && s.cfg.AllowOrigin(origin))
	remote := remoteAddr(r.RemoteAddr)
	// Admitted before the upgrade answers, so a client whose handshake has
	// completed holds its place: a later connection from it cannot take
	// the slot first.
	var late lateClose
	release, admitErr := func() {}, error(nil)
	if originOK && s.cfg.Admit != nil {
		if release, admitErr = s.cfg.Admit(remote, late.close); admitErr != nil {
			release = func() {}
		}
	}
	defer release()
	// The origin is checked here rather than by Accept, which would answer
	// 403 before the upgrade: a page sees only "connection failed" then,
	// while a close frame's reason reaches its onclose.
	hj := &hijackRecorder{ResponseWriter: w}
	ws, err := websocket.Accept(hj, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		return // Accept answered the request with the reason
	}
	switch {
	case !originOK:
		s.cfg.Log.Debug().Str("origin", origin).Str("remote", r.RemoteAddr).Msg("browser origin refused")
		_ = ws.Close(websocket.StatusPolicyViolation, closeReason("forbidden: origin "+origin+" is not in browser_allowed_origins"))
		return
	case admitErr != nil:
		re := replyError(admitErr)
		_ = ws.Close(websocket.StatusPolicyViolation, closeReason(re.Name+": "+re.Message))
		return
	}
	late.set(ws)
	c := &conn{srv: s, link: wsLink{ws: ws, raw: hj.conn}, id: sessionIDBase + s.nextID.Add(1), remote: remote, releasePreAuth: release}
	c.log = s.cfg.Log.With().Uint64("conn", c.id).Str("remote", r.RemoteAddr).Logger()
	c.serve(s.ctx)
}

// hijackRecorder keeps the connection websocket.Accept hijacks, so that a
// close handshake can be bounded by a deadline on it (wsLink.read).
type hijackRecorder struct {
	http.ResponseWriter
	conn net.Conn
}

func (h *hijackRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	hj, ok := h.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("webfront: the response writer cannot be hijacked")
	}
	c, rw, err := hj.Hijack()
	h.conn = c
	return c, rw, err
}

// lateClose closes a connection that the limits displace, which may happen
// between its admission and its upgrade: then it is closed once upgraded.
type lateClose struct {
	mu        sync.Mutex
	ws        *websocket.Conn
	displaced bool
}

func (l *lateClose) close() {
	l.mu.Lock()
	ws := l.ws
	l.displaced = true
	l.mu.Unlock()
	if ws != nil {
		closeDisplaced(ws)
	}
}

func (l *lateClose) set(ws *websocket.Conn) {
	l.mu.Lock()
	l.ws = ws
	displaced := l.displaced
	l.mu.Unlock()
	if displaced {
		closeDisplaced(ws)
	}
}

// displacedReason is the close reason of a connection the pre-auth pool
// gave up to admit a newer one.
const displacedReason = "limit_exceeded: max_preauth_connections reached: closed unauthenticated to admit a newer connection"

func closeDisplaced(ws *websocket.Conn) {
	_ = ws.Close(websocket.StatusPolicyViolation, closeReason(displacedReason))
}

// remoteAddr parses an http.Request's RemoteAddr into the *net.TCPAddr the
// connection limits count by IP.
func remoteAddr(s string) net.Addr {
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		return &net.TCPAddr{}
	}
	return net.TCPAddrFromAddrPort(ap)
}

// maxCloseReason is RFC 6455's bound on a close frame's reason.
const maxCloseReason = 123

func closeReason(s string) string {
	if len(s) > maxCloseReason {
		return s[:maxCloseReason]
	}
	return s
}
