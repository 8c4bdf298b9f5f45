package webfront

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/webtransport-go"

	"github.com/getfelix/felix-go/internal/quicconf"
	"github.com/getfelix/felix-go/wire"
)

// A WebTransport session is the same connection as a WebSocket one: the
// first bidirectional stream the page opens is its control stream and
// carries the same control frames, each after a u32 length; events go on
// one unidirectional stream per subscription, opened by the broker, which
// starts with the u64 subscription id and then carries that
// subscription's events frames, each after a u32 length. A subscription
// that ends cleanly finishes its stream before its ended frame is sent; one
// the broker ends has its stream reset with the felix/1 stream code.

// Streams a page may open at once on one QUIC connection. HTTP/3 needs
// one bidirectional (the CONNECT request) and three unidirectional (its
// control and QPACK streams); the page opens one more, the control
// stream. Any other stream it opens is reset at once, so these bound only
// how many it can hold open meanwhile.
const (
	wtMaxIncomingStreams    = 8
	wtMaxIncomingUniStreams = 8
)

// webTransport is the front end's HTTP/3 listener.
type webTransport struct {
	udp    net.PacketConn
	ln     *quic.Listener
	server *webtransport.Server
	// admissions are the QUIC connections accepted whose HTTP/3
	// connection has not yet taken its admission (ConnContext does).
	admissions sync.Map // *quic.Conn -> *wtAdmission
	quicConns  sync.WaitGroup
	accepted   chan struct{}
}

// wtAdmission is one QUIC connection's place among the connections not
// yet authenticated, taken when it was accepted.
type wtAdmission struct {
	err     error
	release func()
	late    *lateCloseWT
	// unauthenticated closes the connection if no session starts within
	// auth_timeout_ms; once one has, the session's own handshake
	// deadline takes over (it tells the page why).
	unauthenticated *time.Timer
}

type wtAdmissionKey struct{}

// listenWebTransport binds cfg.WebTransportAddr (UDP).
func (s *Server) listenWebTransport() error {
	cfg := s.cfg
	if cfg.WebTransportTLS == nil {
		return errors.New("webfront: WebTransport needs a TLS config")
	}
	udp, err := net.ListenPacket("udp", cfg.WebTransportAddr)
	if err != nil {
		return fmt.Errorf("webfront: listen udp %s: %w", cfg.WebTransportAddr, err)
	}
	tc := cfg.WebTransportTLS.Clone()
	tc.NextProtos = []string{http3.NextProtoH3}
	qc := quicconf.QUICConfig()
	qc.MaxIncomingStreams = wtMaxIncomingStreams
	qc.MaxIncomingUniStreams = wtMaxIncomingUniStreams
	qc.HandshakeIdleTimeout = cfg.AuthTimeout
	qc.EnableDatagrams = true // webtransport-go requires both
	qc.EnableStreamResetPartialDelivery = true
	ln, err := quic.Listen(udp, tc, qc)
	if err != nil {
		_ = udp.Close()
		return fmt.Errorf("webfront: listen quic %s: %w", cfg.WebTransportAddr, err)
	}
	wt := &webTransport{udp: udp, ln: ln, accepted: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("/", s.serveWebTransport)
	wt.server = &webtransport.Server{
		H3: &http3.Server{
			Handler:         mux,
			MaxHeaderBytes:  16 << 10,
			IdleTimeout:     qc.MaxIdleTimeout,
			ConnContext:     wt.connContext,
			EnableDatagrams: true,
		},
		// The origin is checked by serveWebTransport, after the upgrade,
		// so that a refused page is told why (refuseFirstFrame); a
		// refused CONNECT only shows as a failed handshake.
		CheckOrigin: func(*http.Request) bool { return true },
	}
	s.wt = wt
	go wt.accept(s)
	return nil
}

// connContext hands the HTTP/3 connection its QUIC connection's admission.
func (wt *webTransport) connContext(ctx context.Context, qc *quic.Conn) context.Context {
	if a, ok := wt.admissions.LoadAndDelete(qc); ok {
		ctx = context.WithValue(ctx, wtAdmissionKey{}, a)
	}
	return ctx
}

// accept admits each QUIC connection as it completes its handshake (it
// holds a place among unauthenticated connections from then on, as a
// felix/1 one does) and serves it; it exits when the listener closes.
func (wt *webTransport) accept(s *Server) {
	defer close(wt.accepted)
	for {
		qc, err := wt.ln.Accept(context.Background())
		if err != nil {
			return
		}
		a := &wtAdmission{release: func() {}, late: &lateCloseWT{qc: qc}}
		if s.cfg.Admit != nil {
			release, err := s.cfg.Admit(qc.RemoteAddr(), a.late.close)
			if err != nil {
				a.err = err
			} else {
				a.release = release
			}
		}
		// A connection with no session within auth_timeout_ms goes; once
		// it has one, the session's own auth deadline takes over.
		a.unauthenticated = time.AfterFunc(s.cfg.AuthTimeout, func() {
			_ = qc.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeNoError), "unauthenticated: no session within auth_timeout_ms")
		})
		a.release = sync.OnceFunc(a.release)
		context.AfterFunc(qc.Context(), a.release)
		wt.admissions.Store(qc, a)
		wt.quicConns.Add(1)
		go func() {
			defer wt.quicConns.Done()
			defer wt.admissions.Delete(qc)
			_ = wt.server.ServeQUICConn(qc)
		}()
	}
}

// close stops accepting, closes every session and QUIC connection, and
// waits for the connections' goroutines.
func (wt *webTransport) close() {
	_ = wt.server.Close()
	_ = wt.ln.Close()
	<-wt.accepted
	wt.quicConns.Wait()
	_ = wt.udp.Close()
}

// serveWebTransport upgrades one CONNECT to a session and serves it as a
// browser connection until it ends.
func (s *Server) serveWebTransport(w http.ResponseWriter, r *http.Request) {
	s.conns.Add(1)
	defer s.conns.Done()
	// Every request of a QUIC connection carries its admission; a second
	// CONNECT on it is refused by Upgrade (one session per connection
	// without WebTransport's flow control, which is not offered).
	a, _ := r.Context().Value(wtAdmissionKey{}).(*wtAdmission)
	if a == nil {
		http.Error(w, "webfront: the QUIC connection was not admitted", http.StatusInternalServerError)
		return
	}
	origin := r.Header.Get("Origin")
	originOK := origin == "" || (s.cfg.AllowOrigin != nil && s.cfg.AllowOrigin(origin))
	sess, err := s.wt.server.Upgrade(w, r)
	if err != nil {
		s.cfg.Log.Debug().Err(err).Str("remote", r.RemoteAddr).Msg("WebTransport upgrade refused")
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	a.unauthenticated.Stop()
	l := &wtLink{sess: sess}
	a.late.set(l)
	// Refusals wait for the control stream: Chromium reports a session
	// closed as soon as it is accepted as a failed handshake ("Opening
	// handshake failed"), without the close's code and reason.
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.AuthTimeout)
	ctrl, err := sess.AcceptStream(ctx)
	cancel()
	if err != nil {
		_ = l.refuse("unauthenticated: no control stream within auth_timeout_ms")
		return
	}
	l.ctrl = ctrl
	switch {
	case !originOK:
		s.cfg.Log.Debug().Str("origin", origin).Str("remote", r.RemoteAddr).Msg("browser origin refused")
		s.refuseFirstFrame(l, wire.NewError(wire.CodeForbidden, "origin %s is not in browser_allowed_origins", origin))
		return
	case a.err != nil:
		s.refuseFirstFrame(l, a.err)
		return
	}
	go l.refuseOtherStreams()
	c := &conn{srv: s, link: l, id: sessionIDBase + s.nextID.Add(1), remote: sess.RemoteAddr(), releasePreAuth: a.release}
	c.log = s.cfg.Log.With().Uint64("conn", c.id).Str("remote", r.RemoteAddr).Str("transport", "webtransport").Logger()
	c.serve(s.ctx)
}

// refuseFirstFrame answers the page's first frame (its auth) with the
// refusal and closes the session with it: a page's client reads a reply
// to its auth, while the close's reason may not reach it (Chromium reports
// a session closed right after it opened as "Connection lost").
func (s *Server) refuseFirstFrame(l *wtLink, refusal error) {
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.AuthTimeout)
	defer cancel()
	var id uint64
	if frame, err := l.read(ctx, s.cfg.PreAuthMaxFrameBytes); err == nil {
		if req, err := DecodeRequest(frame); err == nil {
			id = req.ID
		}
	}
	re := replyError(refusal)
	_ = l.write(ctx, AppendReply(nil, &Reply{Op: OpReply, ID: id, Error: re}))
	_ = l.refuse(re.Name + ": " + re.Message)
}

// lateCloseWT closes a connection that the limits displace: its session
// with the reason, or the QUIC connection while it has none (a CONNECT
// upgraded meanwhile is closed once upgraded).
type lateCloseWT struct {
	qc        *quic.Conn
	mu        sync.Mutex
	l         *wtLink
	displaced bool
}

func (lc *lateCloseWT) close() {
	lc.mu.Lock()
	l := lc.l
	lc.displaced = true
	lc.mu.Unlock()
	if l != nil {
		go l.refuse(displacedReason) // refuse waits for the session to end; Admit's caller may not
		return
	}
	_ = lc.qc.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeNoError), displacedReason)
}

func (lc *lateCloseWT) set(l *wtLink) {
	lc.mu.Lock()
	lc.l = l
	displaced := lc.displaced
	lc.mu.Unlock()
	if displaced {
		go l.refuse(displacedReason)
	}
}

// wtLink is a WebTransport session: control frames on the control stream
// (ctrl, read only by the connection's read loop), events on a stream per
// subscription.
type wtLink struct {
	sess    *webtransport.Session
	ctrl    *webtransport.Stream
	writeMu sync.Mutex // one control frame at a time on ctrl
	scratch []byte     // under writeMu
}

func (l *wtLink) read(ctx context.Context, limit int) ([]byte, error) {
	stop := context.AfterFunc(ctx, func() { _ = l.ctrl.SetReadDeadline(time.Now()) })
	defer stop()
	frame, err := ReadStreamFrame(l.ctrl, limit)
	if errors.Is(err, ErrFrameTooLarge) {
		_ = l.sess.CloseWithError(webtransport.SessionErrorCode(closeMessageTooBig), "frame_too_large: "+err.Error())
	}
	return frame, err
}

func (l *wtLink) write(ctx context.Context, frame []byte) error {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	l.scratch = AppendStreamFrame(l.scratch[:0], frame)
	return writeStream(ctx, l.ctrl, l.scratch)
}

// deadlineWriter is the part of a WebTransport send stream writeStream uses.
type deadlineWriter interface {
	Write([]byte) (int, error)
	SetWriteDeadline(time.Time) error
}

// writeStream writes b to str before ctx ends; nothing once it has (as
// coder/websocket does): a connection closing writes no more frames, such
// as the ended frames of the subscriptions its session's close ends.
func writeStream(ctx context.Context, str deadlineWriter, b []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok {
		_ = str.SetWriteDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { _ = str.SetWriteDeadline(time.Now()) })
	defer stop()
	_, err := str.Write(b)
	return err
}

// refuseGrace is how long a refused session has to read what it was sent
// (the refusal's reply) and close itself before the broker closes it:
// closing a session resets its streams, and data written but not yet sent
// goes with them.
const refuseGrace = 2 * time.Second

func (l *wtLink) refuse(reason string) error {
	if l.ctrl != nil {
		_ = l.ctrl.Close() // a FIN after what was written
		t := time.NewTimer(refuseGrace)
		select {
		case <-l.sess.Context().Done():
		case <-t.C:
		}
		t.Stop()
	}
	return l.sess.CloseWithError(webtransport.SessionErrorCode(closePolicyViolation), reason)
}

func (l *wtLink) closeNow() { _ = l.sess.CloseWithError(0, "") }

// refuseOtherStreams resets every stream the page opens after its control
// stream: nothing reads them, and each could hold a receive window.
func (l *wtLink) refuseOtherStreams() {
	go func() {
		for {
			str, err := l.sess.AcceptUniStream(l.sess.Context())
			if err != nil {
				return
			}
			str.CancelRead(0)
		}
	}()
	for {
		str, err := l.sess.AcceptStream(l.sess.Context())
		if err != nil {
			return
		}
		str.CancelRead(0)
		str.CancelWrite(0)
	}
}

func (l *wtLink) events(sub uint64) eventStream { return &wtEvents{l: l, sub: sub} }

// wtEvents is one subscription's stream, opened with its first write (or
// its clean end: a page waits for the stream to finish, so every
// subscription gets one).
type wtEvents struct {
	l       *wtLink
	sub     uint64
	scratch []byte // the writer's only

	mu      sync.Mutex
	str     *webtransport.SendStream
	aborted bool
}

func (e *wtEvents) stream(ctx context.Context) (*webtransport.SendStream, error) {
	e.mu.Lock()
	str, aborted := e.str, e.aborted
	e.mu.Unlock()
	if str != nil || aborted {
		if aborted {
			return nil, errors.New("webfront: the subscription was ended")
		}
		return str, nil
	}
	str, err := e.l.sess.OpenUniStreamSync(ctx)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.aborted {
		str.CancelWrite(0)
		return nil, errors.New("webfront: the subscription was ended")
	}
	e.str = str
	e.scratch = binary.BigEndian.AppendUint64(e.scratch[:0], e.sub)
	return str, writeStream(ctx, str, e.scratch)
}

func (e *wtEvents) write(ctx context.Context, frame []byte) error {
	str, err := e.stream(ctx)
	if err != nil {
		return err
	}
	e.scratch = AppendStreamFrame(e.scratch[:0], frame)
	return writeStream(ctx, str, e.scratch)
}

func (e *wtEvents) finish(ctx context.Context) {
	if str, err := e.stream(ctx); err == nil {
		_ = str.Close()
	}
}

func (e *wtEvents) abort(code uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.aborted = true
	if e.str != nil {
		e.str.CancelWrite(webtransport.StreamErrorCode(code))
	}
}
