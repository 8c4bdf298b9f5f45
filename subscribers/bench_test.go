package subscribers

import (
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/lanes"
	"github.com/getfelix/felix-go/streams"
)

// BenchmarkDeliveryPath measures the broker's delivery hops after the
// shard: an envelope of 64 × 128 B from a feeder's queue through the feeder
// (encode, coalesce, egress credit), its lane and the connection writer to
// the subscription's write goroutine, which writes to a stream that
// discards. An op is one envelope; allocations per op are what these hops
// cost the collector per published batch, the envelope itself
// and its encoded frame (2 allocations, the shard's and the encoder's)
// included.
//
//	go test -run '^$' -bench DeliveryPath -benchmem -benchtime 200000x ./subscribers/
func BenchmarkDeliveryPath(b *testing.B) {
	for _, paced := range []bool{false, true} {
		b.Run(fmt.Sprintf("one-at-a-time=%v", paced), func(b *testing.B) { benchDeliveryPath(b, paced) })
	}
}

// discard is an event stream that counts what it is given.
type discard struct{ bytes atomic.Int64 }

func (d *discard) Write(p []byte) (int, error) { d.bytes.Add(int64(len(p))); return len(p), nil }
func (d *discard) Close() error                { return nil }

// pathRig is a feeder, its lane and a connection writer whose one
// subscription writes to a discarding stream.
type pathRig struct {
	queue    *actors.Mailbox
	written  atomic.Int64 // records written
	wrote    chan struct{}
	payloads [][]byte
	// timeout bounds each await; one timer, reset, so that waiting
	// allocates nothing the allocation count would blame on the path.
	timeout *time.Timer
}

func newPathRig(tb testing.TB) *pathRig {
	r := &pathRig{wrote: make(chan struct{}, 1), payloads: make([][]byte, 64), timeout: time.NewTimer(time.Hour)}
	tb.Cleanup(func() { r.timeout.Stop() })
	for i := range r.payloads {
		r.payloads[i] = make([]byte, 128)
	}
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	tb.Cleanup(system.Shutdown)
	stop := func(pid *actor.PID) { tb.Cleanup(func() { _ = system.Root.StopFuture(pid).Wait() }) }
	var writerBox, laneBox *actors.Mailbox
	writer := system.Root.Spawn(lanes.WriterProps(lanes.WriterConfig{Root: system.Root, OnWritten: func(records int, _, _ int64) {
		r.written.Add(int64(records))
		select {
		case r.wrote <- struct{}{}:
		default:
		}
	}}, func(m *actors.Mailbox) { writerBox = m }))
	stop(writer)
	lane := system.Root.Spawn(lanes.LaneProps(0, lanes.LaneConfig{Depth: 1024, Policy: actors.Block}, func(m *actors.Mailbox) { laneBox = m }))
	stop(lane)
	wref := &lanes.WriterRef{ConnID: 1, PID: writer, Mailbox: writerBox, Budget: lanes.NewConnBudget(64 << 20)}
	props, egress := Props(Config{SubscriptionID: 1, Batch: defaultBatch, Lane: lanes.LaneRef{PID: lane, Mailbox: laneBox}, Writer: wref, Root: system.Root},
		actors.MailboxConfig{Capacity: 4096, Policy: actors.Block}, func(m *actors.Mailbox) { r.queue = m })
	feeder := system.Root.Spawn(props)
	stop(feeder)
	if _, err := system.Root.RequestFuture(writer, &lanes.Register{SubscriptionID: 1, Stream: &discard{}, Egress: egress}, 5*time.Second).Result(); err != nil {
		tb.Fatal(err)
	}
	system.Root.Send(feeder, &Start{})
	return r
}

// post queues one envelope of 64 × 128 B.
func (r *pathRig) post(tb testing.TB) {
	if res := r.queue.TryPost(streams.NewEnvelope(r.payloads), 5*time.Second); !res.Accepted() {
		tb.Fatalf("envelope not queued: %v", res)
	}
}

// await waits until n records in all were written.
func (r *pathRig) await(tb testing.TB, n int64) {
	r.timeout.Reset(10 * time.Second)
	for r.written.Load() < n {
		select {
		case <-r.wrote:
		case <-r.timeout.C:
			tb.Fatalf("written %d of %d records", r.written.Load(), n)
		}
	}
}

// benchDeliveryPath posts b.N envelopes to the feeder's queue; paced waits
// for each to be written before the next (one batch per delivery, no
// coalescing), else they are posted as fast as the queue takes them.
func benchDeliveryPath(b *testing.B, paced bool) {
	r := newPathRig(b)
	per := int64(len(r.payloads))
	b.ReportAllocs()
	b.ResetTimer()
	for i := range int64(b.N) {
		r.post(b)
		if paced {
			r.await(b, (i+1)*per)
		}
	}
	r.await(b, int64(b.N)*per)
}

// TestDeliveryPathAllocatesOnlyTheEnvelope: from the feeder's queue to the
// write, a delivered batch allocates nothing but the envelope and its
// encoded frame, which every subscriber shares: the Deliver and
// its frame slice are recycled, the writer's queue and report reused, and
// the mailboxes' wake-ups allocate nothing. sync.Pool drops items at random
// under the race detector, so the count is checked without it.
func TestDeliveryPathAllocatesOnlyTheEnvelope(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under -race")
	}
	r := newPathRig(t)
	per, sent := int64(len(r.payloads)), int64(0)
	deliver := func() {
		sent++
		r.post(t)
		r.await(t, sent*per)
	}
	for range 100 {
		deliver() // warm: pools filled, slices grown
	}
	if got := testing.AllocsPerRun(500, deliver); got > 2 {
		t.Fatalf("%.0f allocations per delivered batch; want at most 2 (the envelope and its frame)", got)
	}
}
