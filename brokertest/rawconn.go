package brokertest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/getfelix/felix-go/broker"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/config"
	"github.com/getfelix/felix-go/internal/quicconf"
	"github.com/getfelix/felix-go/wire"
)

// DialOptions connects a client with opts, trusting the broker's generated
// certificate unless opts names other trust, and closes it when tb ends.
func DialOptions(tb testing.TB, b *broker.Broker, cfg config.Config, opts client.Options) *client.Client {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if opts.TLS == nil && opts.CAFile == "" && !opts.Insecure {
		opts.CAFile = filepath.Join(cfg.DataDir, quicconf.CertFile)
	}
	if opts.Token == "" {
		tenant := opts.Tenant
		if tenant == "" {
			tenant = "default"
		}
		opts.Token = Token(tb, cfg, tenant)
	}
	c, err := client.Dial(ctx, b.Addr().String(), opts)
	if err != nil {
		tb.Fatalf("client.Dial: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	return c
}

// RawConn is a QUIC connection to a broker that speaks wire frames directly,
// with no client library in between, so tests can send what a correct client
// never would.
type RawConn struct {
	Conn *quic.Conn
	// token mints a full-rights token for a tenant, for Handshake.
	token func(tenant string) string
}

// DialRaw opens a QUIC connection to b and sends nothing. The connection is
// closed when tb ends.
func DialRaw(tb testing.TB, b *broker.Broker, cfg config.Config) *RawConn {
	tb.Helper()
	tlsConf, err := quicconf.ClientTLS(filepath.Join(cfg.DataDir, quicconf.CertFile), false)
	if err != nil {
		tb.Fatalf("client TLS: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := quic.DialAddr(ctx, b.Addr().String(), tlsConf, quicconf.QUICConfig())
	if err != nil {
		tb.Fatalf("quic dial %s: %v", b.Addr(), err)
	}
	tb.Cleanup(func() { _ = conn.CloseWithError(0, "test done") })
	return &RawConn{Conn: conn, token: func(tenant string) string {
		if wire.ValidateName("tenant", tenant) != nil {
			return "" // a test of a bad tenant name: no token could name it
		}
		return Token(tb, cfg, tenant)
	}}
}

// DialRawFrom is DialRaw from the local address from (any 127.0.0.0/8
// address is loopback on Linux), so a test can play many clients: each
// connection has its own UDP socket, closed with it when tb ends.
func DialRawFrom(tb testing.TB, b *broker.Broker, cfg config.Config, from netip.Addr) *RawConn {
	tb.Helper()
	tlsConf, err := quicconf.ClientTLS(filepath.Join(cfg.DataDir, quicconf.CertFile), false)
	if err != nil {
		tb.Fatalf("client TLS: %v", err)
	}
	udp, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(from, 0)))
	if err != nil {
		tb.Fatalf("bind %s: %v", from, err)
	}
	tr := &quic.Transport{Conn: udp}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	remote, ok := b.Addr().(*net.UDPAddr)
	if !ok {
		tb.Fatalf("broker address %v is not UDP", b.Addr())
	}
	conn, err := tr.Dial(ctx, remote, tlsConf, quicconf.QUICConfig())
	if err != nil {
		_ = tr.Close()
		_ = udp.Close()
		tb.Fatalf("quic dial %s from %s: %v", b.Addr(), from, err)
	}
	tb.Cleanup(func() {
		_ = conn.CloseWithError(0, "test done")
		_ = tr.Close()
		_ = udp.Close()
	})
	return &RawConn{Conn: conn, token: func(tenant string) string { return Token(tb, cfg, tenant) }}
}

// OpenStream opens a bidirectional stream. QUIC tells the broker about it
// only once something is written on it.
func (rc *RawConn) OpenStream(ctx context.Context) (*RawStream, error) {
	st, err := rc.Conn.OpenStreamSync(ctx)
	if err != nil {
		return nil, fmt.Errorf("open stream: %w", err)
	}
	return &RawStream{St: st, FR: wire.NewFrameReader(st, 64<<20)}, nil
}

// Handshake opens the control stream, sends Auth for tenant and reads the
// first answer, which it returns whatever it is.
func (rc *RawConn) Handshake(ctx context.Context, tenant string) (*RawStream, wire.Message, error) {
	return rc.HandshakeToken(ctx, tenant, rc.token(tenant))
}

// HandshakeToken is Handshake with the given token (empty: none).
func (rc *RawConn) HandshakeToken(ctx context.Context, tenant, token string) (*RawStream, wire.Message, error) {
	ctrl, err := rc.OpenStream(ctx)
	if err != nil {
		return nil, nil, err
	}
	auth := &wire.Auth{Tenant: tenant, Token: token, ClientFlags: wire.SupportedFlags, ClientFeatures: wire.SupportedFeatures, ClientName: "raw"}
	if err := ctrl.Send(auth); err != nil {
		return nil, nil, err
	}
	msg, err := ctrl.ReadMessage(ctx)
	return ctrl, msg, err
}

// MustHandshake is Handshake that fails tb unless the answer is AuthOK.
func (rc *RawConn) MustHandshake(tb testing.TB, ctx context.Context) (*RawStream, *wire.AuthOK) {
	tb.Helper()
	ctrl, msg, err := rc.Handshake(ctx, "default")
	if err != nil {
		tb.Fatalf("handshake: %v", err)
	}
	ok, isOK := msg.(*wire.AuthOK)
	if !isOK {
		tb.Fatalf("handshake answered with %T %+v, want *wire.AuthOK", msg, msg)
	}
	return ctrl, ok
}

// AcceptEventStream waits for the next unidirectional stream the broker
// opens and reads its first frame, which should be EventStreamHello.
func (rc *RawConn) AcceptEventStream(ctx context.Context) (*RawEvents, wire.Message, error) {
	rs, err := rc.Conn.AcceptUniStream(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("accept uni stream: %w", err)
	}
	ev := &RawEvents{St: rs, FR: wire.NewFrameReader(rs, 64<<20)}
	h, payload, err := ev.ReadFrame(ctx)
	if err != nil {
		return ev, nil, err
	}
	if h.Flags != 0 {
		return ev, nil, fmt.Errorf("first frame of the event stream has flags %#04x, want a control message", h.Flags)
	}
	msg, err := wire.DecodeMessage(payload)
	return ev, msg, err
}

// CloseError waits until the connection is closed and returns why: a
// *quic.ApplicationError when the broker closed it with a code.
func (rc *RawConn) CloseError(ctx context.Context) error {
	select {
	case <-rc.Conn.Context().Done():
		return context.Cause(rc.Conn.Context())
	case <-ctx.Done():
		return fmt.Errorf("connection still open: %w", ctx.Err())
	}
}

// AppCloseCode waits until the connection closes and returns the application
// error code the broker closed it with; ok is false when it closed some other
// way (or not at all before ctx ended).
func (rc *RawConn) AppCloseCode(ctx context.Context) (code quic.ApplicationErrorCode, ok bool, err error) {
	err = rc.CloseError(ctx)
	var appErr *quic.ApplicationError
	if errors.As(err, &appErr) && appErr.Remote {
		return appErr.ErrorCode, true, err
	}
	return 0, false, err
}

// RawStream is one bidirectional stream of a RawConn.
type RawStream struct {
	St *quic.Stream
	FR *wire.FrameReader
}

// Write writes raw bytes.
func (s *RawStream) Write(b []byte) error {
	_, err := s.St.Write(b)
	return err
}

// Send writes one control message.
func (s *RawStream) Send(m wire.Message) error {
	b, err := wire.AppendMessage(nil, m)
	if err != nil {
		return err
	}
	return s.Write(b)
}

// ReadFrame reads one frame, giving up when ctx ends.
func (s *RawStream) ReadFrame(ctx context.Context) (wire.Header, []byte, error) {
	return readFrame(ctx, s.St, s.FR)
}

// ReadMessage reads one frame and decodes it as a control message.
func (s *RawStream) ReadMessage(ctx context.Context) (wire.Message, error) {
	return readMessage(ctx, s.St, s.FR)
}

// RawEvents is a subscription's event stream as the broker opened it.
type RawEvents struct {
	St *quic.ReceiveStream
	FR *wire.FrameReader
}

// ReadFrame reads one frame, giving up when ctx ends.
func (e *RawEvents) ReadFrame(ctx context.Context) (wire.Header, []byte, error) {
	return readFrame(ctx, e.St, e.FR)
}

type deadliner interface {
	SetReadDeadline(time.Time) error
}

func readFrame(ctx context.Context, st deadliner, fr *wire.FrameReader) (wire.Header, []byte, error) {
	if dl, ok := ctx.Deadline(); ok {
		_ = st.SetReadDeadline(dl)
		defer func() { _ = st.SetReadDeadline(time.Time{}) }()
	}
	return fr.Next()
}

func readMessage(ctx context.Context, st deadliner, fr *wire.FrameReader) (wire.Message, error) {
	h, payload, err := readFrame(ctx, st, fr)
	if err != nil {
		return nil, err
	}
	if h.Flags != 0 {
		return nil, fmt.Errorf("got a frame with flags %#04x, want a control message", h.Flags)
	}
	return wire.DecodeMessage(payload)
}
