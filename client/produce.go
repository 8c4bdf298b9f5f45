package client

import (
	"context"
	"errors"

	"github.com/getfelix/felix-go/wire"
)

// Errors of Produce, for a batch it does not send.
var (
	// ErrProduceNeedsAck refuses a fire-and-forget publish, which has no
	// result to promise: use Publish.
	ErrProduceNeedsAck = errors.New("client: Produce needs an acked publish; use Publish for fire-and-forget")
	// ErrEmptyBatch refuses a batch of no payloads.
	ErrEmptyBatch = errors.New("client: Produce of an empty batch")
)

// Produce publishes payloads as one batch without waiting for its ack: it
// returns once the batch is handed to the stream's publish stream, and the
// client calls promise with the result when the broker answers (on a
// durable stream, the offset of the batch's first record). Callers publish
// from one goroutine and still keep the stream's window of acked publishes
// in flight: up to the broker's publish window on each publish stream (or
// Options.PublishWindow, when lower), within Options.PublishInflightBytes.
// Produce waits only when that byte budget is full, and only until ctx
// ends. The ack mode defaults to per batch; fire-and-forget is refused
// (ErrProduceNeedsAck).
//
// The shape is franz-go's Produce(ctx, record, promise) rather than
// nats.go's PublishAsync returning a future with Ok and Err channels. A
// promise costs no channel per publish (a future costs one or two, and
// someone must still read them in order), and promises are called in
// order, which is what a caller that records what was acknowledged (felix
// pub --json-acks) needs: with futures it would read them back in order
// itself. Publish wraps Produce with a one-shot channel for callers who
// want to wait.
//
// Promises, for one publish stream (one stream scope while the client has
// dedicated streams left, see Options.PublishShardStreams), are called one
// at a time, in the order the Produce calls were made, on the client's
// goroutine that reads the acks: a promise must return quickly, must not
// wait for another publish's result (that would wait for itself) and must
// not call Close, which waits for that goroutine. Each
// is called exactly once, unless Produce returns an error (the key too
// long, the batch over the broker's frame cap, ctx ended while waiting for
// room, the client closed), in which case the batch was not sent and
// promise is never called.
//
// Outcomes: a batch the broker refuses gets its *wire.Error (errors.Is
// against wire.ErrForbidden and the others), and only its own promise; a
// lost connection fails every outstanding promise with the client's error
// (a *ConnectionLostError); Close waits, within its ctx, for every
// outstanding publish to be answered, and fails the ones still
// outstanding when its ctx ends with ErrClosed; every promise has been
// called by the time Close returns.
//
// While the window is full, batches to the same stream scope with the
// same key are queued and sent together as one request when a slot frees
// (up to 1024 records or 256 KiB). Each promise still gets its own
// batch's first offset, and the records keep their order; but the
// broker accepts or refuses such a request as a whole, so a refusal
// (overloaded, say) fails every batch in it. Payloads are copied before
// Produce returns: the caller may reuse them.
func (c *Client) Produce(ctx context.Context, s Stream, payloads [][]byte, o PublishOptions, promise func(PublishResult, error)) error {
	if o.FireAndForget {
		return ErrProduceNeedsAck
	}
	if len(payloads) == 0 {
		// Calling the promise here would overtake the ones outstanding.
		return ErrEmptyBatch
	}
	o = withDefaultAck(o, wire.AckPerBatch)
	scope := s.scope(c)
	ps, err := c.pubs.stream(scope)
	if err != nil {
		return err
	}
	return ps.enqueue(ctx, scope, payloads, o, true, promise)
}

// Flush waits until every publish made before and during the call has been
// answered and its promise has returned, and every fire-and-forget publish
// is handed to QUIC. It returns ctx's error if ctx ends first, and the
// client's error if the connection ends (by then every outstanding promise
// was called with it). Failed publishes do not make Flush fail: their
// promises have their errors.
func (c *Client) Flush(ctx context.Context) error {
	for _, p := range c.pubs.all() {
		if err := p.drain(ctx); err != nil {
			return err
		}
	}
	return nil
}

// PublishWindow is how many acked publishes each publish stream keeps
// unanswered: the broker's publish window (or Options.PublishWindow, when
// lower), or 1 when the broker does not pipeline.
func (c *Client) PublishWindow() int { return c.ackWindow }

// ProduceIf is PublishIf without waiting: payloads are written only if
// they would start at offset expected, and promise gets the offset written
// at or the *wire.RefusedError (errors.Is(err, wire.ErrOffsetMismatch))
// whose Tail is the stream's next offset. A single writer that owns a
// stream pipelines its conditional batches with it, each expecting where
// the one before ends. Each batch is checked on its own, in order: when
// another writer slipped a record in, the batch expecting that offset is
// refused, but a later pipelined batch whose expected offset happens to
// equal the new tail is written (after the intruder's record, not after
// the refused batch). So a writer that pipelines must treat its first
// refusal as having lost the stream: stop, read from the refused batch's
// expected offset to see what was written, and decide. A conditional batch
// is never merged with another. The rest is as Produce.
func (c *Client) ProduceIf(ctx context.Context, s Stream, payloads [][]byte, expected uint64, o PublishOptions, promise func(PublishResult, error)) error {
	if len(payloads) == 0 {
		return ErrEmptyBatch
	}
	if c.features&wire.FeaturePublishConditional == 0 {
		return wire.NewError(wire.CodeInvalidRequest, "the broker does not offer conditional publishes (FeaturePublishConditional)")
	}
	o.Ack, o.FireAndForget, o.expected = wire.AckPerBatch, false, &expected
	scope := s.scope(c)
	ps, err := c.pubs.stream(scope)
	if err != nil {
		return err
	}
	return ps.enqueue(ctx, scope, payloads, o, false, promise)
}
