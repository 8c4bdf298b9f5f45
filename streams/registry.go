package streams

import (
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/wire"
)

// GetShard asks the registry for a shard, creating an in-memory stream on
// first use. The registry responds with *ShardRef.
type GetShard struct {
	actors.ControlMessage
	Scope wire.Scope
	Shard uint32
}

// ShardRef addresses a shard: its PID for actor messages and its mailbox for
// admission with a bounded wait (TryPost), which Send cannot express.
type ShardRef struct {
	PID     *actor.PID
	Mailbox *actors.Mailbox
	Durable bool
	// Log is a durable shard's log, for readers outside the actor (range
	// reads and replay never go through the shard's mailbox).
	Log Log
	Err error
}

// RegistryConfig configures the registry and the shards it makes.
type RegistryConfig struct {
	Shard ShardConfig
	// PubQueueDepth bounds each shard's mailbox.
	PubQueueDepth int
	Log           zerolog.Logger
	// OnStats, when set, receives every publish's fanout stats on the shard's goroutine.
	OnStats func(*FanoutStats)
	// OpenLog opens (recovering) the durable log of a shard of a durable
	// stream, and says whether acks wait for the fsync (on_commit).
	OpenLog func(def Def, shard uint32) (log Log, onCommit bool, err error)
	// RemoveLogs deletes a deleted durable stream's data.
	RemoveLogs func(def Def)
	// Root sends from the shards' helper goroutines.
	Root *actor.RootContext
	// Store keeps explicit stream definitions; nil keeps them in memory only.
	Store DefStore
	// Defs are the stored definitions, loaded at start.
	Defs []Def
	// OnSpawned, when set, is told of each new shard (for the directory).
	OnSpawned func(pid *actor.PID, mb *actors.Mailbox, scope wire.Scope, shard uint32)
}

// registry is the streams supervisor: the parent of every shard, and the
// only place shards are created, so two publishers racing to a new stream
// get the same shard. Only Receive touches it.
type registry struct {
	cfg    RegistryConfig
	defs   map[wire.Scope]Def
	shards map[shardKey]*ShardRef
	// generations counts shards spawned per key, naming replacements.
	generations map[shardKey]int
}

type shardKey struct {
	scope wire.Scope
	shard uint32
}

// RegistryProps returns the props of the streams supervisor.
func RegistryProps(cfg RegistryConfig, created func(*actors.Mailbox)) *actor.Props {
	// One instance across restarts: losing the map would create a second
	// shard for a stream that has one.
	r := &registry{cfg: cfg, defs: make(map[wire.Scope]Def), shards: make(map[shardKey]*ShardRef), generations: make(map[shardKey]int)}
	for _, d := range cfg.Defs {
		r.defs[d.Scope] = d
	}
	return actors.SupervisorPropsFor(func() actor.Actor { return r }, created)
}

func (r *registry) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *GetShard:
		r.handleGetShard(ctx, msg)
	case *GetStream:
		r.handleGetStream(ctx, msg)
	case *CreateStream:
		r.handleCreateStream(ctx, msg)
	case *ListStreams:
		r.handleListStreams(ctx, msg)
	case *DeleteStream:
		r.handleDeleteStream(ctx, msg)
	case *actor.Terminated:
		r.handleTerminated(msg)
	}
}

func (r *registry) handleGetShard(ctx actor.Context, msg *GetShard) {
	key := shardKey{msg.Scope, msg.Shard}
	if ref, ok := r.shards[key]; ok && !ref.Mailbox.IsClosed() {
		ctx.Respond(ref)
		return
	}
	def, err := r.def(msg.Scope, true)
	if err != nil {
		ctx.Respond(&ShardRef{Err: err})
		return
	}
	if msg.Shard >= def.Shards {
		ctx.Respond(&ShardRef{Err: wire.NewError(wire.CodeNotFound, "stream %s has %d shard(s); there is no shard %d", msg.Scope, def.Shards, msg.Shard)})
		return
	}
	sh := newShard(msg.Scope, r.cfg.Shard, r.cfg.Log, r.cfg.OnStats)
	if def.Durable {
		if r.cfg.OpenLog == nil {
			ctx.Respond(&ShardRef{Err: wire.NewError(wire.CodeStorage, "stream %s is durable but this broker has no durable storage", msg.Scope)})
			return
		}
		log, onCommit, err := r.cfg.OpenLog(def, msg.Shard)
		if err != nil {
			// A log that will not open (corruption, an unwritable directory)
			// refuses the shard clearly; it is never silently emptied.
			ctx.Respond(&ShardRef{Err: wire.NewError(wire.CodeStorage, "open the log of %s shard %d: %v", msg.Scope, msg.Shard, err)})
			return
		}
		sh.log, sh.root = log, r.cfg.Root
		sh.next = log.NextOffset()
		sh.delivered = sh.next
		if onCommit {
			sh.waits = make(chan durableWait, max(1, r.cfg.PubQueueDepth))
		}
	}
	ref := &ShardRef{}
	props := actors.Props(
		// The same instance on every restart: see shard.handleRestarting.
		func() actor.Actor { return sh },
		actors.MailboxConfig{Capacity: r.cfg.PubQueueDepth, Policy: actors.Block, OnDrop: failPublish},
		func(m *actors.Mailbox) { ref.Mailbox = m },
	)
	// A replacement for a stopped shard gets a new name: the old one's
	// death may not be final in protoactor's registry yet, and reusing the
	// name would fail the spawn ("name exists").
	name := ShardName(msg.Scope, msg.Shard)
	if gen := r.generations[key]; gen > 0 {
		name = fmt.Sprintf("%s.%d", name, gen)
	}
	r.generations[key]++
	pid, err := ctx.SpawnNamed(props, name)
	if err != nil {
		ctx.Respond(&ShardRef{Err: fmt.Errorf("streams: spawn shard %s: %w", msg.Scope, err)})
		return
	}
	ref.PID = pid
	ref.Durable = def.Durable
	ref.Log = sh.log
	if r.cfg.OnSpawned != nil {
		r.cfg.OnSpawned(pid, ref.Mailbox, msg.Scope, msg.Shard)
	}
	ctx.Watch(pid)
	r.shards[key] = ref
	ctx.Respond(ref)
}

// handleTerminated forgets a stopped shard. The registry hears of a death
// twice (as parent and as watcher), and a replacement may already stand at
// the key: only the entry of the actor that died is removed.
func (r *registry) handleTerminated(msg *actor.Terminated) {
	for k, ref := range r.shards {
		if ref.PID.Equal(msg.Who) {
			delete(r.shards, k)
			return
		}
	}
}

// ShardName is a shard's actor name under the streams supervisor. ':' cannot
// occur in a valid name, so the mapping is unambiguous.
func ShardName(scope wire.Scope, shard uint32) string {
	return fmt.Sprintf("%s:%s:%s:%d", scope.Tenant, scope.Namespace, scope.Stream, shard)
}

// Lookup asks the registry for a shard from outside the actor system.
func Lookup(root *actor.RootContext, registry *actor.PID, scope wire.Scope, shard uint32, timeout time.Duration) (*ShardRef, error) {
	res, err := root.RequestFuture(registry, &GetShard{Scope: scope, Shard: shard}, timeout).Result()
	if err != nil {
		return nil, fmt.Errorf("streams: look up %s: %w", scope, err)
	}
	ref := res.(*ShardRef)
	if ref.Err != nil {
		return nil, ref.Err
	}
	return ref, nil
}

// failPublish answers a publish the shard will never handle because it
// stopped with the publish still queued.
func failPublish(msg any, _ actors.DropReason) {
	if env, ok := msg.(*actor.MessageEnvelope); ok {
		msg = env.Message
	}
	switch m := msg.(type) {
	case *Publish:
		if m.Done != nil {
			m.Done(0, false, ErrShardStopped)
		}
	case *durableDone:
		if m.p.Done != nil {
			m.p.Done(0, false, ErrShardStopped)
		}
	}
}
