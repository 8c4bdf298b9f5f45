package groups

import (
	"errors"
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
		pid := sys.Root.Spawn(Props(cfg, 1, func(m *actors.Mailbox) { mb = m }))
		return pid, mb
	}
	pid, mb := spawn()
	create := &Admin{Op: OpCreate, Reply: make(chan AdminResult, 1)}
	mb.TryPost(create, 0)
	if res := <-create.Reply; res.Err != nil {
		t.Fatal(res.Err)
	}
	poll := func() *Poll {
		return &Poll{Max: 2, MaxBytes: 1 << 20, Visibility: time.Minute, Reply: make(chan PollResult, 1)}
	}
	mb.Hold()
	p1, p2 := poll(), poll()
	if r := mb.TryPost(p1, 0); !r.Accepted() {
		t.Fatalf("first poll: %v", r)
	}
	if r := mb.TryPost(p2, 0); r.Accepted() {
		t.Fatalf("second poll past the bound of 1: %v", r)
	}
	if res := <-p2.Reply; !errors.Is(res.Err, wire.ErrOverloaded) {
		t.Fatalf("refused poll: %v", res.Err)
	}
	mb.Release()
	if res := <-p1.Reply; res.Err != nil || len(res.Records) != 2 {
		t.Fatalf("first poll: %+v", res)
	}
	// Acked 0; 1 in flight when the actor stops with a poll queued.
	ack := &Settle{Op: service.SettleAck, Claims: []service.Claim{{Offset: 0, Attempt: 1}}, Reply: make(chan SettleResult, 1)}
	mb.TryPost(ack, 0)
	if res := <-ack.Reply; res.Err != nil || res.Failures != nil {
		t.Fatalf("ack: %+v", res)
	}
	mb.Hold()
	p3 := poll()
	mb.TryPost(p3, 0)
	if err := sys.Root.StopFuture(pid).Wait(); err != nil {
		t.Fatal(err)
	}
	if res := <-p3.Reply; !errors.Is(res.Err, wire.ErrUnavailable) {
		t.Fatalf("queued poll at the stop: %v", res.Err)
	}
	// A new actor replays the state: 1 and the rest come, 0 does not.
	_, mb2 := spawn()
	p4 := poll()
	p4.Max = 10
	mb2.TryPost(p4, 0)
	if res := <-p4.Reply; res.Err != nil || len(res.Records) != 4 || res.Records[0].Offset != 1 {
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
			p := &Poll{Max: 1, MaxBytes: 1 << 20, Visibility: time.Hour, Reply: make(chan PollResult, 1)}
			mb.TryPost(p, 0)
			if res := <-p.Reply; res.Err != nil || len(res.Records) != 1 {
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
	p := &Poll{Max: 2, MaxBytes: 1 << 20, Visibility: time.Minute, Reply: make(chan PollResult, 1)}
	mb.TryPost(p, 0)
	if res := <-p.Reply; res.Err != nil || len(res.Records) != 2 {
		t.Fatalf("poll: %+v", res)
	}
	// Acked 0 and 1 (the cursor moves to 2, not written yet); deposed.
	ack := &Settle{Op: service.SettleAck, Claims: []service.Claim{{Offset: 0, Attempt: 1}, {Offset: 1, Attempt: 1}}, Reply: make(chan SettleResult, 1)}
	mb.TryPost(ack, 0)
	if res := <-ack.Reply; res.Err != nil || res.Failures != nil {
		t.Fatalf("ack: %+v", res)
	}
	written := len(state.records)
	stopped := watchStop(sys, pid)
	deposed.Store(true)
	p2 := &Poll{Max: 2, MaxBytes: 1 << 20, Visibility: time.Minute, Reply: make(chan PollResult, 1)}
	mb.TryPost(p2, 0)
	var we *wire.Error
	if res := <-p2.Reply; !errors.As(res.Err, &we) || we.Code != wire.CodeNotLeader || we.Owner.NodeID != "b" {
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
	pid := sys.Root.Spawn(Props(cfg, 8, func(m *actors.Mailbox) { mb = m }))
	create := &Admin{Op: OpCreate, Reply: make(chan AdminResult, 1)}
	mb.TryPost(create, 0)
	if res := <-create.Reply; res.Err != nil {
		t.Fatal(res.Err)
	}
	return pid, mb
}
