package groups

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/streams"
	"github.com/getfelix/felix-go/wire"
)

// stateLog is a state shard's log in memory: Write appends.
type stateLog struct{ memLog }

func (l *stateLog) write(rec []byte, done func(error)) error {
	off := uint64(len(l.records))
	l.records = append(l.records, streams.Record{Offset: off, Value: rec})
	done(nil)
	return nil
}

// TestActorMailboxBound: past the mailbox's bound a poll is refused
// overloaded at once; requests queued when the actor stops fail
// shard_unavailable, and the stop writes the cursor: a new actor replays
// it and hands out only what was not acked.
func TestActorMailboxBound(t *testing.T) {
	sys := actor.NewActorSystem(actors.LoggerFactory(zerolog.Nop()))
	defer sys.Shutdown()
	state := &stateLog{}
	cfg := Config{
		Scope: wire.Scope{Tenant: "t", Namespace: "n", Stream: "s"}, Group: "g", Limits: testLimits,
		Handles: Handles{Data: newMemLog(5), State: state, Write: state.write},
	}
	spawn := func() (*actor.PID, *actors.Mailbox) {
		var mb *actors.Mailbox
		pid := sys.Root.Spawn(Props(cfg, 1, sys.Root, func(m *actors.Mailbox) { mb = m }))
		return pid, mb
	}
	pid, mb := spawn()
	create := &Admin{Op: OpCreate}
	acreate := ask(t, sys, mb, create)
	if res := acreate.admin(t); res.Err != nil {
		t.Fatal(res.Err)
	}
	poll := func() *Poll {
		return &Poll{Max: 2, MaxBytes: 1 << 20, Visibility: time.Minute}
	}
	mb.Hold()
	p1, p2 := poll(), poll()
	ap1 := ask(t, sys, mb, p1)
	if !ap1.posted.Accepted() {
		t.Fatalf("first poll: %v", ap1.posted)
	}
	ap2 := ask(t, sys, mb, p2)
	if ap2.posted.Accepted() {
		t.Fatalf("second poll past the bound of 1: %v", ap2.posted)
	}
	if res := ap2.poll(t); !errors.Is(res.Err, wire.ErrOverloaded) {
		t.Fatalf("refused poll: %v", res.Err)
	}
	mb.Release()
	if res := ap1.poll(t); res.Err != nil || len(res.Records) != 2 {
		t.Fatalf("first poll: %+v", res)
	}
	// Acked 0; 1 in flight when the actor stops with a poll queued.
	ack := &Settle{Op: service.SettleAck, Claims: []service.Claim{{Offset: 0, Attempt: 1}}}
	aack := ask(t, sys, mb, ack)
	if res := aack.settle(t); res.Err != nil || res.Failures != nil {
		t.Fatalf("ack: %+v", res)
	}
	mb.Hold()
	p3 := poll()
	ap3 := ask(t, sys, mb, p3)
	if err := sys.Root.StopFuture(pid).Wait(); err != nil {
		t.Fatal(err)
	}
	if res := ap3.poll(t); !errors.Is(res.Err, wire.ErrUnavailable) {
		t.Fatalf("queued poll at the stop: %v", res.Err)
	}
	// A new actor replays the state: 1 and the rest come, 0 does not.
	_, mb2 := spawn()
	p4 := poll()
	p4.Max = 10
	ap4 := ask(t, sys, mb2, p4)
	if res := ap4.poll(t); res.Err != nil || len(res.Records) != 4 || res.Records[0].Offset != 1 {
		t.Fatalf("after a new start: %+v", res)
	}
}

// TestActorStopsWhenIdle: a group actor that served nothing for IdleAfter
// and holds nothing only in memory stops by itself (its state is in the
// state stream); one holding a claim in flight does not.
func TestActorStopsWhenIdle(t *testing.T) {
	sys := actor.NewActorSystem(actors.LoggerFactory(zerolog.Nop()))
	defer sys.Shutdown()
	run := func(claim bool) bool {
		state := &stateLog{}
		lim := testLimits
		lim.IdleAfter = 50 * time.Millisecond
		cfg := Config{
			Scope: wire.Scope{Tenant: "t", Namespace: "n", Stream: "s"}, Group: "g", Limits: lim,
			Handles: Handles{Data: newMemLog(5), State: state, Write: state.write},
		}
		pid, mb := spawnCreated(t, sys, cfg)
		if claim {
			p := &Poll{Max: 1, MaxBytes: 1 << 20, Visibility: time.Hour}
			ap := ask(t, sys, mb, p)
			if res := ap.poll(t); res.Err != nil || len(res.Records) != 1 {
				t.Fatalf("poll: %+v", res)
			}
		}
		stopped := watchStop(sys, pid)
		select {
		case <-stopped:
			return true
		case <-time.After(time.Second): // twenty times IdleAfter
			sys.Root.Stop(pid)
			return false
		}
	}
	if !run(false) {
		t.Fatal("an idle group actor with nothing in memory did not stop")
	}
	if run(true) {
		t.Fatal("a group actor with a claim in flight stopped for being idle")
	}
}

// TestActorDeposed: once Handles.Live refuses (in a cluster: its member no
// longer serves the group), a request gets that refusal (not_leader naming
// the member that serves it), the actor stops, and it writes nothing more,
// not even its cursor at the stop: its successor's state stands.
func TestActorDeposed(t *testing.T) {
	sys := actor.NewActorSystem(actors.LoggerFactory(zerolog.Nop()))
	defer sys.Shutdown()
	state := &stateLog{}
	var deposed atomic.Bool
	moved := &wire.Error{Code: wire.CodeNotLeader, Message: "served by b", Owner: &wire.Owner{NodeID: "b", Addr: "127.0.0.1:2"}}
	live := func() error {
		if deposed.Load() {
			return moved
		}
		return nil
	}
	cfg := Config{
		Scope: wire.Scope{Tenant: "t", Namespace: "n", Stream: "s"}, Group: "g", Limits: testLimits,
		Handles: Handles{Data: newMemLog(5), State: state, Live: live, Write: func(rec []byte, done func(error)) error {
			if err := live(); err != nil {
				return err
			}
			return state.write(rec, done)
		}},
	}
	pid, mb := spawnCreated(t, sys, cfg)
	p := &Poll{Max: 2, MaxBytes: 1 << 20, Visibility: time.Minute}
	ap := ask(t, sys, mb, p)
	if res := ap.poll(t); res.Err != nil || len(res.Records) != 2 {
		t.Fatalf("poll: %+v", res)
	}
	// Acked 0 and 1 (the cursor moves to 2, not written yet); deposed.
	ack := &Settle{Op: service.SettleAck, Claims: []service.Claim{{Offset: 0, Attempt: 1}, {Offset: 1, Attempt: 1}}}
	aack := ask(t, sys, mb, ack)
	if res := aack.settle(t); res.Err != nil || res.Failures != nil {
		t.Fatalf("ack: %+v", res)
	}
	written := len(state.records)
	stopped := watchStop(sys, pid)
	deposed.Store(true)
	p2 := &Poll{Max: 2, MaxBytes: 1 << 20, Visibility: time.Minute}
	ap2 := ask(t, sys, mb, p2)
	var we *wire.Error
	if res := ap2.poll(t); !errors.As(res.Err, &we) || we.Code != wire.CodeNotLeader || we.Owner.NodeID != "b" {
		t.Fatalf("poll at a deposed actor: %v; want not_leader naming b", res.Err)
	}
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("the deposed actor did not stop")
	}
	if len(state.records) != written {
		t.Fatalf("the deposed actor wrote %d state records after it was deposed", len(state.records)-written)
	}
}

// watchStop closes the channel it returns when pid stops.
func watchStop(sys *actor.ActorSystem, pid *actor.PID) <-chan struct{} {
	stopped := make(chan struct{})
	sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		switch m := ctx.Message().(type) {
		case *actor.Started:
			ctx.Watch(pid)
		case *actor.Terminated:
			if m.Who.Equal(pid) {
				close(stopped)
			}
		}
	}))
	return stopped
}

// spawnCreated spawns a group actor of cfg (mailbox of 8) and creates its
// group.
func spawnCreated(t *testing.T, sys *actor.ActorSystem, cfg Config) (*actor.PID, *actors.Mailbox) {
	t.Helper()
	var mb *actors.Mailbox
	pid := sys.Root.Spawn(Props(cfg, 8, sys.Root, func(m *actors.Mailbox) { mb = m }))
	create := &Admin{Op: OpCreate}
	acreate := ask(t, sys, mb, create)
	if res := acreate.admin(t); res.Err != nil {
		t.Fatal(res.Err)
	}
	return pid, mb
}

// lockedLog is a data log the test appends to while the actor reads it.
type lockedLog struct {
	mu sync.Mutex
	memLog
}

func (l *lockedLog) Read(from uint64, maxRecords, maxBytes int) (streams.ReadPage, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.memLog.Read(from, maxRecords, maxBytes)
}

func (l *lockedLog) Committed() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.memLog.Committed()
}

// TestActorParkedPollWokenByTheDataShard: a parked poll is answered when
// the data shard's watch wakes the actor, long before its wait ends (no
// timer of the actor's looks at the log); the watch is held only while a
// poll is parked, and starts from what the poll read.
func TestActorParkedPollWokenByTheDataShard(t *testing.T) {
	sys := actor.NewActorSystem(actors.LoggerFactory(zerolog.Nop()))
	defer sys.Shutdown()
	state := &stateLog{}
	data := &lockedLog{}
	type watch struct {
		w     streams.CommitWaker
		after uint64
	}
	watches, cancels := make(chan watch, 4), make(chan struct{}, 4)
	cfg := Config{
		Scope: wire.Scope{Tenant: "t", Namespace: "n", Stream: "s"}, Group: "g", Limits: testLimits,
		Handles: Handles{Data: data, State: state, Write: state.write, WatchData: func(w streams.CommitWaker, after uint64) func() {
			watches <- watch{w, after}
			return func() { cancels <- struct{}{} }
		}},
	}
	_, mb := spawnCreated(t, sys, cfg)
	p := &Poll{Max: 10, MaxBytes: 1 << 20, Wait: time.Hour, Visibility: time.Minute}
	ap := ask(t, sys, mb, p)
	var wt watch
	select {
	case wt = <-watches:
	case <-time.After(10 * time.Second):
		t.Fatal("a parked poll did not watch the data shard")
	}
	if wt.after != 0 {
		t.Fatalf("the watch starts after %d; want 0, what the poll read", wt.after)
	}
	data.mu.Lock()
	data.append(3)
	data.mu.Unlock()
	if !wt.w.Wake() {
		t.Fatal("the live group's waker reports itself gone")
	}
	if res := ap.poll(t); res.Err != nil || len(res.Records) != 3 {
		t.Fatalf("woken poll: %+v; want the 3 new records", res)
	}
	select {
	case <-cancels:
	case <-time.After(10 * time.Second):
		t.Fatal("the watch was kept with no poll parked")
	}
}

// asked is a request posted into a group actor's mailbox as actors.Request
// posts it: with a sender, here one of the test's own that hands the
// answer over.
type asked struct {
	posted actors.PostResult
	got    chan any
}

func ask(t *testing.T, sys *actor.ActorSystem, mb *actors.Mailbox, msg any) *asked {
	t.Helper()
	a := &asked{got: make(chan any, 2)}
	pid := sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if _, ok := ctx.Message().(actor.SystemMessage); !ok {
			a.got <- ctx.Message()
		}
	}))
	t.Cleanup(func() { sys.Root.Stop(pid) })
	a.posted = mb.TryPost(&actor.MessageEnvelope{Message: msg, Sender: pid}, 0)
	return a
}

// answer waits for the request's answer.
func (a *asked) answer(t *testing.T) any {
	t.Helper()
	select {
	case m := <-a.got:
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("the group actor did not answer")
	}
	return nil
}

func (a *asked) poll(t *testing.T) PollResult {
	t.Helper()
	switch m := a.answer(t).(type) {
	case *PollResult:
		return *m
	case error:
		return PollResult{Err: m}
	default:
		t.Fatalf("a poll answered %T", m)
	}
	return PollResult{}
}

func (a *asked) settle(t *testing.T) SettleResult {
	t.Helper()
	switch m := a.answer(t).(type) {
	case *SettleResult:
		return *m
	case error:
		return SettleResult{Err: m}
	default:
		t.Fatalf("a settlement answered %T", m)
	}
	return SettleResult{}
}

func (a *asked) admin(t *testing.T) AdminResult {
	t.Helper()
	switch m := a.answer(t).(type) {
	case *AdminResult:
		return *m
	case error:
		return AdminResult{Err: m}
	default:
		t.Fatalf("an admin request answered %T", m)
	}
	return AdminResult{}
}
