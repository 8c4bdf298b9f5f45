package peerlink

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/rs/zerolog"
)

// ALPN is the protocol members speak to each other; a felix/1 client
// cannot reach a peer listener, nor a peer a client listener.
const ALPN = "felix-peer/1"

// Config configures a Link.
type Config struct {
	// NodeID is this member's id, sent in each connection's hello.
	NodeID string
	// Cert is this member's certificate, presented to every peer, both as
	// server and as client; it must name NodeID (NamesNode). CAs verifies
	// the peers' certificates.
	Cert tls.Certificate
	CAs  *x509.CertPool
	// QueueDepth bounds each peer's outbound queue (messages; default 1024).
	QueueDepth int
	// Handle is given every message received, on the peer connection's
	// reader goroutine: it must not block (post to a mailbox, dropping when
	// full, as Send does).
	Handle func(from string, m Message)
	Log    zerolog.Logger
}

// Link is a member's side of the peer links: a listener for the other
// members' connections and one outbound connection per peer.
type Link struct {
	cfg Config
	// One UDP socket for the listener and every outbound connection, ours
	// to close: Close frees the port at once (a restarted member binds it
	// again).
	udp *net.UDPConn
	tr  *quic.Transport
	ln  *quic.Listener

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	peers map[string]*peer
}

// PeerStats counts one peer's outbound messages.
type PeerStats struct {
	Addr          string
	Queued        int
	Sent, Dropped uint64
	Connected     bool
}

// Listen starts the link, listening at addr (port 0 picks one).
func Listen(addr string, cfg Config) (*Link, error) {
	if cfg.NodeID == "" || cfg.CAs == nil || cfg.Handle == nil {
		return nil, errors.New("peerlink: node id, CA pool and handler are required")
	}
	if err := checkOwnCert(cfg.Cert, cfg.NodeID); err != nil {
		return nil, err
	}
	if cfg.QueueDepth <= 0 {
		cfg.QueueDepth = 1024
	}
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("peerlink: listen address %q: %w", addr, err)
	}
	udp, err := net.ListenUDP("udp", ua)
	if err != nil {
		return nil, fmt.Errorf("peerlink: listen %s: %w", addr, err)
	}
	tr := &quic.Transport{Conn: udp}
	ln, err := tr.Listen(serverTLS(cfg), quicConfig())
	if err != nil {
		_ = udp.Close()
		return nil, fmt.Errorf("peerlink: listen %s: %w", addr, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &Link{cfg: cfg, udp: udp, tr: tr, ln: ln, ctx: ctx, cancel: cancel, peers: make(map[string]*peer)}
	l.wg.Add(1)
	go l.accept()
	return l, nil
}

// Addr is the bound address.
func (l *Link) Addr() net.Addr { return l.ln.Addr() }

// Send queues m for peer to at addr and reports whether it was queued: a
// full queue drops it (raft sends again what it needs), and so does a
// message CheckMessage refuses (the peer would drop the connection).
func (l *Link) Send(to, addr string, m Message) bool {
	if CheckMessage(m) != nil {
		return false
	}
	p := l.peer(to, addr)
	if p == nil {
		return false
	}
	select {
	case p.queue <- m:
		return true
	default:
		p.dropped.Add(1)
		return false
	}
}

// peer returns the outbound peer to at addr, starting it on first use or
// when its address changed (the member restarted elsewhere).
func (l *Link) peer(to, addr string) *peer {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx.Err() != nil {
		return nil
	}
	p := l.peers[to]
	if p != nil && p.addr == addr {
		return p
	}
	if p != nil {
		p.stop()
	}
	ctx, cancel := context.WithCancel(l.ctx)
	p = &peer{id: to, addr: addr, queue: make(chan Message, l.cfg.QueueDepth), cancel: cancel}
	l.peers[to] = p
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		p.run(ctx, l)
	}()
	return p
}

// Stats reports every peer's outbound counters.
func (l *Link) Stats() map[string]PeerStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]PeerStats, len(l.peers))
	for id, p := range l.peers {
		out[id] = PeerStats{Addr: p.addr, Queued: len(p.queue), Sent: p.sent.Load(), Dropped: p.dropped.Load(), Connected: p.connected.Load()}
	}
	return out
}

// Close stops the listener and every connection and waits for their
// goroutines.
func (l *Link) Close() error {
	l.mu.Lock()
	l.cancel()
	l.mu.Unlock()
	err := l.ln.Close()
	l.wg.Wait()
	return errors.Join(err, l.tr.Close(), l.udp.Close())
}

// accept serves the other members' connections.
func (l *Link) accept() {
	defer l.wg.Done()
	for {
		conn, err := l.ln.Accept(l.ctx)
		if err != nil {
			return
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			l.serve(conn)
		}()
	}
}

// serve reads one inbound connection: its hello, then messages, handed to
// Handle as they come. A malformed frame ends the connection.
func (l *Link) serve(conn *quic.Conn) {
	stop := context.AfterFunc(l.ctx, func() { _ = conn.CloseWithError(0, "member leaving") })
	defer stop()
	ctx, cancel := context.WithTimeout(l.ctx, helloTimeout)
	st, err := conn.AcceptStream(ctx)
	cancel()
	if err != nil {
		_ = conn.CloseWithError(errCodeProtocol, "no stream")
		return
	}
	hdr := make([]byte, 4)
	kind, body, err := readFrame(st, hdr)
	if err != nil {
		_ = conn.CloseWithError(errCodeProtocol, "no hello")
		return
	}
	from, err := decodeHello(kind, body)
	if err != nil {
		_ = conn.CloseWithError(errCodeProtocol, err.Error())
		return
	}
	if err := peerNames(conn, from); err != nil {
		l.cfg.Log.Warn().Err(err).Str("peer", from).Stringer("remote", conn.RemoteAddr()).Msg("a peer's hello names another member than its certificate; dropping its connection")
		_ = conn.CloseWithError(errCodeIdentity, err.Error())
		return
	}
	for {
		kind, body, err := readFrame(st, hdr)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				_ = conn.CloseWithError(0, "")
				return
			}
			l.cfg.Log.Warn().Err(err).Str("peer", from).Msg("malformed frame from a peer; dropping its connection")
			_ = conn.CloseWithError(errCodeProtocol, err.Error())
			return
		}
		m, err := decodeMessage(kind, body)
		if err != nil {
			l.cfg.Log.Warn().Err(err).Str("peer", from).Msg("malformed frame from a peer; dropping its connection")
			_ = conn.CloseWithError(errCodeProtocol, err.Error())
			return
		}
		l.cfg.Handle(from, m)
	}
}

const (
	errCodeProtocol quic.ApplicationErrorCode = 1
	errCodeIdentity quic.ApplicationErrorCode = 2
	helloTimeout                              = 5 * time.Second
	redialMin                                 = 50 * time.Millisecond
	redialMax                                 = 2 * time.Second
	// writeBatchBytes bounds what one write gathers from the queue.
	writeBatchBytes = 1 << 20
)

// peer is one outbound connection and its queue. Only run writes to the
// connection.
type peer struct {
	id, addr  string
	queue     chan Message
	cancel    context.CancelFunc
	sent      atomic.Uint64
	dropped   atomic.Uint64
	connected atomic.Bool
}

func (p *peer) stop() { p.cancel() }

// run keeps a connection to the peer and writes the queue to it, batching
// what is queued into one write; it redials with backoff after a failure.
// Messages queued while the peer is unreachable wait in the bounded queue
// (Send drops past it).
func (p *peer) run(ctx context.Context, l *Link) {
	wait := redialMin
	for ctx.Err() == nil {
		conn, st, err := p.dial(ctx, l)
		if err != nil {
			l.cfg.Log.Debug().Err(err).Str("peer", p.id).Str("addr", p.addr).Msg("dial peer")
			if !sleep(ctx, wait) {
				return
			}
			wait = min(2*wait, redialMax)
			continue
		}
		wait = redialMin
		p.connected.Store(true)
		p.write(ctx, st)
		p.connected.Store(false)
		_ = conn.CloseWithError(0, "")
	}
}

func (p *peer) dial(ctx context.Context, l *Link) (*quic.Conn, *quic.Stream, error) {
	dctx, cancel := context.WithTimeout(ctx, helloTimeout)
	defer cancel()
	ua, err := net.ResolveUDPAddr("udp", p.addr)
	if err != nil {
		return nil, nil, err
	}
	conn, err := l.tr.Dial(dctx, ua, clientTLS(l.cfg), quicConfig())
	if err != nil {
		return nil, nil, err
	}
	// The member at addr must be the one dialled: an address that now
	// belongs to another member (or to one holding another's key) gets no
	// traffic meant for p.id.
	if err := peerNames(conn, p.id); err != nil {
		_ = conn.CloseWithError(errCodeIdentity, err.Error())
		return nil, nil, err
	}
	st, err := conn.OpenStreamSync(dctx)
	if err == nil {
		_, err = st.Write(appendHello(nil, l.cfg.NodeID))
	}
	if err != nil {
		_ = conn.CloseWithError(0, "")
		return nil, nil, err
	}
	return conn, st, nil
}

// write sends queued messages until the connection fails or ctx ends.
func (p *peer) write(ctx context.Context, st *quic.Stream) {
	var buf []byte
	for {
		var m Message
		select {
		case <-ctx.Done():
			return
		case m = <-p.queue:
		}
		buf = appendMessage(buf[:0], m)
		n := 1
	gather:
		for len(buf) < writeBatchBytes {
			select {
			case m = <-p.queue:
				buf = appendMessage(buf, m)
				n++
			default:
				break gather
			}
		}
		if _, err := st.Write(buf); err != nil {
			p.dropped.Add(uint64(n))
			return
		}
		p.sent.Add(uint64(n))
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func quicConfig() *quic.Config {
	return &quic.Config{
		MaxIdleTimeout:  10 * time.Second,
		KeepAlivePeriod: 2 * time.Second,
		// One stream per connection, opened by the dialer.
		MaxIncomingStreams:    1,
		MaxIncomingUniStreams: -1,
	}
}

// serverTLS and clientTLS make both sides present the member's
// certificate and verify the other's against the cluster's CAs. Members
// are known by their CA, not their host names (a member's address may be
// an IP its certificate does not name), so the chain is verified without
// the name check.
func serverTLS(cfg Config) *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{cfg.Cert},
		ClientCAs:    cfg.CAs,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		NextProtos:   []string{ALPN},
		MinVersion:   tls.VersionTLS13,
	}
}

func clientTLS(cfg Config) *tls.Config {
	return &tls.Config{
		Certificates:          []tls.Certificate{cfg.Cert},
		NextProtos:            []string{ALPN},
		MinVersion:            tls.VersionTLS13,
		InsecureSkipVerify:    true, // the chain is verified below, without the host name
		VerifyPeerCertificate: verifyChain(cfg.CAs),
	}
}

func verifyChain(cas *x509.CertPool) func([][]byte, [][]*x509.Certificate) error {
	return func(raw [][]byte, _ [][]*x509.Certificate) error {
		if len(raw) == 0 {
			return errors.New("peerlink: the peer presented no certificate")
		}
		certs := make([]*x509.Certificate, len(raw))
		for i, r := range raw {
			c, err := x509.ParseCertificate(r)
			if err != nil {
				return fmt.Errorf("peerlink: peer certificate: %w", err)
			}
			certs[i] = c
		}
		inter := x509.NewCertPool()
		for _, c := range certs[1:] {
			inter.AddCert(c)
		}
		_, err := certs[0].Verify(x509.VerifyOptions{Roots: cas, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
		if err != nil {
			return fmt.Errorf("peerlink: peer certificate not signed by the cluster's CA: %w", err)
		}
		return nil
	}
}

// ErrIdentity is a peer whose certificate, though the cluster CA signed
// it, is not for the member it claims to be (in its hello) or was dialled
// as: a member holding one certificate cannot speak as another.
var ErrIdentity = errors.New("peerlink: certificate is for another member")

// NamesNode says whether a member's certificate is for node: its Common
// Name or one of its DNS names is the node id (felix cluster certs puts
// it in both).
func NamesNode(c *x509.Certificate, node string) bool {
	return c != nil && (c.Subject.CommonName == node || slices.Contains(c.DNSNames, node))
}

// peerNames checks that the other end of conn presented a certificate for
// node; the handshake already verified its chain.
func peerNames(conn *quic.Conn, node string) error {
	certs := conn.ConnectionState().TLS.PeerCertificates
	if len(certs) == 0 {
		return fmt.Errorf("%w: no certificate, peer %q", ErrIdentity, node)
	}
	if !NamesNode(certs[0], node) {
		return fmt.Errorf("%w: it names %q (DNS %v), the peer is %q", ErrIdentity, certs[0].Subject.CommonName, certs[0].DNSNames, node)
	}
	return nil
}

// checkOwnCert refuses a certificate that does not name this member's node
// id: every peer would refuse each of its connections.
func checkOwnCert(cert tls.Certificate, node string) error {
	leaf := cert.Leaf
	if leaf == nil && len(cert.Certificate) > 0 {
		var err error
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return fmt.Errorf("peerlink: own certificate: %w", err)
		}
	}
	if !NamesNode(leaf, node) {
		name := ""
		if leaf != nil {
			name = leaf.Subject.CommonName
		}
		return fmt.Errorf("%w: this member's certificate names %q, not its node id %q, so every peer would refuse it (felix cluster certs --nodes %s makes one)", ErrIdentity, name, node, node)
	}
	return nil
}
