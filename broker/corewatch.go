package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// The broker's core actors (the registry and the six top-level
// supervisors) live as long as the broker: one that stops while it runs
// (a supervisor past its restart limit, a stop from outside) leaves a
// member that cannot serve what it holds (a dead registry answers every
// publish, read and create with a dead letter) while it keeps its leases
// and leads its raft groups, so nothing fails over. So the broker stops
// itself: /ready answers 503 at once, then its whole Stop runs, which
// leaves the cluster (the lease is revoked, the shards are placed
// elsewhere, the replicated shards' replicas here stop and the others
// elect a leader), and Fatal reports why, so `felix broker` exits
// non-zero for its supervisor to start it again. Restarting the lost
// actor in place was rejected: the registry's definitions and shard
// table, or a supervisor's children, would come back empty under PIDs
// that sessions, shards and peers still hold.

// ErrCoreActorStopped is reported on Fatal when a core actor stopped while
// the broker ran; the broker has then stopped itself.
var ErrCoreActorStopped = errors.New("broker: a core actor stopped")

// coreLossStopTimeout bounds the Stop that follows a lost core actor, as
// felix broker bounds one it was signalled to do.
const coreLossStopTimeout = 15 * time.Second

// watchCore spawns the actor that watches the core actors.
func (b *Broker) watchCore() error {
	core := []*actor.PID{b.registry, b.shards, b.sessions, b.subscribers, b.lanesSup, b.connections, b.groups}
	props := actor.PropsFromFunc(func(ctx actor.Context) {
		switch m := ctx.Message().(type) {
		case *actor.Started:
			// Watching an actor that already stopped answers Terminated
			// at once, so none is missed between the spawn and here.
			for _, pid := range core {
				ctx.Watch(pid)
			}
		case *actor.Terminated:
			b.coreStopped(m.Who.Id)
		}
	})
	pid, err := b.system.Root.SpawnNamed(props, b.name+"/core-watch")
	if err != nil {
		return fmt.Errorf("broker: spawn the core actors' watch: %w", err)
	}
	b.coreWatch = pid
	return nil
}

// coreStopped runs on the watch's goroutine: the Stop it starts stops the
// watch too, so it runs on its own.
func (b *Broker) coreStopped(id string) {
	if b.stopped.Load() {
		return // the broker's own Stop
	}
	b.log.Error().Str("actor", id).Msg("a core actor stopped while the broker ran: the broker stops, leaving the cluster so its shards are served elsewhere; start it again")
	b.reportFatal(fmt.Errorf("%w: %s (the broker stopped itself; start it again)", ErrCoreActorStopped, id))
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), coreLossStopTimeout)
		defer cancel()
		if err := b.Stop(ctx); err != nil {
			b.log.Warn().Err(err).Msg("stop after losing a core actor")
		}
	}()
}

// reportFatal hands err to Fatal's reader; only the first is kept.
func (b *Broker) reportFatal(err error) {
	select {
	case b.fatal <- err:
	default:
	}
}
