package lanes_test

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/lanes"
)

// laneRig is one lane in front of a fake connection writer that records
// the deliveries reaching its mailbox. The lane's hooks report into
// channels.
type laneRig struct {
	system  *actor.ActorSystem
	lane    lanes.LaneRef
	writer  *lanes.WriterRef
	got     chan *lanes.Deliver // reached the writer
	dropped chan *lanes.Deliver // told to OnDrop
	refused chan *lanes.Deliver // told to OnRefused
	egress  *lanes.Egress
	budget  *actors.ByteBudget
	stopped map[*actor.PID]bool
}

// newLaneRig spawns the fake writer and a lane of depth under policy; with
// hold the lane's queue is held, so deliveries stay queued until released.
func newLaneRig(t *testing.T, depth int, policy actors.Policy, hold bool) *laneRig {
	t.Helper()
	r := &laneRig{
		system:  actor.NewActorSystem(),
		writer:  &lanes.WriterRef{ConnID: 1, Budget: lanes.NewConnBudget(1 << 20)},
		got:     make(chan *lanes.Deliver, 64),
		dropped: make(chan *lanes.Deliver, 64),
		refused: make(chan *lanes.Deliver, 64),
		budget:  actors.NewByteBudget(1 << 20),
		stopped: map[*actor.PID]bool{},
	}
	r.egress = r.writer.Budget.NewEgress(nil)
	writerProps := actors.Props(func() actor.Actor {
		return actor.ReceiveFunc(func(ctx actor.Context) {
			if d, ok := ctx.Message().(*lanes.Deliver); ok {
				r.got <- d
			}
		})
	}, actors.MailboxConfig{Capacity: 64, Policy: actors.Block}, func(m *actors.Mailbox) { r.writer.Mailbox = m })
	r.writer.PID = r.system.Root.Spawn(writerProps)

	cfg := lanes.LaneConfig{
		Depth:     depth,
		Policy:    policy,
		Log:       zerolog.Nop(),
		OnDrop:    func(d *lanes.Deliver) { r.dropped <- d },
		OnRefused: func(d *lanes.Deliver) { r.refused <- d },
	}
	r.lane.PID = r.system.Root.Spawn(lanes.LaneProps(0, cfg, func(m *actors.Mailbox) {
		r.lane.Mailbox = m
		if hold {
			m.Hold()
		}
	}))
	t.Cleanup(func() {
		r.stop(t, r.lane.PID)
		r.stop(t, r.writer.PID)
		r.system.Shutdown()
		time.Sleep(r.system.Config.DeadLetterThrottleInterval) // see newWriterRig
	})
	return r
}

func (r *laneRig) stop(t *testing.T, pid *actor.PID) {
	t.Helper()
	if r.stopped[pid] {
		return
	}
	r.stopped[pid] = true
	if err := r.system.Root.StopFuture(pid).Wait(); err != nil {
		t.Fatalf("stop %s: %v", pid.Id, err)
	}
}

// post sends a one-frame delivery into the lane queue as a feeder does: it
// takes egress credit and budget bytes first, and posts without waiting.
func (r *laneRig) post(t *testing.T, payload string) (*lanes.Deliver, actors.PostResult) {
	t.Helper()
	f := frame(payload)
	n := int64(len(f))
	if !r.egress.TryTake(n) {
		t.Fatalf("egress refused %d bytes with %d in flight", n, r.egress.InFlight())
	}
	r.budget.ForceAcquire(n)
	d := &lanes.Deliver{SubscriptionID: 1, Frames: [][]byte{f}, Bytes: n, Records: 1, Egress: r.egress, Writer: r.writer, Held: n, Budget: r.budget}
	return d, r.lane.Mailbox.TryPost(d, 0)
}

func recvDeliver(t *testing.T, ch chan *lanes.Deliver, what string) *lanes.Deliver {
	t.Helper()
	select {
	case d := <-ch:
		return d
	case <-time.After(wait):
		t.Fatalf("no delivery %s within %v", what, wait)
		return nil
	}
}

func expectNone(t *testing.T, ch chan *lanes.Deliver, what string) {
	t.Helper()
	select {
	case d := <-ch:
		t.Fatalf("delivery %q %s, want none", d.Frames[0], what)
	default:
	}
}

func TestLaneForwardsDeliveriesInOrderToWriterMailbox(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newLaneRig(t, 64, actors.DropNew, false)
		var sent []*lanes.Deliver
		var taken int64
		for i := range 20 {
			d, res := r.post(t, fmt.Sprint(i))
			if !res.Accepted() {
				t.Fatalf("post %d into an empty 64-deep lane: %v", i, res)
			}
			sent = append(sent, d)
			taken += d.Bytes
		}
		for i, want := range sent {
			if got := recvDeliver(t, r.got, "at the writer"); got != want {
				t.Fatalf("writer got delivery %q as number %d, want %q (same Deliver, in the order sent)", got.Frames[0], i, want.Frames[0])
			}
		}
		synctest.Wait()
		expectNone(t, r.dropped, "told to OnDrop")
		expectNone(t, r.refused, "told to OnRefused")
		// The lane only forwards: the bytes stay taken until the writer writes.
		if got, want := r.egress.InFlight(), taken; got != want {
			t.Errorf("after forwarding: InFlight() = %d, want %d (the lane returns nothing it forwarded)", got, want)
		}
	})
}

// Under drop_new a full lane queue refuses the delivery; its drop hook gives
// back the egress credit and the budget bytes before telling OnDrop.
func TestLaneDropNewFullQueueGivesBackAndCallsOnDrop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newLaneRig(t, 2, actors.DropNew, true)
		d1, _ := r.post(t, "one")
		d2, _ := r.post(t, "two")
		d3, res := r.post(t, "three")
		if res != actors.Dropped {
			t.Fatalf("third post into a held 2-deep drop_new lane: %v, want Dropped", res)
		}
		if got := recvDeliver(t, r.dropped, "told to OnDrop"); got != d3 {
			t.Fatalf("OnDrop told of %q, want the refused %q", got.Frames[0], d3.Frames[0])
		}
		if got, want := r.egress.InFlight(), d1.Bytes+d2.Bytes; got != want {
			t.Errorf("after the drop: InFlight() = %d, want %d (the dropped delivery's %d returned)", got, want, d3.Bytes)
		}
		if got, want := r.budget.Used(), d1.Held+d2.Held; got != want {
			t.Errorf("after the drop: budget Used() = %d, want %d (the dropped delivery's %d released)", got, want, d3.Held)
		}

		r.lane.Mailbox.Release()
		for _, want := range []*lanes.Deliver{d1, d2} {
			if got := recvDeliver(t, r.got, "at the writer"); got != want {
				t.Fatalf("writer got %q, want %q", got.Frames[0], want.Frames[0])
			}
		}
		synctest.Wait()
		expectNone(t, r.got, "at the writer after the queued two")
		expectNone(t, r.dropped, "told to OnDrop again")
	})
}

// A delivery whose connection writer has stopped (its mailbox closed) is
// given back and told to OnRefused, not lost holding credit.
func TestLaneGivesBackDeliveryWhoseWriterMailboxClosed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newLaneRig(t, 64, actors.DropNew, false)
		r.stop(t, r.writer.PID)
		if !r.writer.Mailbox.IsClosed() {
			t.Fatal("the stopped writer's mailbox is not closed")
		}
		d, res := r.post(t, "to nobody")
		if !res.Accepted() {
			t.Fatalf("post into the lane: %v", res)
		}
		if got := recvDeliver(t, r.refused, "told to OnRefused"); got != d {
			t.Fatalf("OnRefused told of %q, want %q", got.Frames[0], d.Frames[0])
		}
		synctest.Wait()
		if got := r.egress.InFlight(); got != 0 {
			t.Errorf("after the refusal: InFlight() = %d, want 0", got)
		}
		if got := r.budget.Used(); got != 0 {
			t.Errorf("after the refusal: budget Used() = %d, want 0", got)
		}
		expectNone(t, r.dropped, "told to OnDrop")
	})
}

// A lane that stops gives back what its queue still held.
func TestLaneStopGivesBackQueuedDeliveries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newLaneRig(t, 8, actors.DropNew, true)
		r.post(t, "one")
		r.post(t, "two")
		r.stop(t, r.lane.PID)
		synctest.Wait()
		if got := r.egress.InFlight(); got != 0 {
			t.Errorf("after the lane stopped with 2 queued: InFlight() = %d, want 0", got)
		}
		if got := r.budget.Used(); got != 0 {
			t.Errorf("after the lane stopped with 2 queued: budget Used() = %d, want 0", got)
		}
		expectNone(t, r.got, "at the writer")
	})
}
