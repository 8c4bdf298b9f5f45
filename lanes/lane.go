// Package lanes owns the last two hops of delivery: the fixed set of writer
// lane actors (the lane queues), and one connection writer actor
// per QUIC connection, which owns that connection's event streams and writes
// them with continuous pipelining. It also owns the per-connection egress
// byte budget that feeders take from and writers return to, and the facts a
// writer, lane or feeder reports to its session (StreamFailed, Lagged,
// LagQueued). A delivered batch allocates nothing here: NewDeliver recycles
// the Deliver the writer has queued, its report and queue slices reused.
//
// Why the lane hop stays. A feeder posting straight to the connection
// writer measured no faster than through the lane (felix bench --profile
// throughput --payload 128, medians of 3 alternating runs: 0.99× at
// fanout 1, 1.00× at fanout 10; docs/BENCHMARKS.md). A pool of write
// goroutines in the lane, to bound write parallelism, was rejected on
// correctness: a write blocks while its stream is flow-controlled, so one
// stalled subscriber would hold a pool slot and stall its lane-mates. So
// the lane is the lane queue (subscriber_lane_queue_depth, always block: a
// shared hop never drops) and the stable path that keeps one
// subscription's deliveries in order; each subscription writes on its own
// goroutine in the connection writer.
//
// What a restart costs: a lane is stateless, and loses only the delivery
// in hand; a stopped lane is replaced by the lanes supervisor, which owns
// the lane set (lane-<i>.<gen>, supervisor.go), and the feeders routed to
// the old one give back their credit
// and stop, ending their subscriptions. A connection writer restarted
// keeps its streams and write goroutines; stopped, it resets every stream
// it owned, and its session ends those subscriptions and spawns a new
// writer (conn-<id>.<gen>).
package lanes

import (
	"sync"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/internal/probe"
)

// Deliver carries one subscription's coalesced event frames toward its
// connection. The frames are shared with other subscribers: never modify them.
// Bytes were taken from Egress by the feeder, and whoever ends the Deliver's
// life (written, dropped, refused) returns them.
type Deliver struct {
	SubscriptionID uint64
	Frames         [][]byte
	Bytes          int64
	Records        int
	Egress         *Egress
	Writer         *WriterRef
	// Session owns the subscription: a durable one whose batch a lane
	// drops is reported to it (Lagged).
	Session *actor.PID
	// Held is payload bytes of the broker-wide subscriber budget still
	// covering this batch (subscriber_queue_max_bytes_total); Budget is nil
	// when the total is off.
	Held   int64
	Budget *actors.ByteBudget
	// Next is the offset after the batch's last record on a durable stream
	// (0 otherwise): the writer resumes a lagged subscription from the last
	// batch it really queued.
	Next uint64
	// Published is the oldest publish time (unix ns) in the batch, for the
	// delivery latency metric (WriterConfig.OnWritten); 0 is not timed.
	Published int64
}

// deliveries recycles Deliver values: the connection writer puts one back
// once it has queued its frames, the only end of a Deliver's life that is
// common and certain; a dropped or refused one is left to the collector.
var deliveries = sync.Pool{New: func() any { return new(Deliver) }}

// maxPooledFrames bounds the frame slice a recycled Deliver keeps.
const maxPooledFrames = 1024

// NewDeliver returns an empty Deliver, recycled when one is free; its Frames
// has length 0 and may have room. Its sender fills it and gives up every
// reference to it when it posts it.
func NewDeliver() *Deliver { return deliveries.Get().(*Deliver) }

// recycle clears d (its frames are shared and must not stay reachable)
// and puts it back for NewDeliver. Only the connection writer calls it,
// once d's frames are in its queue.
func (d *Deliver) recycle() {
	frames := d.Frames
	if cap(frames) > maxPooledFrames {
		frames = nil
	}
	clear(frames)
	*d = Deliver{Frames: frames[:0]}
	deliveries.Put(d)
}

// GiveBack returns what a Deliver holds when it ends without being written:
// its egress credit and its share of the subscriber budget.
func (d *Deliver) GiveBack() {
	d.Egress.Return(d.Bytes)
	d.Budget.Release(d.Held)
}

// MailboxBytes counts the frames against a lane's byte accounting.
func (d *Deliver) MailboxBytes() int64 { return d.Bytes }

// WriterRef addresses a connection writer.
type WriterRef struct {
	ConnID  uint64
	PID     *actor.PID
	Mailbox *actors.Mailbox
	Budget  *ConnBudget
}

// LaneRef addresses a lane.
type LaneRef struct {
	Index   int
	PID     *actor.PID
	Mailbox *actors.Mailbox
	// Err, in the lanes supervisor's answer, is why lane Index has none.
	Err error
}

// lane forwards deliveries to their connection writers. Its mailbox is the
// lane queue (subscriber_lane_queue_depth and policy), and it gives each
// subscription a stable path, so its frames reach the connection writer in
// the order the feeder sent them. It does not bound write parallelism: each
// subscription has its own write goroutine in the connection writer, because
// a pool shared by a lane's subscriptions would let one flow-controlled
// stream hold a slot and stall the rest (see the package doc, "Why the lane
// hop stays"; bypassing the lane measured no faster).
type lane struct {
	index int
	log   zerolog.Logger
	// onRefused counts a delivery whose connection writer is gone.
	onRefused func(*Deliver)
}

// LaneConfig configures one lane.
type LaneConfig struct {
	Depth  int
	Policy actors.Policy
	Log    zerolog.Logger
	// OnDrop is told of each delivery the lane queue refused, after its
	// egress bytes were returned.
	OnDrop func(*Deliver)
	// OnRefused is told of each delivery whose connection writer had stopped.
	OnRefused func(*Deliver)
}

// LaneProps returns the props of lane index; created receives its mailbox.
func LaneProps(index int, cfg LaneConfig, created func(*actors.Mailbox)) *actor.Props {
	l := &lane{index: index, log: cfg.Log.With().Int("lane", index).Logger(), onRefused: cfg.OnRefused}
	return actors.Props(func() actor.Actor { return l }, actors.MailboxConfig{
		Capacity: cfg.Depth,
		Policy:   cfg.Policy,
		OnDrop: func(msg any, _ actors.DropReason) {
			if d, ok := unwrap(msg).(*Deliver); ok {
				d.GiveBack()
				if cfg.OnDrop != nil {
					cfg.OnDrop(d)
				}
			}
		},
	}, created)
}

func (l *lane) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *Deliver:
		l.handleDeliver(msg)
	}
}

func (l *lane) handleDeliver(d *Deliver) {
	probe.Mark(probe.LaneReceive)
	// The connection writer never blocks in Receive (its writes run on their
	// own goroutines), so this wait is short; it is Block so a burst is not lost.
	if !d.Writer.Mailbox.TryPost(d, -1).Accepted() {
		d.GiveBack()
		if l.onRefused != nil {
			l.onRefused(d)
		}
	}
}

func unwrap(msg any) any {
	if env, ok := msg.(*actor.MessageEnvelope); ok {
		return env.Message
	}
	return msg
}
