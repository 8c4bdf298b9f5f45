// Package subscribers owns subscription feeders: one actor per subscription
// whose mailbox is the subscriber queue (subscriber_queue_capacity,
// subscriber_queue_max_bytes and the stream's overflow policy). A feeder takes
// the shared frame of each envelope the shard fans out, coalesces frames
// adaptively, takes egress credit from its connection's budget, and hands the
// batch to its writer lane.
package subscribers

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/lanes"
	"github.com/getfelix/felix-go/streams"
)

// Messages a feeder accepts: *streams.Envelope from its shard (data, bounded
// by the subscriber queue), and these two control messages to itself.

// flushDue is the coalescing timer firing for the batch of generation gen.
type flushDue struct {
	actors.ControlMessage
	gen uint64
}

// StartFrom releases a durable subscription's feeder once its history has
// been replayed: the feeder expects the next envelope at Offset, and any
// other offset means a batch was dropped from its queue.
type StartFrom struct {
	actors.ControlMessage
	Offset uint64
}

// creditReturned says egress bytes came back while the feeder waited for them.
type creditReturned struct{ actors.ControlMessage }

var creditReturnedMsg = &creditReturned{}

// BatchConfig governs coalescing (EventWriterConfig in the spec).
type BatchConfig struct {
	MaxEvents int
	MaxBytes  int
	MaxDelay  time.Duration
	// SingleEvent sends every envelope at once on its own (fanout_batch_size <= 1).
	SingleEvent bool
}

// Config is one feeder's wiring.
type Config struct {
	SubscriptionID uint64
	Batch          BatchConfig
	Lane           lanes.LaneRef
	Writer         *lanes.WriterRef
	Root           *actor.RootContext
	Log            zerolog.Logger
	// OnLaneDrop is told when the lane had stopped and could not take a batch.
	OnLaneDrop func(records int, bytes int64)
	// Durable subscriptions start held (their queue fills while history is
	// replayed) until StartFrom, and end as lagged at the first gap.
	Durable bool
	// Held starts the feeder held until StartFrom without gap detection:
	// an in-memory subscription replaying the ring backlog first.
	Held bool
	// OnLagged is told the offset to resume from when a durable
	// subscription found a gap; it must not block.
	OnLagged func(resumeFrom uint64)
	// Offsets sends frames with base offsets (a durable stream, and a client
	// that offered FlagEventBatchOffsets).
	Offsets bool
	// Shard is the shard the subscription is registered with: the feeder
	// watches it and ends the subscription if the shard stops for good.
	Shard *actor.PID
	// OnStopped is told when the feeder stops, whatever the reason, so the
	// session can end the subscription; it must not block.
	OnStopped func()
	// Budget is the broker-wide subscriber budget when its mailbox keeps
	// budget bytes on delivery (MailboxConfig.KeepBudget); the feeder passes
	// them on with each batch until it is written. Nil when the total is off.
	Budget *actors.ByteBudget
}

// feeder is the actor for one subscription. Every field is owned by Receive,
// except egress, whose atomics it shares with the connection writer.
type feeder struct {
	cfg     Config
	mailbox *actors.Mailbox
	egress  *lanes.Egress
	self    *actor.PID

	pending      [][]byte
	pendingBytes int64
	pendingHeld  int64  // subscriber-budget bytes the pending envelopes carry
	pendingNext  uint64 // offset after the last pending durable record
	records      int
	// busy is set when the last batch found more envelopes queued behind its
	// first: under load the next batch waits up to MaxDelay to fill.
	busy       bool
	timerArmed bool
	timerGen   uint64
	timer      *time.Timer
	// out is a batch waiting for egress credit; the mailbox is held meanwhile,
	// so the subscriber queue (not this actor) absorbs what keeps arriving.
	out *lanes.Deliver
	// laneGone is set when the lane refused as closed; the feeder then stops.
	laneGone bool
	// expect is the next offset a durable subscription must see; lagged is
	// set at the first gap, and the feeder then stops.
	expect uint64
	lagged bool
}

// Props returns the props of a feeder. created receives its mailbox (the
// subscriber queue); egress is the subscription's share of its connection.
func Props(cfg Config, queue actors.MailboxConfig, created func(*actors.Mailbox)) (*actor.Props, *lanes.Egress) {
	f := &feeder{cfg: cfg}
	f.egress = cfg.Writer.Budget.NewEgress(func() {
		if pid := f.selfPID(); pid != nil {
			cfg.Root.Send(pid, creditReturnedMsg)
		}
	})
	props := actors.Props(func() actor.Actor { return f }, queue, func(m *actors.Mailbox) {
		f.mailbox = m
		if cfg.Durable || cfg.Held {
			m.Hold() // until StartFrom: see Config.Durable and Held
		}
		if created != nil {
			created(m)
		}
	})
	return props, f.egress
}

// selfPID is read by the egress notifier on the connection writer's goroutine.
// It is set once, before any credit can be owed (credit is only owed after a
// failed take, which happens inside Receive), so no lock is needed.
func (f *feeder) selfPID() *actor.PID { return f.self }

func (f *feeder) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		f.handleStarted(ctx)
	case *actor.Terminated:
		f.handleTerminated(ctx, msg)
	case *actor.Restarting:
		f.handleRestarting()
	case *actor.Stopped:
		f.handleStopped()
	case *streams.Envelope:
		f.handleEnvelope(msg)
		if f.laneGone {
			ctx.Stop(ctx.Self()) // see toLane
		}
	case *StartFrom:
		f.expect = msg.Offset
		f.mailbox.Release()
	case *flushDue:
		f.handleFlushDue(msg)
	case *creditReturned:
		f.handleCreditReturned()
	default:
		f.cfg.Log.Debug().Type("message", msg).Msg("feeder ignored message")
	}
}

// handleStarted runs at spawn and after every restart. After a restart the
// pending batch is still here (this same instance is reused) but the timer
// that would have sent it was stopped: send it now, or it would wait for the
// next publish.
func (f *feeder) handleStarted(ctx actor.Context) {
	f.self = ctx.Self()
	if f.cfg.Shard != nil {
		ctx.Watch(f.cfg.Shard)
	}
	if len(f.pending) > 0 && f.out == nil {
		f.flush()
	}
	if f.laneGone {
		ctx.Stop(ctx.Self())
	}
}

// handleTerminated: the shard stopped for good, so nothing will ever be
// published to this subscription again. End it, with an error to the client,
// rather than leave it silently waiting.
func (f *feeder) handleTerminated(ctx actor.Context, msg *actor.Terminated) {
	if f.cfg.Shard != nil && msg.Who.Equal(f.cfg.Shard) {
		f.cfg.Log.Warn().Uint64("subscription", f.cfg.SubscriptionID).Str("shard", msg.Who.Id).Msg("shard stopped; ending its subscription")
		ctx.Stop(ctx.Self())
	}
}

// handleRestarting keeps the subscription (this same instance is reused) but
// forgets the timer, whose goroutine may fire into the new incarnation.
func (f *feeder) handleRestarting() {
	f.stopTimer()
}

func (f *feeder) handleStopped() {
	f.stopTimer()
	f.cfg.Budget.Release(f.pendingHeld)
	if f.out != nil {
		f.cfg.Budget.Release(f.out.Held) // its egress credit was never taken
	}
	f.pending, f.out, f.pendingHeld = nil, nil, 0
	if f.cfg.OnStopped != nil {
		f.cfg.OnStopped()
	}
}

func (f *feeder) handleEnvelope(env *streams.Envelope) {
	if f.cfg.Durable && env.Durable && !f.checkGap(env) {
		return
	}
	shape := streams.ShapePlain
	if f.cfg.Offsets && env.Durable {
		shape = streams.ShapeOffsets
	}
	frame := env.Frame(shape)
	if len(f.pending) == 0 && f.busy && !f.cfg.Batch.SingleEvent {
		f.armTimer()
	}
	f.pending = append(f.pending, frame)
	f.pendingBytes += int64(len(frame))
	f.records += env.Len()
	if f.cfg.Budget != nil {
		f.pendingHeld += env.MailboxBytes()
	}
	if env.Durable {
		f.pendingNext = env.Base + uint64(env.Len())
	}

	switch {
	case f.cfg.Batch.SingleEvent,
		len(f.pending) >= f.cfg.Batch.MaxEvents,
		f.pendingBytes >= int64(f.cfg.Batch.MaxBytes):
		f.flush()
	case f.mailbox.Len() > 0:
		// More is queued right behind: take it into this batch first.
	case !f.timerArmed:
		// Nothing more waiting and no reason to wait: a lone event goes now.
		f.flush()
	}
}

// checkGap reports whether env continues the subscription without a gap.
// A durable subscription never skips silently: at the first gap (its queue
// dropped a batch) it ends as lagged, and the writer tells the client the
// offset to resume from (right after what it really wrote). A batch below
// the expected offset was already written by the replay and is skipped.
func (f *feeder) checkGap(env *streams.Envelope) bool {
	if f.lagged {
		return false // ended; the session stops this feeder
	}
	if env.Base+uint64(env.Len()) <= f.expect {
		return false // already written by the replay's catch-up
	}
	if env.Base != f.expect {
		// What is pending is not sent: the writer names the resume offset
		// from what it really queued, and the client reads the rest again.
		f.lagged = true
		if f.cfg.OnLagged != nil {
			f.cfg.OnLagged(f.expect)
		}
		return false
	}
	f.expect = env.Base + uint64(env.Len())
	return true
}

func (f *feeder) handleFlushDue(msg *flushDue) {
	if msg.gen != f.timerGen || !f.timerArmed {
		return // a timer for a batch that already went
	}
	f.timerArmed = false
	if len(f.pending) > 0 && f.out == nil {
		f.flush()
	}
}

func (f *feeder) handleCreditReturned() {
	if f.out == nil {
		return
	}
	if !f.egress.TryTake(f.out.Bytes) {
		return // still full; the next return notifies again
	}
	d := f.out
	f.out = nil
	f.toLane(d)
	f.mailbox.Release()
}

// flush sends the pending batch toward the network.
func (f *feeder) flush() {
	f.stopTimer()
	d := &lanes.Deliver{
		SubscriptionID: f.cfg.SubscriptionID,
		Frames:         f.pending,
		Bytes:          f.pendingBytes,
		Records:        f.records,
		Egress:         f.egress,
		Writer:         f.cfg.Writer,
		Held:           f.pendingHeld,
		Budget:         f.cfg.Budget,
		Next:           f.pendingNext,
	}
	// A batch that coalesced more than one envelope means they arrive faster
	// than we drain: wait to fill the next one. A lone one clears the mark.
	f.busy = len(f.pending) > 1
	f.pending, f.pendingBytes, f.records, f.pendingHeld = nil, 0, 0, 0
	if !f.egress.TryTake(d.Bytes) {
		f.out = d
		f.mailbox.Hold()
		return
	}
	f.toLane(d)
}

func (f *feeder) toLane(d *lanes.Deliver) {
	// Under drop_new the lane refuses at once (its drop hook returns the
	// credit); under block this parks until the lane has room, which is the
	// documented cost of block: the connection's subscriptions wait together.
	// A refusal by a full lane is counted and its credit returned by the
	// lane's drop hook; a stopped lane calls no hook, so do both here.
	if f.cfg.Lane.Mailbox.TryPost(d, -1) == actors.Closed {
		d.GiveBack()
		if f.cfg.OnLaneDrop != nil {
			f.cfg.OnLaneDrop(d.Records, d.Bytes)
		}
		// The lane was stopped for good: this subscription has no path to
		// the network any more. The feeder stops (ending the subscription
		// with an error to the client) instead of dropping forever.
		f.laneGone = true
	}
}

func (f *feeder) armTimer() {
	f.timerGen++
	f.timerArmed = true
	gen, self, root := f.timerGen, f.self, f.cfg.Root
	f.timer = time.AfterFunc(f.cfg.Batch.MaxDelay, func() { root.Send(self, &flushDue{gen: gen}) })
}

func (f *feeder) stopTimer() {
	if f.timer != nil {
		f.timer.Stop()
		f.timer = nil
	}
	f.timerArmed = false
	f.timerGen++
}
