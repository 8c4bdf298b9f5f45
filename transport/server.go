package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/rs/zerolog"

	"github.com/getfelix/felix-go/internal/quicconf"
	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/wire"
)

// Connection close codes sent to clients.
const (
	CloseShutdown    quic.ApplicationErrorCode = 0
	CloseAuthTimeout quic.ApplicationErrorCode = 1
	CloseProtocol    quic.ApplicationErrorCode = 2
	CloseLimit       quic.ApplicationErrorCode = 3
)

// Stream error codes.
const (
	streamErrProtocol quic.StreamErrorCode = quic.StreamErrorCode(wire.StreamCodeProtocol)
	// streamErrPreAuth resets a stream opened before the handshake ended.
	streamErrPreAuth quic.StreamErrorCode = quic.StreamErrorCode(wire.StreamCodePreAuth)
)

// Config is what the transport takes from the broker's configuration.
type Config struct {
	MaxFrameBytes        int
	PreAuthMaxFrameBytes int
	AuthTimeout          time.Duration
	// FrameReadTimeout is how long a frame may take once its first byte
	// has arrived; past it the stream is reset. Zero: no deadline.
	FrameReadTimeout time.Duration
	PublishWindow    int
	Log              zerolog.Logger
	// OnConnection is told of connection events (accepted, refused,
	// displaced, auth_timeout, closed) for metrics; may be nil. It must
	// not block.
	OnConnection func(event string)
	// Admit, when set, is asked before a connection is served (the
	// broker's limits on connections not yet authenticated); a refusal
	// closes it with the error's message. displace closes the connection
	// (CloseLimit) if the broker needs its place before it authenticates.
	// release is called once the connection has authenticated (Open
	// succeeded) or has ended, whichever comes first.
	Admit func(remote net.Addr, displace func()) (release func(), err error)
}

// Server accepts QUIC connections and serves them.
type Server struct {
	cfg     Config
	backend service.Service
	ln      *quic.Listener
	// tr owns the UDP socket: closing it waits until quic-go stopped
	// reading from it, which closing the listener alone does not (a
	// closed connection keeps the socket a while, for retransmissions).
	tr *quic.Transport

	nextConn atomic.Uint64
	wg       sync.WaitGroup // one per connection goroutine and the accept loop
	mu       struct {
		sync.Mutex
		conns  map[*quic.Conn]struct{}
		closed bool
	}
}

// Listen binds addr and starts accepting. The returned server is serving.
func Listen(addr string, tlsConf *tls.Config, cfg Config, backend service.Service) (*Server, error) {
	udpAddr, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("transport: listen %s: %w", addr, err)
	}
	udp, err := net.ListenUDP("udp", udpAddr)
	if err != nil {
		return nil, fmt.Errorf("transport: listen %s: %w", addr, err)
	}
	tr := &quic.Transport{Conn: udp}
	ln, err := tr.Listen(tlsConf, quicconf.ServerQUICConfig())
	if err != nil {
		return nil, errors.Join(fmt.Errorf("transport: listen %s: %w", addr, err), tr.Close(), udp.Close())
	}
	s := &Server{cfg: cfg, backend: backend, ln: ln, tr: tr}
	s.mu.conns = make(map[*quic.Conn]struct{})
	s.wg.Add(1)
	go s.acceptLoop()
	return s, nil
}

// Addr is the bound address.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// acceptLoop runs until the listener closes.
func (s *Server) acceptLoop() {
	defer s.wg.Done()
	for {
		conn, err := s.ln.Accept(context.Background())
		if err != nil {
			return // listener closed
		}
		s.mu.Lock()
		if s.mu.closed {
			s.mu.Unlock()
			_ = conn.CloseWithError(CloseShutdown, "broker stopping")
			continue
		}
		s.mu.conns[conn] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		s.event("accepted")
		go func() {
			defer s.wg.Done()
			if release, ok := s.admit(conn); ok {
				s.serveConn(conn, release)
			}
			s.event("closed")
			s.mu.Lock()
			delete(s.mu.conns, conn)
			s.mu.Unlock()
		}()
	}
}

// admit asks the broker whether conn may be served; a refused one is closed
// with the reason. The returned release gives back the pre-auth slot;
// serveConn calls it once the client authenticated, and it runs anyway
// when the connection ends.
func (s *Server) admit(conn *quic.Conn) (release func(), ok bool) {
	if s.cfg.Admit == nil {
		return func() {}, true
	}
	displace := func() {
		s.event("displaced")
		_ = conn.CloseWithError(CloseLimit, "max_preauth_connections reached: closed unauthenticated to admit a newer connection; authenticate sooner after the handshake")
	}
	release, err := s.cfg.Admit(conn.RemoteAddr(), displace)
	if err != nil {
		s.event("refused")
		_ = conn.CloseWithError(CloseLimit, wire.AsError(err).Message)
		return nil, false
	}
	context.AfterFunc(conn.Context(), release)
	return release, true
}

func (s *Server) event(e string) {
	if s.cfg.OnConnection != nil {
		s.cfg.OnConnection(e)
	}
}

// Close stops accepting, closes every connection, and waits for their
// goroutines to finish (or ctx to end).
func (s *Server) Close(ctx context.Context) error {
	s.mu.Lock()
	s.mu.closed = true
	for c := range s.mu.conns {
		_ = c.CloseWithError(CloseShutdown, "broker stopping")
	}
	s.mu.Unlock()
	err := s.ln.Close()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("transport: close: %w", ctx.Err())
	}
	if errors.Is(err, quic.ErrServerClosed) {
		err = nil
	}
	// The Transport does not close a socket it was given; it stops
	// reading from it, and waits for that.
	return errors.Join(err, s.tr.Close(), s.tr.Conn.Close())
}
