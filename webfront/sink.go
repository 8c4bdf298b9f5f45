package webfront

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"

	"github.com/getfelix/felix-go/wire"
)

// sink is one subscription's service.Sink. The connection writer hands it
// whole felix/1 event batch frames (one write in flight per subscription),
// and each goes out as one events frame, its payload unchanged; pending
// holds a frame split across writes, should a writer ever split one.
//
// WebSocket has one byte stream per connection, so a browser that reads
// slowly slows its own subscriptions together (the price of no
// WebTransport); each still queues and drops under its own policy behind
// its egress share, and nobody else's is touched. Over WebTransport each
// subscription has a stream of its own (out), so one a page reads slowly
// waits alone.
type sink struct {
	c   *conn
	sub uint64
	out eventStream
	// answered is closed once the subscribe's reply is written: the
	// writer's goroutine starts writing history as soon as Subscribe
	// returns, and on one WebSocket the events of an id the browser has
	// not been told yet would be dropped.
	answered chan struct{}
	ended    atomic.Bool // the ended frame is sent once, by Close or Abort
	pending  []byte
	frame    []byte // scratch for the events frame, reused
}

// waitAnswered waits until the subscribe's reply is out, or the connection ends.
func (s *sink) waitAnswered() error {
	select {
	case <-s.answered:
		return nil
	case <-s.c.ctx.Done():
		return s.c.ctx.Err()
	}
}

func (s *sink) Write(p []byte) (int, error) {
	if err := s.waitAnswered(); err != nil {
		return 0, err
	}
	b := p
	if len(s.pending) > 0 {
		s.pending = append(s.pending, p...)
		b = s.pending
	}
	for len(b) >= wire.HeaderLen {
		h, err := wire.ParseHeader(b, math.MaxInt32)
		if err != nil {
			return 0, fmt.Errorf("webfront: the writer handed a bad frame: %w", err)
		}
		if int64(h.Length) > int64(len(b)-wire.HeaderLen) {
			break // the rest of this frame comes with the next write
		}
		if h.Flags&wire.FlagEventBatch == 0 {
			return 0, fmt.Errorf("webfront: the writer handed a frame with flags %#04x, not an event batch", h.Flags)
		}
		end := wire.HeaderLen + int(h.Length)
		s.frame = appendEvents(s.frame[:0], s.sub, h.Flags, b[wire.HeaderLen:end])
		if err := s.writeEvents(); err != nil {
			return 0, err
		}
		b = b[end:]
	}
	s.pending = append(s.pending[:0], b...)
	return len(p), nil
}

func (s *sink) writeEvents() error {
	ctx, cancel := context.WithTimeout(s.c.ctx, writeTimeout)
	defer cancel()
	return s.out.write(ctx, s.frame)
}

// Close ends the subscription cleanly (an unsubscribe); the writer's
// goroutine calls it last, so it may wait for the write. The events
// stream ends before the ended frame goes out, so a client that waits for
// both has every event.
func (s *sink) Close() error {
	if s.ended.CompareAndSwap(false, true) && s.waitAnswered() == nil {
		ctx, cancel := context.WithTimeout(s.c.ctx, writeTimeout)
		s.out.finish(ctx)
		cancel()
		s.c.reply(&Reply{Op: OpEnded, Sub: s.sub})
	}
	return nil
}

// Abort tells the browser the broker ended the subscription and why (a
// wire.StreamCode*). The connection writer's actor calls it, and actors
// never block, so the frame is written by a goroutine of the connection's
// (conn.serve waits for them).
func (s *sink) Abort(code uint64) {
	if !s.ended.CompareAndSwap(false, true) {
		return
	}
	s.out.abort(code)
	s.c.background.Add(1)
	go func() {
		defer s.c.background.Done()
		if s.waitAnswered() == nil {
			s.c.reply(&Reply{Op: OpEnded, Sub: s.sub, Code: code})
		}
	}()
}
