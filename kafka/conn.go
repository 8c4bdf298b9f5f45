package kafka

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/getfelix/felix-go/service"
)

// conn serves one Kafka connection with two goroutines: serve reads
// requests and starts each (Produce is admitted inline, so an idempotent
// producer's batches reach their shards in wire order; Fetch long-polls in
// a goroutine of its own; the rest answer inline), and write sends the
// answers in request order, as Kafka requires. The queue between them, out,
// holds at most Config.MaxInflight requests: when it is full the reader
// stops reading and TCP pushes back on the client. That is the bound on a
// connection's queued work.
type conn struct {
	l      *Listener
	nc     net.Conn
	id     uint64
	ctx    context.Context
	cancel context.CancelFunc
	out    chan *pending
	wg     sync.WaitGroup // write and the fetch goroutines

	// Owned by serve's goroutine.
	sess      service.Session // nil until authenticated
	tenant    string
	handshook bool // SASLHandshake PLAIN seen; SASLAuthenticate may follow
	// rawSASL: a v0 SASLHandshake was answered, so the next frame is the
	// bare PLAIN token, not a request.
	rawSASL bool
	topics  topicCache
}

// pending is one request's answer, in the order requests arrived.
type pending struct {
	done  chan struct{}
	frame []byte // the framed response; nil: none (acks=0)
	// closeAfter closes the connection once frame is written.
	closeAfter bool
	once       sync.Once
}

func newPending() *pending { return &pending{done: make(chan struct{})} }

// finish sets the answer; only the first call counts.
func (p *pending) finish(frame []byte, closeAfter bool) {
	p.once.Do(func() {
		p.frame, p.closeAfter = frame, closeAfter
		close(p.done)
	})
}

// answered is a pending already finished with resp.
func answered(corr int32, resp kmsg.Response) *pending {
	p := newPending()
	p.finish(appendResponse(nil, corr, resp), false)
	return p
}

func newConn(l *Listener, nc net.Conn, id uint64) *conn {
	ctx, cancel := context.WithCancel(context.Background())
	return &conn{l: l, nc: nc, id: id, ctx: ctx, cancel: cancel, out: make(chan *pending, l.cfg.MaxInflight)}
}

// close ends the connection: the reader fails, serve returns.
func (c *conn) close() {
	c.cancel()
	_ = c.nc.Close()
}

// serve reads requests until the connection fails or a request closes it,
// then waits for the writer and the fetches, and closes the session.
func (c *conn) serve() {
	c.wg.Add(1)
	go c.write()
	err := c.read()
	c.cancel()
	close(c.out)
	_ = c.nc.Close()
	c.wg.Wait()
	if c.sess != nil {
		c.sess.Close()
	}
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		c.l.cfg.Log.Debug().Err(err).Uint64("conn", c.id).Str("remote", c.nc.RemoteAddr().String()).Msg("kafka: connection closed")
	}
}

// read is the read loop. A panic in a handler (a bug) closes this
// connection only: the broker and its other clients go on.
func (c *conn) read() (err error) {
	defer func() {
		if r := recover(); r != nil {
			c.l.cfg.Log.Error().Interface("panic", r).Uint64("conn", c.id).Msg("kafka: handler panicked; connection closed")
			c.l.cfg.Hooks.Request("panic", "closed")
			err = fmt.Errorf("kafka: panic: %v", r)
		}
	}()
	br := bufio.NewReaderSize(c.nc, 64<<10)
	var buf []byte
	_ = c.nc.SetReadDeadline(time.Now().Add(c.l.cfg.AuthTimeout))
	authed := false
	for {
		limit := c.l.cfg.MaxRequestBytes
		if c.sess == nil {
			limit = c.l.cfg.PreAuthMaxRequestBytes
		} else if !authed {
			authed = true
			_ = c.nc.SetReadDeadline(time.Time{}) // authenticated: no deadline
		}
		frame, err := readFrame(br, buf, limit)
		if err != nil {
			if errors.Is(err, ErrFrameTooLarge) {
				c.l.cfg.Hooks.Request("unknown", "closed")
			}
			return err
		}
		// A frame's bytes stay referenced by the request (Produce records
		// alias them), so each frame gets a fresh buffer.
		buf = nil
		if c.rawSASL {
			p, err := c.rawAuthenticate(frame)
			c.out <- p
			if err != nil {
				return err
			}
			continue
		}
		h, req, err := decodeRequest(frame)
		if err != nil {
			p, stop := c.refuse(h, req, err)
			if p != nil {
				c.out <- p
			}
			if stop {
				return err
			}
			continue
		}
		p, err := c.dispatch(h, req)
		if p != nil {
			select {
			case c.out <- p:
			case <-c.ctx.Done():
				return c.ctx.Err()
			}
		}
		if err != nil {
			return err
		}
	}
}

// refuse answers a request that did not decode: an ApiVersions at an
// unknown version gets the KIP-511 answer (a v0 response with
// UNSUPPORTED_VERSION and the versions served), another api at a version
// the listener can still speak gets UNSUPPORTED_VERSION at that version
// (req, versions.go), and the connection goes on; anything else closes
// it, as Kafka does.
func (c *conn) refuse(h header, req kmsg.Request, err error) (*pending, bool) {
	if errors.Is(err, ErrUnsupportedVersion) {
		switch {
		case h.key == apiVersionsKey:
			c.l.cfg.Hooks.Request("ApiVersions", kerr.UnsupportedVersion.Message)
			return answered(h.correlation, apiVersionsResponse(0, kerr.UnsupportedVersion.Code)), false
		case req != nil:
			c.l.cfg.Hooks.Request(kmsg.NameForKey(h.key), kerr.UnsupportedVersion.Message)
			return answered(h.correlation, unsupportedResponse(req)), false
		}
	}
	c.l.cfg.Hooks.Request(kmsg.NameForKey(h.key), "closed")
	return nil, true
}

// write sends answers in request order until out closes.
func (c *conn) write() {
	defer c.wg.Done()
	bw := bufio.NewWriterSize(c.nc, 64<<10)
	for p := range c.out {
		select {
		case <-p.done:
		case <-c.ctx.Done():
			continue
		}
		if p.frame != nil && c.ctx.Err() == nil {
			if _, err := bw.Write(p.frame); err != nil {
				c.close()
				continue
			}
		}
		// Flush when nothing else is ready, so pipelined answers leave
		// in one write.
		if len(c.out) == 0 || p.closeAfter {
			if err := bw.Flush(); err != nil {
				c.close()
			}
		}
		if p.closeAfter {
			c.close()
		}
	}
}

// dispatch starts one request and returns its answer to queue, and an
// error when the connection must close after it.
func (c *conn) dispatch(h header, req kmsg.Request) (*pending, error) {
	name := kmsg.NameForKey(h.key)
	if c.sess == nil && h.key != apiVersionsKey && h.key != 17 && h.key != 36 {
		if err := c.openAnonymous(); err != nil {
			c.l.cfg.Hooks.Request(name, "closed")
			return nil, err
		}
	}
	switch r := req.(type) {
	case *kmsg.ApiVersionsRequest:
		c.l.cfg.Hooks.Request(name, "ok")
		return answered(h.correlation, apiVersionsResponse(r.Version, 0)), nil
	case *kmsg.SASLHandshakeRequest:
		return c.handleHandshake(h, r)
	case *kmsg.SASLAuthenticateRequest:
		return c.handleAuthenticate(h, r)
	case *kmsg.MetadataRequest:
		return c.handleMetadata(h, r), nil
	case *kmsg.ProduceRequest:
		return c.handleProduce(h, r), nil
	case *kmsg.FetchRequest:
		return c.handleFetch(h, r), nil
	case *kmsg.ListOffsetsRequest:
		return c.handleListOffsets(h, r), nil
	case *kmsg.InitProducerIDRequest:
		return c.handleInitProducerID(h, r), nil
	case *kmsg.FindCoordinatorRequest:
		return c.handleFindCoordinator(h, r), nil
	case *kmsg.JoinGroupRequest:
		return c.handleJoinGroup(h, r), nil
	case *kmsg.SyncGroupRequest:
		return c.handleSyncGroup(h, r), nil
	case *kmsg.HeartbeatRequest:
		return c.handleHeartbeat(h, r), nil
	case *kmsg.LeaveGroupRequest:
		return c.handleLeaveGroup(h, r), nil
	case *kmsg.OffsetCommitRequest:
		return c.handleOffsetCommit(h, r), nil
	case *kmsg.OffsetFetchRequest:
		return c.handleOffsetFetch(h, r), nil
	}
	// Unreachable while apis and this switch agree.
	c.l.cfg.Hooks.Request(name, "closed")
	return nil, fmt.Errorf("%w %d", ErrUnknownAPI, h.key)
}

// count reports a request's outcome from its error code.
func (c *conn) count(key int16, code int16) {
	outcome := "ok"
	if code != 0 {
		outcome = kerr.TypedErrorForCode(code).Message
	}
	c.l.cfg.Hooks.Request(kmsg.NameForKey(key), outcome)
}
