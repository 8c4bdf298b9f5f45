package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/rs/zerolog"

	"github.com/getfelix/felix-go/internal/probe"
	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/wire"
)

// openStreamTimeout bounds opening a subscription's event stream: a client
// at its stream limit gets an error rather than a hung subscribe.
const openStreamTimeout = 5 * time.Second

// serveConn runs one connection: the handshake on its first bidirectional
// stream, then one goroutine per stream the client opens. It returns when
// the connection has closed and every stream goroutine has finished.
// releasePreAuth gives back the connection's place among those not yet
// authenticated, which it leaves once Open has succeeded.
func (s *Server) serveConn(conn *quic.Conn, releasePreAuth func()) {
	id := s.nextConn.Add(1)
	log := s.cfg.Log.With().Uint64("conn", id).Str("remote", conn.RemoteAddr().String()).Logger()

	ctrl, info, err := s.handshake(conn, id)
	if err != nil {
		log.Debug().Err(err).Msg("handshake failed")
		return
	}
	session, err := s.backend.Open(conn.Context(), service.Client{
		ID: info.ID, Remote: info.Remote, Tenant: info.Tenant, Token: info.Token, CertSubject: info.CertSubject,
		Offsets: info.Flags&wire.FlagEventBatchOffsets != 0, Frontend: service.FrontendFelix,
	})
	if err != nil {
		// A refused credential (or limit): the typed error, then the close.
		s.refuse(conn, ctrl, wire.AsError(err))
		return
	}
	releasePreAuth()
	ack := &wire.AuthOK{
		ServerFlags:    info.Flags,
		ServerFeatures: info.Features,
		PublishWindow:  s.cfg.PublishWindow,
		MaxFrameBytes:  s.cfg.MaxFrameBytes,
	}
	if err := writeMessage(ctrl, ack); err != nil {
		session.Close()
		_ = conn.CloseWithError(CloseProtocol, "handshake write failed")
		return
	}

	h := &connHandler{
		srv: s, conn: conn, session: session, log: log, info: info, authOK: ack,
		frames:   newByteGate(max(frameBytesInFlight, int64(s.cfg.MaxFrameBytes))),
		answered: newByteGate(answerConnMaxBytes),
	}
	var wg sync.WaitGroup
	wg.Add(1)
	// The handshake's reader read exactly the Auth frame, nothing after it.
	go func() { defer wg.Done(); h.serveStream(ctrl) }()
	for {
		st, err := conn.AcceptStream(context.Background())
		if err != nil {
			break // the connection closed
		}
		wg.Add(1)
		go func() { defer wg.Done(); h.serveStream(st) }()
	}
	wg.Wait()
	session.Close()
	log.Debug().Msg("connection closed")
}

// handshake waits for the first stream and its Auth, within AuthTimeout.
// A client that connects and says nothing is closed with CloseAuthTimeout.
//
// Input the broker cannot decode (a bad magic, version or flags, a frame
// over the pre-auth cap, msgpack that does not parse) is refused
// invalid_request; a well-formed first frame that is not an Auth, or an
// Auth whose credential the broker refuses, is unauthenticated.
func (s *Server) handshake(conn *quic.Conn, id uint64) (*quic.Stream, ConnInfo, error) {
	deadline := time.Now().Add(s.cfg.AuthTimeout)
	ctx, cancel := context.WithDeadline(conn.Context(), deadline)
	defer cancel()
	ctrl, err := conn.AcceptStream(ctx)
	if err != nil {
		s.closeAuthTimeout(conn, ctx)
		return nil, ConnInfo{}, fmt.Errorf("transport: no control stream: %w", err)
	}
	defer refusePreAuthStreams(conn)()
	_ = ctrl.SetReadDeadline(deadline)
	fr := wire.NewFrameReader(ctrl, s.cfg.PreAuthMaxFrameBytes)
	hdr, payload, err := fr.Next()
	if err != nil {
		if isTimeout(err) {
			// The read deadline and ctx's are the same instant on two
			// timers: wait for ctx, or closeAuthTimeout may see it live
			// and leave the silent connection open.
			<-ctx.Done()
			s.closeAuthTimeout(conn, ctx)
		} else {
			s.refuse(conn, ctrl, wire.NewError(wire.CodeInvalidRequest, "handshake: %v", err))
		}
		return nil, ConnInfo{}, err
	}
	_ = ctrl.SetReadDeadline(time.Time{})
	var auth *wire.Auth
	if hdr.Flags == 0 {
		msg, derr := wire.DecodeMessage(payload)
		if derr != nil {
			s.refuse(conn, ctrl, wire.NewError(wire.CodeInvalidRequest, "handshake: %v", derr))
			return nil, ConnInfo{}, derr
		}
		auth, _ = msg.(*wire.Auth)
	}
	if auth == nil {
		err = errors.New("the first frame must be auth")
		s.refuse(conn, ctrl, wire.NewError(wire.CodeUnauthenticated, "handshake: %v", err))
		return nil, ConnInfo{}, err
	}
	if err := wire.ValidateName("tenant", auth.Tenant); err != nil {
		s.refuse(conn, ctrl, wire.AsError(err))
		return nil, ConnInfo{}, err
	}
	info := ConnInfo{
		ID:     id,
		Remote: conn.RemoteAddr(),
		Tenant: auth.Tenant,
		Token:  auth.Token,
		Flags:  auth.ClientFlags & wire.SupportedFlags,
		// Verified by TLS when the broker requires client certificates.
		CertSubject: certSubject(conn),
		Features:    auth.ClientFeatures & wire.SupportedFeatures,
	}
	return ctrl, info, nil
}

// refusePreAuthStreams resets every stream the client opens besides the
// control stream until the returned stop is called (the handshake is
// over). Without it, what a client sent on streams it opened early sat in
// QUIC's buffers, up to the connection window (64 MiB), for as long as the
// auth timeout. A client must wait for AuthOK before opening
// another stream; ours does.
func refusePreAuthStreams(conn *quic.Conn) (stop func()) {
	ctx, cancel := context.WithCancel(conn.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			st, err := conn.AcceptStream(ctx)
			if err != nil {
				return
			}
			st.CancelRead(streamErrPreAuth)
			st.CancelWrite(streamErrPreAuth)
		}
	}()
	// Wait for the goroutine, so only the connection's accept loop
	// accepts streams from now on.
	return func() { cancel(); <-done }
}

// certSubject is the subject common name of the client's certificate, or
// "" when it presented none.
func certSubject(conn *quic.Conn) string {
	if certs := conn.ConnectionState().TLS.PeerCertificates; len(certs) > 0 {
		return certs[0].Subject.CommonName
	}
	return ""
}

func (s *Server) closeAuthTimeout(conn *quic.Conn, ctx context.Context) {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		s.event("auth_timeout")
		_ = conn.CloseWithError(CloseAuthTimeout, "no handshake within the auth timeout")
	}
}

// refuseLinger bounds how long a refused connection stays open so its
// typed error can arrive: CloseWithError discards stream data not yet sent.
const refuseLinger = 250 * time.Millisecond

// refuse answers a bad handshake with a typed error, then closes the
// connection once the client has closed it (having read the error) or
// refuseLinger has passed.
func (s *Server) refuse(conn *quic.Conn, ctrl *quic.Stream, e *wire.Error) {
	s.event("refused")
	writeError(ctrl, 0, e)
	_ = ctrl.Close()
	linger := time.NewTimer(refuseLinger)
	defer linger.Stop()
	select {
	case <-conn.Context().Done():
	case <-linger.C:
	}
	_ = conn.CloseWithError(CloseProtocol, e.Message)
}

func isTimeout(err error) bool {
	var ne interface{ Timeout() bool }
	return errors.As(err, &ne) && ne.Timeout()
}

func writeMessage(w io.Writer, m wire.Message) error {
	b, err := wire.AppendMessage(nil, m)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// writeError writes a handshake's refusal: before AuthOK nothing is
// negotiated, so it names no owner.
func writeError(w io.Writer, requestID uint64, e *wire.Error) {
	_ = writeMessage(w, errorMsg(requestID, clientError(e, false)))
}

// connHandler serves the streams of one authenticated connection.
type connHandler struct {
	srv     *Server
	conn    *quic.Conn
	session service.Session
	log     zerolog.Logger
	info    ConnInfo
	authOK  *wire.AuthOK // the handshake's answer, repeated to a re-authentication
	// frames bounds the bytes of frames being read on the connection
	// (frameBytesInFlight); answered the bytes of answers its streams owe
	// (answerConnMaxBytes).
	frames, answered *byteGate
}

// serveStream reads requests from one bidirectional stream until it ends.
// Answers go out in request order through the stream's responder; a frame
// that cannot be parsed ends the stream (its boundary is lost), and so does
// one that does not arrive within FrameReadTimeout of its first byte;
// anything else gets a typed error and the stream keeps going.
func (h *connHandler) serveStream(st *quic.Stream) {
	sr := &streamReader{st: st, ctx: h.conn.Context(), timeout: h.srv.cfg.FrameReadTimeout, frames: h.frames}
	fr := wire.NewFrameReader(sr, h.srv.cfg.MaxFrameBytes)
	fr.Budget = sr
	r := newResponder(st, h.srv.cfg.PublishWindow, h.answered, h.info.Features&wire.FeatureRedirect != 0)
	defer func() {
		r.close()
		_ = st.Close()
	}()
	for {
		hdr, payload, err := fr.Next()
		sr.frameDone()
		if err != nil {
			if isTimeout(err) {
				// Reset, so the buffer and the stream's goroutines go (10 000
				// streams trickling a byte a second were held).
				r.fail(0, wire.NewError(wire.CodeInvalidRequest, "frame not complete within frame_read_timeout_ms (%s) of its first byte", h.srv.cfg.FrameReadTimeout))
				st.CancelRead(streamErrProtocol)
				return
			}
			if errors.Is(err, io.EOF) || !isWireError(err) {
				return // clean end, or the connection went away
			}
			r.fail(0, wire.NewError(wire.CodeInvalidRequest, "%v", err))
			st.CancelRead(streamErrProtocol)
			return
		}
		switch {
		case hdr.Flags == 0:
			h.handleControl(r, payload)
		case hdr.Flags&wire.FlagPublishBatch != 0:
			if !h.handlePublish(r, hdr.Flags, payload) {
				st.CancelRead(streamErrProtocol)
				return
			}
		default:
			r.fail(0, wire.NewError(wire.CodeInvalidRequest, "frame flags %#04x are not a request", hdr.Flags))
		}
	}
}

func isWireError(err error) bool {
	for _, e := range []error{wire.ErrMalformed, wire.ErrBadMagic, wire.ErrBadVersion, wire.ErrUnknownFlags, wire.ErrFrameTooLarge} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

func (h *connHandler) handleControl(r *responder, payload []byte) {
	msg, err := wire.DecodeMessage(payload)
	if err != nil {
		r.fail(0, wire.NewError(wire.CodeInvalidRequest, "%v", err))
		return
	}
	ctx := h.conn.Context()
	// Room for the answer first: while the client leaves answers unread,
	// the stream reads no more requests (answerStreamMaxBytes,
	// answerConnMaxBytes).
	if err := r.reserve(ctx, answerReserve(msg)); err != nil {
		return // the connection closed
	}
	defer r.unreserve()
	switch m := msg.(type) {
	case *wire.Subscribe:
		h.handleSubscribe(ctx, r, m)
	case *wire.Unsubscribe:
		answer(r, m.RequestID, func() (wire.Message, error) {
			return &wire.OK{RequestID: m.RequestID}, h.session.Unsubscribe(ctx, m.SubscriptionID)
		})
	case *wire.StreamCreate:
		answer(r, m.RequestID, func() (wire.Message, error) { return createStream(ctx, h.session, m) })
	case *wire.StreamGet:
		answer(r, m.RequestID, func() (wire.Message, error) { return getStream(ctx, h.session, m) })
	case *wire.StreamList:
		answer(r, m.RequestID, func() (wire.Message, error) { return listStreams(ctx, h.session, m) })
	case *wire.StreamRead:
		answer(r, m.RequestID, func() (wire.Message, error) { return readStream(ctx, h.session, m) })
	case *wire.OffsetForTime:
		answer(r, m.RequestID, func() (wire.Message, error) { return offsetForTime(ctx, h.session, m) })
	case *wire.ProducerInit:
		answer(r, m.RequestID, func() (wire.Message, error) { return initProducer(ctx, h.session, m) })
	case *wire.ShardOwners:
		answer(r, m.RequestID, func() (wire.Message, error) { return h.shardOwners(ctx, m) })
	case *wire.ReplicationStatus:
		answer(r, m.RequestID, func() (wire.Message, error) { return h.replicationStatus(ctx, m) })
	case *wire.StreamDelete:
		answer(r, m.RequestID, func() (wire.Message, error) {
			return &wire.OK{RequestID: m.RequestID}, h.session.DeleteStream(ctx, scopeOf(m.Tenant, m.Namespace, m.Stream))
		})
	case *wire.Auth:
		h.handleReauth(ctx, r, m)
	default:
		if !handleGroup(ctx, r, h.session, msg) && !h.handleCache(ctx, r, msg) { // groups.go, cache.go
			r.fail(0, wire.NewError(wire.CodeInvalidRequest, "%s is not a request", msg.Type()))
		}
	}
}

// shardOwners answers a client that negotiated FeatureShardOwners. One
// that did not is refused rather than answered: it did not say it reads
// shard_owners_view, and a broker that answers what was not negotiated
// would make the feature bit meaningless.
func (h *connHandler) shardOwners(ctx context.Context, m *wire.ShardOwners) (wire.Message, error) {
	if h.info.Features&wire.FeatureShardOwners == 0 {
		return nil, wire.NewError(wire.CodeInvalidRequest, "shard_owners needs FeatureShardOwners, which this connection did not negotiate")
	}
	return shardOwners(ctx, h.session, m)
}

// replicationStatus answers a client that negotiated
// FeatureReplicationStatus (see shardOwners for why others are refused).
func (h *connHandler) replicationStatus(ctx context.Context, m *wire.ReplicationStatus) (wire.Message, error) {
	if h.info.Features&wire.FeatureReplicationStatus == 0 {
		return nil, wire.NewError(wire.CodeInvalidRequest, "replication_status needs FeatureReplicationStatus, which this connection did not negotiate")
	}
	node, shards, err := h.session.Replication(ctx, scopeOf(m.Tenant, m.Namespace, m.Stream))
	if err != nil {
		return nil, err
	}
	return &wire.ReplicationStatusView{RequestID: m.RequestID, Node: node, Shards: shards}, nil
}

// answerReserve is the room an answer to msg may take.
func answerReserve(msg wire.Message) int64 {
	switch msg.(type) {
	case *wire.StreamRead, *wire.GroupPoll:
		return readAnswerReserve
	}
	return controlAnswerReserve
}

// handleSubscribe answers a subscribe with Subscribed, a cursor error or an
// error; the session writes any history after the answer is queued.
func (h *connHandler) handleSubscribe(ctx context.Context, r *responder, m *wire.Subscribe) {
	req, err := subscribeRequest(m)
	if err != nil {
		r.fail(m.RequestID, wire.AsError(err))
		return
	}
	res, err := h.session.Subscribe(ctx, req, h.openEventStream)
	var cursor *wire.CursorError
	switch {
	case errors.As(err, &cursor):
		r.reply(&wire.SubscribeCursorError{RequestID: m.RequestID, Reason: cursor.Reason, Requested: cursor.Requested, Available: cursor.Available})
	case err != nil:
		r.fail(m.RequestID, wire.AsError(err))
	default:
		r.reply(&wire.Subscribed{
			RequestID: m.RequestID, SubscriptionID: res.ID, QueueCapacity: res.QueueCapacity,
			StartOffset: res.StartOffset, LiveOffset: res.LiveOffset, Durable: res.Durable,
		})
	}
}

// handleReauth takes a fresh token on an authenticated connection (its
// old one expiring or expired); the answer is AuthOK, as at the handshake.
func (h *connHandler) handleReauth(ctx context.Context, r *responder, m *wire.Auth) {
	if m.Tenant != h.info.Tenant {
		r.fail(0, wire.NewError(wire.CodeInvalidRequest, "a connection stays with its tenant %q; open another connection for tenant %q", h.info.Tenant, m.Tenant))
		return
	}
	if err := h.session.Reauthenticate(ctx, m.Token); err != nil {
		r.fail(0, wire.AsError(err))
		return
	}
	r.reply(h.authOK)
}

// answer queues the reply of a request, or its error.
func answer(r *responder, requestID uint64, do func() (wire.Message, error)) {
	m, err := do()
	if err != nil {
		r.fail(requestID, wire.AsError(err))
		return
	}
	r.reply(m)
}

// handlePublish admits one publish frame. It returns false when the frame is
// malformed: an acked publish's request id cannot be trusted then, so the
// stream ends rather than answer out of order.
func (h *connHandler) handlePublish(r *responder, flags uint16, payload []byte) bool {
	p, err := wire.DecodePublish(flags, payload)
	if err != nil {
		r.fail(0, wire.NewError(wire.CodeInvalidRequest, "%v", err))
		return false
	}
	probe.Mark(probe.TransportRead)
	if p.Ack == wire.AckNone {
		if err := p.Scope.Validate(); err != nil {
			r.fail(0, wire.AsError(err))
			return true
		}
		if err := h.session.Publish(h.conn.Context(), &service.Publish{Scope: p.Scope, Key: p.Key, Payloads: p.Payloads}, nil); err != nil {
			r.fail(0, wire.AsError(err))
		}
		return true
	}
	pd := r.ack(p.RequestID, uint32(len(p.Payloads)), p.Ack)
	if err := p.Scope.Validate(); err != nil {
		pd.complete(err)
		return true
	}
	withOffset := h.info.Flags&wire.FlagPublishAckOffset != 0 // else the client did not offer offsets in acks
	done := func(res service.PublishResult) { pd.resolve(res.Offset, res.Durable && withOffset, res.Err) }
	sp := &service.Publish{Scope: p.Scope, Key: p.Key, Payloads: p.Payloads}
	if p.Conditional {
		sp.ExpectedOffset = &p.Expected
	}
	if p.Idempotent {
		sp.Producer = &service.ProducerSeq{ID: p.ProducerID, Seq: p.Sequence}
	}
	if err := h.session.Publish(h.conn.Context(), sp, done); err != nil {
		pd.complete(err)
	}
	return true
}

// openEventStream opens a subscription's event stream and writes its
// EventStreamHello, the only frame that names the subscription.
func (h *connHandler) openEventStream(id uint64) (service.Sink, error) {
	ctx, cancel := context.WithTimeout(h.conn.Context(), openStreamTimeout)
	defer cancel()
	us, err := h.conn.OpenUniStreamSync(ctx)
	if err != nil {
		return nil, wire.NewError(wire.CodeLimitExceeded, "open event stream: %v", err)
	}
	if err := writeMessage(us, &wire.EventStreamHello{SubscriptionID: id}); err != nil {
		us.CancelWrite(streamErrProtocol)
		return nil, wire.NewError(wire.CodeInternal, "write event stream hello: %v", err)
	}
	// The hello is how the client pairs the stream with its subscription;
	// if the broker resets the stream (the subscription ended at once), the
	// hello must still arrive so the client sees the end instead of waiting.
	us.SetReliableBoundary()
	return eventSink{us}, nil
}

// eventSink is a subscription's event stream; Abort resets it with a
// wire.StreamCode* when the broker ends the subscription itself.
type eventSink struct{ *quic.SendStream }

func (s eventSink) Abort(code uint64) { s.CancelWrite(quic.StreamErrorCode(code)) }
