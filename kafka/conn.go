package kafka

import (
	"bufio"
	"context"
	"encoding/binary"
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
// stops reading and TCP pushes back on the client. That, and the bytes
// budgets of the requests read (requestBytes) and the Fetch answers built
// (fetchBytes), bound a connection's queued work.
type conn struct {
	l      *Listener
	nc     net.Conn
	id     uint64
	ctx    context.Context
	cancel context.CancelFunc
	out    chan *pending
	wg     sync.WaitGroup // write and the fetch goroutines

	// fetchBytes and requestBytes are the connection's in-flight budgets
	// (Config.MaxInflightFetchBytes, MaxInflightRequestBytes): the read
	// loop reserves, the writer releases. A connection that ends drops
	// them with whatever they still hold.
	fetchBytes, requestBytes *budget

	// Owned by serve's goroutine.
	sess      service.Session // nil until authenticated
	tenant    string
	handshook bool   // SASLHandshake seen; SASLAuthenticate may follow
	mechanism string // the handshake's SASL mechanism
	// rawSASL: a v0 SASLHandshake was answered, so the next frame is the
	// bare SASL message, not a request (both of a SCRAM exchange).
	rawSASL bool
	// scram is the SCRAM exchange under way, between its two messages.
	scram  service.SCRAMLogin
	topics topicCache
	// authDeadline is when a connection that has not logged in closes.
	authDeadline time.Time
	// releasePreAuth gives back the connection's place among those not
	// yet authenticated (Config.Admit); read calls it once sess is set.
	releasePreAuth func()
}

// pending is one request's answer, in the order requests arrived.
type pending struct {
	done  chan struct{}
	frame []byte // the framed response; nil: none (acks=0)
	// closeAfter closes the connection once frame is written.
	closeAfter bool
	once       sync.Once
	// held is a Fetch's share of the connection's fetchBytes, given back
	// once its answer is written; request is the request's share of
	// requestBytes, given back once it is answered. Both are set before
	// the pending is queued, and nil for requests that hold none.
	held, request *reservation
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
	return &conn{
		l: l, nc: nc, id: id, ctx: ctx, cancel: cancel, out: make(chan *pending, l.cfg.MaxInflight),
		fetchBytes: newBudget(l.cfg.MaxInflightFetchBytes), requestBytes: newBudget(l.cfg.MaxInflightRequestBytes),
	}
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
	c.authDeadline = time.Now().Add(c.l.cfg.AuthTimeout)
	for {
		limit := c.l.cfg.MaxRequestBytes
		if c.sess == nil {
			limit = c.l.cfg.PreAuthMaxRequestBytes
		}
		frame, held, err := c.readRequest(br, limit)
		if err != nil {
			return err
		}
		if c.rawSASL {
			p, err := c.rawAuthenticate(frame)
			p.request = held
			c.out <- p
			if err != nil {
				return err
			}
			c.leftPreAuth()
			continue
		}
		h, req, err := decodeRequest(frame)
		if err != nil {
			p, stop := c.refuse(h, req, err)
			if p != nil {
				p.request = held
				c.out <- p
			} else {
				c.requestBytes.release(held)
			}
			if stop {
				return err
			}
			continue
		}
		p, err := c.dispatch(h, req)
		c.leftPreAuth()
		if p == nil {
			c.requestBytes.release(held)
		} else {
			p.request = held
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

// leftPreAuth gives back the pre-auth place once the connection has a
// session: from then on it counts among the authenticated ones.
func (c *conn) leftPreAuth() {
	if c.sess != nil && c.releasePreAuth != nil {
		c.releasePreAuth()
		c.releasePreAuth = nil
	}
}

// readRequest reads the next request frame, at most limit bytes, under
// the deadline of each stage: kafka_idle_timeout_ms for its first byte to
// come (the connection is idle until then), kafka_request_read_timeout_ms
// for the rest once it has, and before authenticating never past
// auth_timeout_ms from the connection's start. Its body is read once the
// connection's in-flight request bytes leave room for it; the reservation
// is returned with the frame, to be given back when it is answered.
func (c *conn) readRequest(br *bufio.Reader, limit int) ([]byte, *reservation, error) {
	c.setReadDeadline(c.l.cfg.IdleTimeout)
	if _, err := br.Peek(1); err != nil {
		return nil, nil, c.readFailed(err, "kafka_idle_timeout_ms")
	}
	c.setReadDeadline(c.l.cfg.RequestReadTimeout)
	var size [4]byte
	if _, err := io.ReadFull(br, size[:]); err != nil {
		return nil, nil, c.readFailed(err, "kafka_request_read_timeout_ms")
	}
	n := int32(binary.BigEndian.Uint32(size[:]))
	if n < 0 || int(n) > limit {
		return nil, nil, c.tooLarge(br, n, limit)
	}
	held := c.requestBytes.reserve(int(n))
	if err := c.requestBytes.wait(c.ctx, held); err != nil {
		return nil, nil, err
	}
	// The wait was the broker's, not the client's: its time is not the
	// client's to make up.
	c.setReadDeadline(c.l.cfg.RequestReadTimeout)
	frame, err := readBody(br, int(n))
	if err != nil {
		c.requestBytes.release(held)
		return nil, nil, c.readFailed(err, "kafka_request_read_timeout_ms")
	}
	return frame, held, nil
}

// setReadDeadline sets the read deadline d from now, or the login's
// deadline when that comes first.
func (c *conn) setReadDeadline(d time.Duration) {
	deadline := time.Now().Add(d)
	if c.sess == nil && c.authDeadline.Before(deadline) {
		deadline = c.authDeadline
	}
	_ = c.nc.SetReadDeadline(deadline)
}

// readFailed reports a read error: a deadline is counted under its knob
// (auth_timeout_ms before the login) and logged, so an operator can tell
// a client cut off from one that left.
func (c *conn) readFailed(err error, knob string) error {
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		return err
	}
	if c.sess == nil {
		knob = "auth_timeout_ms"
	}
	c.l.cfg.Hooks.Limit(knob)
	c.l.cfg.Log.Info().Uint64("conn", c.id).Str("remote", c.nc.RemoteAddr().String()).Str("tenant", c.tenant).Str("limit", knob).
		Msg("kafka: read deadline passed; connection closed")
	return fmt.Errorf("kafka: %s: %w", knob, err)
}

// tooLarge refuses a frame of n bytes, past limit, by closing the
// connection, as Kafka does: nothing of it can be answered without
// reading it. It is logged at warn with the api when its header is
// already buffered, because the client will most likely only see a
// broken connection (kgo retries it, librdkafka reports the login).
func (c *conn) tooLarge(br *bufio.Reader, n int32, limit int) error {
	knob := "kafka_max_request_bytes"
	if limit != c.l.cfg.MaxRequestBytes { // before the login, without an anonymous tenant
		knob = "pre_auth_max_frame_bytes"
	}
	api := "unknown"
	if br.Buffered() >= 2 {
		key, _ := br.Peek(2)
		if name := kmsg.NameForKey(int16(binary.BigEndian.Uint16(key))); name != "" {
			api = name
		}
	}
	c.l.cfg.Hooks.Request(api, "closed")
	c.l.cfg.Hooks.Limit(knob)
	c.l.cfg.Log.Warn().Uint64("conn", c.id).Str("remote", c.nc.RemoteAddr().String()).Str("tenant", c.tenant).
		Str("api", api).Int32("size", n).Int("limit", limit).Str("knob", knob).
		Msg("kafka: request larger than the limit; connection closed (raise the knob, or lower the client's max request size)")
	return fmt.Errorf("%w: %d bytes, limit %d", ErrFrameTooLarge, n, limit)
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
		c.requestBytes.release(p.request)
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
		// Written to the buffer is as good as gone: it is at most 64 KiB.
		c.fetchBytes.release(p.held)
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
	case *kmsg.CreateTopicsRequest:
		return c.handleCreateTopics(h, r), nil
	case *kmsg.DeleteTopicsRequest:
		return c.handleDeleteTopics(h, r), nil
	case *kmsg.CreatePartitionsRequest:
		return c.handleCreatePartitions(h, r), nil
	case *kmsg.DescribeConfigsRequest:
		return c.handleDescribeConfigs(h, r), nil
	case *kmsg.AlterConfigsRequest:
		return c.handleAlterConfigs(h, r), nil
	case *kmsg.IncrementalAlterConfigsRequest:
		return c.handleIncrementalAlterConfigs(h, r), nil
	case *kmsg.ListGroupsRequest:
		return c.handleListGroups(h, r), nil
	case *kmsg.DescribeGroupsRequest:
		return c.handleDescribeGroups(h, r), nil
	case *kmsg.DeleteGroupsRequest:
		return c.handleDeleteGroups(h, r), nil
	case *kmsg.OffsetDeleteRequest:
		return c.handleOffsetDelete(h, r), nil
	case *kmsg.DescribeClusterRequest:
		return c.handleDescribeCluster(h, r), nil
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
