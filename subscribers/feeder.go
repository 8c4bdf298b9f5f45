// Package subscribers owns subscription feeders: one actor per subscription
// whose mailbox is the subscriber queue (subscriber_queue_capacity,
// subscriber_queue_max_bytes and the stream's overflow policy). A feeder
// writes its subscription's history first (an in-memory stream's replay
// ring, or a durable stream's log, read page by page), then the shared frame
// of each envelope the shard fans out; it coalesces frames adaptively, takes
// egress credit from its connection's budget, and hands each batch to its
// writer lane.
//
// A subscription's life, from the feeder's side. It is spawned with its
// queue held; the shard registers it and names live, the offset of the
// first batch it will get, so [start, live) is closed. On Start it writes
// that history itself: the ring's shared frames, or pages read from the log
// by a goroutine, the next read waiting until the page took its egress
// credit (a slow client slows the reading). Catching up, a hole in the
// queue (batches it dropped meanwhile) is read from the log before the
// batch that revealed it, and when the queue is empty the log's committed
// end is checked too, at most maxCatchUpPasses times. Live, a gap (a batch
// its own queue dropped, one lost with a stopped lane, or the shard
// evicting it under block) ends a durable subscription: it reports
// lanes.Lagged to the session, which has the writer queue
// SubscriptionLagged naming the offset to resume from. An in-memory
// subscription evicted under block ends with an error. Without credit the
// feeder holds its mailbox (data stops, control flows) until a write
// returns bytes, so only its own queue fills.
//
// A cache watch (Config.Watch) is a subscription too: its history is the
// shard's snapshot or replayed changes, handed over at Start, and its
// queue takes one change per envelope. Its versions have gaps by nature,
// so the feeder checks no order; the shard forgets a watcher whose queue
// is full and tells it, and the feeder ends the watch lagged, naming the
// version after the last change it handed to its lane.
//
// What a restart keeps: the subscription, the queue and the pending batch,
// sent at once; a history read in flight is read again; the envelope in
// hand is lost (on a durable stream a gap, read from the log while catching
// up, else the subscription ends lagged). A stopped feeder's session ends
// the subscription. A feeder unwatches its shard when it stops:
// protoactor keeps a stopped watcher's PID, and through it the whole
// feeder, in the watched actor's set.
package subscribers

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/internal/probe"
	"github.com/getfelix/felix-go/lanes"
	"github.com/getfelix/felix-go/streams"
)

// Messages a feeder accepts: *streams.Envelope from its shard (data, bounded
// by the subscriber queue), Start from the subscription's session, and these
// control messages to itself. It reports lanes.Lagged to its session.

// Start begins a subscription once its shard has registered the feeder. Its
// queue has been collecting every batch from Live on since then; the feeder
// first writes the history: Backlog (an in-memory stream's replay ring) or,
// on a durable stream, the records [From, Live) read from Log. Then it
// catches up: a hole in the queue (batches it dropped meanwhile) is read
// from the log too, a few times at most, and after that a gap ends the
// subscription as lagged.
type Start struct {
	actors.ControlMessage
	Backlog []*streams.Envelope
	Log     streams.Log
	From    uint64
	Live    uint64
}

// flushDue is the coalescing timer firing for the batch of generation gen.
type flushDue struct {
	actors.ControlMessage
	gen uint64
}

// creditReturned says egress bytes came back while the feeder waited for them.
type creditReturned struct{ actors.ControlMessage }

var creditReturnedMsg = &creditReturned{}

// pageRead carries one page of history read from the log by a reader
// goroutine; at most one read is in flight, so a slow client slows reading.
type pageRead struct {
	actors.ControlMessage
	page streams.ReadPage
	err  error
}

// BatchConfig governs coalescing: a frame goes when it holds MaxEvents
// events or MaxBytes bytes, or MaxDelay after its first event.
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
	// Session owns the subscription: it is told lanes.Lagged, and watches
	// the feeder to learn when it stops.
	Session *actor.PID
	Root    *actor.RootContext
	Log     zerolog.Logger
	// Durable subscriptions end as lagged at the first gap once caught up.
	Durable bool
	// Offsets sends frames with base offsets (a durable stream, and a client
	// that offered FlagEventBatchOffsets).
	Offsets bool
	// Watch makes the subscription a cache watch: its envelopes are
	// changes of the keys it covers (streams/cachewatch.go), whose
	// versions have gaps by nature, so none is a lost batch; what ends
	// it lagged is its shard forgetting it (SubscriberEvicted), and the
	// version to resume from is the Resume of the last change it sent.
	Watch bool
	// Shard is the shard the subscription is registered with: the feeder
	// watches it and ends the subscription if the shard stops for good.
	Shard *actor.PID
	// Budget is the broker-wide subscriber budget when its mailbox keeps
	// budget bytes on delivery (MailboxConfig.KeepBudget); the feeder passes
	// them on with each batch until it is written. Nil when the total is off.
	Budget *actors.ByteBudget

	// now is the feeder's clock, time.Now unless a test sets it.
	now func() time.Time
}

// phase is where a subscription is in its life.
type phase uint8

const (
	waiting    phase = iota // spawned, queue held, until Start
	replaying               // writing history from the log; queue held
	catchingUp              // draining what queued meanwhile; holes are read from the log
	live                    // a gap ends a durable subscription as lagged
)

// maxCatchUpPasses bounds how often a subscription reads a hole from the
// log after its history: more keeps arriving while it reads, so after a few
// passes a gap is reported (lagged) instead of chased.
const maxCatchUpPasses = 4

// Replay reads: one page in memory at a time.
const (
	replayPageRecords = 1024
	replayPageBytes   = 1 << 20
)

// feeder is the actor for one subscription. Every field is owned by Receive,
// except egress, whose atomics it shares with the connection writer.
type feeder struct {
	cfg     Config
	mailbox *actors.Mailbox
	egress  *lanes.Egress
	self    *actor.PID
	holding bool // whether the mailbox is held now

	phase phase
	// The history being read from the log: [next, to), one read in flight
	// at most; after is the queued envelope that revealed a hole, handled
	// once the hole is written.
	log     streams.Log
	next    uint64
	to      uint64
	reading bool
	after   *streams.Envelope
	passes  int

	pending      [][]byte
	pendingBytes int64
	pendingHeld  int64  // subscriber-budget bytes the pending envelopes carry
	pendingNext  uint64 // offset after the last pending durable record
	records      int
	// pendingPublished is the oldest live publish time (unix ns) among the
	// pending envelopes, for the delivery latency metric; 0 for none.
	pendingPublished int64
	// busy is set when the last batch found more envelopes queued behind its
	// first: under load the next batch waits up to MaxDelay to fill. It
	// lapses once MaxDelay passed since that batch (flushedAt): an envelope
	// after an idle gap goes at once, not after a wait meant for a burst.
	busy       bool
	flushedAt  time.Time
	timerArmed bool
	timerGen   uint64
	timer      *time.Timer
	// out is a batch waiting for egress credit; the mailbox is held meanwhile,
	// so the subscriber queue (not this actor) absorbs what keeps arriving.
	out *lanes.Deliver
	// laneGone is set when the lane refused as closed; the feeder then stops.
	laneGone bool
	// expect is the next offset a durable subscription must see; lagged is
	// set at the first gap, and the feeder then only waits to be stopped.
	expect uint64
	lagged bool
	// evicted is set when the shard evicted the subscription before Start.
	evicted bool
	// start is the first offset a durable subscription delivers (a
	// watch's first version): where a lagged one resumes when its
	// connection writer queued none of it.
	start uint64
}

// Props returns the props of a feeder. created receives its mailbox (the
// subscriber queue), which starts held until Start; egress is the
// subscription's share of its connection.
func Props(cfg Config, queue actors.MailboxConfig, created func(*actors.Mailbox)) (*actor.Props, *lanes.Egress) {
	if cfg.now == nil {
		cfg.now = time.Now
	}
	f := &feeder{cfg: cfg}
	f.egress = cfg.Writer.Budget.NewEgress(func() {
		if pid := f.selfPID(); pid != nil {
			cfg.Root.Send(pid, creditReturnedMsg)
		}
	})
	props := actors.Props(func() actor.Actor { return f }, queue, func(m *actors.Mailbox) {
		f.mailbox = m
		m.Hold() // until Start: the history goes first
		f.holding = true
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
		f.handleStopped(ctx)
	case *streams.Envelope:
		f.handleEnvelope(ctx, msg)
	case *Start:
		f.handleStart(ctx, msg)
	case *streams.SubscriberEvicted:
		f.handleEvicted(ctx, msg)
	case *pageRead:
		f.handlePageRead(ctx, msg)
	case *flushDue:
		f.handleFlushDue(msg)
	case *creditReturned:
		f.handleCreditReturned(ctx)
	default:
		f.cfg.Log.Debug().Type("message", msg).Msg("feeder ignored message")
	}
	if f.laneGone {
		ctx.Stop(ctx.Self()) // see toLane
	}
}

// handleStarted runs at spawn and after every restart. After a restart the
// pending batch is still here (this same instance is reused) but the timer
// that would have sent it was stopped, and a page read in flight may have
// been the message that failed: send the batch now and read again.
func (f *feeder) handleStarted(ctx actor.Context) {
	f.self = ctx.Self()
	if f.cfg.Shard != nil {
		ctx.Watch(f.cfg.Shard)
	}
	if len(f.pending) > 0 && f.out == nil {
		f.flush()
	}
	if f.phase == replaying && f.reading {
		f.reading = false
		f.continueReplay(ctx)
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

func (f *feeder) handleStopped(ctx actor.Context) {
	// protoactor does not take a stopped watcher off the actors it watched:
	// the shard's watcher set kept every feeder's PID, and through the PID's
	// cached process the whole stopped feeder (about 5 KiB a subscription,
	// for the life of the shard).
	if f.cfg.Shard != nil {
		ctx.Unwatch(f.cfg.Shard)
	}
	f.stopTimer()
	f.cfg.Budget.Release(f.pendingHeld)
	if f.out != nil {
		f.cfg.Budget.Release(f.out.Held) // its egress credit was never taken
	}
	if f.after != nil {
		f.cfg.Budget.Release(f.after.MailboxBytes())
	}
	f.pending, f.out, f.after, f.pendingHeld = nil, nil, nil, 0
}

// handleStart writes the history, then lets the queue flow.
func (f *feeder) handleStart(ctx actor.Context, msg *Start) {
	if f.phase != waiting {
		return
	}
	if f.cfg.Watch {
		f.pendingNext, f.start = msg.From, msg.From
	}
	if f.evicted {
		f.phase, f.expect, f.start = live, msg.From, msg.From
		f.lag(ctx)
		return
	}
	for _, env := range msg.Backlog {
		f.add(env)
	}
	if len(f.pending) > 0 {
		f.flush()
	}
	f.expect, f.start = msg.From, msg.From
	if msg.Log == nil || msg.From >= msg.Live {
		f.expect = max(msg.From, msg.Live)
		f.start = f.expect
		f.log = msg.Log
		f.catchUp(ctx)
		return
	}
	f.log, f.next, f.to = msg.Log, msg.From, msg.Live
	f.phase = replaying
	f.continueReplay(ctx)
}

// continueReplay reads the next page of history, or, once the range is
// written, handles the envelope that revealed it and lets the queue flow.
func (f *feeder) continueReplay(ctx actor.Context) {
	if f.reading || f.out != nil {
		return // a read in flight, or waiting for credit: handleCreditReturned continues
	}
	if f.next < f.to {
		f.reading = true
		log, from, n, self, root := f.log, f.next, int(min(f.to-f.next, replayPageRecords)), ctx.Self(), f.cfg.Root
		// Reads never wait for new records, so this goroutine ends with
		// the read; it sends to a stopped feeder harmlessly.
		go func() {
			page, err := log.Read(from, n, replayPageBytes)
			root.Send(self, &pageRead{page: page, err: err})
		}()
		return
	}
	f.catchUp(ctx)
}

// catchUp lets the queue flow once history is written, the envelope that
// revealed a hole first. The log's committed end is checked only once the
// queue is empty (handleEnvelope calls caughtUp then): checked while
// batches are still queued, it reads them again from the log, encoded per
// subscriber instead of their shared frames, and spends catch-up passes.
func (f *feeder) catchUp(ctx actor.Context) {
	f.phase = catchingUp
	if env := f.after; env != nil {
		f.after = nil
		f.handleEnvelope(ctx, env)
		if f.phase != catchingUp {
			return // another hole being read, or caught up
		}
	} else if f.mailbox.Len() == 0 {
		f.caughtUp(ctx)
		return
	}
	// Held since Start or since the hole was found; nothing else releases
	// it while catching up.
	f.hold(false)
}

func (f *feeder) handlePageRead(ctx actor.Context, msg *pageRead) {
	if f.phase != replaying || !f.reading {
		return
	}
	f.reading = false
	err := msg.err
	if err == nil && (len(msg.page.Records) == 0 || msg.page.Records[0].Offset != f.next) {
		err = errHistoryMissing
	}
	if err != nil {
		f.cfg.Log.Debug().Err(err).Uint64("subscription", f.cfg.SubscriptionID).Uint64("offset", f.next).Msg("history read failed; ending the subscription")
		ctx.Stop(ctx.Self())
		return
	}
	f.next, f.expect = msg.page.Next, msg.page.Next
	f.pendingNext = msg.page.Next
	f.appendFrame(historyFrame(msg.page, f.cfg.Offsets), len(msg.page.Records))
	f.flush()
	f.continueReplay(ctx)
}

// handleEvicted: under block the shard gave up waiting on this full queue
// and forgot the subscription. A durable one ends lagged, to resume from
// the batch it did not get; an in-memory one ends with an error.
func (f *feeder) handleEvicted(ctx actor.Context, msg *streams.SubscriberEvicted) {
	if !f.cfg.Durable && !f.cfg.Watch {
		ctx.Stop(ctx.Self())
		return
	}
	if f.phase == waiting {
		// Not started: nothing was written, so the client resumes from
		// where it asked to start (handleStart lags at once).
		f.evicted = true
		return
	}
	if !f.lagged {
		f.expect = min(f.expect, msg.ResumeFrom)
		f.lag(ctx)
	}
}

// handleEnvelope takes one batch from the queue (or the one that revealed a
// hole, after the hole was written).
func (f *feeder) handleEnvelope(ctx actor.Context, env *streams.Envelope) {
	probe.Mark(probe.FeederReceive)
	switch {
	case f.cfg.Watch && f.lagged:
		// Ended: what is still queued is dropped, and sent again from
		// the resume version.
	case !f.cfg.Durable || !env.Durable || f.inOrder(ctx, env):
		f.take(env)
	}
	if f.phase == catchingUp && f.mailbox.Len() == 0 {
		f.caughtUp(ctx)
	}
}

// take adds env to the pending batch and sends the batch when it is due.
func (f *feeder) take(env *streams.Envelope) {
	f.add(env)
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

// add appends an envelope's shared frame to the pending batch.
func (f *feeder) add(env *streams.Envelope) {
	shape := streams.ShapePlain
	if f.cfg.Offsets && env.Durable {
		shape = streams.ShapeOffsets
	}
	if len(f.pending) == 0 && f.busy && !f.cfg.Batch.SingleEvent {
		if f.cfg.now().Sub(f.flushedAt) < f.cfg.Batch.MaxDelay {
			f.armTimer()
		} else {
			f.busy = false // idle since the busy batch: no burst to fill from
		}
	}
	if f.cfg.Budget != nil {
		f.pendingHeld += env.MailboxBytes()
	}
	switch {
	case env.Durable:
		f.pendingNext = env.Base + uint64(env.Len())
	case f.cfg.Watch:
		f.pendingNext = max(f.pendingNext, env.Resume)
	}
	// History (the backlog at Start, a replay) is not timed: its wait is
	// the subscriber's choice of a start, not the broker's latency.
	if p := env.Published; p != 0 && (f.phase == live || f.phase == catchingUp) && (f.pendingPublished == 0 || p < f.pendingPublished) {
		f.pendingPublished = p
	}
	f.appendFrame(env.Frame(shape), env.Len())
}

func (f *feeder) appendFrame(frame []byte, records int) {
	f.pending = append(f.pending, frame)
	f.pendingBytes += int64(len(frame))
	f.records += records
}

// inOrder reports whether env continues the subscription without a gap. A
// batch already written (from the log) is skipped. While catching up, a
// hole before env is read from the log first (env waits, and so does the
// queue); once live, a durable subscription never skips silently: at the
// first gap it ends as lagged, and the writer tells the client the offset
// to resume from (right after what it really wrote).
func (f *feeder) inOrder(ctx actor.Context, env *streams.Envelope) bool {
	end := env.Base + uint64(env.Len())
	switch {
	case f.lagged:
		return false // ended; the session stops this feeder
	case end <= f.expect:
		return false // already written from the log
	case env.Base == f.expect:
		f.expect = end
		return true
	case f.phase == catchingUp && env.Base > f.expect && f.passes < maxCatchUpPasses && f.log != nil:
		f.passes++
		f.after, f.next, f.to = env, f.expect, env.Base
		f.phase = replaying
		f.hold(true)
		f.continueReplay(ctx)
		return false
	}
	f.lag(ctx)
	return false
}

// caughtUp runs when the queue is empty while catching up. Batches the
// queue dropped after its last one leave a hole no queued batch reveals:
// read up to the log's committed end, then the subscription is live.
func (f *feeder) caughtUp(ctx actor.Context) {
	if f.log != nil && f.passes < maxCatchUpPasses {
		if c := f.log.Committed(); c > f.expect {
			f.passes++
			f.next, f.to = f.expect, c
			f.phase = replaying
			f.hold(true)
			f.continueReplay(ctx)
			return
		}
	}
	f.phase = live
	f.hold(f.out != nil)
}

// lag ends a durable subscription at its first gap. What is pending is not
// sent: the writer names the resume offset from what it really queued. The
// feeder cannot know that (a batch it handed over may still be in the lane
// behind the Lagged), so what it names is the subscription's start, right
// whenever the writer queued nothing of it: an offset past a batch pending
// here, or still in the lane, would skip that batch for good.
// History stops too (an eviction can come while it is read): a page in
// flight is dropped when it arrives, as handlePageRead takes pages only
// while replaying, and the queue flows so that everything in it is dropped
// rather than making the shard wait on an ended subscription.
func (f *feeder) lag(ctx actor.Context) {
	f.lagged = true
	f.cfg.Budget.Release(f.pendingHeld)
	f.pending, f.pendingBytes, f.records, f.pendingHeld = nil, 0, 0, 0
	if f.after != nil {
		f.cfg.Budget.Release(f.after.MailboxBytes())
		f.after = nil
	}
	f.phase = live
	f.hold(f.out != nil)
	ctx.Send(f.cfg.Session, &lanes.Lagged{SubscriptionID: f.cfg.SubscriptionID, ResumeFrom: f.start})
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

func (f *feeder) handleCreditReturned(ctx actor.Context) {
	if f.out == nil {
		return
	}
	if !f.egress.TryTake(f.out.Bytes) {
		return // still full; the next return notifies again
	}
	d := f.out
	f.out = nil
	f.toLane(d)
	switch f.phase {
	case replaying:
		f.continueReplay(ctx)
	case catchingUp, live:
		f.hold(false)
	}
}

// hold holds or releases the queue: it is held before Start, while history
// is written, and while a batch waits for egress credit.
func (f *feeder) hold(on bool) {
	on = on || f.phase == waiting || f.phase == replaying || f.out != nil
	if on == f.holding {
		return
	}
	f.holding = on
	if on {
		f.mailbox.Hold()
	} else {
		f.mailbox.Release()
	}
}

// flush sends the pending batch toward the network.
func (f *feeder) flush() {
	f.stopTimer()
	if len(f.pending) == 0 {
		return
	}
	// A recycled Deliver (the writer puts them back) takes the pending
	// frames, and its empty frame slice becomes the next pending one: a
	// delivered batch allocates neither.
	d := lanes.NewDeliver()
	spare := d.Frames
	*d = lanes.Deliver{
		SubscriptionID: f.cfg.SubscriptionID,
		Frames:         f.pending,
		Bytes:          f.pendingBytes,
		Records:        f.records,
		Egress:         f.egress,
		Writer:         f.cfg.Writer,
		Session:        f.cfg.Session,
		Held:           f.pendingHeld,
		Budget:         f.cfg.Budget,
		Next:           f.pendingNext,
		Published:      f.pendingPublished,
	}
	// A batch that coalesced more than one envelope means they arrive faster
	// than we drain: wait to fill the next one. A lone one clears the mark.
	f.busy = len(f.pending) > 1
	if f.busy {
		f.flushedAt = f.cfg.now() // read only when busy: a lone batch needs no clock
	}
	f.pending, f.pendingBytes, f.records, f.pendingHeld, f.pendingPublished = spare, 0, 0, 0, 0
	if !f.egress.TryTake(d.Bytes) {
		f.out = d
		f.hold(true)
		return
	}
	f.toLane(d)
}

func (f *feeder) toLane(d *lanes.Deliver) {
	// A lane's policy is always block (a shared hop never drops): this parks
	// until the lane has room, so the subscriptions sharing a lane wait
	// together while it is full. A stopped lane refuses the post and calls
	// no hook, so the credit is returned here.
	probe.Mark(probe.FeederFlush)
	if f.cfg.Lane.Mailbox.TryPost(d, -1) == actors.Closed {
		d.GiveBack()
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
