package subscribers

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/getfelix/felix-go/lanes"
	"github.com/getfelix/felix-go/streams"
	"github.com/getfelix/felix-go/wire"
)

// fakeLog is a streams.Log over an in-memory slice: record i is at offset i
// and holds "r<i>". It counts reads, and can fail them or shift the pages
// it returns.
type fakeLog struct {
	mu struct {
		sync.Mutex
		end       uint64 // records [0, end) exist
		committed uint64
		pageLimit int    // records per page at most; 0 means what is asked
		err       error  // returned by every Read when set
		shift     uint64 // added to every page's offsets: a page from elsewhere
		reads     []readCall
	}
	// gate, when set before the first Read, holds every Read until closed.
	gate chan struct{}
}

// readCall is one Read: the records asked for, [from, from+n).
type readCall struct{ from, n uint64 }

func (c readCall) String() string { return fmt.Sprintf("[%d,%d)", c.from, c.from+c.n) }

func newFakeLog(end, committed uint64) *fakeLog {
	l := &fakeLog{}
	l.mu.end, l.mu.committed = end, committed
	return l
}

func (l *fakeLog) Read(from uint64, maxRecords, _ int) (streams.ReadPage, error) {
	if l.gate != nil {
		<-l.gate
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mu.reads = append(l.mu.reads, readCall{from, uint64(maxRecords)})
	if l.mu.err != nil {
		return streams.ReadPage{}, l.mu.err
	}
	n := maxRecords
	if l.mu.pageLimit > 0 {
		n = min(n, l.mu.pageLimit)
	}
	page := streams.ReadPage{Next: from}
	for off := from + l.mu.shift; off < l.mu.end && len(page.Records) < n; off++ {
		page.Records = append(page.Records, streams.Record{Offset: off, Value: payload(off)})
		page.Next = off + 1
	}
	return page, nil
}

func (l *fakeLog) Committed() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.committed
}

func (l *fakeLog) reads() []readCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]readCall(nil), l.mu.reads...)
}

// The rest of streams.Log is the shard's; a feeder only reads.
func (l *fakeLog) Append(uint64, [][]byte, time.Time) error { return errors.New("fakeLog: read only") }
func (l *fakeLog) AppendStamped(uint64, [][]byte, time.Time, streams.Stamp) error {
	return errors.New("fakeLog: read only")
}
func (l *fakeLog) Stamps(uint64, func(streams.Stamp, uint64, uint32) bool) error { return nil }
func (l *fakeLog) WaitDurable(uint64) <-chan error                               { return nil }
func (l *fakeLog) NextOffset() uint64                                            { return l.Committed() }
func (l *fakeLog) EnforceRetention(time.Time) error                              { return nil }
func (l *fakeLog) OffsetForTime(time.Time) (uint64, error)                       { return 0, nil }
func (l *fakeLog) StartOffset() uint64                                           { return 0 }
func (l *fakeLog) Failed() error                                                 { return nil }
func (l *fakeLog) Close() error                                                  { return nil }

func payload(off uint64) []byte { return fmt.Appendf(nil, "r%d", off) }

// durableEnv is the batch a durable shard fans out for [base, base+n).
func durableEnv(base uint64, n int) *streams.Envelope {
	payloads := make([][]byte, n)
	for i := range payloads {
		payloads[i] = payload(base + uint64(i))
	}
	env := streams.NewEnvelope(payloads)
	env.Base, env.Durable = base, true
	return env
}

// newSyncRig is newRig inside a synctest bubble. A dead letter (the rig's
// cleanup stops actors that may be gone) starts protoactor's 1s throttle
// timer in a goroutine, and a bubble's clock stops once its main goroutine
// exits, so the last cleanup waits that timer out.
func newSyncRig(t *testing.T, batch BatchConfig, egressLimit int64, opts ...func(*Config)) *rig {
	t.Helper()
	t.Cleanup(func() { time.Sleep(2 * time.Second) })
	return newRig(t, batch, egressLimit, opts...)
}

// durable configures a durable subscription whose client takes offsets.
func durable(c *Config) { c.Durable, c.Offsets = true, true }

// postEnv queues env as the shard does (into the feeder's queue).
func (r *rig) postEnv(t *testing.T, env *streams.Envelope) {
	t.Helper()
	if res := r.queue.TryPost(env, 0); !res.Accepted() {
		t.Fatalf("post the batch at %d: %v", env.Base, res)
	}
}

// record is one delivered event.
type record struct {
	offset  uint64
	payload string
}

// decode decodes a delivery's frames as the client does.
func decode(t *testing.T, d *lanes.Deliver) []record {
	t.Helper()
	var out []record
	for i, frame := range d.Frames {
		h, err := wire.ParseHeader(frame, math.MaxInt32)
		if err != nil {
			t.Fatalf("frame %d of a delivery: %v", i, err)
		}
		base, events, err := wire.DecodeEventBatchFlags(h.Flags, frame[wire.HeaderLen:])
		if err != nil {
			t.Fatalf("frame %d of a delivery: %v", i, err)
		}
		for j, e := range events {
			out = append(out, record{offset: base + uint64(j), payload: string(e)})
		}
	}
	return out
}

// expectRecords takes deliveries (returning their credit) until [from, to)
// arrived, and fails at the first record out of place: a duplicate, a gap
// or a wrong payload.
func (r *rig) expectRecords(t *testing.T, from, to uint64) {
	t.Helper()
	want := from
	for want < to {
		for _, rec := range decode(t, r.next(t)) {
			if rec.offset != want || rec.payload != string(payload(want)) {
				t.Fatalf("got offset %d (%q); want offset %d (%q): the stream must run [%d,%d) in order, once each",
					rec.offset, rec.payload, want, payload(want), from, to)
			}
			want++
		}
	}
}

// expectQuiet fails if anything is delivered once every goroutine has
// settled, timers included (synctest's clock jumps).
func (r *rig) expectQuiet(t *testing.T, after string) {
	t.Helper()
	time.Sleep(time.Second)
	synctest.Wait()
	select {
	case d := <-r.got:
		t.Fatalf("after %s: a delivery of %v", after, decode(t, d))
	default:
	}
}

func expectReads(t *testing.T, log *fakeLog, want ...readCall) {
	t.Helper()
	if got := log.reads(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("the log was read at %v; want %v", got, want)
	}
}

func (r *rig) expectStopped(t *testing.T, why string) {
	t.Helper()
	select {
	case <-r.stopped:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: the feeder did not stop within 5s", why)
	}
}

// History [From, Live) is read from the log and written before the batches
// queued from Live on, which then come from the queue: no duplicate, no
// gap, and the log is not read again for what the queue holds.
func TestFeederDurableHistoryBeforeQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newSyncRig(t, defaultBatch, 1<<30, durable)
		log := newFakeLog(30, 30)
		r.postEnv(t, durableEnv(20, 2))
		r.postEnv(t, durableEnv(22, 3))
		r.postEnv(t, durableEnv(25, 5))
		r.system.Root.Send(r.feeder, &Start{Log: log, From: 5, Live: 20})
		r.expectRecords(t, 5, 30)
		r.expectQuiet(t, "[5,30)")
		expectReads(t, log, readCall{5, 15})
	})
}

// While catching up, a batch past the expected offset reveals a hole (the
// queue dropped [21,30)): the hole is read from the log before that batch,
// and then the batches queued behind it flow.
func TestFeederFillsAHoleInTheQueueFromTheLog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newSyncRig(t, defaultBatch, 1<<30, durable)
		log := newFakeLog(32, 32)
		r.postEnv(t, durableEnv(20, 1))
		r.postEnv(t, durableEnv(30, 1))
		r.postEnv(t, durableEnv(31, 1)) // queued behind: the queue flows again after the hole
		r.system.Root.Send(r.feeder, &Start{Log: log, From: 5, Live: 20})
		r.expectRecords(t, 5, 32)
		r.expectQuiet(t, "[5,32)")
		expectReads(t, log, readCall{5, 15}, readCall{21, 9})
	})
}

// Batches the queue dropped after its last one leave a hole no batch
// reveals: once the queue is empty, the log is read up to its committed end.
func TestFeederReadsTheTailTheQueueDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newSyncRig(t, defaultBatch, 1<<30, durable)
		log := newFakeLog(30, 30)
		r.postEnv(t, durableEnv(20, 2))
		r.system.Root.Send(r.feeder, &Start{Log: log, From: 5, Live: 20})
		r.expectRecords(t, 5, 30)
		r.expectQuiet(t, "[5,30)")
		expectReads(t, log, readCall{5, 15}, readCall{22, 8})
	})
}

// Once live, a gap ends a durable subscription: one Lagged, and nothing
// after it.
func TestFeederLiveGapLagsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newSyncRig(t, defaultBatch, 1<<30, durable)
		log := newFakeLog(20, 20)
		r.system.Root.Send(r.feeder, &Start{Log: log, From: 20, Live: 20})
		r.postEnv(t, durableEnv(20, 2))
		r.expectRecords(t, 20, 22)
		synctest.Wait() // live now: the queue was empty and the log had nothing more
		r.postEnv(t, durableEnv(25, 1))
		r.postEnv(t, durableEnv(26, 1))
		r.postEnv(t, durableEnv(22, 1)) // late and in order: still nothing after the gap
		r.expectQuiet(t, "the gap at 22")
		select {
		case l := <-r.lagged:
			// The start: the writer, which queued [20,22), resumes the
			// client after it itself.
			if l.SubscriptionID != 1 || l.ResumeFrom != 20 {
				t.Fatalf("lagged %+v; want subscription 1 naming its start, 20", *l)
			}
		default:
			t.Fatal("a gap at 22 (a batch at 25) reported no Lagged")
		}
		if len(r.lagged) != 0 {
			t.Fatalf("%d more Lagged after the first; want exactly one", len(r.lagged))
		}
		if got := log.reads(); len(got) != 0 {
			t.Fatalf("a live gap was read from the log at %v; want it reported as lagged", got)
		}
	})
}

// A gap found while the batch before it is still pending (not yet handed
// to the lane) drops that batch too: the Lagged must not name an offset
// past it. The connection writer, having queued nothing of this
// subscription, resumes the client from the Lagged's offset, so naming
// the offset after the dropped batch would skip it for good.
func TestFeederGapBeforeAnythingSentResumesAtTheStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newSyncRig(t, defaultBatch, 1<<30, durable)
		r.system.Root.Send(r.feeder, &Start{Log: newFakeLog(20, 20), From: 20, Live: 20})
		synctest.Wait() // live: the queue was empty and the log had nothing more
		r.queue.Hold()  // both batches queued before the feeder sees the first
		r.postEnv(t, durableEnv(20, 2))
		r.postEnv(t, durableEnv(25, 1))
		r.queue.Release()
		r.expectQuiet(t, "the gap at 22, with [20,22) still pending")
		select {
		case l := <-r.lagged:
			if l.ResumeFrom != 20 {
				t.Fatalf("lagged %+v; want resuming from 20: [20,22) was dropped unsent", *l)
			}
		default:
			t.Fatal("a gap at 22 (a batch at 25) reported no Lagged")
		}
	})
}

// History paging takes egress credit: the feeder reads a page only after
// the previous one took its credit, so with a share smaller than a page it
// keeps at most one page beyond what the connection writer holds.
func TestFeederHistoryPagingWaitsForEgressCredit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newSyncRig(t, defaultBatch, 1, durable) // a 1-byte share
		log := newFakeLog(12, 12)
		log.mu.pageLimit = 4
		r.system.Root.Send(r.feeder, &Start{Log: log, From: 0, Live: 12})
		synctest.Wait()
		// Page [0,4) went out and holds the share; page [4,8) was read and
		// waits for credit; page [8,12) must not be read yet.
		expectReads(t, log, readCall{0, 12}, readCall{4, 8})
		d := r.receive(t)
		if recs := decode(t, d); len(recs) != 4 || recs[0].offset != 0 {
			t.Fatalf("first history delivery %v; want [0,4)", recs)
		}
		r.expectQuiet(t, "the first page, its credit not returned")
		expectReads(t, log, readCall{0, 12}, readCall{4, 8})
		d.Egress.Return(d.Bytes)
		synctest.Wait()
		expectReads(t, log, readCall{0, 12}, readCall{4, 8}, readCall{8, 4})
		r.expectRecords(t, 4, 12)
		r.expectQuiet(t, "[0,12)")
	})
}

// A history read that fails, or a page that does not start where it was
// asked (retention took the records meanwhile), stops the feeder: skipping
// it would be a silent gap.
func TestFeederStopsWhenHistoryIsUnreadable(t *testing.T) {
	tests := []struct {
		name  string
		setup func(*fakeLog)
	}{
		{"read error", func(l *fakeLog) { l.mu.err = errors.New("disk gone") }},
		{"page at a later offset", func(l *fakeLog) { l.mu.shift = 3 }},
		{"empty page", func(l *fakeLog) { l.mu.end = 0 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newSyncRig(t, defaultBatch, 1<<30, durable)
				log := newFakeLog(20, 20)
				tt.setup(log)
				r.postEnv(t, durableEnv(20, 1))
				r.system.Root.Send(r.feeder, &Start{Log: log, From: 5, Live: 20})
				r.expectStopped(t, tt.name)
				select {
				case d := <-r.got:
					t.Fatalf("%s: delivered %v; want nothing", tt.name, decode(t, d))
				default:
				}
			})
		})
	}
}

// An in-memory Start writes the replay ring's shared frames first, then the
// batches queued meanwhile.
func TestFeederInMemoryBacklogThenQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newSyncRig(t, defaultBatch, 1<<30)
		var backlog []*streams.Envelope
		for i := range 3 {
			env := streams.NewEnvelope([][]byte{fmt.Appendf(nil, "b%d", i)})
			env.Base = uint64(i)
			backlog = append(backlog, env)
		}
		for i := range 2 {
			r.postEnv(t, streams.NewEnvelope([][]byte{fmt.Appendf(nil, "l%d", i)}))
		}
		r.system.Root.Send(r.feeder, &Start{Backlog: backlog, From: 3, Live: 3})
		first := r.next(t)
		if len(first.Frames) != len(backlog) {
			t.Fatalf("first delivery has %d frames; want the %d backlog frames", len(first.Frames), len(backlog))
		}
		for i, env := range backlog {
			if &first.Frames[i][0] != &env.Frame(streams.ShapePlain)[0] {
				t.Fatalf("frame %d of the first delivery is not backlog batch %d's shared frame", i, i)
			}
		}
		var got []string
		for _, rec := range decode(t, first) {
			got = append(got, rec.payload)
		}
		for len(got) < 5 {
			for _, rec := range decode(t, r.next(t)) {
				got = append(got, rec.payload)
			}
		}
		if fmt.Sprint(got) != "[b0 b1 b2 l0 l1]" {
			t.Fatalf("delivered %v; want [b0 b1 b2 l0 l1]", got)
		}
		r.expectQuiet(t, "the backlog and the queue")
	})
}

// SubscriberEvicted: the shard forgot the subscription under block. A
// durable one ends as lagged (resuming from the batch it did not get); an
// in-memory one stops its feeder, so the session ends it with an error.
func TestFeederEvicted(t *testing.T) {
	t.Run("durable lags", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := newSyncRig(t, defaultBatch, 1<<30, durable)
			r.system.Root.Send(r.feeder, &Start{Log: newFakeLog(20, 20), From: 20, Live: 20})
			r.postEnv(t, durableEnv(20, 1))
			r.expectRecords(t, 20, 21)
			r.system.Root.Send(r.feeder, &streams.SubscriberEvicted{ResumeFrom: 21})
			synctest.Wait()
			select {
			case l := <-r.lagged:
				// The start: the writer, which queued [20,21), resumes the
				// client after it itself.
				if l.SubscriptionID != 1 || l.ResumeFrom != 20 {
					t.Fatalf("lagged %+v; want subscription 1 naming its start, 20", *l)
				}
			default:
				t.Fatal("an evicted durable subscription reported no Lagged")
			}
			select {
			case <-r.stopped:
				t.Fatal("the evicted durable feeder stopped itself; the session ends it")
			default:
			}
		})
	})
	t.Run("durable before start", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := newSyncRig(t, defaultBatch, 1<<30, durable)
			r.system.Root.Send(r.feeder, &streams.SubscriberEvicted{ResumeFrom: 20})
			synctest.Wait()
			if len(r.lagged) != 0 {
				t.Fatal("evicted before Start: lagged at once, before the start offset is known")
			}
			r.system.Root.Send(r.feeder, &Start{Log: newFakeLog(20, 20), From: 5, Live: 20})
			synctest.Wait()
			select {
			case l := <-r.lagged:
				if l.ResumeFrom != 5 {
					t.Fatalf("lagged %+v; want resuming from 5, where it asked to start (nothing was written)", *l)
				}
			default:
				t.Fatal("a durable subscription evicted before Start reported no Lagged")
			}
		})
	})
	t.Run("durable during history", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := newSyncRig(t, defaultBatch, 1<<30, durable)
			log := newFakeLog(30, 30)
			log.mu.pageLimit = 5
			log.gate = make(chan struct{})
			r.postEnv(t, durableEnv(20, 10))
			r.system.Root.Send(r.feeder, &Start{Log: log, From: 5, Live: 20})
			synctest.Wait() // the read of [5,10) is in flight
			r.system.Root.Send(r.feeder, &streams.SubscriberEvicted{ResumeFrom: 20})
			synctest.Wait()
			close(log.gate)
			r.expectQuiet(t, "evicted while reading history")
			select {
			case l := <-r.lagged:
				if l.ResumeFrom != 5 {
					t.Fatalf("lagged %+v; want resuming from 5, the history not written yet", *l)
				}
			default:
				t.Fatal("a durable subscription evicted during its history reported no Lagged")
			}
			if len(r.lagged) != 0 {
				t.Fatalf("%d more Lagged after the first; want exactly one", len(r.lagged))
			}
			// Lagged, the feeder only waits to be stopped: the page in
			// flight is dropped and nothing more is read.
			expectReads(t, log, readCall{5, 15})
		})
	})
	t.Run("in-memory stops", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := newSyncRig(t, defaultBatch, 1<<30)
			r.start()
			r.system.Root.Send(r.feeder, &streams.SubscriberEvicted{})
			r.expectStopped(t, "in-memory evicted")
			if len(r.lagged) != 0 {
				t.Fatal("an in-memory subscription reported Lagged; it has no offset to resume from")
			}
		})
	})
}
