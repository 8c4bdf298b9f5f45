package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/getfelix/felix-go/routing"
	"github.com/getfelix/felix-go/wire"
)

// InitProducer asks the broker for a new idempotent producer id for the
// client's tenant (producer_init). Its sequences start at 0 on every
// shard. Most callers want NewIdempotentProducer, which keeps the
// sequences.
func (c *Client) InitProducer(ctx context.Context) (uint64, error) {
	if c.features&wire.FeatureIdempotentProducer == 0 {
		return 0, wire.NewError(wire.CodeInvalidRequest, "the broker does not offer idempotent producers (FeatureIdempotentProducer)")
	}
	id := c.nextReq.Add(1)
	res, err := c.request(ctx, id, &wire.ProducerInit{RequestID: id})
	if err != nil {
		return 0, err
	}
	m, ok := res.(*wire.ProducerInitOK)
	if !ok {
		return 0, fmt.Errorf("%w: producer_init answered with %s", ErrProtocol, res.Type())
	}
	return m.ProducerID, nil
}

// DefaultAckTimeout is how long an IdempotentProducer waits for one
// attempt's answer before it sends the batch again.
const DefaultAckTimeout = 10 * time.Second

// IdempotentProducer publishes batches that may be retried safely: each
// carries the producer's id and a sequence per shard, and the shard writes
// a batch once, answering a re-send of one it remembers with its original
// offset. A publish whose outcome is unknown (a lost connection, a broker
// restart, no answer in AckTimeout, shard_unavailable, overloaded, ...) is
// sent again, with the same sequence and payloads, on a new connection if
// the old one is gone, until it gets an answer: an ack or a final refusal.
//
// One batch is in flight at a time: Publish calls are sequential (a second
// caller waits for the first). Pipelining would let a refused batch leave a
// gap that every later one in flight runs into; Produce is the pipelined
// API for publishes that need no idempotence. Durable streams only.
type IdempotentProducer struct {
	dial func(context.Context) (*Client, error)
	// cc, when set (ClusterClient.NewIdempotentProducer), sends each
	// attempt to its shard's owner, following redirects; dial is unused.
	cc *ClusterClient
	// AckTimeout bounds one attempt's wait for its answer (DefaultAckTimeout);
	// set it before the first Publish.
	AckTimeout time.Duration

	closing   chan struct{} // closed by Close: retries stop
	closeOnce sync.Once

	// mu is held for a whole Publish: it is what makes calls sequential.
	mu struct {
		sync.Mutex
		c      *Client
		id     uint64
		shards map[wire.Scope]shardRouting // a stream's routing, from StreamInfo
		seqs   map[shardOf]uint64          // the next sequence on each shard
		// unsure is a batch whose call ended (its context) before an
		// answer: written or not, only a re-send with its sequence tells.
		unsure *idemBatch
		closed bool
	}
}

type shardRouting struct {
	routing routing.Routing
	shards  uint32
}

type shardOf struct {
	scope wire.Scope
	shard uint32
}

// idemBatch is one batch with its sequence on its shard.
type idemBatch struct {
	stream   Stream
	at       shardOf
	key      []byte
	payloads [][]byte
	seq      uint64
}

// NewIdempotentProducer dials with dial and asks the broker for a producer
// id. dial is called again whenever the client it gave is gone; the
// producer closes the clients it dialed.
func NewIdempotentProducer(ctx context.Context, dial func(context.Context) (*Client, error)) (*IdempotentProducer, error) {
	c, err := dial(ctx)
	if err != nil {
		return nil, err
	}
	id, err := c.InitProducer(ctx)
	if err != nil {
		_ = c.Close(ctx)
		return nil, err
	}
	p := &IdempotentProducer{dial: dial, AckTimeout: DefaultAckTimeout, closing: make(chan struct{})}
	p.mu.c, p.mu.id = c, id
	p.mu.shards = make(map[wire.Scope]shardRouting)
	p.mu.seqs = make(map[shardOf]uint64)
	return p, nil
}

// ID returns the producer's id.
func (p *IdempotentProducer) ID() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.id
}

// Publish writes payloads to s as one batch, routed by key as the broker
// routes it, exactly once however often it has to be sent. It returns the
// batch's first offset, or a final error: a *wire.RefusedError for the
// producer's refusals (sequence_gap, unknown_producer, sequence_reused,
// sequence_expired) or the broker's *wire.Error, and then nothing was
// written. If ctx ends before an answer, the batch may or may not be
// written: the producer keeps it and sends it again, with its sequence,
// before its next batch to any shard (as that batch, when the next call
// repeats it), so a sequence is never skipped nor reused with other
// content.
func (p *IdempotentProducer) Publish(ctx context.Context, s Stream, payloads [][]byte, key []byte) (PublishResult, error) {
	if len(payloads) == 0 {
		return PublishResult{}, errors.New("client: idempotent publish of an empty batch")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.closed {
		return PublishResult{}, ErrClosed
	}
	if u := p.mu.unsure; u != nil {
		repeat := u.repeats(s, key, payloads)
		res, err := p.sendLocked(ctx, u)
		if repeat {
			return res, err
		}
		if err != nil {
			return PublishResult{}, fmt.Errorf("client: the producer's earlier unanswered batch: %w", err)
		}
	}
	at, err := p.shardLocked(ctx, s, key)
	if err != nil {
		return PublishResult{}, err
	}
	return p.sendLocked(ctx, &idemBatch{stream: s, at: at, key: key, payloads: payloads, seq: p.mu.seqs[at]})
}

// repeats says whether a call's batch is b again (the caller retrying).
func (b *idemBatch) repeats(s Stream, key []byte, payloads [][]byte) bool {
	if b.stream != s || !bytes.Equal(b.key, key) || (b.key == nil) != (key == nil) || len(b.payloads) != len(payloads) {
		return false
	}
	for i := range payloads {
		if !bytes.Equal(b.payloads[i], payloads[i]) {
			return false
		}
	}
	return true
}

// sendLocked sends b until it is answered. An ack uses up its sequence;
// a final error leaves it for the next batch (nothing was written); an
// unknown outcome when ctx ends keeps b as the producer's unsure batch.
//
// REQUIRES: p.mu is held.
func (p *IdempotentProducer) sendLocked(ctx context.Context, b *idemBatch) (PublishResult, error) {
	backoff := 20 * time.Millisecond
	for {
		res, err := p.attempt(ctx, b)
		if err == nil {
			p.mu.unsure = nil
			p.mu.seqs[b.at] = b.seq + 1
			return res, nil
		}
		switch {
		case ctx.Err() != nil:
			p.keepUnsureLocked(b)
			return PublishResult{}, fmt.Errorf("client: idempotent publish unanswered (it is sent again with its sequence before the next batch): %w", err)
		case !outcomeUnknown(err):
			// Final: nothing of b was written, and its sequence is the
			// next batch's.
			p.mu.unsure = nil
			return PublishResult{}, err
		}
		select {
		case <-time.After(backoff):
			backoff = min(2*backoff, time.Second)
		case <-ctx.Done():
		case <-p.closing:
			p.keepUnsureLocked(b)
			return PublishResult{}, ErrClosed
		}
	}
}

// attempt sends b once (to the producer's client, or through the
// ClusterClient to its shard's owner) and waits at most AckTimeout for its
// answer.
//
// REQUIRES: p.mu is held.
func (p *IdempotentProducer) attempt(ctx context.Context, b *idemBatch) (PublishResult, error) {
	actx, cancel := context.WithTimeout(ctx, p.AckTimeout)
	defer cancel()
	o := PublishOptions{Ack: wire.AckPerBatch, Key: b.key, producer: &producerSeq{id: p.mu.id, seq: b.seq}}
	var res PublishResult
	var err error
	if p.cc != nil {
		res, err = p.cc.PublishResult(actx, b.stream, b.payloads, o)
	} else {
		var c *Client
		if c, err = p.clientLocked(actx); err == nil {
			res, err = c.PublishResult(actx, b.stream, b.payloads, o)
		}
	}
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return res, errAttemptTimeout // ours, not the caller's: send again
	}
	return res, err
}

var errAttemptTimeout = errors.New("client: no answer within the idempotent producer's AckTimeout")

// keepUnsureLocked keeps b, with copies of its buffers (the caller may
// reuse them once Publish returns), to be sent again.
//
// REQUIRES: p.mu is held.
func (p *IdempotentProducer) keepUnsureLocked(b *idemBatch) {
	if p.mu.unsure == b {
		return
	}
	kept := *b
	kept.key = bytes.Clone(b.key)
	kept.payloads = make([][]byte, len(b.payloads))
	for i, pl := range b.payloads {
		kept.payloads[i] = bytes.Clone(pl)
		if kept.payloads[i] == nil {
			kept.payloads[i] = []byte{}
		}
	}
	p.mu.unsure = &kept
}

// outcomeUnknown says whether err leaves a batch possibly written, or
// refused only for now: then the same batch is sent again.
func outcomeUnknown(err error) bool {
	if errors.Is(err, errAttemptTimeout) || errors.Is(err, ErrClosed) {
		return true
	}
	var lost *ConnectionLostError
	if errors.As(err, &lost) {
		return true
	}
	var refused *wire.RefusedError
	if errors.As(err, &refused) {
		return false
	}
	var we *wire.Error
	if errors.As(err, &we) {
		switch we.Retry {
		case wire.Retry, wire.RetryAfter, wire.RetryOutcomeUnknown:
			return true
		}
	}
	return false
}

// clientLocked returns the producer's client, dialing a new one when the
// old one is gone (lost or closed).
//
// REQUIRES: p.mu is held.
func (p *IdempotentProducer) clientLocked(ctx context.Context) (*Client, error) {
	if c := p.mu.c; c != nil && !c.closed.Load() {
		return c, nil
	}
	if old := p.mu.c; old != nil {
		_ = old.Close(ctx)
		p.mu.c = nil
	}
	c, err := p.dial(ctx)
	if err != nil {
		var we *wire.Error
		if errors.As(err, &we) && we.Retry == wire.RetryFatal {
			return nil, err
		}
		return nil, &ConnectionLostError{Cause: err} // try again: the broker may be restarting
	}
	p.mu.c = c
	return c, nil
}

// shardLocked is the shard the broker routes key to on s, from the
// stream's definition (asked once per stream).
//
// REQUIRES: p.mu is held.
func (p *IdempotentProducer) shardLocked(ctx context.Context, s Stream, key []byte) (shardOf, error) {
	if p.cc != nil {
		top, err := p.cc.knownOwners(ctx, s)
		if err != nil {
			return shardOf{}, err
		}
		return shardOf{scope: p.cc.scope(s), shard: top.ShardFor(key)}, nil
	}
	c, err := p.clientLocked(ctx)
	if err != nil {
		return shardOf{}, err
	}
	scope := s.scope(c)
	r, ok := p.mu.shards[scope]
	if !ok {
		info, err := c.StreamInfo(ctx, s)
		if err != nil {
			return shardOf{}, err
		}
		rt, err := routing.Parse(info.Routing)
		if err != nil {
			return shardOf{}, fmt.Errorf("client: stream %s: %w", scope, err)
		}
		r = shardRouting{routing: rt, shards: max(info.Shards, 1)}
		p.mu.shards[scope] = r
	}
	return shardOf{scope: scope, shard: r.routing.ShardFor(key, r.shards)}, nil
}

// NewIdempotentProducer asks any member for a producer id (ids are the
// cluster's, so any member knows it) and returns a producer whose batches
// go to their shard's owner: a batch refused as not_leader, or whose owner
// was lost, is sent again with its sequence to the owner there is then,
// and written once. Closing the producer leaves cc open.
func (cc *ClusterClient) NewIdempotentProducer(ctx context.Context) (*IdempotentProducer, error) {
	var id uint64
	err := cc.any(ctx, func(_ string, c *Client) error {
		var err error
		id, err = c.InitProducer(ctx)
		return err
	})
	if err != nil {
		return nil, err
	}
	p := &IdempotentProducer{cc: cc, AckTimeout: DefaultAckTimeout, closing: make(chan struct{})}
	p.mu.id = id
	p.mu.shards = make(map[wire.Scope]shardRouting)
	p.mu.seqs = make(map[shardOf]uint64)
	return p, nil
}

// Close stops any retry under way, waits for the Publish in progress to
// return, and closes the producer's client. A batch still unanswered then
// may or may not have been written.
func (p *IdempotentProducer) Close(ctx context.Context) error {
	p.closeOnce.Do(func() { close(p.closing) })
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.closed = true
	if c := p.mu.c; c != nil {
		p.mu.c = nil
		return c.Close(ctx)
	}
	return nil
}
