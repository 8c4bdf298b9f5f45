package streams

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/wire"
)

func TestMain(m *testing.M) {
	// protoactor's dead-letter throttle outlives Shutdown by one interval
	// (see broker/main_test.go); every test system sets it short.
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"),
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewThrottle.func1.1"),
	)
}

// eventTimeout bounds every wait for the actor; a passing test never hits it.
const eventTimeout = 10 * time.Second

var testScope = wire.Scope{Tenant: "t", Namespace: "n", Stream: "s"}

func newSystem(t testing.TB) *actor.ActorSystem {
	t.Helper()
	sys := actor.NewActorSystem(
		actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }),
		actor.WithDeadLetterThrottleInterval(10*time.Millisecond),
	)
	t.Cleanup(sys.Shutdown)
	return sys
}

// fakeLog is a durable log in memory. Under on_commit the test decides when
// each fsync completes (sync).
type fakeLog struct {
	mu      sync.Mutex
	start   uint64 // the offset of records[0]
	next    uint64
	records [][]byte
	stamps  []fakeStamp
	waits   map[uint64]chan error
	closed  bool
	fail    error // every Append fails with it
	poison  error // what Failed reports
}

func newFakeLog(next uint64) *fakeLog {
	return &fakeLog{start: next, next: next, waits: make(map[uint64]chan error)}
}

// fakeStamp is a stamped batch the fake log holds.
type fakeStamp struct {
	stamp Stamp
	base  uint64
	count uint32
}

func (l *fakeLog) AppendStamped(base uint64, records [][]byte, now time.Time, stamp Stamp) error {
	if err := l.Append(base, records, now); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stamps = append(l.stamps, fakeStamp{stamp, base, uint32(len(records))})
	return nil
}

func (l *fakeLog) Stamps(from uint64, fn func(Stamp, uint64, uint32) bool) error {
	l.mu.Lock()
	stamps := append([]fakeStamp(nil), l.stamps...)
	l.mu.Unlock()
	for _, s := range stamps {
		if s.base+uint64(s.count) > from && !fn(s.stamp, s.base, s.count) {
			break
		}
	}
	return nil
}

func (l *fakeLog) Append(base uint64, records [][]byte, _ time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fail != nil {
		return l.fail
	}
	if base != l.next {
		return errors.New("fake: append not at the end")
	}
	l.records = append(l.records, records...)
	l.next += uint64(len(records))
	return nil
}

func (l *fakeLog) WaitDurable(upTo uint64) <-chan error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.waits[upTo] == nil {
		l.waits[upTo] = make(chan error, 1)
	}
	return l.waits[upTo]
}

// sync completes the fsync covering upTo.
func (l *fakeLog) sync(upTo uint64, err error) {
	l.WaitDurable(upTo)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.waits[upTo] <- err
}

func (l *fakeLog) NextOffset() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.next
}
func (l *fakeLog) EnforceRetention(time.Time) error        { return nil }
func (l *fakeLog) OffsetForTime(time.Time) (uint64, error) { return l.NextOffset(), nil }
func (l *fakeLog) StartOffset() uint64                     { return 0 }
func (l *fakeLog) Committed() uint64                       { return l.NextOffset() }
func (l *fakeLog) Failed() error                           { l.mu.Lock(); defer l.mu.Unlock(); return l.poison }
func (l *fakeLog) Close() error                            { l.mu.Lock(); l.closed = true; l.mu.Unlock(); return nil }
func (l *fakeLog) appended() int                           { l.mu.Lock(); defer l.mu.Unlock(); return len(l.records) }
func (l *fakeLog) isClosed() bool                          { l.mu.Lock(); defer l.mu.Unlock(); return l.closed }

// Read returns what was appended, up to maxRecords.
func (l *fakeLog) Read(from uint64, maxRecords, _ int) (ReadPage, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	page := ReadPage{Next: max(from, l.start)}
	for ; page.Next < l.next && len(page.Records) < maxRecords; page.Next++ {
		page.Records = append(page.Records, Record{Offset: page.Next, Value: l.records[page.Next-l.start]})
	}
	return page, nil
}

var _ Log = (*fakeLog)(nil)

// testShard spawns one shard under a real shard supervisor. log nil makes
// an in-memory stream; openErr makes the log fail to open.
type testShard struct {
	sys *actor.ActorSystem
	ref *ShardRef
	sup *actor.PID
}

func spawnTestShard(t testing.TB, cfg ShardConfig, log *fakeLog, onCommit bool, onStats func(*FanoutStats)) *testShard {
	t.Helper()
	sys := newSystem(t)
	rc := RegistryConfig{Shard: cfg, PubQueueDepth: 8, Log: zerolog.Nop(), Root: sys.Root, OnStats: onStats}
	if log != nil {
		rc.OpenLog = func(Def, uint32) (Log, bool, error) { return log, onCommit, nil }
	}
	sup := spawnSupervisor(t, sys, rc)
	res, err := sys.Root.RequestFuture(sup, &spawnShard{def: Def{Scope: testScope, Shards: 1, Durable: log != nil}, shard: 0}, eventTimeout).Result()
	if err != nil {
		t.Fatal(err)
	}
	return &testShard{sys: sys, ref: res.(*ShardRef), sup: sup}
}

// spawnSupervisor starts a shard supervisor, stopped (with its shards)
// before the system shuts down: Shutdown stops no actor, so their waiters
// and tickers would outlive the test.
func spawnSupervisor(t testing.TB, sys *actor.ActorSystem, rc RegistryConfig) *actor.PID {
	t.Helper()
	sup, err := sys.Root.SpawnNamed(ShardSupervisorProps(rc, nil), "shards")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sys.Root.StopFuture(sup).Wait() })
	return sup
}

// publish posts a batch and returns where its answers go.
func (ts *testShard) publish(t *testing.T, expected *uint64, payloads ...string) <-chan PublishResult {
	t.Helper()
	answers := make(chan PublishResult, 2) // room for a wrong second answer
	p := &Publish{ExpectedOffset: expected, Done: func(r PublishResult) { answers <- r }}
	for _, s := range payloads {
		p.Payloads = append(p.Payloads, []byte(s))
	}
	if r := ts.ref.Mailbox.TryPost(p, eventTimeout); !r.Accepted() {
		t.Fatalf("publish not admitted: %v", r)
	}
	return answers
}

// answer waits for a publish's one answer and checks no second one follows.
func answer(t *testing.T, answers <-chan PublishResult) PublishResult {
	t.Helper()
	select {
	case r := <-answers:
		select {
		case r2 := <-answers:
			t.Fatalf("publish answered twice: %+v then %+v", r, r2)
		case <-time.After(20 * time.Millisecond):
		}
		return r
	case <-time.After(eventTimeout):
		t.Fatal("publish never answered")
	}
	return PublishResult{}
}

func noAnswer(t *testing.T, answers <-chan PublishResult, why string) {
	t.Helper()
	select {
	case r := <-answers:
		t.Fatalf("publish answered %+v; want no answer yet: %s", r, why)
	case <-time.After(50 * time.Millisecond):
	}
}

// feeder is a stand-in subscriber: an actor with its own bounded mailbox
// that reports what it receives.
type feeder struct {
	mb  *actors.Mailbox
	got chan any
}

type feederActor struct{ got chan any }

func (f *feederActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *Envelope, *SubscriberEvicted:
		f.got <- m
	}
}

func (ts *testShard) addFeeder(t *testing.T, id uint64, cfg actors.MailboxConfig) *feeder {
	t.Helper()
	f := &feeder{got: make(chan any, 64)}
	ts.sys.Root.Spawn(actors.Props(func() actor.Actor { return &feederActor{got: f.got} }, cfg, func(m *actors.Mailbox) { f.mb = m }))
	if _, err := ts.sys.Root.RequestFuture(ts.ref.PID, &AddSubscriber{ID: id, Feeder: f.mb}, eventTimeout).Result(); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *feeder) next(t *testing.T) any {
	t.Helper()
	select {
	case m := <-f.got:
		return m
	case <-time.After(eventTimeout):
		t.Fatal("feeder got nothing")
	}
	return nil
}

func (f *feeder) nextEnv(t *testing.T) *Envelope {
	t.Helper()
	m := f.next(t)
	env, ok := m.(*Envelope)
	if !ok {
		t.Fatalf("feeder got %T, want *Envelope", m)
	}
	return env
}

func TestShardFansOutInOrderToEverySubscriber(t *testing.T) {
	ts := spawnTestShard(t, ShardConfig{RingRecords: 16}, nil, false, nil)
	a := ts.addFeeder(t, 1, actors.MailboxConfig{Capacity: 16})
	b := ts.addFeeder(t, 2, actors.MailboxConfig{Capacity: 16})
	var answers []<-chan PublishResult
	for _, batch := range [][]string{{"a"}, {"b", "c"}, {"d"}} {
		answers = append(answers, ts.publish(t, nil, batch...))
	}
	for i, want := range []uint64{0, 1, 3} {
		if r := answer(t, answers[i]); r.Err != nil || r.Base != want || r.Durable {
			t.Errorf("publish %d answered %+v; want base %d, in memory, no error", i, r, want)
		}
	}
	for name, f := range map[string]*feeder{"a": a, "b": b} {
		for i, want := range []string{"a", "b", "d"} {
			if env := f.nextEnv(t); string(env.Payloads[0]) != want {
				t.Errorf("feeder %s batch %d starts with %q; want %q (publish order)", name, i, env.Payloads[0], want)
			}
		}
	}
}

func TestShardDurableAppendsAtTheLogsOffsets(t *testing.T) {
	log := newFakeLog(5)
	ts := spawnTestShard(t, ShardConfig{}, log, false, nil)
	f := ts.addFeeder(t, 1, actors.MailboxConfig{Capacity: 16})
	if r := answer(t, ts.publish(t, nil, "x", "y")); r.Err != nil || r.Base != 5 || !r.Durable {
		t.Fatalf("durable publish answered %+v; want base 5 (the log's next offset), durable", r)
	}
	if env := f.nextEnv(t); env.Base != 5 || !env.Durable {
		t.Errorf("feeder got base %d durable %v; want 5, true", env.Base, env.Durable)
	}
	if n := log.appended(); n != 2 {
		t.Errorf("log holds %d records; want 2", n)
	}
	got, err := ts.ref.Log(context.Background())
	if err != nil || got != Log(log) {
		t.Errorf("ref.Log = %v, %v; want the shard's log", got, err)
	}
}

func TestShardOnCommitWaitsForTheFsync(t *testing.T) {
	log := newFakeLog(0)
	ts := spawnTestShard(t, ShardConfig{}, log, true, nil)
	f := ts.addFeeder(t, 1, actors.MailboxConfig{Capacity: 16})
	answers := ts.publish(t, nil, "x")
	noAnswer(t, answers, "the fsync has not completed")
	select {
	case m := <-f.got:
		t.Fatalf("subscriber got %T before the batch was durable", m)
	default:
	}
	log.sync(1, nil)
	if r := answer(t, answers); r.Err != nil || r.Base != 0 || !r.Durable {
		t.Fatalf("answered %+v after the fsync; want base 0, durable", r)
	}
	f.nextEnv(t)

	failed := ts.publish(t, nil, "y")
	log.sync(2, errors.New("disk on fire"))
	if r := answer(t, failed); !errors.Is(r.Err, &wire.Error{Code: wire.CodeStorage}) {
		t.Fatalf("a failed fsync answered %+v; want a storage error", r)
	}
}

// TestShardPanicInPublishFailsThePublishInHand: a
// panic while handling a publish answers exactly that publish with
// ErrShardRestarted (it used to be lost: a deferred reset cleared it before
// handleRestarting looked), once, and the shard keeps serving.
func TestShardPanicInPublishFailsThePublishInHand(t *testing.T) {
	for _, at := range []step{stepCheck, stepAppend, stepDeliver} {
		var panics atomic.Int32
		cfg := ShardConfig{beforeStep: func(s step) {
			if s == at && panics.Add(1) == 1 {
				panic("injected")
			}
		}}
		log := newFakeLog(0)
		ts := spawnTestShard(t, cfg, log, false, nil)
		if r := answer(t, ts.publish(t, nil, "x")); !errors.Is(r.Err, ErrShardRestarted) {
			t.Fatalf("panic at step %d: answered %+v; want ErrShardRestarted", at, r)
		}
		if r := answer(t, ts.publish(t, nil, "y")); r.Err != nil {
			t.Fatalf("panic at step %d: the next publish answered %+v; want it served", at, r)
		}
	}
}

// TestShardPanicInDurableCompletionFailsThatBatch: defect 1, the durable
// path: a panic in handleDurable fails the batch it was delivering, and only
// that one; a batch still waiting for its fsync is answered normally later.
func TestShardPanicInDurableCompletionFailsThatBatch(t *testing.T) {
	var panics atomic.Int32
	cfg := ShardConfig{beforeStep: func(s step) {
		if s == stepDurable && panics.Add(1) == 1 {
			panic("injected")
		}
	}}
	log := newFakeLog(0)
	ts := spawnTestShard(t, cfg, log, true, nil)
	first := ts.publish(t, nil, "x")
	second := ts.publish(t, nil, "y")
	log.sync(1, nil)
	if r := answer(t, first); !errors.Is(r.Err, ErrShardRestarted) {
		t.Fatalf("the batch whose completion panicked answered %+v; want ErrShardRestarted", r)
	}
	noAnswer(t, second, "its fsync has not completed")
	log.sync(2, nil)
	if r := answer(t, second); r.Err != nil || r.Base != 1 {
		t.Fatalf("the batch waiting for its fsync answered %+v; want base 1", r)
	}
}

// TestShardStopFailsEveryPublishInFlight: a stop answers the publishes
// waiting for their fsync and the ones still queued, each once.
func TestShardStopFailsEveryPublishInFlight(t *testing.T) {
	log := newFakeLog(0)
	ts := spawnTestShard(t, ShardConfig{}, log, true, nil)
	syncing := []<-chan PublishResult{ts.publish(t, nil, "a"), ts.publish(t, nil, "b")}
	noAnswer(t, syncing[0], "no fsync yet")
	if err := ts.sys.Root.StopFuture(ts.ref.PID).Wait(); err != nil {
		t.Fatal(err)
	}
	for i, a := range syncing {
		if r := answer(t, a); !errors.Is(r.Err, &wire.Error{Code: wire.CodeShardUnavailable}) {
			t.Errorf("publish %d waiting for its fsync answered %+v at stop; want shard_unavailable", i, r)
		}
	}
	if !log.isClosed() {
		t.Error("the stopped shard left its log open")
	}
	log.sync(2, nil) // too late: nothing may answer again (answer checked above)
}

func TestConditionalPublishWritesExactlyOne(t *testing.T) {
	log := newFakeLog(0)
	ts := spawnTestShard(t, ShardConfig{}, log, false, nil)
	zero := uint64(0)
	a, b := ts.publish(t, &zero, "a"), ts.publish(t, &zero, "b")
	ra, rb := answer(t, a), answer(t, b)
	if ra.Err != nil || ra.Base != 0 {
		t.Fatalf("first conditional publish at 0 answered %+v; want written at 0", ra)
	}
	var mismatch *OffsetMismatchError
	if !errors.As(rb.Err, &mismatch) || !errors.Is(rb.Err, ErrOffsetMismatch) || mismatch.Expected != 0 || mismatch.Tail != 1 {
		t.Fatalf("second conditional publish at 0 answered %+v; want OffsetMismatchError{0, 1}", rb)
	}
	if n := log.appended(); n != 1 {
		t.Fatalf("log holds %d records; want exactly 1", n)
	}
	if r := answer(t, ts.publish(t, nil, "c")); r.Base != 1 {
		t.Fatalf("after the refused one, the next publish got base %d; want 1 (no offset used)", r.Base)
	}

	mem := spawnTestShard(t, ShardConfig{}, nil, false, nil)
	if r := answer(t, mem.publish(t, &zero, "a")); !errors.Is(r.Err, wire.ErrInvalidRequest) {
		t.Fatalf("conditional publish in memory answered %+v; want invalid_request", r)
	}
}

// TestBlockEvictsASubscriberFullPastTheMaxWait: defect 5. Under block the
// shard waits on a full subscriber at most BlockMaxWait, then removes it and
// tells it so; the publish is answered and later ones do not wait.
func TestBlockEvictsASubscriberFullPastTheMaxWait(t *testing.T) {
	stats := make(chan *FanoutStats, 8)
	ts := spawnTestShard(t, ShardConfig{SubscriberPolicy: actors.Block, BlockMaxWait: 50 * time.Millisecond}, nil, false, func(st *FanoutStats) { c := *st; stats <- &c })
	healthy := ts.addFeeder(t, 1, actors.MailboxConfig{Capacity: 16, Policy: actors.Block})
	stalled := ts.addFeeder(t, 2, actors.MailboxConfig{Capacity: 1, Policy: actors.Block})
	stalled.mb.Hold() // it reads nothing more; control still reaches it
	if r := answer(t, ts.publish(t, nil, "fills")); r.Err != nil {
		t.Fatal(r)
	}
	<-stats
	if r := answer(t, ts.publish(t, nil, "waits")); r.Err != nil || r.Base != 1 {
		t.Fatalf("publish under block with a stalled reader answered %+v; want base 1", r)
	}
	if st := <-stats; st.Evicted != 1 || st.Delivered != 1 || st.BlockedFor < 50*time.Millisecond {
		t.Fatalf("stats %+v; want 1 evicted, 1 delivered, blocked >= 50ms", st)
	}
	ev, ok := stalled.next(t).(*SubscriberEvicted)
	if !ok || ev.ResumeFrom != 1 {
		t.Fatalf("stalled subscriber was told %+v; want SubscriberEvicted{ResumeFrom: 1}", ev)
	}
	start := time.Now()
	answer(t, ts.publish(t, nil, "free"))
	if st := <-stats; st.BlockedFor != 0 || st.Delivered != 1 || time.Since(start) > 40*time.Millisecond {
		t.Fatalf("after the eviction a publish waited (%+v, %s); want no wait", st, time.Since(start))
	}
	for range 3 {
		healthy.nextEnv(t)
	}
}

// TestLogThatWillNotOpenFailsQueuedPublishesWithStorage: the log opens after
// Started; if it fails, the publishes queued meanwhile get a storage error,
// readers get it from ref.Log, and the shard stops.
func TestLogThatWillNotOpenFailsQueuedPublishesWithStorage(t *testing.T) {
	sys := newSystem(t)
	gate := make(chan struct{})
	rc := RegistryConfig{PubQueueDepth: 8, Log: zerolog.Nop(), Root: sys.Root,
		OpenLog: func(Def, uint32) (Log, bool, error) { <-gate; return nil, false, errors.New("no such directory") }}
	sup := spawnSupervisor(t, sys, rc)
	res, err := sys.Root.RequestFuture(sup, &spawnShard{def: Def{Scope: testScope, Shards: 1, Durable: true}}, eventTimeout).Result()
	if err != nil {
		t.Fatal(err)
	}
	ts := &testShard{sys: sys, ref: res.(*ShardRef)}
	queued := ts.publish(t, nil, "x")
	close(gate)
	if r := answer(t, queued); !errors.Is(r.Err, &wire.Error{Code: wire.CodeStorage}) {
		t.Fatalf("publish queued while the log failed to open answered %+v; want storage", r)
	}
	if _, err := ts.ref.Log(context.Background()); !errors.Is(err, &wire.Error{Code: wire.CodeStorage}) {
		t.Fatalf("ref.Log = %v; want storage", err)
	}
	deadline := time.Now().Add(eventTimeout)
	for !ts.ref.Mailbox.IsClosed() {
		if time.Now().After(deadline) {
			t.Fatal("the shard whose log did not open is still running")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestShardStopsOnAFailedLog: a log poisoned by a full disk
// stayed the shard's for ever: every publish failed storage until the
// broker restarted, even after the disk had room again. Now the shard
// answers storage and stops, closing the log, and the next request makes a
// new shard, which opens (recovers) the log again; a failure that is not
// the log's (a batch too large) does not stop it.
func TestShardStopsOnAFailedLog(t *testing.T) {
	sys := newSystem(t)
	var opens []*fakeLog
	var mu sync.Mutex
	rc := RegistryConfig{PubQueueDepth: 8, Log: zerolog.Nop(), Root: sys.Root, OpenLog: func(Def, uint32) (Log, bool, error) {
		mu.Lock()
		defer mu.Unlock()
		l := newFakeLog(0)
		opens = append(opens, l)
		return l, false, nil
	}}
	sup := spawnSupervisor(t, sys, rc)
	spawn := func() *testShard {
		res, err := sys.Root.RequestFuture(sup, &spawnShard{def: Def{Scope: testScope, Shards: 1, Durable: true}, shard: 0}, eventTimeout).Result()
		if err != nil {
			t.Fatal(err)
		}
		return &testShard{sys: sys, ref: res.(*ShardRef), sup: sup}
	}
	ts := spawn()
	if _, err := ts.ref.Log(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	first := opens[0]
	mu.Unlock()

	first.mu.Lock()
	first.fail = errors.New("fake: not a log failure")
	first.mu.Unlock()
	if r := answer(t, ts.publish(t, nil, "refused")); !errors.Is(r.Err, &wire.Error{Code: wire.CodeStorage}) {
		t.Fatalf("publish on a refusing log: %+v, want storage", r)
	}
	if ts.ref.Mailbox.IsClosed() {
		t.Fatal("an append error that is not the log's failure stopped the shard")
	}

	first.mu.Lock()
	first.fail = errors.New("fake: no space left on device")
	first.poison = first.fail
	first.mu.Unlock()
	if r := answer(t, ts.publish(t, nil, "disk full")); !errors.Is(r.Err, &wire.Error{Code: wire.CodeStorage}) {
		t.Fatalf("publish on a failed log: %+v, want storage", r)
	}
	deadline := time.Now().Add(eventTimeout)
	for !ts.ref.Mailbox.IsClosed() || !first.isClosed() {
		if time.Now().After(deadline) {
			t.Fatalf("the shard kept its failed log (mailbox closed %v, log closed %v)", ts.ref.Mailbox.IsClosed(), first.isClosed())
		}
		time.Sleep(time.Millisecond)
	}
	again := spawn()
	if r := answer(t, again.publish(t, nil, "after")); r.Err != nil {
		t.Fatalf("publish to the new shard: %+v", r)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(opens) != 2 || opens[1].appended() != 1 {
		t.Fatalf("log opened %d times; want the new shard to open it again and append there", len(opens))
	}
}
