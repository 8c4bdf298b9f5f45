package streams

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/wire"
)

// An in-memory shard with no subscribers and no publishes for
// ShardConfig.IdleTimeout (stream_idle_timeout_ms) stops itself and its ring
// goes with it; the registry forgets an implicit stream's definition. Before
// this, streams made by a first publish were never reclaimed: one client
// pinned 2.7 GB in 10 s with 40 streams and no subscriber.
// Durable shards are not reclaimed this way: their data is on disk, and
// their descriptors are bounded by the log's file cache.

// checkIdle is the idle ticker's tick.
type checkIdle struct{ actors.ControlMessage }

// ShardIdle tells the registry that an in-memory shard stopped for being
// idle, so it can forget an implicit stream's definition.
type ShardIdle struct {
	actors.ControlMessage
	Scope wire.Scope
	Shard uint32
}

// startIdleTicker starts the idle check of an in-memory shard, every half
// idle timeout (so a shard goes at most 1.5 × the timeout after its last use).
func (s *shard) startIdleTicker() {
	// An in-memory cache is not idle when no one touches it: its keys
	// are its state, and stopping would lose them.
	if s.cfg.IdleTimeout <= 0 || s.open != nil || s.cache != nil {
		return
	}
	s.lastUsed = time.Now()
	self, root := s.self, s.root
	s.idle = startRetentionTicker(s.cfg.IdleTimeout/2, func() { root.Send(self, &checkIdle{}) })
}

// used notes activity that keeps an in-memory shard alive.
func (s *shard) used() { s.lastUsed = time.Now() }

func (s *shard) handleCheckIdle(ctx actor.Context) {
	if len(s.subs) > 0 || s.hasWatchers() || time.Since(s.lastUsed) < s.cfg.IdleTimeout || (s.ref.Mailbox != nil && s.ref.Mailbox.Len() > 0) {
		return
	}
	s.logger.Debug().Dur("idle", time.Since(s.lastUsed)).Msg("in-memory shard idle; stopping it")
	if s.cfg.OnIdle != nil {
		s.cfg.OnIdle(s.scope, s.n)
	}
	ctx.Stop(ctx.Self())
}
