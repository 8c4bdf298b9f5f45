package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/getfelix/felix-go/internal/probe"
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

func (s Stream) scope(c *Client) wire.Scope { return s.scopeIn(c.opts.Tenant) }

// scopeIn is the stream's full name, tenant the client's when s names none.
func (s Stream) scopeIn(tenant string) wire.Scope {
	t, ns := s.Tenant, s.Namespace
	if t == "" {
		t = tenant
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

	// expected makes the publish conditional (PublishIf).
	expected *uint64
	// producer makes the publish an idempotent producer's (IdempotentProducer).
	producer *producerSeq
}

// producerSeq is an idempotent producer's id and a batch's sequence.
type producerSeq struct{ id, seq uint64 }

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

// PublishIf writes payloads only if they would start at offset expected
// (the shard's next offset): of several writers expecting the same offset,
// exactly one is written. It returns the offset written at, or a
// *wire.RefusedError (errors.Is(err, wire.ErrOffsetMismatch)) whose Tail is
// the shard's next offset, and then nothing was written and no offset was
// used. Durable streams only; the broker must grant
// wire.FeaturePublishConditional. On a lost answer (a context that ended,
// a lost connection) do not resend blindly: read the shard at expected to
// see whether it was written.
func (c *Client) PublishIf(ctx context.Context, s Stream, payloads [][]byte, expected uint64, o PublishOptions) (uint64, error) {
	if len(payloads) == 0 {
		return 0, errors.New("client: PublishIf of an empty batch")
	}
	if c.features&wire.FeaturePublishConditional == 0 {
		return 0, wire.NewError(wire.CodeInvalidRequest, "the broker does not offer conditional publishes (FeaturePublishConditional)")
	}
	o.Ack, o.FireAndForget, o.expected = wire.AckPerBatch, false, &expected
	res, err := c.PublishResult(ctx, s, payloads, o)
	if err != nil {
		return 0, err
	}
	return res.Offset, nil
}

func withDefaultAck(o PublishOptions, mode wire.AckMode) PublishOptions {
	if !o.FireAndForget && o.Ack == wire.AckNone {
		o.Ack = mode
	}
	return o
}

// publishers gives each stream scope its publish stream, so a shard that
// stops taking publishes holds up only the publishes queued behind it on
// its own QUIC stream: the broker admits a stream's publishes in
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
	ps.mu.Unlock()
	all := ps.all()
	if ps.c.closed.Load() {
		return // the connection is gone: nothing more can reach the broker
	}
	var wg sync.WaitGroup
	for _, p := range all {
		wg.Go(func() { p.finish(ctx) })
	}
	wg.Wait()
}

// all returns every publish stream open now.
func (ps *publishers) all() []*pubStream {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	all := make([]*pubStream, 0, len(ps.mu.dedicated)+1)
	for _, p := range ps.mu.dedicated {
		all = append(all, p)
	}
	if ps.mu.pooled != nil {
		all = append(all, ps.mu.pooled)
	}
	return all
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

// Bounds on a request the client makes by merging queued publishes (see
// pubStream). A merged request is big enough that the broker's cost per
// request (about 8 µs here: decode, shard mailbox, answer) is small next
// to its records', and small enough that one request is short work for
// the shard and one frame for a subscriber.
const (
	maxMergeRecords = 1024
	maxMergeBytes   = 256 << 10
)

// pubStream owns one publish stream. Callers encode straight into a shared
// buffer that one goroutine hands to QUIC, so back-to-back publishes leave
// in one write (quic-go pays per write, not per byte); acked requests are
// remembered in write order and resolved in that order as acks arrive.
//
// At most the window's acked requests are unanswered (fifo). An acked
// publish that finds the window full is not refused and does not wait: it
// is queued (queued), and merged into the queued request before it when
// that one goes to the same scope with the same key, so a caller that
// publishes message by message from one goroutine fills each slot the
// broker frees with everything that arrived meanwhile, the way franz-go
// fills a produce request with the records buffered for its partition.
// Sending each call as its own request was measured first: the broker
// answers about 120 k single-record requests a second on this machine,
// against 1.4 M records a second in batches of 64. Callers wait only for
// the byte budget (Options.PublishInflightBytes), which queued publishes
// take as well as unanswered ones.
//
// Only readAcks calls promises, so they run one at a time in request
// order: a write error cancels the read side to make readAcks fail
// everything, rather than failing from the writer.
type pubStream struct {
	c  *Client
	st *quic.Stream

	mu struct {
		sync.Mutex
		buf    []byte
		fifo   []*pendingPub // sent, awaiting acks, in request order
		queued []*pendingPub // acked publishes not sent yet, in call order
		// inflight is the bytes of fifo and queued; unresolved counts the
		// calls whose promise has not returned yet.
		inflight   int64
		unresolved int
		nextID     uint64
		err        error
		writing    bool // a Write is in progress: drain waits for it
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

// call is one caller's publish inside a request: its records, in order,
// and where its result goes.
type call struct {
	records int
	promise func(PublishResult, error)
}

// pendingPub is one acked request: sent (in fifo) or queued.
type pendingPub struct {
	id    uint64
	mode  wire.AckMode
	want  uint32
	got   uint32
	bytes int64
	calls []call
	one   [1]call // calls' first backing array: most requests are one call
	err   error
	// result is from the first ack: the first record's offset.
	result PublishResult

	// A queued request keeps a copy of its payloads (the caller may reuse
	// its buffers once the call returns) until it is sent.
	scope     wire.Scope
	key       []byte
	arena     []byte
	ends      []int // payload i is arena[ends[i-1]:ends[i]]
	frameLen  int
	mergeable bool
	expected  *uint64      // a conditional publish's expected offset
	producer  *producerSeq // an idempotent publish's producer and sequence
}

func newPubStream(c *Client, st *quic.Stream) *pubStream {
	p := &pubStream{c: c, st: st, wake: make(chan struct{}, 1), acksDone: make(chan struct{})}
	p.mu.changed = make(chan struct{})
	c.wg.Add(2)
	go p.writeLoop()
	go p.readAcks()
	return p
}

// publish sends a batch and, when acked, waits for its result.
func (p *pubStream) publish(ctx context.Context, scope wire.Scope, payloads [][]byte, o PublishOptions) (PublishResult, error) {
	if o.FireAndForget || o.Ack == wire.AckNone {
		return PublishResult{}, p.enqueue(ctx, scope, payloads, o, false, nil)
	}
	type outcome struct {
		res PublishResult
		err error
	}
	done := make(chan outcome, 1) // the promise never blocks, even after ctx ends
	err := p.enqueue(ctx, scope, payloads, o, true, func(res PublishResult, err error) { done <- outcome{res, err} })
	if err != nil {
		return PublishResult{}, err
	}
	select {
	case out := <-done:
		return out.res, out.err
	case <-ctx.Done():
		// The ack will still come and release the budget; the caller just
		// stops waiting for it.
		return PublishResult{}, ctx.Err()
	}
}

// enqueue hands one call's batch to the stream: encoded now, or queued
// when the window or the write buffer is full. It waits only for the byte
// budget (acked) or the write buffer (fire-and-forget). An acked call's
// promise is called exactly once, from readAcks, unless enqueue returns an
// error. mergeable lets the batch share a request with the calls around
// it (a conditional publish must not: its check is per request).
func (p *pubStream) enqueue(ctx context.Context, scope wire.Scope, payloads [][]byte, o PublishOptions, mergeable bool, promise func(PublishResult, error)) error {
	if len(o.Key) > wire.MaxKeyLen {
		return fmt.Errorf("client: routing key of %d bytes, at most %d", len(o.Key), wire.MaxKeyLen)
	}
	mode := o.Ack
	if o.FireAndForget {
		mode = wire.AckNone
	}
	acked := mode != wire.AckNone
	var size int64
	for _, pl := range payloads {
		size += int64(len(pl))
	}
	// A conditional or idempotent publish is a request of its own: merged,
	// its expected offset or its sequence would not be its own.
	mergeable = mergeable && o.expected == nil && o.producer == nil
	// The broker ends a stream that sends a frame over its cap, which would
	// fail every publish of this client from then on: refuse it here.
	n := publishLen(scope, payloads, mode, o.Key, o.expected != nil, o.producer != nil)
	if p.c.maxFrame > 0 && n > p.c.maxFrame {
		return wire.NewError(wire.CodeInvalidRequest, "publish frame of %d bytes is over the broker's max_frame_bytes %d", n, p.c.maxFrame)
	}
	p.mu.Lock()
	if err := p.waitRoomLocked(ctx, acked, size); err != nil {
		p.mu.Unlock()
		return err
	}
	if !acked {
		p.mu.buf = wire.AppendPublish(p.mu.buf, &wire.Publish{Ack: mode, Key: o.Key, Scope: scope, Payloads: payloads})
		p.mu.Unlock()
		p.wakeWriter()
		return nil
	}
	p.mu.inflight += size
	p.mu.unresolved++
	if h := p.c.testHookInflight; h != nil {
		h(len(p.mu.fifo), p.mu.inflight)
	}
	c := call{records: len(payloads), promise: promise}
	if len(p.mu.queued) == 0 && len(p.mu.fifo) < p.c.ackWindow && len(p.mu.buf) < maxPendingWrite {
		pd := &pendingPub{mode: mode, bytes: size, expected: o.expected, producer: o.producer}
		pd.calls = append(pd.one[:0], c)
		p.sendLocked(pd, payloads, scope, o.Key)
		p.mu.Unlock()
		p.wakeWriter()
		return nil
	}
	if k := len(p.mu.queued); k > 0 && mergeable && p.mu.queued[k-1].fits(scope, o.Key, payloads, p.c.maxFrame) {
		p.mu.queued[k-1].add(c, payloads, size)
	} else {
		pd := &pendingPub{mode: mode, scope: scope, key: bytes.Clone(o.Key), mergeable: mergeable, frameLen: n, expected: o.expected, producer: o.producer}
		pd.calls = pd.one[:0]
		pd.add(c, payloads, size)
		p.mu.queued = append(p.mu.queued, pd)
	}
	p.mu.Unlock()
	return nil
}

// waitRoomLocked waits until the stream can take a publish of size bytes:
// an acked one within the in-flight budget, a fire-and-forget one when the
// write buffer has room and no acked publish is queued (it would overtake
// them). It returns with p.mu held, also on an error.
//
// REQUIRES: p.mu is held.
func (p *pubStream) waitRoomLocked(ctx context.Context, acked bool, size int64) error {
	for {
		if p.mu.err != nil {
			return p.mu.err
		}
		var room bool
		if acked {
			room = p.mu.inflight == 0 || p.mu.inflight+size <= p.c.opts.PublishInflightBytes
		} else {
			room = len(p.mu.buf) < maxPendingWrite && len(p.mu.queued) == 0
		}
		if room {
			return nil
		}
		changed := p.mu.changed
		p.mu.Unlock()
		var err error
		select {
		case <-changed:
		case <-ctx.Done():
			err = ctx.Err()
		case <-p.c.done:
			err = p.c.closedErr()
		}
		p.mu.Lock()
		if err != nil {
			return err
		}
	}
}

// fits says whether a call's batch may join queued request pd.
func (pd *pendingPub) fits(scope wire.Scope, key []byte, payloads [][]byte, maxFrame int) bool {
	if !pd.mergeable || pd.scope != scope || !bytes.Equal(pd.key, key) || len(pd.ends)+len(payloads) > maxMergeRecords {
		return false
	}
	n := pd.frameLen
	for _, pl := range payloads {
		n += 4 + len(pl)
	}
	return n-pd.frameLen+len(pd.arena) <= maxMergeBytes && (maxFrame <= 0 || n <= maxFrame)
}

// add copies a call's batch into queued request pd.
func (pd *pendingPub) add(c call, payloads [][]byte, size int64) {
	if len(pd.calls) > 0 {
		for _, pl := range payloads {
			pd.frameLen += 4 + len(pl)
		}
	}
	for _, pl := range payloads {
		pd.arena = append(pd.arena, pl...)
		pd.ends = append(pd.ends, len(pd.arena))
	}
	pd.calls = append(pd.calls, c)
	pd.bytes += size
}

// sendLocked numbers request pd, encodes it into the write buffer and
// puts it in the fifo to await its acks.
//
// REQUIRES: p.mu is held.
func (p *pubStream) sendLocked(pd *pendingPub, payloads [][]byte, scope wire.Scope, key []byte) {
	p.mu.nextID++
	pd.id = p.mu.nextID
	pd.want = 1
	if pd.mode == wire.AckPerMessage {
		pd.want = uint32(len(payloads))
	}
	wp := &wire.Publish{RequestID: pd.id, Ack: pd.mode, Key: key, Scope: scope, Payloads: payloads}
	if pd.expected != nil {
		wp.Conditional, wp.Expected = true, *pd.expected
	}
	if pd.producer != nil {
		wp.Idempotent, wp.ProducerID, wp.Sequence = true, pd.producer.id, pd.producer.seq
	}
	if h := p.c.testHookSend; h != nil {
		h(wp)
	}
	p.mu.buf = wire.AppendPublish(p.mu.buf, wp)
	p.mu.fifo = append(p.mu.fifo, pd)
	if h := p.c.testHookInflight; h != nil {
		h(len(p.mu.fifo), p.mu.inflight)
	}
}

// promoteLocked sends queued requests while the window and the write
// buffer have room, and says whether it sent any. A merged request asks
// for one ack: its calls' modes may differ, and one ack frame per record
// would be all the broker sends.
//
// REQUIRES: p.mu is held.
func (p *pubStream) promoteLocked() bool {
	sent := false
	for len(p.mu.queued) > 0 && len(p.mu.fifo) < p.c.ackWindow && len(p.mu.buf) < maxPendingWrite {
		pd := p.mu.queued[0]
		p.mu.queued[0] = nil
		p.mu.queued = p.mu.queued[1:]
		if len(pd.calls) > 1 {
			pd.mode = wire.AckPerBatch
		}
		payloads := make([][]byte, len(pd.ends))
		from := 0
		for i, end := range pd.ends {
			payloads[i] = pd.arena[from:end:end]
			from = end
		}
		p.sendLocked(pd, payloads, pd.scope, pd.key)
		pd.arena, pd.ends, pd.key = nil, nil, nil
		sent = true
	}
	return sent
}

func (p *pubStream) wakeWriter() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// publishLen is the payload length wire.AppendPublish writes for a publish.
func publishLen(scope wire.Scope, payloads [][]byte, mode wire.AckMode, key []byte, conditional, idempotent bool) int {
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
	if conditional {
		n += 8
	}
	if idempotent {
		n += 16
	}
	return n
}

// writeLoop hands encoded publishes to QUIC; it exits when the client
// closes or a write fails.
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
		// Room in the buffer: queued requests the window lets go move in.
		if p.promoteLocked() {
			p.wakeWriter()
		}
		p.broadcastLocked()
		p.mu.Unlock()
		if len(out) == 0 {
			spare = out
			continue
		}
		probe.Mark(probe.ClientWrite)
		_, err := p.st.Write(out)
		p.mu.Lock()
		p.mu.writing = false
		if err != nil && p.mu.err == nil {
			p.mu.err = fmt.Errorf("client: publish stream: %w", err)
			var se *quic.StreamError
			if !errors.As(err, &se) {
				p.mu.err = p.c.closedErrOr(err) // the connection ended
			}
		}
		p.broadcastLocked()
		p.mu.Unlock()
		if err != nil {
			// readAcks fails what is outstanding (it alone calls promises):
			// make sure its read ends.
			p.st.CancelRead(0)
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

// readAcks resolves acked publishes in order; it exits when the stream
// ends, after failing every publish still outstanding.
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
			msg, err := wire.DecodeMessage(payload)
			switch m := msg.(type) {
			case *wire.ErrorMsg:
				// An error for a fire-and-forget publish (bad stream name, overload).
				if err == nil {
					p.c.setAsyncErr(m.Err())
				}
				continue
			case *wire.PublishRefused:
				// A conditional publish not written: its answer in order.
				if err == nil {
					err = p.refused(m)
				}
				if err != nil {
					p.failAll(err)
					return
				}
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

// resolve counts an ack against the oldest request and, once it is
// answered, sends what the freed slot lets go and calls its promises.
func (p *pubStream) resolve(ack wire.Ack) error {
	p.mu.Lock()
	if len(p.mu.fifo) == 0 || p.mu.fifo[0].id != ack.RequestID {
		p.mu.Unlock()
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
		p.mu.Unlock()
		return nil
	}
	p.mu.fifo[0] = nil
	p.mu.fifo = p.mu.fifo[1:]
	sent := p.promoteLocked()
	p.mu.Unlock()
	if sent {
		p.wakeWriter()
	}
	p.complete([]*pendingPub{head}, nil)
	return nil
}

// refused answers the oldest request, a conditional or idempotent publish
// the broker did not write, with its refusal.
func (p *pubStream) refused(m *wire.PublishRefused) error {
	p.mu.Lock()
	if len(p.mu.fifo) == 0 || p.mu.fifo[0].id != m.RequestID || (p.mu.fifo[0].expected == nil && p.mu.fifo[0].producer == nil) {
		p.mu.Unlock()
		return fmt.Errorf("%w: publish_refused for request %d out of order", ErrProtocol, m.RequestID)
	}
	head := p.mu.fifo[0]
	head.err = m.Err()
	p.mu.fifo[0] = nil
	p.mu.fifo = p.mu.fifo[1:]
	sent := p.promoteLocked()
	p.mu.Unlock()
	if sent {
		p.wakeWriter()
	}
	p.complete([]*pendingPub{head}, nil)
	return nil
}

// failAll ends the stream's publishing with err (the first error wins):
// every request sent or queued fails, in order.
func (p *pubStream) failAll(err error) {
	p.mu.Lock()
	if p.mu.err == nil {
		p.mu.err = err
	}
	err = p.mu.err
	all := append(p.mu.fifo, p.mu.queued...)
	p.mu.fifo, p.mu.queued = nil, nil
	p.mu.Unlock()
	p.complete(all, err)
}

// complete calls the promises of answered requests in order, then gives
// their budget back. err, when set, overrides each request's own outcome.
// Only readAcks calls it.
func (p *pubStream) complete(pds []*pendingPub, err error) {
	var freed int64
	calls := 0
	for _, pd := range pds {
		res, perr := pd.result, pd.err
		if err != nil {
			perr = err
		}
		if perr != nil {
			res = PublishResult{}
		}
		for _, c := range pd.calls {
			if c.promise != nil {
				c.promise(res, perr)
			}
			if res.HasOffset {
				res.Offset += uint64(c.records)
			}
		}
		freed += pd.bytes
		calls += len(pd.calls)
	}
	p.mu.Lock()
	p.mu.inflight -= freed
	p.mu.unresolved -= calls
	p.broadcastLocked()
	p.mu.Unlock()
}

// drain waits until every acked publish is answered and its promise
// returned, and every buffered fire-and-forget publish is handed to QUIC.
// It returns ctx's error when ctx ends first, and the client's when the
// connection ends (after readAcks failed what was outstanding).
func (p *pubStream) drain(ctx context.Context) error {
	for {
		p.mu.Lock()
		idle := p.mu.unresolved == 0 && len(p.mu.buf) == 0 && !p.mu.writing
		changed := p.mu.changed
		p.mu.Unlock()
		if idle {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		case <-p.c.done:
			select {
			case <-p.acksDone:
			case <-ctx.Done():
				return ctx.Err()
			}
			return p.c.closedErr()
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
	if p.drain(ctx) != nil {
		return // closing now is the best we can do
	}
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
