package webfront

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/wire"
)

// maxInflight bounds the requests one connection has read and not yet
// answered; the read loop waits for a slot, so a connection holds at most
// this many frames (each at most max_frame_bytes) however fast it sends.
const maxInflight = 16

// writeTimeout closes a connection whose browser has not taken one message
// for this long. A stalled tab's subscriptions stop at their egress share
// and queue under their policy meanwhile; the timeout frees its writer.
const writeTimeout = 30 * time.Second

// conn is one browser connection: its read loop, its session, and the
// goroutines answering its requests (at most maxInflight).
type conn struct {
	srv     *Server
	link    link
	id      uint64
	remote  net.Addr
	log     zerolog.Logger
	ctx     context.Context
	session service.Session
	tenant  string
	// releasePreAuth gives back the connection's place among those not
	// yet authenticated (the server's deferred call gives it back too,
	// for a connection that never authenticates; a second call does
	// nothing).
	releasePreAuth func()
	// background counts the goroutines writing ended frames for Abort.
	background sync.WaitGroup
}

// serve runs the handshake and then the read loop; it returns once the
// connection ended and every request goroutine finished, with the session
// closed.
func (c *conn) serve(parent context.Context) {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	c.ctx = ctx
	defer c.link.closeNow()
	if err := c.handshake(); err != nil {
		c.log.Debug().Err(err).Msg("browser handshake failed")
		return
	}
	slots := make(chan struct{}, maxInflight)
	defer func() {
		for range maxInflight {
			slots <- struct{}{} // every request goroutine has finished
		}
		c.session.Close()
		c.background.Wait()
	}()
	for {
		msg, err := c.link.read(ctx, c.srv.cfg.MaxFrameBytes)
		if errors.Is(err, errTextMessage) {
			c.reply(&Reply{Op: OpReply, Error: replyError(wire.NewError(wire.CodeInvalidRequest, "frames are binary WebSocket messages"))})
			continue
		}
		if err != nil {
			c.log.Debug().Err(err).Msg("browser connection closed")
			return
		}
		req, err := DecodeRequest(msg)
		if err != nil {
			c.reply(&Reply{Op: OpReply, Error: replyError(wire.NewError(wire.CodeInvalidRequest, "%v", err))})
			continue
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		release := func() { <-slots }
		if req.Op == OpPublish {
			// Admitted here, in the order the browser sent them, as felix/1
			// admits a stream's publishes; only the wait for the answer
			// runs apart.
			c.publish(req, release)
			continue
		}
		go func() {
			defer release()
			c.handle(req)
		}()
	}
}

// handshake reads the auth within the auth timeout and opens the session.
// A refusal is answered, then the connection closes with status 1008 and
// the refusal as its reason.
func (c *conn) handshake() error {
	cfg := c.srv.cfg
	// A timer closes a silent connection, not Read's context: a context
	// ending inside Read drops the connection without a close frame, and
	// the page would not learn why.
	closed := make(chan struct{})
	timer := time.AfterFunc(cfg.AuthTimeout, func() {
		defer close(closed)
		_ = c.link.refuse("unauthenticated: no auth within auth_timeout_ms")
	})
	msg, err := c.link.read(c.ctx, cfg.PreAuthMaxFrameBytes)
	if !timer.Stop() {
		<-closed
		return errors.New("webfront: no auth within auth_timeout_ms")
	}
	if err != nil {
		return err
	}
	req, err := DecodeRequest(msg)
	if err == nil && req.Op != OpAuth {
		err = wire.NewError(wire.CodeUnauthenticated, "the first frame must be auth, got %s", req.Op)
	}
	if err == nil {
		err = wire.ValidateName("tenant", req.Tenant)
	}
	var session service.Session
	if err == nil {
		session, err = c.srv.svc.Open(c.ctx, service.Client{ID: c.id, Remote: c.remote, Tenant: req.Tenant, Token: req.Token, Offsets: true, Frontend: service.FrontendBrowser})
	}
	if err != nil {
		if errors.Is(err, ErrMalformed) {
			err = wire.NewError(wire.CodeInvalidRequest, "%v", err)
		}
		var id uint64
		if req != nil {
			id = req.ID
		}
		re := replyError(err)
		c.reply(&Reply{Op: OpReply, ID: id, Error: re})
		_ = c.link.refuse(re.Name + ": " + re.Message)
		return err
	}
	c.releasePreAuth() // authenticated: it counts among authenticated connections now
	c.session, c.tenant = session, req.Tenant
	c.reply(&Reply{Op: OpReply, ID: req.ID})
	return nil
}

// handle answers one request.
func (c *conn) handle(req *Request) {
	var (
		rep   *Reply
		err   error
		after func() // runs once the reply is written
	)
	switch req.Op {
	case OpSubscribe:
		rep, after, err = c.subscribe(req)
	case OpUnsubscribe:
		rep, err = &Reply{}, c.session.Unsubscribe(c.ctx, req.Sub)
	case OpRead:
		rep, err = c.read(req)
	case OpAuth:
		// A fresh token for the same tenant, before the old one expires.
		if req.Tenant != c.tenant {
			err = wire.NewError(wire.CodeInvalidRequest, "a connection stays with its tenant %q", c.tenant)
		} else {
			rep, err = &Reply{}, c.session.Reauthenticate(c.ctx, req.Token)
		}
	}
	if err != nil {
		rep = &Reply{Error: replyError(err)}
	}
	rep.Op, rep.ID = OpReply, req.ID
	c.reply(rep)
	if after != nil {
		after()
	}
}

func (c *conn) scope(req *Request) (wire.Scope, error) {
	sc := wire.Scope{Tenant: c.tenant, Namespace: req.Namespace, Stream: req.Stream}
	return sc, sc.Validate()
}

// subscribe subscribes; after, when set, lets the subscription's events
// out once the reply is written.
func (c *conn) subscribe(req *Request) (rep *Reply, after func(), err error) {
	sc, err := c.scope(req)
	if err != nil {
		return nil, nil, err
	}
	sub := &service.Subscribe{Scope: sc, Shard: uint32(req.Shard), Offset: req.Offset}
	switch req.Start {
	case "earliest":
		sub.Start = service.StartEarliest
	case "offset":
		sub.Start = service.StartOffset
	}
	var opened *sink
	open := func(id uint64) (service.Sink, error) {
		opened = &sink{c: c, sub: id, out: c.link.events(id), answered: make(chan struct{})}
		return opened, nil
	}
	res, err := c.session.Subscribe(c.ctx, sub, open)
	if opened != nil {
		after = func() { close(opened.answered) }
	}
	if err != nil {
		return nil, after, err
	}
	return &Reply{Sub: res.ID, Durable: res.Durable, StartOffset: res.StartOffset, LiveOffset: res.LiveOffset}, after, nil
}

// publish admits a publish on the read loop and answers it from a
// goroutine once the shard handled it; release frees the request's slot
// after the answer, which is what bounds a connection's publishes in
// flight.
func (c *conn) publish(req *Request, release func()) {
	fail := func(err error) {
		c.reply(&Reply{Op: OpReply, ID: req.ID, Error: replyError(err)})
		release()
	}
	sc, err := c.scope(req)
	if err != nil {
		fail(err)
		return
	}
	if len(req.Payloads) == 0 {
		fail(wire.NewError(wire.CodeInvalidRequest, "publish carries no payloads"))
		return
	}
	done := make(chan service.PublishResult, 1)
	p := &service.Publish{Scope: sc, Key: req.Key, Payloads: req.Payloads}
	if err := c.session.Publish(c.ctx, p, func(r service.PublishResult) { done <- r }); err != nil {
		fail(err)
		return
	}
	go func() {
		defer release()
		select {
		case r := <-done:
			if r.Err != nil {
				c.reply(&Reply{Op: OpReply, ID: req.ID, Error: replyError(r.Err)})
				return
			}
			c.reply(&Reply{Op: OpReply, ID: req.ID, Offset: r.Offset, Durable: r.Durable})
		case <-c.ctx.Done():
		}
	}()
}

func (c *conn) read(req *Request) (*Reply, error) {
	sc, err := c.scope(req)
	if err != nil {
		return nil, err
	}
	page, err := c.session.Read(c.ctx, &service.Read{Scope: sc, Shard: uint32(req.Shard), From: req.From, MaxRecords: int(req.Max)})
	if err != nil {
		return nil, err
	}
	rep := &Reply{Next: page.Next, Committed: page.Committed, Records: make([]ReplyRecord, len(page.Records))}
	for i, r := range page.Records {
		rep.Records[i] = ReplyRecord{Offset: r.Offset, Value: r.Value, TimeMs: r.Time.UnixMilli()}
	}
	return rep, nil
}

// reply writes one control frame; a failed write ends the connection
// (coder/websocket closes it; a WebTransport session is closed here),
// which the read loop then sees.
func (c *conn) reply(r *Reply) {
	_ = c.write(AppendReply(nil, r))
}

func (c *conn) write(frame []byte) error {
	ctx, cancel := context.WithTimeout(c.ctx, writeTimeout)
	defer cancel()
	err := c.link.write(ctx, frame)
	if err != nil {
		c.link.closeNow()
	}
	return err
}
