package lanes_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/lanes"
	"github.com/getfelix/felix-go/wire"
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

// The tests run the real connection writer in a synctest bubble with a real
// actor system and fake event streams: synctest.Wait() returns once every
// actor and write goroutine is idle or parked in a fake Write, so what has
// not happened by then will not happen until the test lets it.

// wait bounds every receive; in a bubble it fires as soon as nothing else can
// move, so a missing message fails fast instead of hanging.
const wait = 5 * time.Second

var errBroken = errors.New("test: stream broken")

// memStream is an in-memory EventStream: it records each Write (copied, as
// the writer reuses its scratch buffer) and each Close.
type memStream struct {
	mu     sync.Mutex
	writes [][]byte
	closes int
	aborts int
}

func (s *memStream) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes = append(s.writes, bytes.Clone(p))
	return len(p), nil
}

func (s *memStream) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closes++
	return nil
}

// state returns the writes so far and how often Close and Abort were called.
func (s *memStream) state() (writes [][]byte, closes, aborts int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]byte(nil), s.writes...), s.closes, s.aborts
}

// all is everything written, in order.
func (s *memStream) all() []byte {
	writes, _, _ := s.state()
	return bytes.Join(writes, nil)
}

// abortStream is a memStream that can be reset.
type abortStream struct{ memStream }

func (s *abortStream) Abort(uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.aborts++
}

// blockingStream parks every Write until the test releases it (one release
// per write) or the stream is aborted, as a flow-controlled QUIC stream does
// until the peer grants credit or the stream is reset. A released write
// records its bytes and returns err.
type blockingStream struct {
	memStream
	release   chan struct{}
	aborted   chan struct{}
	abortOnce sync.Once
	err       error
	entered   int // Writes begun, under mu
}

func newBlockingStream(err error) *blockingStream {
	return &blockingStream{release: make(chan struct{}), aborted: make(chan struct{}), err: err}
}

func (s *blockingStream) Write(p []byte) (int, error) {
	s.mu.Lock()
	s.entered++
	s.mu.Unlock()
	select {
	case <-s.release:
	case <-s.aborted:
		return 0, errors.New("test: stream reset")
	}
	if s.err != nil {
		return 0, s.err
	}
	return s.memStream.Write(p)
}

func (s *blockingStream) Abort(uint64) {
	s.mu.Lock()
	s.aborts++
	s.mu.Unlock()
	s.abortOnce.Do(func() { close(s.aborted) })
}

// begun is how many Writes have started.
func (s *blockingStream) begun() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.entered
}

// releaseOne lets the write parked in the stream return.
func (s *blockingStream) releaseOne(t *testing.T) {
	t.Helper()
	select {
	case s.release <- struct{}{}:
	case <-time.After(wait):
		t.Fatal("no write was parked in the blocking stream to release")
	}
}

// failingStream fails every Write.
type failingStream struct{ memStream }

func (s *failingStream) Write([]byte) (int, error) { return 0, errBroken }

// writerRig is a connection writer with a fake session that records the
// facts the writer reports, and a broker-wide subscriber budget.
type writerRig struct {
	system  *actor.ActorSystem
	ref     *lanes.WriterRef
	budget  *actors.ByteBudget
	facts   chan any
	stopped bool

	mu        sync.Mutex
	records   int     // told to OnWritten
	written   int64   // told to OnWritten
	published []int64 // told to OnWritten, one per write
}

func newWriterRig(t *testing.T) *writerRig {
	t.Helper()
	r := &writerRig{
		system: actor.NewActorSystem(),
		ref:    &lanes.WriterRef{ConnID: 1, Budget: lanes.NewConnBudget(1 << 22)},
		budget: actors.NewByteBudget(1 << 22),
		facts:  make(chan any, 16),
	}
	session := r.system.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		switch msg := ctx.Message().(type) {
		case *lanes.StreamFailed, *lanes.LagQueued:
			r.facts <- msg
		}
	}))
	props := lanes.WriterProps(lanes.WriterConfig{
		Log:     zerolog.Nop(),
		Root:    r.system.Root,
		Session: session,
		OnWritten: func(records int, n, published int64) {
			r.mu.Lock()
			r.records += records
			r.written += n
			r.published = append(r.published, published)
			r.mu.Unlock()
		},
	}, func(m *actors.Mailbox) { r.ref.Mailbox = m })
	r.ref.PID = r.system.Root.Spawn(props)
	t.Cleanup(func() {
		r.stop(t)
		_ = r.system.Root.StopFuture(session).Wait()
		r.system.Shutdown()
		// A dead letter (a writeDone reaching a stopped writer) starts
		// protoactor's throttle timer goroutine; let it run out in the
		// bubble's fake time so the bubble can end.
		time.Sleep(r.system.Config.DeadLetterThrottleInterval)
	})
	return r
}

// stop stops the writer and waits until it stopped.
func (r *writerRig) stop(t *testing.T) {
	t.Helper()
	if r.stopped {
		return
	}
	r.stopped = true
	if err := r.system.Root.StopFuture(r.ref.PID).Wait(); err != nil {
		t.Fatalf("stop writer: %v", err)
	}
}

// register hands the writer a stream as the session's subscribe does, and
// returns the subscription's egress share.
func (r *writerRig) register(t *testing.T, id uint64, st lanes.EventStream, next uint64) *lanes.Egress {
	t.Helper()
	eg := r.ref.Budget.NewEgress(nil)
	res, err := r.system.Root.RequestFuture(r.ref.PID, &lanes.Register{SubscriptionID: id, Stream: st, Egress: eg, Next: next}, wait).Result()
	if err != nil {
		t.Fatalf("Register %d: %v", id, err)
	}
	if reg, ok := res.(*lanes.Registered); !ok || reg.SubscriptionID != id {
		t.Fatalf("Register %d answered %#v, want &Registered{SubscriptionID: %d}", id, res, id)
	}
	return eg
}

// deliver posts frames for subscription id as a lane does, after taking
// their egress credit and their broker-wide budget bytes as a feeder does.
// next is the offset after the batch (durable streams), or 0.
func (r *writerRig) deliver(t *testing.T, id uint64, eg *lanes.Egress, next uint64, frames ...[]byte) *lanes.Deliver {
	t.Helper()
	return r.deliverPublished(t, id, eg, next, 0, frames...)
}

// deliverPublished is deliver of a batch whose oldest publish was at
// published (unix ns; 0: not timed).
func (r *writerRig) deliverPublished(t *testing.T, id uint64, eg *lanes.Egress, next uint64, published int64, frames ...[]byte) *lanes.Deliver {
	t.Helper()
	var n int64
	for _, f := range frames {
		n += int64(len(f))
	}
	if !eg.TryTake(n) {
		t.Fatalf("subscription %d: egress refused %d bytes with %d in flight", id, n, eg.InFlight())
	}
	r.budget.ForceAcquire(n)
	d := &lanes.Deliver{SubscriptionID: id, Frames: frames, Bytes: n, Records: len(frames), Egress: eg, Writer: r.ref, Held: n, Budget: r.budget, Next: next, Published: published}
	if res := r.ref.Mailbox.TryPost(d, wait); !res.Accepted() {
		t.Fatalf("post Deliver for subscription %d to the writer: %v", id, res)
	}
	return d
}

func (r *writerRig) send(msg any) { r.system.Root.Send(r.ref.PID, msg) }

func (r *writerRig) onWritten() (int, int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.records, r.written
}

// fact receives the next fact the writer told the session.
func fact[T any](t *testing.T, r *writerRig) T {
	t.Helper()
	select {
	case msg := <-r.facts:
		v, ok := msg.(T)
		if !ok {
			var want T
			t.Fatalf("session was told %#v, want a %T", msg, want)
		}
		return v
	case <-time.After(wait):
		var want T
		t.Fatalf("session was told no %T within %v", want, wait)
		return *new(T)
	}
}

// noFact checks the session was told nothing (call after synctest.Wait).
func noFact(t *testing.T, r *writerRig) {
	t.Helper()
	select {
	case msg := <-r.facts:
		t.Fatalf("session was told %#v, want nothing", msg)
	default:
	}
}

// frame builds an event frame with a recognisable payload.
func frame(payload string) []byte {
	return append(wire.AppendHeader(nil, wire.FlagEventBatch, len(payload)), payload...)
}

// payloads splits what a stream carried back into frames, failing on bytes
// that are not whole frames.
func payloads(t *testing.T, b []byte) [][]byte {
	t.Helper()
	fr := wire.NewFrameReader(bytes.NewReader(b), 1<<20)
	var out [][]byte
	for {
		_, p, err := fr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("stream bytes are not whole frames after %d frames: %v", len(out), err)
		}
		out = append(out, p)
	}
}

// checkReturned asserts every egress byte and every budget byte came back.
func checkReturned(t *testing.T, r *writerRig, egs ...*lanes.Egress) {
	t.Helper()
	for i, eg := range egs {
		if got := eg.InFlight(); got != 0 {
			t.Errorf("egress %d: InFlight() = %d, want 0 (every byte returned)", i, got)
		}
	}
	if got := r.budget.Used(); got != 0 {
		t.Errorf("broker-wide subscriber budget Used() = %d, want 0 (every Held byte released)", got)
	}
}

func TestWriterRegisterAnswersRegistered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newWriterRig(t)
		r.register(t, 7, &memStream{}, 0) // register checks the answer
		r.register(t, 8, &memStream{}, 0)
		if got := r.ref.Budget.Subscriptions(); got != 2 {
			t.Fatalf("ConnBudget.Subscriptions() after two registrations = %d, want 2", got)
		}
	})
}

func TestWriterWritesDeliveriesInOrderAndReturnsEverything(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newWriterRig(t)
		st := &memStream{}
		eg := r.register(t, 1, st, 0)
		var want []byte
		for i := range 50 {
			f := frame(fmt.Sprintf("event-%02d", i))
			want = append(want, f...)
			r.deliver(t, 1, eg, 0, f)
		}
		synctest.Wait()
		if got := st.all(); !bytes.Equal(got, want) {
			t.Fatalf("50 one-frame deliveries: stream carried %q, want %q (every frame once, in order)", got, want)
		}
		if records, n := r.onWritten(); records != 50 || n != int64(len(want)) {
			t.Errorf("OnWritten told %d records, %d bytes; want 50, %d", records, n, len(want))
		}
		checkReturned(t, r, eg)
		if _, closes, _ := st.state(); closes != 0 {
			t.Errorf("stream closed %d times while registered, want 0", closes)
		}
	})
}

func TestWriterCoalescesSmallFramesIntoOneWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newWriterRig(t)
		st := &memStream{}
		eg := r.register(t, 1, st, 0)
		a, b, c := frame("a"), frame("bb"), frame("ccc")
		r.deliver(t, 1, eg, 0, a, b, c)
		synctest.Wait()
		writes, _, _ := st.state()
		if want := bytes.Join([][]byte{a, b, c}, nil); len(writes) != 1 || !bytes.Equal(writes[0], want) {
			t.Fatalf("one Deliver of 3 small frames: %d writes %q, want one write %q", len(writes), writes, want)
		}
	})
}

// A batch above the coalescing bound (256 KiB) is written frame by frame
// rather than copied into an ever larger scratch buffer.
func TestWriterWritesLargeBatchFrameByFrame(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newWriterRig(t)
		st := &memStream{}
		eg := r.register(t, 1, st, 0)
		big1, big2 := frame(string(bytes.Repeat([]byte{'x'}, 200<<10))), frame(string(bytes.Repeat([]byte{'y'}, 200<<10)))
		r.deliver(t, 1, eg, 0, big1, big2)
		synctest.Wait()
		writes, _, _ := st.state()
		if len(writes) != 2 || !bytes.Equal(writes[0], big1) || !bytes.Equal(writes[1], big2) {
			t.Fatalf("one Deliver of two 200 KiB frames: %d writes, want 2, one per frame in order", len(writes))
		}
		checkReturned(t, r, eg)
	})
}

// One write in flight per subscription: while subscription 1's stream is
// blocked, its later deliveries wait (and then go as one coalesced write),
// and subscription 2 on the same writer keeps being written.
func TestWriterOneWriteInFlightPerSubscriptionOthersKeepGoing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newWriterRig(t)
		slow := newBlockingStream(nil)
		fast := &memStream{}
		egSlow := r.register(t, 1, slow, 0)
		egFast := r.register(t, 2, fast, 0)

		a, b, c := frame("a1"), frame("b22"), frame("c333")
		r.deliver(t, 1, egSlow, 0, a)
		r.deliver(t, 1, egSlow, 0, b)
		r.deliver(t, 1, egSlow, 0, c)
		x, y := frame("x"), frame("yy")
		r.deliver(t, 2, egFast, 0, x)
		r.deliver(t, 2, egFast, 0, y)
		synctest.Wait()

		if got := slow.begun(); got != 1 {
			t.Fatalf("blocked subscription with 3 deliveries: %d writes begun, want 1 (one write in flight)", got)
		}
		if got, want := fast.all(), append(bytes.Clone(x), y...); !bytes.Equal(got, want) {
			t.Fatalf("subscription 2 while subscription 1 is blocked: stream carried %q, want %q", got, want)
		}
		if got, want := egSlow.InFlight(), int64(len(a)+len(b)+len(c)); got != want {
			t.Errorf("blocked subscription: InFlight() = %d, want %d (nothing written yet)", got, want)
		}
		if got, want := r.budget.Used(), int64(len(a)+len(b)+len(c)); got != want {
			t.Errorf("budget Used() with subscription 1 blocked = %d, want %d (subscription 2's released)", got, want)
		}

		slow.releaseOne(t) // the first write returns; b and c go next, as one write
		synctest.Wait()
		if got, want := egSlow.InFlight(), int64(len(b)+len(c)); got != want {
			t.Errorf("after the first write returned: InFlight() = %d, want %d (its %d bytes returned)", got, want, len(a))
		}
		slow.releaseOne(t)
		synctest.Wait()
		writes, _, _ := slow.state()
		if len(writes) != 2 || !bytes.Equal(writes[0], a) || !bytes.Equal(writes[1], append(bytes.Clone(b), c...)) {
			t.Fatalf("blocked subscription's writes = %q, want [%q %q] (what queued behind the first went as one write)", writes, a, append(bytes.Clone(b), c...))
		}
		checkReturned(t, r, egSlow, egFast)
	})
}

// TestWriterTellsOldestPublished: each write tells OnWritten the oldest
// publish time among the deliveries it carried (deliveries not timed, 0,
// do not count), for the delivery latency histogram.
func TestWriterTellsOldestPublished(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newWriterRig(t)
		st := newBlockingStream(nil)
		eg := r.register(t, 1, st, 0)
		r.deliverPublished(t, 1, eg, 0, 300, frame("a"))
		synctest.Wait() // the first write is in flight; the rest queue behind it
		r.deliverPublished(t, 1, eg, 0, 250, frame("b"))
		r.deliverPublished(t, 1, eg, 0, 0, frame("c"))
		r.deliverPublished(t, 1, eg, 0, 200, frame("d"))
		synctest.Wait()
		st.releaseOne(t)
		synctest.Wait()
		st.releaseOne(t)
		synctest.Wait()
		r.deliverPublished(t, 1, eg, 0, 0, frame("e"))
		synctest.Wait()
		st.releaseOne(t)
		synctest.Wait()
		r.mu.Lock()
		got := slices.Clone(r.published)
		r.mu.Unlock()
		if want := []int64{300, 200, 0}; !slices.Equal(got, want) {
			t.Fatalf("OnWritten told published %v, want %v (each write's oldest timed delivery)", got, want)
		}
		checkReturned(t, r, eg)
	})
}

// A clean Unregister finishes the stream only after what was queued is
// written; a Deliver after it is not written and its bytes come back.
func TestWriterUnregisterWritesQueuedFramesThenCloses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newWriterRig(t)
		st := newBlockingStream(nil)
		eg := r.register(t, 1, st, 0)
		a, b := frame("a"), frame("b")
		r.deliver(t, 1, eg, 0, a)
		r.deliver(t, 1, eg, 0, b)
		synctest.Wait() // Unregister is control traffic: it would overtake queued deliveries
		r.send(&lanes.Unregister{SubscriptionID: 1})
		r.deliver(t, 1, eg, 0, frame("late"))
		synctest.Wait()
		if _, closes, _ := st.state(); closes != 0 {
			t.Fatalf("stream closed with frames still queued")
		}
		if got, want := eg.InFlight(), int64(len(a)+len(b)); got != want {
			t.Errorf("after a Deliver following Unregister: InFlight() = %d, want %d (the late one returned)", got, want)
		}

		st.releaseOne(t)
		st.releaseOne(t)
		synctest.Wait()
		writes, closes, aborts := st.state()
		if got, want := bytes.Join(writes, nil), append(bytes.Clone(a), b...); !bytes.Equal(got, want) {
			t.Errorf("stream carried %q, want %q (queued frames, nothing after Unregister)", got, want)
		}
		if closes != 1 || aborts != 0 {
			t.Errorf("clean Unregister: Close called %d times, Abort %d; want 1, 0", closes, aborts)
		}
		if got := r.ref.Budget.Subscriptions(); got != 0 {
			t.Errorf("ConnBudget.Subscriptions() after Unregister = %d, want 0", got)
		}
		checkReturned(t, r, eg)
		noFact(t, r)
	})
}

func TestWriterUnregisterAbortResetsAndCloses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newWriterRig(t)
		idle := &abortStream{}
		busy := newBlockingStream(nil)
		egIdle := r.register(t, 1, idle, 0)
		egBusy := r.register(t, 2, busy, 0)
		r.deliver(t, 2, egBusy, 0, frame("in flight"))
		r.deliver(t, 2, egBusy, 0, frame("queued"))
		synctest.Wait()

		r.send(&lanes.Unregister{SubscriptionID: 1, Abort: true})
		r.send(&lanes.Unregister{SubscriptionID: 2, Abort: true})
		synctest.Wait()
		for _, tt := range []struct {
			name string
			st   *memStream
		}{
			{name: "idle stream", st: &idle.memStream},
			{name: "stream with a write in flight", st: &busy.memStream},
		} {
			writes, closes, aborts := tt.st.state()
			if aborts != 1 || closes != 1 || len(writes) != 0 {
				t.Errorf("Unregister{Abort} of %s: Abort called %d times, Close %d, %d writes completed; want 1, 1, 0", tt.name, aborts, closes, len(writes))
			}
		}
		if got := r.ref.Budget.Subscriptions(); got != 0 {
			t.Errorf("ConnBudget.Subscriptions() after both aborted = %d, want 0", got)
		}
		checkReturned(t, r, egIdle, egBusy)
		noFact(t, r)
	})
}

// Unregister{Lagged} queues SubscriptionLagged after what is queued, naming
// the offset after the last durable batch queued, tells the session
// LagQueued, and drops later deliveries (a lane's stragglers).
func TestWriterLaggedQueuesLagFrameAfterLastQueuedBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newWriterRig(t)
		st := newBlockingStream(nil)
		eg := r.register(t, 9, st, 100)
		a, b := frame("batch 100-109"), frame("batch 110-119")
		r.deliver(t, 9, eg, 110, a) // in flight
		r.deliver(t, 9, eg, 120, b) // queued
		synctest.Wait()             // Unregister is control traffic: it would overtake queued deliveries
		r.send(&lanes.Unregister{SubscriptionID: 9, Lagged: true, ResumeFrom: 5})
		if lq := fact[*lanes.LagQueued](t, r); lq.SubscriptionID != 9 {
			t.Fatalf("LagQueued for subscription %d, want 9", lq.SubscriptionID)
		}
		r.deliver(t, 9, eg, 130, frame("batch 120-129 (late)"))
		synctest.Wait()
		if got, want := eg.InFlight(), int64(len(a)+len(b)); got != want {
			t.Errorf("after a Deliver following the lag: InFlight() = %d, want %d (the late one returned)", got, want)
		}
		if _, closes, _ := st.state(); closes != 0 {
			t.Fatalf("stream closed before the lag frame was written")
		}

		st.releaseOne(t) // a
		st.releaseOne(t) // b and the lag frame
		synctest.Wait()
		got := payloads(t, st.all())
		if len(got) != 3 || string(got[0]) != "batch 100-109" || string(got[1]) != "batch 110-119" {
			t.Fatalf("lagged stream carried %q, want the two queued batches then the lag frame", got)
		}
		msg, err := wire.DecodeMessage(got[2])
		if err != nil {
			t.Fatalf("last frame %q: %v", got[2], err)
		}
		want := &wire.SubscriptionLagged{SubscriptionID: 9, ResumeFrom: 120}
		if lag, ok := msg.(*wire.SubscriptionLagged); !ok || *lag != *want {
			t.Fatalf("last frame = %#v, want %#v (resume after the last batch queued, not the late one nor ResumeFrom)", msg, want)
		}
		if _, closes, aborts := st.state(); closes != 1 || aborts != 0 {
			t.Errorf("lagged stream: Close called %d times, Abort %d; want 1, 0", closes, aborts)
		}
		checkReturned(t, r, eg)
	})
}

// With no durable batch queued since Register, the lag frame names where
// the stream continued from (Register.Next), or else Unregister.ResumeFrom.
func TestWriterLaggedResumeOffsetFallbacks(t *testing.T) {
	tests := []struct {
		name         string
		registerNext uint64
		resumeFrom   uint64
		want         uint64
	}{
		{name: "Register.Next when nothing was delivered", registerNext: 100, resumeFrom: 5, want: 100},
		{name: "ResumeFrom when the writer knows nothing", registerNext: 0, resumeFrom: 42, want: 42},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newWriterRig(t)
				st := &memStream{}
				eg := r.register(t, 3, st, tt.registerNext)
				r.send(&lanes.Unregister{SubscriptionID: 3, Lagged: true, ResumeFrom: tt.resumeFrom})
				fact[*lanes.LagQueued](t, r)
				synctest.Wait()
				got := payloads(t, st.all())
				if len(got) != 1 {
					t.Fatalf("stream carried %d frames, want the lag frame alone", len(got))
				}
				msg, err := wire.DecodeMessage(got[0])
				if lag, ok := msg.(*wire.SubscriptionLagged); err != nil || !ok || lag.ResumeFrom != tt.want {
					t.Fatalf("Register.Next %d, Unregister.ResumeFrom %d: lag frame %#v (err %v), want ResumeFrom %d", tt.registerNext, tt.resumeFrom, msg, err, tt.want)
				}
				checkReturned(t, r, eg)
			})
		})
	}
}

// A failing write reports StreamFailed to the session, lets go of the
// stream, and returns what was in flight and queued.
func TestWriterFailedWriteReportsStreamFailedAndReturnsQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newWriterRig(t)
		st := newBlockingStream(errBroken)
		eg := r.register(t, 4, st, 0)
		r.deliver(t, 4, eg, 0, frame("fails"))
		r.deliver(t, 4, eg, 0, frame("queued behind it"))
		synctest.Wait()
		st.releaseOne(t)
		sf := fact[*lanes.StreamFailed](t, r)
		if sf.SubscriptionID != 4 || !errors.Is(sf.Err, errBroken) {
			t.Fatalf("StreamFailed = %+v, want subscription 4 with %v", sf, errBroken)
		}
		r.deliver(t, 4, eg, 0, frame("after the failure"))
		synctest.Wait()
		if writes, closes, _ := st.state(); len(writes) != 0 || closes != 1 || st.begun() != 1 {
			t.Errorf("failed stream: %d writes begun, %d completed, Close called %d times; want 1, 0, 1", st.begun(), len(writes), closes)
		}
		if got := r.ref.Budget.Subscriptions(); got != 0 {
			t.Errorf("ConnBudget.Subscriptions() after the failure = %d, want 0", got)
		}
		checkReturned(t, r, eg)
	})
}

func TestWriterFailingStreamFailsOnFirstWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newWriterRig(t)
		st := &failingStream{}
		eg := r.register(t, 5, st, 0)
		r.deliver(t, 5, eg, 0, frame("x"))
		if sf := fact[*lanes.StreamFailed](t, r); sf.SubscriptionID != 5 || !errors.Is(sf.Err, errBroken) {
			t.Fatalf("StreamFailed = %+v, want subscription 5 with %v", sf, errBroken)
		}
		synctest.Wait()
		if records, _ := r.onWritten(); records != 0 {
			t.Errorf("OnWritten told %d records for a failed write, want 0", records)
		}
		checkReturned(t, r, eg)
	})
}

// Stopping the writer resets every stream and gives back every byte: in
// flight, queued in the writer, and still in its mailbox.
func TestWriterStopAbortsEveryStreamAndReturnsEveryByte(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newWriterRig(t)
		busy := newBlockingStream(nil)
		idle := &abortStream{}
		egBusy := r.register(t, 1, busy, 0)
		egIdle := r.register(t, 2, idle, 0)
		r.deliver(t, 1, egBusy, 0, frame("in flight"))
		r.deliver(t, 1, egBusy, 0, frame("queued in the writer"))
		synctest.Wait()
		r.ref.Mailbox.Hold() // what comes next stays in the writer's mailbox
		r.deliver(t, 2, egIdle, 0, frame("queued in the mailbox"))
		synctest.Wait()

		r.stop(t)
		synctest.Wait()
		for _, tt := range []struct {
			name string
			st   *memStream
		}{
			{name: "stream with a write in flight", st: &busy.memStream},
			{name: "idle stream", st: &idle.memStream},
		} {
			writes, closes, aborts := tt.st.state()
			if aborts != 1 || closes != 1 || len(writes) != 0 {
				t.Errorf("writer stopped, %s: Abort called %d times, Close %d, %d writes completed; want 1, 1, 0", tt.name, aborts, closes, len(writes))
			}
		}
		if got := r.ref.Budget.Subscriptions(); got != 0 {
			t.Errorf("ConnBudget.Subscriptions() after the writer stopped = %d, want 0", got)
		}
		checkReturned(t, r, egBusy, egIdle)
	})
}
