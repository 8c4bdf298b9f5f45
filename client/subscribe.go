package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/quic-go/quic-go"

	"github.com/getfelix/felix-go/internal/probe"
	"github.com/getfelix/felix-go/wire"
)

// Event is one delivered record. Payload is owned by the receiver.
type Event struct {
	Payload []byte
	// Offset is the record's offset in its shard, on a durable stream
	// (HasOffset). A jump between consecutive offsets is a drop.
	Offset    uint64
	HasOffset bool
}

// SubscribeOptions tune a subscription.
type SubscribeOptions struct {
	// QueueCapacity asks the broker for this subscriber queue capacity
	// (batches); zero takes the stream's default. The broker clamps it and
	// Subscription.QueueCapacity says what was granted.
	QueueCapacity int
	// Shard picks the shard of a multi-shard stream (default 0).
	Shard uint32
	// From starts a durable subscription at an offset (FromOffset), at the
	// oldest record kept (FromEarliest) or, by default, at the next record
	// published. History is replayed, then live delivery continues.
	From       StartFrom
	FromOffset uint64
	// Batches reads the subscription on the caller's goroutine with
	// NextBatch, one event batch as the broker sent it at a time, instead
	// of a reader goroutine feeding Events: no goroutine hop per event, and
	// no allocation per batch, since each batch's payloads alias a buffer
	// the next NextBatch reuses. For a consumer that handles or copies a
	// batch before it asks for the next. Events is then closed from the
	// start and Next returns ErrReadMode.
	Batches bool
}

// StartFrom is where a subscription starts.
type StartFrom string

// Where a subscription starts.
const (
	FromLatest   StartFrom = ""
	FromEarliest StartFrom = "earliest"
	FromOffset   StartFrom = "offset"
)

// Subscription receives a stream's events in publish order.
type Subscription struct {
	c        *Client
	id       uint64
	capacity int
	events   chan Event
	// batches is the NextBatch side of a subscription made with
	// SubscribeOptions.Batches; nil for one read through events.
	batches *batchReader
	// On a durable stream: where delivery starts and where history ends.
	startOffset, liveOffset uint64
	durable                 bool
	stream                  *quic.ReceiveStream

	closeOnce sync.Once
	done      chan struct{}
	mu        sync.Mutex
	err       error
}

// ID is the broker's subscription id.
func (s *Subscription) ID() uint64 { return s.id }

// Offsets returns, on a durable stream, the first offset this subscription
// delivers and the live offset (below it: history; from it on: live).
func (s *Subscription) Offsets() (start, live uint64, durable bool) {
	return s.startOffset, s.liveOffset, s.durable
}

// QueueCapacity is the subscriber queue capacity the broker granted.
func (s *Subscription) QueueCapacity() int { return s.capacity }

// Events delivers events until the subscription ends; then it is closed and
// Err says why.
func (s *Subscription) Events() <-chan Event { return s.events }

// Next waits for the next event.
func (s *Subscription) Next(ctx context.Context) (Event, error) {
	if s.batches != nil {
		return Event{}, ErrReadMode
	}
	select {
	case ev, ok := <-s.events:
		if !ok {
			return Event{}, s.Err()
		}
		return ev, nil
	case <-ctx.Done():
		return Event{}, ctx.Err()
	}
}

// Err is why the subscription ended: nil while it runs, io.EOF after the
// broker finished it cleanly, ErrSubscriptionEnded when the broker ended it
// (its stream or an actor serving it stopped), ErrTokenExpired when the
// connection's token expired, ErrClosed after Close.
func (s *Subscription) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Subscribe registers a subscription. When it returns, every later publish
// to the stream is delivered to it (until its queue overflows).
func (c *Client) Subscribe(ctx context.Context, st Stream, o SubscribeOptions) (*Subscription, error) {
	scope := st.scope(c)
	id := c.nextReq.Add(1)
	res, err := c.request(ctx, id, &wire.Subscribe{
		RequestID: id, Tenant: scope.Tenant, Namespace: scope.Namespace, Stream: scope.Stream,
		QueueCapacity: int64(o.QueueCapacity), Shard: o.Shard,
		Start: string(o.From), StartOffset: o.FromOffset,
	})
	if err != nil {
		return nil, err
	}
	ok, isSub := res.(*wire.Subscribed)
	if !isSub {
		return nil, fmt.Errorf("%w: subscribe answered with %s", ErrProtocol, res.Type())
	}
	rs, err := c.eventStream(ctx, ok.SubscriptionID)
	if err != nil {
		return nil, err
	}
	s := &Subscription{
		c: c, id: ok.SubscriptionID, capacity: ok.QueueCapacity,
		startOffset: ok.StartOffset, liveOffset: ok.LiveOffset, durable: ok.Durable,
		stream: rs, done: make(chan struct{}),
	}
	if o.Batches {
		s.events = make(chan Event)
		close(s.events)
		s.batches = newBatchReader(rs)
	} else {
		s.events = make(chan Event, c.opts.SubscriptionBuffer)
	}
	c.subsMu.Lock()
	c.subsMu.byID[s.id] = s
	c.subsMu.Unlock()
	if s.batches == nil {
		c.wg.Add(1)
		go s.read(rs)
	}
	return s, nil
}

// eventStream waits for the event stream whose hello names id. The broker
// opens it before answering Subscribed, but the two travel on different
// streams, so either may arrive first.
func (c *Client) eventStream(ctx context.Context, id uint64) (*quic.ReceiveStream, error) {
	c.subsMu.Lock()
	if rs, ok := c.subsMu.orphans[id]; ok {
		delete(c.subsMu.orphans, id)
		c.subsMu.Unlock()
		return rs, nil
	}
	ch := make(chan *quic.ReceiveStream, 1)
	c.subsMu.wait[id] = ch
	c.subsMu.Unlock()
	select {
	case rs := <-ch:
		return rs, nil
	case <-ctx.Done():
		c.subsMu.Lock()
		delete(c.subsMu.wait, id)
		c.subsMu.Unlock()
		return nil, ctx.Err()
	case <-c.done:
		return nil, c.closedErr()
	}
}

// acceptEventStreams reads each new event stream's hello and hands the
// stream to its subscription. It exits when the connection closes.
func (c *Client) acceptEventStreams() {
	defer c.wg.Done()
	for {
		rs, err := c.conn.AcceptUniStream(context.Background())
		if err != nil {
			return
		}
		msg, err := readMessage(wire.NewFrameReader(rs, 64<<10))
		hello, ok := msg.(*wire.EventStreamHello)
		if err != nil || !ok {
			rs.CancelRead(1)
			continue
		}
		c.subsMu.Lock()
		if ch, ok := c.subsMu.wait[hello.SubscriptionID]; ok {
			delete(c.subsMu.wait, hello.SubscriptionID)
			ch <- rs
		} else {
			c.subsMu.orphans[hello.SubscriptionID] = rs
		}
		c.subsMu.Unlock()
	}
}

// read decodes event batches into the events channel. When the channel is
// full it stops reading, so QUIC flow control pushes back to the broker,
// where this subscription's queue and overflow policy take over.
func (s *Subscription) read(r io.Reader) {
	defer s.c.wg.Done()
	defer close(s.events)
	fr := wire.NewFrameReader(r, 16<<20)
	// scratch is the last batch's event slice, reused for the next: the
	// Events sent on carry their own slice headers. Payloads still alias
	// each frame's fresh buffer, which the receiver owns.
	var scratch [][]byte
	for {
		h, payload, err := fr.Next()
		if err != nil {
			s.finish(err)
			return
		}
		if h.Flags == 0 {
			// The only control frame an event stream carries is its end.
			s.finish(controlFrameEnd(payload))
			return
		}
		probe.Mark(probe.ClientRead)
		base, events, err := wire.DecodeEventBatchInto(scratch, h.Flags, payload)
		if err != nil {
			s.finish(fmt.Errorf("%w: %v", ErrProtocol, err))
			return
		}
		hasOffset := h.Flags&wire.FlagEventBatchOffsets != 0
		for i, e := range events {
			ev := Event{Payload: e, Offset: base + uint64(i), HasOffset: hasOffset}
			// The common case first: room in the buffer. A send with a
			// default locks one channel; the select below locks three, and
			// it showed in profiles of the read path.
			probe.Mark(probe.ClientQueued)
			select {
			case s.events <- ev:
				continue
			default:
			}
			select {
			case s.events <- ev:
			case <-s.done:
				s.finish(ErrClosed)
				return
			case <-s.c.done: // the client closed under an unread subscription
				s.finish(ErrClosed)
				return
			}
		}
		if cap(events) <= maxScratchEvents {
			clear(events) // nothing keeps the frame alive through scratch
			scratch = events[:0]
		}
	}
}

// maxScratchEvents bounds the event slice a subscription keeps between
// batches: a rare huge batch is not held on to.
const maxScratchEvents = 4096

func (s *Subscription) finish(err error) {
	var se *quic.StreamError
	if errors.As(err, &se) {
		switch uint64(se.ErrorCode) {
		case wire.StreamCodeSubscriptionEnded:
			err = ErrSubscriptionEnded
		case wire.StreamCodeUnauthenticated:
			err = ErrTokenExpired
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return
	}
	select {
	case <-s.done:
		err = ErrClosed
	default:
		// The event stream's read may fail with the connection's error
		// before the control reader has marked the client closed: the
		// connection's context says it is gone either way.
		if !errors.Is(err, io.EOF) && s.c.gone() {
			err = ErrClosed
		}
	}
	s.err = err
}

// Close ends the subscription: the broker unregisters it and finishes its
// stream. Events still buffered are discarded.
func (s *Subscription) Close(ctx context.Context) error {
	var err error
	s.closeOnce.Do(func() {
		close(s.done)
		s.stream.CancelRead(0)
		// A NextBatch in flight ends on the cancelled read and drops its
		// context's watch itself; with none, the watch is dropped here.
		if br := s.batches; br != nil && br.mu.TryLock() {
			br.unwatch()
			br.mu.Unlock()
		}
		s.c.subsMu.Lock()
		delete(s.c.subsMu.byID, s.id)
		s.c.subsMu.Unlock()
		if !s.c.closed.Load() {
			id := s.c.nextReq.Add(1)
			_, err = s.c.request(ctx, id, &wire.Unsubscribe{RequestID: id, SubscriptionID: s.id})
			// CancelRead above resets the event stream; a write the broker
			// had in flight then fails and ends the subscription before the
			// Unsubscribe arrives. Gone is what Close asked for.
			if errors.Is(err, wire.ErrNotFound) {
				err = nil
			}
		}
	})
	return err
}
