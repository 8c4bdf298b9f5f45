package groups

import (
	"fmt"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/wire"
)

// The groups supervisor (felix/groups) owns the group actors, one per
// (stream, group, shard), spawned on the first request for one (Ensure)
// and supervised one-for-one like every data-path actor. It is the one
// that knows which actor serves a group (Find): the broker keeps no map of
// its own. It does no I/O: the broker resolves the logs before it asks.

// Find asks which actor serves (Scope, Group, Shard); answered by *Ref,
// whose PID is nil when none does: none was spawned, it stopped, or it
// may no longer serve (its Handles.Live refuses; it is stopped). Ensure
// then spawns one.
type Find struct {
	actors.ControlMessage
	Scope wire.Scope
	Group string
	Shard uint32
}

// Ensure asks for the group actor of Config's (stream, group, shard),
// spawning it with Config and Depth when none serves; answered by *Ref.
type Ensure struct {
	actors.ControlMessage
	Config Config
	Depth  int
}

// Ref is a live group actor: post requests into its Mailbox.
type Ref struct {
	PID     *actor.PID
	Mailbox *actors.Mailbox
	Err     error
}

// child is a group actor and what says whether it may still serve.
type child struct {
	ref  *Ref
	live func() error
}

// supervisor is the groups supervisor. Only Receive touches it.
type supervisor struct {
	children map[string]child
	// generations counts actors spawned per name, naming replacements: a
	// stopped actor's name is free again only once protoactor removed it.
	generations map[string]int
	// onSpawned tells the broker of a new child (the directory).
	onSpawned func(ref *Ref, cfg Config)
}

// SupervisorProps returns the props of the groups supervisor, a top-level
// actor.
func SupervisorProps(onSpawned func(ref *Ref, cfg Config), created func(*actors.Mailbox)) *actor.Props {
	s := &supervisor{children: make(map[string]child), generations: make(map[string]int), onSpawned: onSpawned}
	return actors.SupervisorPropsFor(func() actor.Actor { return s }, created)
}

// ChildName is a group actor's name under the supervisor (its first; a
// replacement's carries a generation, ChildName.<n>).
func ChildName(scope wire.Scope, group string, shard uint32) string {
	return fmt.Sprintf("%s:%s:%s:%s:%d", scope.Tenant, scope.Namespace, scope.Stream, group, shard)
}

func (s *supervisor) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *Find:
		s.handleFind(ctx, msg)
	case *Ensure:
		s.handleEnsure(ctx, msg)
	case *actor.Terminated:
		s.handleTerminated(msg)
	}
}

func (s *supervisor) handleFind(ctx actor.Context, msg *Find) {
	if ref, ok := s.serving(ctx, ChildName(msg.Scope, msg.Group, msg.Shard)); ok {
		ctx.Respond(ref)
		return
	}
	ctx.Respond(&Ref{})
}

func (s *supervisor) handleEnsure(ctx actor.Context, msg *Ensure) {
	name := ChildName(msg.Config.Scope, msg.Config.Group, msg.Config.Shard)
	if ref, ok := s.serving(ctx, name); ok {
		ctx.Respond(ref)
		return
	}
	ref := &Ref{}
	props := Props(msg.Config, msg.Depth, ctx.ActorSystem().Root, func(m *actors.Mailbox) { ref.Mailbox = m })
	spawnName := name
	if gen := s.generations[name]; gen > 0 {
		spawnName = fmt.Sprintf("%s.%d", name, gen)
	}
	s.generations[name]++
	pid, err := ctx.SpawnNamed(props, spawnName)
	if err != nil {
		ctx.Respond(&Ref{Err: wire.NewError(wire.CodeShardUnavailable, "group actor %s: %v", spawnName, err)})
		return
	}
	ref.PID = pid
	ctx.Watch(pid)
	s.children[name] = child{ref: ref, live: msg.Config.Handles.Live}
	if s.onSpawned != nil {
		s.onSpawned(ref, msg.Config)
	}
	ctx.Respond(ref)
}

// serving returns the child named name while it runs and may serve. One
// that may no longer serve (its member was deposed, perhaps to lead again
// in a later term) is stopped and forgotten here, so it is never handed
// out again; its replacement gets a new name.
func (s *supervisor) serving(ctx actor.Context, name string) (*Ref, bool) {
	c, ok := s.children[name]
	if !ok {
		return nil, false
	}
	if !c.ref.Mailbox.IsClosed() {
		if c.live == nil || c.live() == nil {
			return c.ref, true
		}
		// Quick: a deposed actor's stop writes nothing.
		ctx.Stop(c.ref.PID)
	}
	delete(s.children, name)
	return nil, false
}

// handleTerminated forgets a stopped child, so the next Ensure spawns
// anew; a replacement may already stand at its name.
func (s *supervisor) handleTerminated(msg *actor.Terminated) {
	for name, c := range s.children {
		if c.ref.PID.Equal(msg.Who) {
			delete(s.children, name)
			return
		}
	}
}
