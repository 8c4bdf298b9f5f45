package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/getfelix/felix-go/wire"
)

// ErrReadMode is returned by Next on a subscription made with
// SubscribeOptions.Batches, and by NextBatch on one made without.
var ErrReadMode = errors.New("client: the subscription is not read this way (see SubscribeOptions.Batches)")

// deadlineStream is what a batch subscription reads: a QUIC receive
// stream, whose read deadline is how a context's end reaches a read.
type deadlineStream interface {
	io.Reader
	SetReadDeadline(time.Time) error
}

// batchReader is the read side of a subscription made with
// SubscribeOptions.Batches. Its fields belong to the NextBatch call
// holding mu.
type batchReader struct {
	mu      sync.Mutex
	stream  deadlineStream
	er      *eventReader
	scratch [][]byte // the last batch's payload slices, reused
	events  []Event  // the last batch, reused

	// The context the stream's deadline follows: registered once per
	// distinct context, so a loop passing the same one pays for the
	// registration once. stop and fired are nil for a context that is
	// never done.
	watched context.Context
	stop    func() bool
	fired   chan struct{} // closed once the deadline was set on ctx's end
}

func newBatchReader(rs deadlineStream) *batchReader {
	return &batchReader{stream: rs, er: newEventReader(rs, 16<<20)}
}

// NextBatch waits for the next event batch of a subscription made with
// SubscribeOptions.Batches and returns its events, in order. The slice
// and every payload in it are valid until the next NextBatch call, which
// reuses them: copy what must outlive the batch. One call at a time. When
// ctx ends first, NextBatch returns ctx's error and the subscription goes
// on: a batch partly read stays where it was for the next call. Once the
// subscription ended, it returns why, as Err does.
func (s *Subscription) NextBatch(ctx context.Context) ([]Event, error) {
	br := s.batches
	if br == nil {
		return nil, ErrReadMode
	}
	br.mu.Lock()
	defer br.mu.Unlock()
	if err := s.Err(); err != nil {
		br.unwatch()
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	br.watch(ctx)
	h, payload, err := br.er.next()
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, ctx.Err()
		}
		return nil, s.endBatches(err)
	}
	if h.Flags == 0 {
		return nil, s.endBatches(controlFrameEnd(payload))
	}
	base, evs, err := wire.DecodeEventBatchInto(br.scratch, h.Flags, payload)
	if err != nil {
		return nil, s.endBatches(fmt.Errorf("%w: %v", ErrProtocol, err))
	}
	hasOffset := h.Flags&wire.FlagEventBatchOffsets != 0
	br.events = br.events[:0]
	for i, e := range evs {
		br.events = append(br.events, Event{Payload: e, Offset: base + uint64(i), HasOffset: hasOffset})
	}
	if cap(evs) <= maxScratchEvents {
		br.scratch = evs[:0]
	}
	events := br.events
	if cap(br.events) > maxScratchEvents {
		br.events = nil // a rare huge batch is not held on to
	}
	return events, nil
}

// endBatches ends a batch subscription with err and returns what Err then
// says. REQUIRES: s.batches.mu is held.
func (s *Subscription) endBatches(err error) error {
	s.finish(err)
	s.batches.unwatch()
	return s.Err()
}

// controlFrameEnd is the end an event stream's control frame announces:
// the only one it carries is SubscriptionLagged.
func controlFrameEnd(payload []byte) error {
	msg, err := wire.DecodeMessageLimit(payload, 1<<16)
	if lag, ok := msg.(*wire.SubscriptionLagged); ok && err == nil {
		return &LaggedError{ResumeFrom: lag.ResumeFrom}
	}
	return fmt.Errorf("%w: unexpected control message on an event stream", ErrProtocol)
}

// watch makes ctx's end cut the stream's reads (a deadline in the past).
// REQUIRES: br.mu is held.
func (br *batchReader) watch(ctx context.Context) {
	if ctx == br.watched {
		return
	}
	br.unwatch()
	br.watched = ctx
	if ctx.Done() == nil {
		return // never done: nothing to watch
	}
	fired := make(chan struct{})
	stream := br.stream
	br.fired = fired
	br.stop = context.AfterFunc(ctx, func() {
		_ = stream.SetReadDeadline(time.Now())
		close(fired)
	})
}

// unwatch drops the watched context and clears a deadline its end set, so
// the next context starts from a stream that reads. REQUIRES: br.mu is
// held.
func (br *batchReader) unwatch() {
	if br.stop != nil && !br.stop() {
		<-br.fired // it ran, or runs: wait for its deadline, then clear it
		_ = br.stream.SetReadDeadline(time.Time{})
	}
	br.watched, br.stop, br.fired = nil, nil, nil
}
