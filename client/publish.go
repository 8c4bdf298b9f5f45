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

// maxPendingWrite bounds a publish stream's bytes encoded but not yet handed
// to QUIC. Fire-and-forget publishers wait here when the stream cannot keep
// up.
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
	scope := s.scope(c)
	ps, err := c.pubs.stream(scope)
	if err != nil {
		return PublishResult{}, err
	}
	return ps.publish(ctx, scope, payloads, withDefaultAck(o, wire.AckPerBatch))
}

func withDefaultAck(o PublishOptions, mode wire.AckMode) PublishOptions {
	if !o.FireAndForget && o.Ack == wire.AckNone {
		o.Ack = mode
	}
	return o
}

// publishers gives each stream scope its publish stream, so a shard that
// stops taking publishes holds up only the publishes queued behind it on
// its own QUIC stream (issue #9): the broker admits a stream's publishes in
// order on that stream's reader, which waits up to
// publish_queue_wait_timeout_ms on a full shard.
//
// The first Options.PublishShardStreams scopes the client publishes to get
// a stream each, first come first served, for the life of the client; every
// later scope shares one pooled stream, so a stalled pooled scope holds up
// the other pooled scopes.
//
// A publish stream is keyed by the stream scope alone, not by shard. The
// broker picks the shard from the key with the stream's routing (shard
// count, modulo or jump), which the client does not know and which changes
// when a stream is deleted and made again; wire.Publish has a Key but no
// way to name a shard. Keying by scope keeps every publish this client
// makes to one shard on one QUIC stream, so the shard's log holds them in
// the order they were issued, at the price that a stalled shard of a
// multi-shard stream also holds up that stream's other shards for this
// client. Keying by (scope, key) was rejected for that order: two keys that
// route to one shard would race on two streams, as would an unkeyed publish
// and a keyed one that routes to shard 0.
type publishers struct {
	c *Client

	mu struct {
		sync.Mutex
		dedicated map[wire.Scope]*pubStream // at most Options.PublishShardStreams
		pooled    *pubStream                // opened when a scope first finds the dedicated streams taken
		closed    bool                      // Close has begun: no stream opens after this
	}
}

// stream returns scope's publish stream, opening it on the scope's first
// publish.
func (ps *publishers) stream(scope wire.Scope) (*pubStream, error) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.mu.closed {
		return nil, ErrClosed
	}
	if p, ok := ps.mu.dedicated[scope]; ok {
		return p, nil
	}
	// A scope not in the map once it is full is pooled: dedicated streams
	// are never given back, so it was pooled from its first publish on.
	if len(ps.mu.dedicated) < ps.c.opts.PublishShardStreams {
		p, err := ps.openLocked()
		if err != nil {
			return nil, err
		}
		if ps.mu.dedicated == nil {
			ps.mu.dedicated = make(map[wire.Scope]*pubStream)
		}
		ps.mu.dedicated[scope] = p
		return p, nil
	}
	if ps.mu.pooled == nil {
		p, err := ps.openLocked()
		if err != nil {
			return nil, err
		}
		ps.mu.pooled = p
	}
	return ps.mu.pooled, nil
}

// openLocked opens a publish stream and starts its two goroutines. It uses
// OpenStream, which never blocks: a client opens a handful of streams, far
// under the broker's limit (transport's MaxIncomingStreams).
//
// REQUIRES: ps.mu is held and not closed, so no goroutine is added to c.wg
// after Close has begun waiting on it.
func (ps *publishers) openLocked() (*pubStream, error) {
	st, err := ps.c.conn.OpenStream()
	if err != nil {
		return nil, ps.c.closedErrOr(err)
	}
	return newPubStream(ps.c, st), nil
}

// finish stops new publish streams from opening and finishes every open
// one at once (see pubStream.finish), bounded by ctx.
func (ps *publishers) finish(ctx context.Context) {
	ps.mu.Lock()
	ps.mu.closed = true
	all := make([]*pubStream, 0, len(ps.mu.dedicated)+1)
	for _, p := range ps.mu.dedicated {
		all = append(all, p)
	}
	if ps.mu.pooled != nil {
		all = append(all, ps.mu.pooled)
	}
	ps.mu.Unlock()
	if ps.c.closed.Load() {
		return // the connection is gone: nothing more can reach the broker
	}
	var wg sync.WaitGroup
	for _, p := range all {
		wg.Go(func() { p.finish(ctx) })
	}
	wg.Wait()
}

// ackWindow is how many acked publishes one publish stream may have
// unanswered. Only a broker that grants FeaturePublishPipeline promises to
// read ahead of its answers, up to its publish window per stream; with any
// other broker the client waits for each ack before sending the next acked
// publish on that stream.
func ackWindow(features uint32, window int) int {
	if features&wire.FeaturePublishPipeline == 0 || window <= 0 {
		return 1
	}
	return window
}

// pubStream owns one publish stream. Callers encode straight into a shared
// buffer that one goroutine hands to QUIC, so back-to-back publishes leave
// in one write (quic-go pays per write, not per byte); acked requests are
// remembered in write order and resolved in that order as acks arrive.
type pubStream struct {
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

func newPubStream(c *Client, st *quic.Stream) *pubStream {
	p := &pubStream{c: c, st: st, wake: make(chan struct{}, 1), acksDone: make(chan struct{})}
	p.mu.changed = make(chan struct{})
	c.wg.Add(2)
	go p.writeLoop()
	go p.readAcks()
	return p
}

func (p *pubStream) publish(ctx context.Context, scope wire.Scope, payloads [][]byte, o PublishOptions) (PublishResult, error) {
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
		roomInflight := mode == wire.AckNone ||
			len(p.mu.fifo) < p.c.ackWindow && (p.mu.inflight == 0 || p.mu.inflight+size <= p.c.opts.PublishInflightBytes)
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
func (p *pubStream) writeLoop() {
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
func (p *pubStream) broadcastLocked() {
	close(p.mu.changed)
	p.mu.changed = make(chan struct{})
}

// readAcks resolves acked publishes in order; it exits when the stream ends.
func (p *pubStream) readAcks() {
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

func (p *pubStream) resolve(ack wire.Ack) error {
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

func (p *pubStream) failAll(err error) {
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
func (p *pubStream) drain(ctx context.Context) {
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
func (p *pubStream) finish(ctx context.Context) {
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
		return c.closedErr()
	}
	return &ConnectionLostError{Cause: err}
}
