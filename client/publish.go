package client

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/getfelix/felix-go/wire"
)

var timeZero time.Time

// maxPendingWrite bounds publish bytes encoded but not yet handed to QUIC.
// Fire-and-forget publishers wait here when the connection cannot keep up.
const maxPendingWrite = 4 << 20

// Stream names a stream as (tenant, namespace, stream). An empty Tenant or
// Namespace means "default".
type Stream struct {
	Tenant    string
	Namespace string
	Name      string
}

func (s Stream) scope(c *Client) wire.Scope {
	t, ns := s.Tenant, s.Namespace
	if t == "" {
		t = c.opts.Tenant
	}
	if ns == "" {
		ns = "default"
	}
	return wire.Scope{Tenant: t, Namespace: ns, Stream: s.Name}
}

// PublishOptions tune one publish.
type PublishOptions struct {
	// Ack is the ack mode (default AckPerMessage for Publish, AckPerBatch for
	// PublishBatch; set AckNone explicitly with FireAndForget).
	Ack wire.AckMode
	// FireAndForget sends with no ack at all.
	FireAndForget bool
	// Key routes the batch to a shard.
	Key []byte
}

// PublishResult is what an acked publish learned.
type PublishResult struct {
	// Offset is the offset of the first record, on a durable stream
	// (HasOffset); the batch's records follow it consecutively.
	Offset    uint64
	HasOffset bool
}

// Publish sends one message and, unless fire-and-forget, waits for its ack.
func (c *Client) Publish(ctx context.Context, s Stream, payload []byte, o PublishOptions) error {
	_, err := c.PublishResult(ctx, s, [][]byte{payload}, withDefaultAck(o, wire.AckPerMessage))
	return err
}

// PublishBatch sends payloads as one batch: routed, ordered and acked as a unit.
func (c *Client) PublishBatch(ctx context.Context, s Stream, payloads [][]byte, o PublishOptions) error {
	_, err := c.PublishResult(ctx, s, payloads, withDefaultAck(o, wire.AckPerBatch))
	return err
}

// PublishResult publishes a batch and returns what its ack said (the
// first record's offset on a durable stream). The ack mode defaults to
// per batch.
func (c *Client) PublishResult(ctx context.Context, s Stream, payloads [][]byte, o PublishOptions) (PublishResult, error) {
	if len(payloads) == 0 {
		return PublishResult{}, nil
	}
	return c.pub.publish(ctx, s.scope(c), payloads, withDefaultAck(o, wire.AckPerBatch))
}

func withDefaultAck(o PublishOptions, mode wire.AckMode) PublishOptions {
	if !o.FireAndForget && o.Ack == wire.AckNone {
		o.Ack = mode
	}
	return o
}

// publisher owns the publish stream. Callers encode straight into a shared
// buffer that one goroutine hands to QUIC, so back-to-back publishes leave
// in one write (quic-go pays per write, not per byte); acked requests are
// remembered in write order and resolved in that order as acks arrive.
type publisher struct {
	c  *Client
	st *quic.Stream

	mu struct {
		sync.Mutex
		buf      []byte
		fifo     []*pendingPub
		inflight int64
		nextID   uint64
		err      error
		writing  bool // a Write is in progress: drain waits for it
		// changed is closed and replaced when buf is taken or inflight drops,
		// waking callers waiting for room.
		changed chan struct{}
	}
	wake chan struct{}
	// acksDone is closed when readAcks returns; closing tells it that the
	// end of the stream is expected.
	acksDone chan struct{}
	closing  atomic.Bool
}

type pendingPub struct {
	id     uint64
	want   uint32
	got    uint32
	bytes  int64
	done   chan struct{}
	err    error
	result PublishResult // from the first ack: the first record's offset
}

func newPublisher(ctx context.Context, c *Client) (*publisher, error) {
	st, err := c.conn.OpenStreamSync(ctx)
	if err != nil {
		return nil, fmt.Errorf("client: open publish stream: %w", err)
	}
	p := &publisher{c: c, st: st, wake: make(chan struct{}, 1), acksDone: make(chan struct{})}
	p.mu.changed = make(chan struct{})
	c.wg.Add(2)
	go p.writeLoop()
	go p.readAcks()
	return p, nil
}

func (p *publisher) publish(ctx context.Context, scope wire.Scope, payloads [][]byte, o PublishOptions) (PublishResult, error) {
	if len(o.Key) > wire.MaxKeyLen {
		return PublishResult{}, fmt.Errorf("client: routing key of %d bytes, at most %d", len(o.Key), wire.MaxKeyLen)
	}
	mode := o.Ack
	if o.FireAndForget {
		mode = wire.AckNone
	}
	var size int64
	for _, pl := range payloads {
		size += int64(len(pl))
	}
	// The broker ends a stream that sends a frame over its cap, which would
	// fail every publish of this client from then on: refuse it here.
	if n := publishLen(scope, payloads, mode, o.Key); p.c.maxFrame > 0 && n > p.c.maxFrame {
		return PublishResult{}, wire.NewError(wire.CodeInvalidRequest, "publish frame of %d bytes is over the broker's max_frame_bytes %d", n, p.c.maxFrame)
	}
	p.mu.Lock()
	for {
		if p.mu.err != nil {
			err := p.mu.err
			p.mu.Unlock()
			return PublishResult{}, err
		}
		roomInBuf := len(p.mu.buf) < maxPendingWrite
		roomInflight := mode == wire.AckNone || p.mu.inflight == 0 || p.mu.inflight+size <= p.c.opts.PublishInflightBytes
		if roomInBuf && roomInflight {
			break
		}
		changed := p.mu.changed
		p.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return PublishResult{}, ctx.Err()
		case <-p.c.done:
			return PublishResult{}, p.c.closedErr()
		}
		p.mu.Lock()
	}
	req := &wire.Publish{Ack: mode, Key: o.Key, Scope: scope, Payloads: payloads}
	var pd *pendingPub
	if mode != wire.AckNone {
		p.mu.nextID++
		req.RequestID = p.mu.nextID
		want := uint32(1)
		if mode == wire.AckPerMessage {
			want = uint32(len(payloads))
		}
		pd = &pendingPub{id: req.RequestID, want: want, bytes: size, done: make(chan struct{})}
		p.mu.fifo = append(p.mu.fifo, pd)
		p.mu.inflight += size
	}
	p.mu.buf = wire.AppendPublish(p.mu.buf, req)
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
	if pd == nil {
		return PublishResult{}, nil
	}
	select {
	case <-pd.done:
		return pd.result, pd.err
	case <-ctx.Done():
		// The ack will still come and release the budget; the caller just
		// stops waiting for it.
		return PublishResult{}, ctx.Err()
	}
}

// publishLen is the payload length wire.AppendPublish writes for a publish.
func publishLen(scope wire.Scope, payloads [][]byte, mode wire.AckMode, key []byte) int {
	n := 2 + len(scope.Tenant) + 2 + len(scope.Namespace) + 2 + len(scope.Stream) + 4 + 4*len(payloads)
	for _, pl := range payloads {
		n += len(pl)
	}
	if mode != wire.AckNone {
		n += 9
	}
	if key != nil {
		n += 2 + len(key)
	}
	return n
}

// writeLoop hands encoded publishes to QUIC; it exits when the client closes.
func (p *publisher) writeLoop() {
	defer p.c.wg.Done()
	var spare []byte
	for {
		select {
		case <-p.wake:
		case <-p.c.done:
			return
		}
		p.mu.Lock()
		out := p.mu.buf
		p.mu.buf = spare[:0]
		p.mu.writing = len(out) > 0
		p.broadcastLocked()
		p.mu.Unlock()
		if len(out) == 0 {
			spare = out
			continue
		}
		_, err := p.st.Write(out)
		p.mu.Lock()
		p.mu.writing = false
		p.broadcastLocked()
		p.mu.Unlock()
		if err != nil {
			p.failAll(fmt.Errorf("client: publish stream: %w", err))
			return
		}
		spare = out
	}
}

// REQUIRES: p.mu is held.
func (p *publisher) broadcastLocked() {
	close(p.mu.changed)
	p.mu.changed = make(chan struct{})
}

// readAcks resolves acked publishes in order; it exits when the stream ends.
func (p *publisher) readAcks() {
	defer p.c.wg.Done()
	defer close(p.acksDone)
	fr := wire.NewFrameReader(p.st, 16<<20)
	for {
		h, payload, err := fr.Next()
		if err != nil {
			if p.closing.Load() {
				p.failAll(ErrClosed) // the end we asked for in finish
				return
			}
			p.failAll(p.c.closedErrOr(err))
			return
		}
		if h.Flags == 0 {
			// An error for a fire-and-forget publish (bad stream name, overload).
			msg, err := wire.DecodeMessage(payload)
			if e, ok := msg.(*wire.ErrorMsg); ok && err == nil {
				p.c.setAsyncErr(e.Err())
			}
			continue
		}
		if h.Flags&wire.FlagPublishAck == 0 {
			p.failAll(fmt.Errorf("%w: unexpected frame flags %#04x on the publish stream", ErrProtocol, h.Flags))
			return
		}
		ack, err := wire.DecodeAck(h.Flags, payload)
		if err != nil {
			p.failAll(fmt.Errorf("%w: %v", ErrProtocol, err))
			return
		}
		if err := p.resolve(ack); err != nil {
			p.failAll(err)
			return
		}
	}
}

func (p *publisher) resolve(ack wire.Ack) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.mu.fifo) == 0 || p.mu.fifo[0].id != ack.RequestID {
		return fmt.Errorf("%w: ack for request %d out of order", ErrProtocol, ack.RequestID)
	}
	head := p.mu.fifo[0]
	if head.got == 0 && ack.HasOffset {
		head.result = PublishResult{Offset: ack.Offset, HasOffset: true}
	}
	head.got += ack.Count
	if ack.Err != nil {
		head.err = ack.Err
	}
	if head.got < head.want && ack.Err == nil {
		return nil
	}
	p.mu.fifo[0] = nil
	p.mu.fifo = p.mu.fifo[1:]
	p.mu.inflight -= head.bytes
	p.broadcastLocked()
	close(head.done)
	return nil
}

func (p *publisher) failAll(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.err == nil {
		p.mu.err = err
	}
	for _, pd := range p.mu.fifo {
		pd.err = p.mu.err
		close(pd.done)
	}
	p.mu.fifo = nil
	p.mu.inflight = 0
	p.broadcastLocked()
}

// drain waits until every acked publish is answered and every buffered
// fire-and-forget publish is handed to QUIC, or ctx ends.
func (p *publisher) drain(ctx context.Context) {
	for {
		p.mu.Lock()
		idle := len(p.mu.fifo) == 0 && len(p.mu.buf) == 0 && !p.mu.writing
		changed := p.mu.changed
		p.mu.Unlock()
		if idle {
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return
		case <-p.c.done:
			return
		}
	}
}

// finish closes the publish stream's send side once everything is written,
// and waits (bounded by ctx) for the broker to finish its side. The broker
// finishes only after reading every publish sent before the FIN, so closing
// the connection after this loses nothing: CloseWithError discards data
// QUIC has not sent yet, and without this the last fire-and-forget
// publishes of a client that closes right after sending them were lost.
func (p *publisher) finish(ctx context.Context) {
	p.drain(ctx)
	p.mu.Lock()
	writing := p.mu.writing
	p.mu.Unlock()
	if writing || ctx.Err() != nil {
		return // drain gave up; closing now is the best we can do
	}
	p.closing.Store(true)
	if err := p.st.Close(); err != nil {
		return
	}
	select {
	case <-p.acksDone:
	case <-ctx.Done():
	}
}

func (c *Client) closedErrOr(err error) error {
	if c.closed.Load() {
		return ErrClosed
	}
	return fmt.Errorf("client: connection lost: %w", err)
}
