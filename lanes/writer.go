package lanes

import (
	"io"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/internal/probe"
	"github.com/getfelix/felix-go/wire"
)

// EventStream is where a subscription's frames go: the QUIC send stream the
// broker opened for it. Close finishes the stream cleanly.
type EventStream interface {
	io.Writer
	Close() error
}

// Aborter is implemented by an EventStream that can be reset, so a client
// learns its subscription ended by error rather than cleanly; code is a
// wire.StreamCode* saying why.
type Aborter interface {
	Abort(code uint64)
}

// Register hands a subscription's event stream to the connection writer,
// which owns it from then on. The writer responds with *Registered.
type Register struct {
	actors.ControlMessage
	SubscriptionID uint64
	Stream         EventStream
	Egress         *Egress
	// Next, on a durable subscription, is the offset the stream continues
	// at (what the replay wrote up to): the writer knows exactly what it
	// has written from there on, so a lagged end names the right offset.
	Next uint64
}

// Registered answers Register.
type Registered struct{ SubscriptionID uint64 }

// Unregister ends a subscription's stream: cleanly once what is queued is
// written, or at once with a reset when Abort is set (the broker ended it).
type Unregister struct {
	actors.ControlMessage
	SubscriptionID uint64
	Abort          bool
	// AbortCode is the reset's wire.StreamCode*; zero is
	// StreamCodeSubscriptionEnded.
	AbortCode uint64
	// Lagged ends a durable subscription that fell behind: after what is
	// queued, a SubscriptionLagged frame tells the client to resume right
	// after the last batch this writer queued (ResumeFrom only when the
	// writer knows nothing better).
	Lagged     bool
	ResumeFrom uint64
}

// Facts reported to a subscription's session, which owns the subscription
// and ends it. They are control messages: a session's mailbox never makes a
// writer, lane or feeder wait.

// StreamFailed says a subscription's stream failed (the client reset it or
// the connection died); the writer has already let go of it.
type StreamFailed struct {
	actors.ControlMessage
	SubscriptionID uint64
	Err            error
}

// LagQueued says the writer queued a lagged subscription's
// SubscriptionLagged frame after everything it had; the stream finishes
// once that is written.
type LagQueued struct {
	actors.ControlMessage
	SubscriptionID uint64
}

// Lagged says a durable subscription fell behind: a lane dropped one of its
// batches, or its feeder found a gap. The session asks the writer to end it
// (Unregister with Lagged). ResumeFrom is the subscription's start: the
// offset to resume from when the writer queued none of it.
type Lagged struct {
	actors.ControlMessage
	SubscriptionID uint64
	ResumeFrom     uint64
}

// writeDone is a subscription's write goroutine reporting one finished write.
// Each subWriter has one, reused: at most one write is in flight, and the
// actor reads it before it starts the next write.
type writeDone struct {
	actors.ControlMessage
	id      uint64
	bytes   int64 // written, for OnWritten
	credit  int64 // egress bytes the write carried, to return
	held    int64
	records int
	// published is the oldest publish time the write carried (unix ns; 0
	// for none), for OnWritten.
	published int64
	err       error
	// frames is the write's frame slice, cleared, for the next queue.
	frames [][]byte
}

// WriterConfig configures a connection writer.
type WriterConfig struct {
	Log zerolog.Logger
	// Root sends writeDone from the write goroutines to the actor.
	Root *actor.RootContext
	// Session is told StreamFailed and LagQueued. It watches the writer, so
	// it also learns when the writer stops (after it reset every stream).
	Session *actor.PID
	// OnWritten counts what reached the network, and the oldest publish
	// time (unix ns; 0: not timed) among its records; it must not block.
	OnWritten func(records int, bytes int64, published int64)
}

// connWriter owns one connection's event streams. It never blocks in
// Receive: each subscription has a goroutine that performs its writes, and at
// most one write in flight. As soon as one subscription's write completes its
// next starts, whatever the others are doing: a flow-control-blocked stream
// holds back nobody else on the connection (continuous pipelining, instead
// of rounds that wait for every stream).
type connWriter struct {
	cfg  WriterConfig
	subs map[uint64]*subWriter
}

type subWriter struct {
	id       uint64
	stream   EventStream
	egress   *Egress
	queue    [][]byte
	queued   int64  // egress bytes of the queue
	inQueued int64  // and of the write in flight
	records  int    // records in queue, counted as delivered once written
	oldest   int64  // the oldest publish time in queue (unix ns), 0 for none
	next     uint64 // offset after the last durable batch queued
	held     int64  // subscriber-budget bytes of the queued batches
	inHeld   int64  // and of the write in flight
	budget   *actors.ByteBudget
	inFlight bool
	closing  bool
	failed   bool
	// reqs carries one batch of frames to the write goroutine. Capacity 1 and
	// at most one write in flight, so the actor's send never blocks.
	reqs chan writeReq
	// done is the write goroutine's report, reused for every write.
	done writeDone
	// spare is the last write's frame slice, empty, for the next queue.
	spare [][]byte
}

type writeReq struct {
	frames    [][]byte
	records   int
	published int64
	held      int64
	// credit is the egress bytes the frames took, which is not their length
	// when the writer added a frame of its own (SubscriptionLagged).
	credit int64
}

// WriterProps returns the props of a connection writer; created receives its mailbox.
func WriterProps(cfg WriterConfig, created func(*actors.Mailbox)) *actor.Props {
	w := &connWriter{cfg: cfg, subs: make(map[uint64]*subWriter)}
	// Deliveries are bounded upstream by the egress budget (bytes) and the
	// lanes (count); this bound is a safety net, and Block because the writer
	// drains it without ever blocking.
	return actors.Props(func() actor.Actor { return w }, actors.MailboxConfig{
		Capacity: 4096,
		Policy:   actors.Block,
		// Deliveries still queued when the writer stops give their credit back.
		OnDrop: func(msg any, _ actors.DropReason) {
			if d, ok := unwrap(msg).(*Deliver); ok {
				d.GiveBack()
			}
		},
	}, created)
}

func (w *connWriter) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Stopped:
		w.handleStopped()
	case *Register:
		w.handleRegister(ctx, msg)
	case *Deliver:
		w.handleDeliver(ctx, msg)
	case *writeDone:
		w.handleWriteDone(ctx, msg)
	case *Unregister:
		w.handleUnregister(ctx, msg)
	}
}

// handleStopped ends every write goroutine. A write blocked on a live
// connection ends when the transport closes the connection.
func (w *connWriter) handleStopped() {
	for id, s := range w.subs {
		abort(s.stream, 0)
		w.finish(s)
		delete(w.subs, id)
	}
}

// abort resets st with code (zero: StreamCodeSubscriptionEnded).
func abort(st EventStream, code uint64) {
	if code == 0 {
		code = wire.StreamCodeSubscriptionEnded
	}
	if a, ok := st.(Aborter); ok {
		a.Abort(code)
	}
}

func (w *connWriter) handleRegister(ctx actor.Context, msg *Register) {
	s := &subWriter{id: msg.SubscriptionID, stream: msg.Stream, egress: msg.Egress, reqs: make(chan writeReq, 1), next: msg.Next}
	w.subs[s.id] = s
	go runWrites(s, ctx.Self(), w.cfg.Root)
	ctx.Respond(&Registered{SubscriptionID: s.id})
}

func (w *connWriter) handleDeliver(ctx actor.Context, d *Deliver) {
	probe.Mark(probe.WriterReceive)
	s, ok := w.subs[d.SubscriptionID]
	if !ok || s.failed || s.closing {
		// A batch that arrives after its subscription began to end (for a
		// lagged one, after the lag frame was queued) is not written: the
		// resume offset already points at it.
		d.GiveBack()
		return
	}
	s.queue = append(s.queue, d.Frames...)
	s.queued += d.Bytes
	s.records += d.Records
	if d.Published != 0 && (s.oldest == 0 || d.Published < s.oldest) {
		s.oldest = d.Published
	}
	s.held += d.Held
	s.budget = d.Budget
	if d.Next > s.next {
		s.next = d.Next
	}
	d.recycle()
	if !s.inFlight {
		w.startWrite(s)
	}
}

func (w *connWriter) handleWriteDone(ctx actor.Context, msg *writeDone) {
	s, ok := w.subs[msg.id]
	if !ok {
		return
	}
	s.inFlight = false
	if cap(msg.frames) <= maxPooledFrames {
		// Reuse the slice: as the queue if nothing came meanwhile, else
		// for the queue after the next write.
		if len(s.queue) == 0 {
			s.queue = msg.frames
		} else {
			s.spare = msg.frames
		}
	}
	s.egress.Return(msg.credit)
	s.budget.Release(msg.held)
	s.inQueued, s.inHeld = 0, 0
	if msg.err != nil {
		s.failed = true
		ctx.Send(w.cfg.Session, &StreamFailed{SubscriptionID: s.id, Err: msg.err})
		w.finish(s)
		delete(w.subs, s.id)
		return
	}
	if w.cfg.OnWritten != nil {
		w.cfg.OnWritten(msg.records, msg.bytes, msg.published)
	}
	if len(s.queue) > 0 {
		w.startWrite(s)
		return
	}
	if s.closing {
		w.finish(s)
		delete(w.subs, s.id)
	}
}

func (w *connWriter) handleUnregister(ctx actor.Context, msg *Unregister) {
	s, ok := w.subs[msg.SubscriptionID]
	if !ok {
		return
	}
	s.closing = true
	if msg.Lagged {
		// What this writer queued is all the client will get: resume right
		// after it. Batches still in a lane arrive too late and are dropped
		// (above), and the client reads them again from here.
		resume := s.next
		if resume == 0 {
			resume = msg.ResumeFrom
		}
		frame, _ := wire.AppendMessage(nil, &wire.SubscriptionLagged{SubscriptionID: s.id, ResumeFrom: resume})
		s.queue = append(s.queue, frame)
		if !s.inFlight {
			w.startWrite(s)
		}
		ctx.Send(w.cfg.Session, &LagQueued{SubscriptionID: s.id})
		return
	}
	if msg.Abort {
		abort(s.stream, msg.AbortCode)
		w.finish(s)
		delete(w.subs, s.id)
		return
	}
	if !s.inFlight && len(s.queue) == 0 {
		w.finish(s)
		delete(w.subs, s.id)
	}
}

func (w *connWriter) startWrite(s *subWriter) {
	req := writeReq{frames: s.queue, records: s.records, published: s.oldest, held: s.held, credit: s.queued}
	s.inQueued, s.inHeld = s.queued, s.held
	s.queue, s.spare = s.spare, nil
	s.records, s.held, s.oldest = 0, 0, 0
	s.inFlight = true
	s.reqs <- req
	// The bytes travel with the write and come back in writeDone.
	s.queued = 0
}

// finish closes the write goroutine's channel; the goroutine finishes the
// stream after its last write. Queued bytes go back to the budget.
func (w *connWriter) finish(s *subWriter) {
	if s.queued > 0 {
		s.egress.Return(s.queued)
		s.queued = 0
	}
	s.budget.Release(s.held)
	if s.inFlight {
		// The stream is ending (aborted, or the writer is stopping) with a
		// write in flight: its writeDone will find no subscription or no
		// actor, so what the write holds is returned now.
		s.egress.Return(s.inQueued)
		s.budget.Release(s.inHeld)
		s.inQueued, s.inHeld = 0, 0
	}
	s.queue, s.records, s.held = nil, 0, 0
	close(s.reqs)
	s.egress.Close()
}

// maxCoalesce bounds the scratch buffer one write goroutine coalesces into.
// Small frames are copied into one Stream.Write, which quic-go turns into far
// fewer packets' worth of work than a write per frame (6-10x on this kind of
// machine); a larger batch is written frame by frame instead of growing the
// buffer.
const maxCoalesce = 256 << 10

// runWrites performs one subscription's writes. It exits when reqs is closed
// (the subscription ended), after closing the stream.
func runWrites(s *subWriter, self *actor.PID, root *actor.RootContext) {
	var scratch []byte
	for req := range s.reqs {
		probe.Mark(probe.WriteStart)
		frames := req.frames
		var n int64
		for _, f := range frames {
			n += int64(len(f))
		}
		var err error
		if len(frames) == 1 || n > maxCoalesce {
			for _, f := range frames {
				if _, err = s.stream.Write(f); err != nil {
					break
				}
			}
		} else {
			scratch = scratch[:0]
			for _, f := range frames {
				scratch = append(scratch, f...)
			}
			_, err = s.stream.Write(scratch)
		}
		probe.Mark(probe.WriteDone)
		clear(frames) // shared frames: not kept alive by a spare slice
		s.done = writeDone{id: s.id, bytes: n, credit: req.credit, held: req.held, records: req.records, published: req.published, err: err, frames: frames[:0]}
		root.Send(self, &s.done)
	}
	// A failing close means the connection is going away; nobody is left to tell.
	_ = s.stream.Close()
}
