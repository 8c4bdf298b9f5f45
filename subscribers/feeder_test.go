package subscribers

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/goleak"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/lanes"
	"github.com/getfelix/felix-go/streams"
)

// TestMain checks for leaked goroutines, but for protoactor's dead-letter
// throttle: a dead letter during teardown (a Watch reaching an actor that
// already stopped) starts a goroutine that outlives the system by up to a
// second, with no way to stop it (see broker/main_test.go; it failed CI).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"),
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewThrottle.func1.1"),
	)
}

// rig is a feeder wired to a capturing lane, with the feeder's mailbox held
// so a test can queue envelopes before the feeder sees any of them.
type rig struct {
	system *actor.ActorSystem
	queue  *actors.Mailbox
	feeder *actor.PID
	got    chan *lanes.Deliver
	// session stands in for the subscription's session: it records what
	// the feeder reports (lagged) and watches it (stopped).
	session *actor.PID
	lagged  chan *lanes.Lagged
	stopped chan struct{}
}

// start lets the feeder's queue flow, as the session does once the shard
// registered it: an in-memory subscription with no history.
func (r *rig) start() { r.system.Root.Send(r.feeder, &Start{}) }

// newRig spawns a feeder with subscription id 1; opts adjust its Config
// (durable, offsets) before it is spawned.
func newRig(t *testing.T, batch BatchConfig, egressLimit int64, opts ...func(*Config)) *rig {
	t.Helper()
	r := &rig{
		system:  actor.NewActorSystem(),
		got:     make(chan *lanes.Deliver, 1024),
		lagged:  make(chan *lanes.Lagged, 16),
		stopped: make(chan struct{}),
	}
	t.Cleanup(r.system.Shutdown)
	r.session = r.system.Root.Spawn(actor.PropsFromFunc(r.receiveSession))
	t.Cleanup(func() { _ = r.system.Root.StopFuture(r.session).Wait() })
	lane := lanes.LaneRef{}
	laneProps := actors.Props(func() actor.Actor {
		return actor.ReceiveFunc(func(ctx actor.Context) {
			if d, ok := ctx.Message().(*lanes.Deliver); ok {
				r.got <- d
			}
		})
	}, actors.MailboxConfig{Capacity: 1024, Policy: actors.Block}, func(m *actors.Mailbox) { lane.Mailbox = m })
	lane.PID = r.system.Root.Spawn(laneProps)
	writer := &lanes.WriterRef{Budget: lanes.NewConnBudget(egressLimit)}
	cfg := Config{SubscriptionID: 1, Batch: batch, Lane: lane, Writer: writer, Root: r.system.Root, Session: r.session}
	for _, opt := range opts {
		opt(&cfg)
	}
	props, _ := Props(cfg, actors.MailboxConfig{Capacity: 512, Policy: actors.DropNew},
		func(m *actors.Mailbox) { r.queue = m; m.Hold() })
	pid := r.system.Root.Spawn(props)
	r.feeder = pid
	r.system.Root.Send(r.session, &watchFeeder{pid: pid})
	t.Cleanup(func() { _ = r.system.Root.StopFuture(pid).Wait(); _ = r.system.Root.StopFuture(lane.PID).Wait() })
	return r
}

// watchFeeder asks the fake session to watch the feeder, as the real one
// does from adoption on.
type watchFeeder struct{ pid *actor.PID }

// receiveSession is the fake session: it watches the feeder, closes stopped
// when the feeder stops, and records every lanes.Lagged.
func (r *rig) receiveSession(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *watchFeeder:
		ctx.Watch(msg.pid)
	case *actor.Terminated:
		if msg.Who.Equal(r.feeder) {
			close(r.stopped)
		}
	case *lanes.Lagged:
		r.lagged <- msg
	}
}

func (r *rig) post(t *testing.T, n int) {
	t.Helper()
	for i := range n {
		if res := r.queue.TryPost(streams.NewEnvelope([][]byte{[]byte(fmt.Sprint(i))}), 0); !res.Accepted() {
			t.Fatalf("post %d: %v", i, res)
		}
	}
}

// next takes the next delivery and returns its credit, as the connection
// writer does after writing it.
func (r *rig) next(t *testing.T) *lanes.Deliver {
	t.Helper()
	d := r.receive(t)
	d.Egress.Return(d.Bytes)
	return d
}

// receive takes the next delivery and keeps its credit: the connection
// writer has not written it yet.
func (r *rig) receive(t *testing.T) *lanes.Deliver {
	t.Helper()
	select {
	case d := <-r.got:
		return d
	case <-time.After(5 * time.Second):
		t.Fatal("no delivery within 5s")
		return nil
	}
}

var defaultBatch = BatchConfig{MaxEvents: 64, MaxBytes: 64 << 10, MaxDelay: 250 * time.Microsecond}

func TestFeederLoneEventGoesAlone(t *testing.T) {
	r := newRig(t, defaultBatch, 1<<30)
	r.start()
	r.post(t, 1)
	if d := r.next(t); len(d.Frames) != 1 || d.Records != 1 {
		t.Fatalf("lone event: got %d frames, %d records; want 1 and 1", len(d.Frames), d.Records)
	}
}

func TestFeederCoalescesWhatIsQueued(t *testing.T) {
	r := newRig(t, defaultBatch, 1<<30)
	r.post(t, 10) // queued while held: the feeder finds them all at once
	r.start()
	if d := r.next(t); len(d.Frames) != 10 {
		t.Fatalf("10 queued envelopes went as %d frames in the first batch, want 10", len(d.Frames))
	}
	// The drain found more than one, so the feeder is busy: the next lone
	// envelope waits for the delay timer, then goes alone.
	r.post(t, 1)
	if d := r.next(t); len(d.Frames) != 1 {
		t.Fatalf("after a busy batch: %d frames, want 1", len(d.Frames))
	}
}

func TestFeederBatchBoundedByMaxEvents(t *testing.T) {
	// A delay far longer than draining 36 envelopes takes, even under -race,
	// so only the count bound can cut a batch (the timer is control traffic
	// and would otherwise overtake queued envelopes).
	batch := defaultBatch
	batch.MaxDelay = 500 * time.Millisecond
	r := newRig(t, batch, 1<<30)
	r.post(t, 100)
	r.start()
	first, second := r.next(t), r.next(t)
	if len(first.Frames) != 64 || len(second.Frames) != 36 {
		t.Fatalf("100 queued envelopes went as %d + %d frames, want 64 + 36", len(first.Frames), len(second.Frames))
	}
}

func TestFeederSingleEventMode(t *testing.T) {
	r := newRig(t, BatchConfig{MaxEvents: 64, MaxBytes: 64 << 10, SingleEvent: true}, 1<<30)
	r.post(t, 5)
	r.start()
	for i := range 5 {
		if d := r.next(t); len(d.Frames) != 1 {
			t.Fatalf("single-event mode delivery %d: %d frames, want 1", i, len(d.Frames))
		}
	}
}

// A busy batch makes the next lone envelope wait to fill a batch, but only
// while the burst can still be going: once MaxDelay has passed since the
// busy batch (an idle queue), a lone envelope goes at once (the
// coalescing adds no delay when the queue is idle). The feeder's clock is
// a fake one, and MaxDelay an hour, so only the clock decides.
func TestFeederIdleQueueAddsNoDelay(t *testing.T) {
	for _, tc := range []struct {
		name    string
		advance time.Duration
		waits   bool
	}{{"within MaxDelay of the busy batch", time.Minute, true}, {"idle past MaxDelay", 2 * time.Hour, false}} {
		t.Run(tc.name, func(t *testing.T) {
			var elapsed atomic.Int64
			base := time.Now()
			clock := func(c *Config) { c.now = func() time.Time { return base.Add(time.Duration(elapsed.Load())) } }
			r := newRig(t, BatchConfig{MaxEvents: 64, MaxBytes: 64 << 10, MaxDelay: time.Hour}, 1<<30, clock)
			r.post(t, 10)
			r.start()
			if d := r.next(t); len(d.Frames) != 10 {
				t.Fatalf("first batch: %d frames, want 10 (a busy batch)", len(d.Frames))
			}
			elapsed.Add(int64(tc.advance))
			r.post(t, 1)
			if !tc.waits {
				if d := r.next(t); len(d.Frames) != 1 {
					t.Fatalf("lone envelope after idle: %d frames, want 1", len(d.Frames))
				}
				return
			}
			select {
			case d := <-r.got:
				t.Fatalf("a lone envelope right after a busy batch went at once (%d frames); want it held to fill", len(d.Frames))
			case <-time.After(50 * time.Millisecond):
				// Held for the hour-long timer: an absence is only observed by waiting.
			}
		})
	}
}

// With an egress share smaller than two frames, the feeder sends one batch,
// holds its queue until the writer returns the bytes, then sends the next:
// frames wait in the bounded subscriber queue, not in the feeder.
func TestFeederWaitsForEgressCredit(t *testing.T) {
	batch := BatchConfig{MaxEvents: 1, MaxBytes: 64 << 10}
	r := newRig(t, batch, 1) // a 1-byte share: one frame in flight at a time
	r.post(t, 3)
	r.start()
	d1 := r.receive(t) // not returned yet: the egress share stays full
	select {
	case d := <-r.got:
		t.Fatalf("second batch (%d frames) went while the first still held the share", len(d.Frames))
	case <-time.After(50 * time.Millisecond):
		// Nothing arrived while the share was full: this is the assertion. A
		// short wait is the only way to observe an absence.
	}
	d1.Egress.Return(d1.Bytes)
	r.next(t)
	r.next(t)
}
