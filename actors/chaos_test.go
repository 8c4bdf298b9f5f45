package actors_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/getfelix/felix-go/actors"
)

// chaosTree is a small live tree for Kill: a supervisor, two shards, a
// feeder, a session, and a feeder that stopped (its entry stays in the
// directory until listed).
type chaosTree struct {
	sys *actor.ActorSystem
	dir *actors.Directory
	// started gets an actor's path each time it starts, restarts included.
	started chan string
}

const (
	treeSupervisor = "felix/streams"
	treeShardA     = "felix/streams/shard-a"
	treeShardB     = "felix/streams/shard-b"
	treeFeeder     = "felix/subscribers/sub-1"
	treeGone       = "felix/subscribers/sub-2"
	treeSession    = "felix/sessions/conn-1"
	treeRegistry   = "felix/registry"
)

func newChaosTree(t *testing.T) *chaosTree {
	t.Helper()
	ct := &chaosTree{sys: newSystem(t), dir: actors.NewDirectory(), started: make(chan string, 64)}
	for _, a := range []struct {
		path string
		kind actors.Kind
	}{
		{treeSupervisor, actors.KindSupervisor},
		{treeShardA, actors.KindShard},
		{treeShardB, actors.KindShard},
		{treeFeeder, actors.KindFeeder},
		{treeSession, actors.KindSession},
		{treeRegistry, actors.KindRegistry},
	} {
		ct.spawn(t, a.path, a.kind)
	}
	gone := actors.NewMailbox(actors.MailboxConfig{Capacity: 1})
	gone.Close() // the actor stopped
	ct.dir.Add(&actor.PID{Id: treeGone}, actors.KindFeeder, gone, nil)
	return ct
}

// spawn starts an actor at path that reports each start on ct.started,
// and records it in ct.dir.
func (ct *chaosTree) spawn(t *testing.T, path string, kind actors.Kind) {
	t.Helper()
	var mb *actors.Mailbox
	props := actors.Props(func() actor.Actor {
		return actor.ReceiveFunc(func(ctx actor.Context) {
			if _, ok := ctx.Message().(*actor.Started); ok {
				ct.started <- ctx.Self().Id
			}
		})
	}, actors.MailboxConfig{Capacity: 8}, func(m *actors.Mailbox) { mb = m }, actor.WithGuardian(actors.GuardianStrategy()))
	pid, err := ct.sys.Root.SpawnNamed(props, path)
	if err != nil {
		t.Fatalf("spawn %s: %v", path, err)
	}
	ct.dir.Add(pid, kind, mb, nil)
	if got := recv(t, ct.started, path+" starting"); got != path {
		t.Fatalf("spawned %s, but %s started", path, got)
	}
}

// TestKillChooses: which actors a request chooses, the mode it reports,
// and the error (with its exact text, which felix chaos prints) of each
// request Kill refuses.
func TestKillChooses(t *testing.T) {
	tests := []struct {
		name string
		give actors.KillRequest
		// wantN actors killed, each one of wantFrom, none twice.
		wantN    int
		wantFrom []string
		wantMode string
		wantErr  error
		wantMsg  string
	}{
		{name: "path", give: actors.KillRequest{Path: treeShardA},
			wantN: 1, wantFrom: []string{treeShardA}, wantMode: "panic"},
		{name: "path, stop", give: actors.KillRequest{Path: treeFeeder, Mode: "stop"},
			wantN: 1, wantFrom: []string{treeFeeder}, wantMode: "stop"},
		{name: "path, count ignored", give: actors.KillRequest{Path: treeShardA, Count: 5},
			wantN: 1, wantFrom: []string{treeShardA}, wantMode: "panic"},
		{name: "kind", give: actors.KillRequest{Kind: "shard"},
			wantN: 1, wantFrom: []string{treeShardA, treeShardB}, wantMode: "panic"},
		{name: "kind, negative count", give: actors.KillRequest{Kind: "shard", Count: -3},
			wantN: 1, wantFrom: []string{treeShardA, treeShardB}, wantMode: "panic"},
		{name: "kind, count", give: actors.KillRequest{Kind: "shard", Count: 2, Mode: "stop"},
			wantN: 2, wantFrom: []string{treeShardA, treeShardB}, wantMode: "stop"},
		{name: "kind, count above the live ones", give: actors.KillRequest{Kind: "shard", Count: 5},
			wantN: 2, wantFrom: []string{treeShardA, treeShardB}, wantMode: "panic"},
		{name: "kind, a stopped one skipped", give: actors.KillRequest{Kind: "feeder", Count: 5},
			wantN: 1, wantFrom: []string{treeFeeder}, wantMode: "panic"},
		{name: "kind with none live", give: actors.KillRequest{Kind: "lane"},
			wantN: 0, wantMode: "panic"},
		{name: "path and kind", give: actors.KillRequest{Path: treeShardA, Kind: "shard"},
			wantErr: actors.ErrBadKillRequest, wantMsg: "broker: bad kill request: give a path or a kind, not both"},
		{name: "neither path nor kind", give: actors.KillRequest{Mode: "stop"},
			wantErr: actors.ErrBadKillRequest, wantMsg: "broker: bad kill request: give a path or a kind"},
		{name: "registry kind (by path only)", give: actors.KillRequest{Kind: "registry"},
			wantErr: actors.ErrBadKillRequest, wantMsg: `broker: bad kill request: kind "registry" (want shard, feeder, lane, connection_writer or group)`},
		{name: "supervisor kind", give: actors.KillRequest{Kind: "supervisor"},
			wantErr: actors.ErrBadKillRequest, wantMsg: `broker: bad kill request: kind "supervisor" (want shard, feeder, lane, connection_writer or group)`},
		{name: "unknown path", give: actors.KillRequest{Path: "nope"},
			wantErr: actors.ErrNoSuchActor, wantMsg: `broker: no such actor: "nope" (list them with felix tree)`},
		{name: "stopped actor's path", give: actors.KillRequest{Path: treeGone, Mode: "stop"},
			wantErr: actors.ErrNoSuchActor, wantMsg: `broker: no such actor: "felix/subscribers/sub-2" (list them with felix tree)`},
		{name: "supervisor path", give: actors.KillRequest{Path: treeSupervisor},
			wantErr: actors.ErrNotKillable, wantMsg: "broker: supervisors cannot be killed (a restart stops every child); kill their children"},
		{name: "session path", give: actors.KillRequest{Path: treeSession, Mode: "stop"},
			wantErr: actors.ErrNotKillable, wantMsg: "broker: supervisors cannot be killed (a restart stops every child); kill their children"},
		{name: "registry path, stop", give: actors.KillRequest{Path: treeRegistry, Mode: "stop"},
			wantN: 1, wantFrom: []string{treeRegistry}, wantMode: "stop"},
		{name: "registry path, panic", give: actors.KillRequest{Path: treeRegistry},
			wantN: 1, wantFrom: []string{treeRegistry}, wantMode: "panic"},
		{name: "unknown mode", give: actors.KillRequest{Kind: "feeder", Mode: "explode"},
			wantErr: actors.ErrBadKillRequest, wantMsg: `broker: bad kill request: mode "explode" (want panic or stop)`},
		{name: "mode in capitals, with a path", give: actors.KillRequest{Path: treeFeeder, Mode: "Panic"},
			wantErr: actors.ErrBadKillRequest, wantMsg: `broker: bad kill request: mode "Panic" (want panic or stop)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ct := newChaosTree(t)
			res, err := actors.Kill(ct.sys.Root, ct.dir, tt.give)
			if !errors.Is(err, tt.wantErr) || (err != nil && err.Error() != tt.wantMsg) {
				t.Fatalf("Kill(%+v): error %v; want %q", tt.give, err, tt.wantMsg)
			}
			if res.Mode != tt.wantMode {
				t.Errorf("Kill(%+v): mode %q; want %q", tt.give, res.Mode, tt.wantMode)
			}
			if len(res.Killed) != tt.wantN {
				t.Errorf("Kill(%+v) killed %q; want %d of %q", tt.give, res.Killed, tt.wantN, tt.wantFrom)
			}
			for i, p := range res.Killed {
				if !slices.Contains(tt.wantFrom, p) || slices.Contains(res.Killed[:i], p) {
					t.Errorf("Kill(%+v) killed %q; want %d distinct of %q", tt.give, res.Killed, tt.wantN, tt.wantFrom)
				}
			}
		})
	}
}

// TestKillNothingKilledIsAnEmptyList: a kind with no live actor kills
// nothing, and says so with an empty list, which the chaos route serves
// as [] and not null.
func TestKillNothingKilledIsAnEmptyList(t *testing.T) {
	ct := newChaosTree(t)
	res, err := actors.Kill(ct.sys.Root, ct.dir, actors.KillRequest{Kind: "group"})
	if err != nil || res.Killed == nil || len(res.Killed) != 0 {
		t.Fatalf("Kill of a kind with none live: %#v, %v; want an empty, non-nil Killed", res, err)
	}
}

// TestKillModes: mode panic crashes the actor inside its own Receive and
// its supervisor restarts it (it starts again, still in the directory);
// mode stop stops it for good (it terminates and leaves the directory).
func TestKillModes(t *testing.T) {
	ct := newChaosTree(t)
	if _, err := actors.Kill(ct.sys.Root, ct.dir, actors.KillRequest{Path: treeShardA}); err != nil {
		t.Fatalf("kill %s: %v", treeShardA, err)
	}
	if got := recv(t, ct.started, treeShardA+" restarting after the panic"); got != treeShardA {
		t.Fatalf("after a panic in %s, %s started", treeShardA, got)
	}
	if _, ok := ct.dir.Lookup(treeShardA); !ok {
		t.Fatalf("%s left the directory after a panic; want it restarted in place", treeShardA)
	}

	e, _ := ct.dir.Lookup(treeShardB)
	terminated := make(chan struct{})
	ct.sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		switch ctx.Message().(type) {
		case *actor.Started:
			ctx.Watch(e.PID)
		case *actor.Terminated:
			close(terminated)
		}
	}))
	if _, err := actors.Kill(ct.sys.Root, ct.dir, actors.KillRequest{Path: treeShardB, Mode: "stop"}); err != nil {
		t.Fatalf("stop %s: %v", treeShardB, err)
	}
	recv(t, terminated, treeShardB+" terminating")
	if _, ok := ct.dir.Lookup(treeShardB); ok {
		t.Fatalf("%s is still in the directory after it stopped", treeShardB)
	}
	select {
	case p := <-ct.started:
		t.Fatalf("%s started after a stop; want nothing restarted", p)
	default:
	}
}
