// Package client is Felix's Go client: connect, publish (fire-and-forget or
// acked, pipelined), subscribe, consumer groups, close. Every call takes a
// context; broker errors come back as *wire.Error, matchable with
// errors.Is against the wire.Err* sentinels. It imports no broker package.
//
// Publishing. Each stream scope gets a publish stream of its own (the first
// Options.PublishShardStreams, then one pooled), so a stalled shard holds
// up only its own publishes. On each, Produce (and ProduceIf, and Publish,
// which is Produce and a wait) hands the batch to the stream and returns: up
// to the broker's publish window of acked requests are in flight (only
// when AuthOK grants FeaturePublishPipeline), within PublishInflightBytes;
// past the window, calls queue and same-scope, same-key ones are merged into
// one request when a slot frees (conditional ones never are). The stream's
// ack reader resolves the oldest request on each answer and calls its
// promises in call order, one at a time; a lost connection fails every
// outstanding promise. An IdempotentProducer sends one batch at a time with
// its producer id and sequence on the shard it routes to (package
// routing, as the broker does); an unanswered batch is sent again with the
// same sequence, redialing if the client is gone.
//
// In a cluster, ClusterClient (DialCluster) keeps one Client per broker it
// needs and a topology per stream, sends each call to its shard's owner,
// follows not_leader, retries by retry class, and leaves an owner that
// stays silent while another member names another (hedge.go).
// ClusterSubscription subscribes again at the owner when the broker ends a
// subscription, its connection goes, or it lags; Group and the group
// administration route each shard's calls to the member serving it.
package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/getfelix/felix-go/internal/quicconf"
	"github.com/getfelix/felix-go/wire"
)

// Errors of the client itself.
var (
	// ErrClosed is returned by calls on a closed client or subscription.
	ErrClosed = errors.New("client: closed")
	// ErrProtocol means the broker sent something this client cannot read.
	ErrProtocol = errors.New("client: protocol error")
	// ErrSubscriptionEnded means the broker ended a subscription itself
	// (an actor serving it stopped, or its stream failed): subscribe again.
	ErrSubscriptionEnded = errors.New("client: the broker ended the subscription; subscribe again")
	// ErrTokenExpired ends the subscriptions of a connection whose token
	// expired. It is a *wire.Error, so errors.Is(err,
	// wire.ErrUnauthenticated) holds: Reauthenticate, then subscribe again.
	ErrTokenExpired = wire.NewError(wire.CodeUnauthenticated,
		"the connection's token expired and the broker ended the subscription; re-authenticate with a fresh token (Client.Reauthenticate) and subscribe again")
)

// LaggedError ends a durable subscription that fell behind its queue:
// nothing was skipped silently; subscribe again from ResumeFrom (or use
// SubscribeResuming, which does).
type LaggedError struct{ ResumeFrom uint64 }

func (e *LaggedError) Error() string {
	return fmt.Sprintf("client: subscription lagged; resume from offset %d", e.ResumeFrom)
}

// Options configure Dial. The zero value trusts the system roots.
type Options struct {
	// Tenant scopes the connection (default "default").
	Tenant string
	// Token authenticates the connection as Tenant; a broker started with
	// auth none ignores it. Empty means the token in DefaultTokenFile when
	// that file exists, else none (and a broker with auth refuses).
	Token string
	// TLS overrides everything below when set.
	TLS *tls.Config
	// CAFile trusts the PEM certificate(s) in this file.
	CAFile string
	// Insecure skips certificate verification.
	Insecure bool
	// PublishInflightBytes bounds each publish stream's acked publish bytes
	// awaiting their ack (4 MiB). It is per stream so that a stalled stream's
	// unanswered publishes cannot take the budget of the others.
	PublishInflightBytes int64
	// PublishWindow caps each publish stream's acked publishes awaiting
	// their ack below the broker's publish window. Zero, or more than the
	// broker grants, means the broker's window (Client.PublishWindow).
	PublishWindow int
	// PublishShardStreams is how many QUIC streams the client dedicates to
	// publishing, one per stream scope: the first this many scopes it
	// publishes to get one each, first come first served, and every later
	// scope shares one pooled stream (so a stalled pooled scope holds up the
	// other pooled ones). A scope keeps its stream for the life of the
	// client. Zero means 4; a negative value dedicates none, so every publish
	// goes on the pooled stream. Each stream has its own window of acked
	// publishes: the broker's publish window when it grants
	// wire.FeaturePublishPipeline, else one.
	PublishShardStreams int
	// SubscriptionBuffer is the number of events a subscription buffers before
	// it stops reading its stream, letting the broker's queue absorb the rest (1024).
	SubscriptionBuffer int
	// IdleTimeout is how long the connection may go without a packet from
	// the broker before the client gives it up as lost (30 s). With
	// KeepAlive below it, an idle but healthy connection never gets there:
	// this is how fast a dead broker or network is noticed, give or take
	// one KeepAlive: quic-go counts it from the first packet the client
	// sent after the broker's last one (RFC 9000, 10.1), which is the
	// keep-alive PING when the client had nothing left unacknowledged. A
	// ClusterClient does not wait for it when another member names a new
	// owner (see ClusterClient).
	IdleTimeout time.Duration
	// KeepAlive is how often the client pings an idle connection (5 s);
	// it must be below IdleTimeout (it is capped at half of it).
	KeepAlive time.Duration
	// DialTimeout bounds each connection a ClusterClient opens to one
	// broker (DefaultDialTimeout): a seed or an owner that does not answer
	// within it counts as unreachable, and the next is tried. Without it a
	// dead address holds the caller for QUIC's handshake timeout. Dial
	// itself is bounded by its context only.
	DialTimeout time.Duration
	// Retrying, when set, is told of each retry of a ClusterClient call
	// that finds no owner to answer it (no leader elected yet, the
	// owner's member down, the members cut off from etcd, a shard
	// moving), before the pause that precedes the next attempt: a
	// program can say what it waits for, and for how long. It may be
	// called from several goroutines at once and must not block.
	Retrying func(Retry)
}

// Retry is one retry of a ClusterClient call (Options.Retrying).
type Retry struct {
	// Stream is the stream the call is for.
	Stream Stream
	// Waited is how long the call has been retried so far.
	Waited time.Duration
	// Err is the last attempt's error: what the call waits out.
	Err error
}

// Defaults of Options' connection timing.
const (
	DefaultIdleTimeout = 30 * time.Second
	DefaultKeepAlive   = 5 * time.Second
	DefaultDialTimeout = 3 * time.Second
)

// withDefaults fills in every zero field that has a default.
func (o Options) withDefaults() Options {
	if o.Tenant == "" {
		o.Tenant = "default"
	}
	if o.PublishInflightBytes <= 0 {
		o.PublishInflightBytes = 4 << 20
	}
	if o.PublishShardStreams == 0 {
		o.PublishShardStreams = 4
	}
	if o.SubscriptionBuffer <= 0 {
		o.SubscriptionBuffer = 1024
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.KeepAlive <= 0 {
		o.KeepAlive = DefaultKeepAlive
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	return o
}

// ConnectionLostError ends a client whose connection the broker or the
// network ended; every later call returns it. Cause is quic-go's error.
type ConnectionLostError struct{ Cause error }

func (e *ConnectionLostError) Error() string {
	var idle *quic.IdleTimeoutError
	var app *quic.ApplicationError
	var reset *quic.StatelessResetError
	switch {
	case errors.As(e.Cause, &idle):
		return "client: connection lost: no answer from the broker within the idle timeout (the broker is gone or the network is down)"
	case errors.As(e.Cause, &app) && app.Remote:
		return fmt.Sprintf("client: connection lost: the broker closed it (code %d: %s)", app.ErrorCode, app.ErrorMessage)
	case errors.As(e.Cause, &reset):
		return "client: connection lost: the broker no longer knows it (it restarted)"
	}
	return "client: connection lost: " + e.Cause.Error()
}

func (e *ConnectionLostError) Unwrap() error { return e.Cause }

// quicConfig is the shared QUIC configuration with o's timing.
func (o *Options) quicConfig() *quic.Config {
	qc := quicconf.QUICConfig()
	qc.MaxIdleTimeout = o.IdleTimeout
	qc.KeepAlivePeriod = min(o.KeepAlive, o.IdleTimeout/2)
	// A broker that does not answer the handshake is given up as soon as
	// an established connection would be (quic-go's default is 5 s).
	qc.HandshakeIdleTimeout = min(o.IdleTimeout, 5*time.Second)
	return qc
}

// DefaultCAFile is where a broker started with defaults in the current
// folder writes its self-signed certificate. Dial trusts it when present and
// no other trust is configured, so local use needs no flags.
var DefaultCAFile = filepath.Join("felix-data", quicconf.CertFile)

// DefaultTokenFile is where a broker started with defaults in the current
// folder writes its admin token (full rights on tenant default). Dial sends
// it when Options.Token is empty, so local use needs no flags, as with
// DefaultCAFile. Unlike the CA, it is used whatever TLS, CAFile or Insecure
// say: trust and credentials are separate questions, and a client given
// --ca for the local broker still wants the local token.
//
// NOTE: "admin.token" is auth.AdminTokenFile; the client does not import
// auth (it holds the broker's signing code), so keep the two in sync.
var DefaultTokenFile = filepath.Join("felix-data", "admin.token")

func (o *Options) tls() (*tls.Config, error) {
	if o.TLS != nil {
		return o.TLS, nil
	}
	ca := o.CAFile
	if ca == "" && !o.Insecure {
		if _, err := os.Stat(DefaultCAFile); err == nil {
			ca = DefaultCAFile
		}
	}
	return quicconf.ClientTLS(ca, o.Insecure)
}

// token is Token, or the contents of DefaultTokenFile when Token is empty
// and the file exists.
func (o *Options) token() (string, error) {
	if o.Token != "" {
		return o.Token, nil
	}
	data, err := os.ReadFile(DefaultTokenFile)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("client: default token: %w", err)
	}
	return strings.TrimSpace(string(data)), nil
}

// Client is a connection to one broker. It is safe for concurrent use.
type Client struct {
	opts      Options
	conn      *quic.Conn
	features  uint32
	ackWindow int // unanswered acked publishes per publish stream (ackWindow)
	maxFrame  int // the broker's max_frame_bytes; 0 means unknown

	ctrl    *quic.Stream
	ctrlMu  sync.Mutex // serialises control requests' writes
	nextReq atomic.Uint64
	waiters sync.Map // request id -> chan wire.Message; 0 is the Reauthenticate in flight

	// reauth serialises Reauthenticate: the broker answers an Auth with no
	// request id, so at most one may be in flight. late is the answer
	// channel of one whose caller gave up; the next waits for it first, so
	// that answer is not taken for its own.
	reauth struct {
		sync.Mutex
		late chan wire.Message
	}

	pubs publishers

	subsMu struct {
		sync.Mutex
		byID    map[uint64]*Subscription
		orphans map[uint64]*quic.ReceiveStream // event streams that beat their Subscribed
		wait    map[uint64]chan *quic.ReceiveStream
	}

	closed   atomic.Bool
	lost     atomic.Bool  // the connection ended by the broker or the network, not Close
	lostNano atomic.Int64 // when lost was set, in Unix nanoseconds
	done     chan struct{}
	wg       sync.WaitGroup
	asyncErr atomic.Pointer[error]

	// testHookInflight, set by tests before the first publish, sees a
	// publish stream's unanswered requests and budget bytes whenever
	// either grows. It runs with the stream's lock held.
	testHookInflight func(requests int, bytes int64)
	// testHookSend, set by tests before the first publish, sees every
	// acked publish as it is encoded (under the stream's lock).
	testHookSend func(*wire.Publish)
}

// Dial connects and completes the handshake.
func Dial(ctx context.Context, addr string, opts Options) (*Client, error) {
	opts = opts.withDefaults()
	tlsConf, err := opts.tls()
	if err != nil {
		return nil, err
	}
	if opts.Token, err = opts.token(); err != nil {
		return nil, err
	}
	conn, err := quic.DialAddr(ctx, addr, tlsConf, opts.quicConfig())
	if err != nil {
		return nil, fmt.Errorf("client: dial %s: %w", addr, err)
	}
	c := &Client{opts: opts, conn: conn, done: make(chan struct{})}
	c.pubs.c = c
	c.subsMu.byID = make(map[uint64]*Subscription)
	c.subsMu.orphans = make(map[uint64]*quic.ReceiveStream)
	c.subsMu.wait = make(map[uint64]chan *quic.ReceiveStream)
	if err := c.handshake(ctx); err != nil {
		_ = conn.CloseWithError(0, "handshake failed")
		return nil, err
	}
	c.wg.Add(2)
	go c.readControl()
	go c.acceptEventStreams()
	return c, nil
}

func (c *Client) handshake(ctx context.Context) error {
	ctrl, err := c.conn.OpenStreamSync(ctx)
	if err != nil {
		return fmt.Errorf("client: open control stream: %w", err)
	}
	c.ctrl = ctrl
	if dl, ok := ctx.Deadline(); ok {
		_ = ctrl.SetReadDeadline(dl)
	}
	b, _ := wire.AppendMessage(nil, &wire.Auth{
		Tenant: c.opts.Tenant, Token: c.opts.Token,
		ClientFlags: wire.SupportedFlags, ClientFeatures: wire.SupportedFeatures,
		ClientName: "felix-go",
	})
	if _, err := ctrl.Write(b); err != nil {
		return fmt.Errorf("client: send auth: %w", err)
	}
	msg, err := readMessage(wire.NewFrameReader(ctrl, 64<<10))
	if err != nil {
		return fmt.Errorf("client: handshake: %w", err)
	}
	_ = ctrl.SetReadDeadline(timeZero)
	switch m := msg.(type) {
	case *wire.AuthOK:
		c.features, c.maxFrame = m.ServerFeatures, m.MaxFrameBytes
		c.ackWindow = ackWindow(m.ServerFeatures, m.PublishWindow)
		if w := c.opts.PublishWindow; w > 0 && w < c.ackWindow {
			c.ackWindow = w
		}
		return nil
	case *wire.ErrorMsg:
		return m.Err()
	default:
		return fmt.Errorf("%w: handshake answered with %s", ErrProtocol, msg.Type())
	}
}

func readMessage(fr *wire.FrameReader) (wire.Message, error) {
	h, payload, err := fr.Next()
	if err != nil {
		return nil, err
	}
	if h.Flags != 0 {
		return nil, fmt.Errorf("%w: expected a control message, got flags %#04x", ErrProtocol, h.Flags)
	}
	// A broker's answers can be as large as a frame (a page of records).
	return wire.DecodeMessageLimit(payload, fr.MaxLen)
}

// readControl routes control answers to the request waiting for them.
func (c *Client) readControl() {
	defer c.wg.Done()
	fr := wire.NewFrameReader(c.ctrl, 16<<20)
	for {
		msg, err := readMessage(fr)
		if err != nil {
			c.fail(err)
			return
		}
		var id uint64
		if r, ok := msg.(wire.Reply); ok {
			id = r.AnswerTo()
		}
		if ch, ok := c.waiters.LoadAndDelete(id); ok {
			ch.(chan wire.Message) <- msg
		} else if e, ok := msg.(*wire.ErrorMsg); ok {
			c.setAsyncErr(e.Err())
		}
	}
}

// request sends a control request and waits for its answer.
func (c *Client) request(ctx context.Context, id uint64, m wire.Message) (wire.Message, error) {
	ch, err := c.send(id, m)
	if err != nil {
		return nil, err
	}
	select {
	case res := <-ch:
		return answerOf(res)
	case <-ctx.Done():
		c.waiters.Delete(id)
		return nil, ctx.Err()
	case <-c.done:
		return nil, c.closedErr()
	}
}

// send registers a waiter for id's answer and writes m on the control
// stream.
func (c *Client) send(id uint64, m wire.Message) (chan wire.Message, error) {
	if c.closed.Load() {
		return nil, ErrClosed
	}
	ch := make(chan wire.Message, 1)
	c.waiters.Store(id, ch)
	b, err := wire.AppendMessage(nil, m)
	if err == nil && len(b)-wire.HeaderLen > wire.MaxRequestBytes(m) {
		err = wire.NewError(wire.CodeInvalidRequest, "%s of %d bytes: a broker takes at most %d", m.Type(), len(b)-wire.HeaderLen, wire.MaxRequestBytes(m))
	}
	if err != nil {
		c.waiters.Delete(id)
		return nil, err
	}
	c.ctrlMu.Lock()
	_, err = c.ctrl.Write(b)
	c.ctrlMu.Unlock()
	if err != nil {
		c.waiters.Delete(id)
		return nil, fmt.Errorf("client: send %s: %w", m.Type(), err)
	}
	return ch, nil
}

// answerOf turns an answer that is an error into one.
func answerOf(res wire.Message) (wire.Message, error) {
	switch e := res.(type) {
	case *wire.ErrorMsg:
		return nil, e.Err()
	case *wire.SubscribeCursorError:
		return nil, &wire.CursorError{Reason: e.Reason, Requested: e.Requested, Available: e.Available}
	}
	return res, nil
}

// Reauthenticate gives the connection a fresh token for its tenant, before
// or after the old one expires; the broker answers as at the handshake.
// After an expiry, operations refused with wire.ErrUnauthenticated work
// again, but subscriptions the expiry ended stay ended: subscribe again.
// A refused token leaves the old principal in force.
//
// The broker answers an Auth in order on the control stream, with AuthOK or
// an error of request id 0, neither naming the request. Replies are routed
// by request id, and id 0 is otherwise used only to answer malformed
// requests, which this client does not send; so calls are serialised (one
// Auth in flight at a time) and the answer with id 0 is this call's. Other
// requests keep flowing meanwhile.
func (c *Client) Reauthenticate(ctx context.Context, token string) error {
	c.reauth.Lock()
	defer c.reauth.Unlock()
	if late := c.reauth.late; late != nil {
		// A call that gave up left its answer to come: wait for it, so it
		// is not read as this call's.
		select {
		case <-late:
			c.reauth.late = nil
		case <-ctx.Done():
			return ctx.Err()
		case <-c.done:
			return c.closedErr()
		}
	}
	ch, err := c.send(0, &wire.Auth{
		Tenant: c.opts.Tenant, Token: token,
		ClientFlags: wire.SupportedFlags, ClientFeatures: wire.SupportedFeatures,
		ClientName: "felix-go",
	})
	if err != nil {
		return err
	}
	select {
	case res := <-ch:
		res, err := answerOf(res)
		if err != nil {
			return err
		}
		if _, ok := res.(*wire.AuthOK); !ok {
			return fmt.Errorf("%w: re-authentication answered with %s", ErrProtocol, res.Type())
		}
		return nil
	case <-ctx.Done():
		c.reauth.late = ch // still registered: the answer lands there
		return ctx.Err()
	case <-c.done:
		return c.closedErr()
	}
}

// fail records the first connection-level error and closes the client.
func (c *Client) fail(err error) {
	if c.closed.Load() {
		return // our own Close ended the connection: not an error to report
	}
	if _, isWire := err.(*wire.Error); !isWire {
		err = &ConnectionLostError{Cause: err}
	}
	c.setAsyncErr(err)
	c.lostNano.Store(time.Now().UnixNano())
	c.lost.Store(true)
	c.shutdown()
}

// lostAt is when the connection was lost; otherwise (the client was
// closed, not lost, or is open) the caller's otherwise.
func (c *Client) lostAt(otherwise time.Time) time.Time {
	if !c.lost.Load() {
		return otherwise
	}
	return time.Unix(0, c.lostNano.Load())
}

func (c *Client) setAsyncErr(err error) {
	c.asyncErr.CompareAndSwap(nil, &err)
}

// Err returns the first asynchronous error the broker reported (for example
// a fire-and-forget publish it refused), or nil.
func (c *Client) Err() error {
	if p := c.asyncErr.Load(); p != nil {
		return *p
	}
	return nil
}

// closedErr is what a call on a client that is no longer usable returns:
// what ended the connection when it was lost, ErrClosed after Close. It
// used to be ErrClosed either way (fail marks the client closed before
// anyone reads the error), hiding an idle timeout or a stopping broker.
func (c *Client) closedErr() error {
	if err := c.Err(); err != nil && c.lost.Load() {
		return err
	}
	return ErrClosed
}

// Close ends every subscription, waits for acked publishes to be answered
// and fire-and-forget publishes to be read by the broker on every publish
// stream, or ctx to end, and closes the connection. Acked publishes still
// unanswered when ctx ends fail with ErrClosed; every Produce promise has
// been called when Close returns (so a promise must not call Close).
func (c *Client) Close(ctx context.Context) error {
	// finish also stops publish streams from opening, which must happen
	// before c.wg.Wait even when the connection is already gone.
	c.pubs.finish(ctx)
	c.shutdown()
	c.wg.Wait()
	return nil
}

// gone says the client is closed or its connection ended. A lost
// connection marks the client closed before the connection's context ends
// (fail, then shutdown's CloseWithError), so a subscription that ended
// with ErrClosed in between must not be taken for one closed on purpose.
func (c *Client) gone() bool {
	return c.closed.Load() || c.conn.Context().Err() != nil
}

func (c *Client) shutdown() {
	if !c.closed.CompareAndSwap(false, true) {
		return
	}
	close(c.done)
	_ = c.conn.CloseWithError(0, "client closing")
}
