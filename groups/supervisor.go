package groups

import (
	"fmt"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/wire"
)

// The groups supervisor (felix/groups) owns the group actors, one per
// (stream, group, shard), spawned on the first request for one (Ensure)
// and supervised one-for-one like every data-path actor. It does no I/O:
// the broker resolves the logs before it asks.

// Ensure asks for the group actor of Config's (stream, group, shard),
// spawning it with Config and Depth when there is none; answered by *Ref.
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

// supervisor is the groups supervisor. Only Receive touches it.
type supervisor struct {
	children map[string]*Ref
	// onSpawned tells the broker of a new child (the directory).
	onSpawned func(ref *Ref, cfg Config)
}

// SupervisorProps returns the props of the groups supervisor, a top-level
// actor.
func SupervisorProps(onSpawned func(ref *Ref, cfg Config), created func(*actors.Mailbox)) *actor.Props {
	s := &supervisor{children: make(map[string]*Ref), onSpawned: onSpawned}
	return actors.SupervisorPropsFor(func() actor.Actor { return s }, created)
}

// ChildName is a group actor's name under the supervisor.
func ChildName(scope wire.Scope, group string, shard uint32) string {
	return fmt.Sprintf("%s:%s:%s:%s:%d", scope.Tenant, scope.Namespace, scope.Stream, group, shard)
}

func (s *supervisor) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *Ensure:
		s.handleEnsure(ctx, msg)
	case *actor.Terminated:
		s.handleTerminated(msg)
	}
}

func (s *supervisor) handleEnsure(ctx actor.Context, msg *Ensure) {
	name := ChildName(msg.Config.Scope, msg.Config.Group, msg.Config.Shard)
	if ref, ok := s.children[name]; ok && !ref.Mailbox.IsClosed() {
		ctx.Respond(ref)
		return
	}
	ref := &Ref{}
	props := Props(msg.Config, msg.Depth, func(m *actors.Mailbox) { ref.Mailbox = m })
	pid, err := ctx.SpawnNamed(props, name)
	if err != nil {
		// A stopped child's name is free again only once protoactor
		// removed it; the caller tries again.
		ctx.Respond(&Ref{Err: wire.NewError(wire.CodeShardUnavailable, "group actor %s: %v", name, err)})
		return
	}
	ref.PID = pid
	ctx.Watch(pid)
	s.children[name] = ref
	if s.onSpawned != nil {
		s.onSpawned(ref, msg.Config)
	}
	ctx.Respond(ref)
}

// handleTerminated forgets a stopped child, so the next Ensure spawns anew.
func (s *supervisor) handleTerminated(msg *actor.Terminated) {
	for name, ref := range s.children {
		if ref.PID.Equal(msg.Who) {
			delete(s.children, name)
			return
		}
	}
}
