package actors

import (
	"context"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// Kind names what an actor does; it labels logs, metrics and the tree.
type Kind string

// The actor kinds of a broker.
const (
	KindSupervisor Kind = "supervisor"
	// KindRegistry is the stream definitions' owner: top-level as the
	// supervisors are, but with no children.
	KindRegistry   Kind = "registry"
	KindShard      Kind = "shard"
	KindFeeder     Kind = "feeder"
	KindLane       Kind = "lane"
	KindConnWriter Kind = "connection_writer"
	KindSession    Kind = "session"
	KindGroup      Kind = "group"
)

// Restart limits for the data-path actors: a child that fails more than
// maxRestarts times within restartWindow is stopped instead of restarted, so a
// poison input cannot turn into a hot crash loop. protoactor's default is the
// same (10 in 10 s); we state it so it is visible and tested.
const (
	maxRestarts   = 10
	restartWindow = 10 * time.Second
)

// ChildStrategy is the strategy each supervisor applies to its children:
// one-for-one, restart on any panic, stop past the limit. One child's failure
// never touches its siblings: one feeder crashing must not end other
// subscriptions.
func ChildStrategy() actor.SupervisorStrategy {
	return actor.NewOneForOneStrategy(maxRestarts, restartWindow, actor.DefaultDecider)
}

// GuardianStrategy supervises the top-level supervisors. They hold no state
// worth losing and do no work that can fail, so they always restart.
func GuardianStrategy() actor.SupervisorStrategy {
	return actor.NewRestartingStrategy()
}

// SpawnChild asks a supervisor to spawn a child under itself. It is a
// request: the supervisor responds with *ChildSpawned.
type SpawnChild struct {
	ControlMessage
	Name  string
	Props *actor.Props
}

// ChildSpawned answers SpawnChild.
type ChildSpawned struct {
	PID *actor.PID
	Err error
}

// supervisor is a parent that does nothing but own children: the streams,
// subscribers, lanes and connections subtrees each hang under one. Only its
// own Receive touches it.
type supervisor struct {
	kind Kind
}

// SupervisorProps returns the props of a supervisor of children of the given
// kind. Spawn it from the root with WithGuardian (protoactor ignores
// WithSupervisor on top-level actors).
func SupervisorProps(kind Kind, created func(*Mailbox)) *actor.Props {
	return SupervisorPropsFor(func() actor.Actor { return &supervisor{kind: kind} }, created)
}

// SupervisorPropsFor gives a supervisor actor of any behaviour (the streams
// registry is one) the supervisors' strategy, guardian and mailbox.
func SupervisorPropsFor(producer actor.Producer, created func(*Mailbox)) *actor.Props {
	return Props(producer, MailboxConfig{Capacity: 4096, Policy: Block}, created,
		actor.WithSupervisor(ChildStrategy()),
		actor.WithGuardian(GuardianStrategy()),
	)
}

func (s *supervisor) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *SpawnChild:
		s.handleSpawnChild(ctx, msg)
	}
}

func (s *supervisor) handleSpawnChild(ctx actor.Context, msg *SpawnChild) {
	pid, err := ctx.SpawnNamed(msg.Props, msg.Name)
	if err != nil {
		err = fmt.Errorf("actors: spawn %s under %s: %w", msg.Name, ctx.Self().Id, err)
	}
	ctx.Respond(&ChildSpawned{PID: pid, Err: err})
}

// Spawn asks the supervisor at parent to spawn props as name, and waits up to
// timeout, or until ctx's deadline (Request; ctx's cancellation does not
// end the wait). Call it from outside actors
// (a connection goroutine), never from inside a Receive.
func Spawn(ctx context.Context, root *actor.RootContext, parent *actor.PID, name string, props *actor.Props, timeout time.Duration) (*actor.PID, error) {
	// Detached: a spawn the caller stopped waiting for would leave an
	// actor nobody knows of.
	spawned, err := Request[*ChildSpawned](Detached(ctx), root, parent, &SpawnChild{Name: name, Props: props}, timeout)
	if err != nil {
		return nil, fmt.Errorf("actors: spawn %s: %w", name, err)
	}
	return spawned.PID, spawned.Err
}

// Props builds the props of a data-path actor with its own bounded mailbox.
// created receives the mailbox handle (for TryPost, metrics and inspection),
// and the mailbox is closed when the actor stops, which releases parked
// senders and makes later posts report Closed. Each Props value is for one
// spawn, because it remembers the one mailbox it made.
func Props(producer actor.Producer, cfg MailboxConfig, created func(*Mailbox), opts ...actor.PropsOption) *actor.Props {
	var mb *Mailbox
	opts = append([]actor.PropsOption{
		actor.WithMailbox(Producer(cfg, func(m *Mailbox) {
			mb = m
			if created != nil {
				created(m)
			}
		})),
	}, opts...)
	// A wrapping actor, not receiver middleware: protoactor allocates a
	// MessageEnvelope for every message an actor with middleware receives,
	// one per hop per delivery on the data path.
	wrapped := func() actor.Actor { return &dataActor{inner: producer(), mb: &mb} }
	return actor.PropsFromProducer(wrapped, opts...)
}

// dataActor is what Props spawns around an actor: a ChaosPanic becomes a
// panic before the actor sees it (so its supervisor handles a real crash),
// and the mailbox closes once the actor stopped.
type dataActor struct {
	inner actor.Actor
	mb    **Mailbox
}

func (d *dataActor) Receive(ctx actor.Context) {
	msg := ctx.Message()
	if p, ok := msg.(*ChaosPanic); ok {
		panic("chaos: " + p.Reason)
	}
	d.inner.Receive(ctx)
	if _, ok := msg.(*actor.Stopped); ok && *d.mb != nil {
		(*d.mb).Close()
	}
}
