package streams

import (
	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/wire"
)

// The registry owns stream definitions: it is the only place they are
// created, read, listed and deleted (the DefStore I/O happens here), and the
// door to shards: GetShard resolves the definition and forwards the request
// to the shard supervisor, which answers the requester. It has no children,
// so a panic in it (a restart) ends no subscription. Anyone may message it.

// GetShard asks the registry for a shard of a defined stream. The shard
// supervisor responds with *ShardRef; a stream without a definition is
// not_found. It never creates one: callers resolve the definition first
// (GetStream, which makes an implicit stream on first use when asked), so a
// stream deleted between the two requests is reported gone, never re-made
// here as another kind (a deleted durable stream came back in
// memory under publishes).
type GetShard struct {
	actors.ControlMessage
	Scope wire.Scope
	Shard uint32
}

// The definition requests (CreateStream, GetStream, ListStreams,
// DeleteStream) are in defs.go.

// RegistryConfig configures the registry (Store, Defs, RemoveLogs, and
// OpenLog to know durable storage exists) and the shard supervisor (the rest).
type RegistryConfig struct {
	Shard ShardConfig
	// CheckStreams, when set, is asked before a tenant gets a new stream
	// (explicit or implicit), with how many it has (tenant_max_streams).
	CheckStreams func(tenant string, current int) error
	// PubQueueDepth bounds each shard's mailbox.
	PubQueueDepth int
	Log           zerolog.Logger
	// OnStats, when set, receives every publish's fanout stats on the
	// shard's goroutine; the stats are valid only during the call.
	OnStats func(*FanoutStats)
	// OpenLog opens (recovering) the durable log of a shard of a durable
	// stream, and says whether acks wait for the fsync (on_commit). The
	// shard calls it on its own goroutine after it started; nil means this
	// broker has no durable storage.
	OpenLog func(def Def, shard uint32) (log Log, onCommit bool, err error)
	// OpenReplica, in a cluster with a peer link, starts the raft side of
	// a replicated shard over its opened log; the shard calls it on its own
	// goroutine right after OpenLog. Nil: replicated streams cannot serve
	// here (their shards answer storage errors).
	OpenReplica func(def Def, shard uint32, log Log, inbox *PeerInbox) (Replica, error)
	// RemoveLogs deletes a deleted durable stream's data.
	RemoveLogs func(def Def)
	// Root sends from the shards' helper goroutines.
	Root *actor.RootContext
	// Store keeps explicit stream definitions; nil keeps them in memory only.
	Store DefStore
	// Defs are the stored definitions, loaded at start.
	Defs []Def
	// Place, when set (a cluster member), is asked before a shard serves
	// here: it returns this member's ownership, which the shard checks
	// before it takes and before it acknowledges a publish, or the error a
	// client gets (not_leader naming the owner, shard_unavailable). It runs
	// inside the registry's Receive and must not block.
	Place func(def Def, shard uint32) (Fence, error)
	// OnSpawned, when set, is told of each new shard (for the directory).
	OnSpawned func(pid *actor.PID, mb *actors.Mailbox, def Def, shard uint32)
	// NotLoaded, set on a cluster member, says the definitions arrive by
	// DefsChanged, the cluster's as of a join once DefsLoaded follows:
	// until then a stream the registry has not heard of may well exist,
	// so a lookup that misses answers NotLoaded's error (shard_unavailable
	// not_ready), never not_found (nor an empty stream made on first use).
	NotLoaded func() error
}

// registry is the stream definitions' owner. Only Receive touches it.
type registry struct {
	cfg    RegistryConfig
	shards *actor.PID // the shard supervisor
	defs   map[wire.Scope]Def
	// perTenant counts each tenant's definitions, for CheckStreams.
	perTenant map[string]int
	// awaiting: NotLoaded is set, and DefsLoaded has not come yet.
	awaiting bool
}

// RegistryProps returns the props of the registry, a top-level actor beside
// the shard supervisor at shards.
func RegistryProps(cfg RegistryConfig, shards *actor.PID, created func(*actors.Mailbox)) *actor.Props {
	// One instance across restarts: definitions survive a panic (implicit
	// streams are nowhere else).
	r := &registry{cfg: cfg, shards: shards, defs: make(map[wire.Scope]Def), perTenant: make(map[string]int), awaiting: cfg.NotLoaded != nil}
	for _, d := range cfg.Defs {
		r.put(d)
	}
	// The supervisors' props give it their guardian (restart) and mailbox;
	// it has no children to supervise.
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
	case *ShardIdle:
		r.handleShardIdle(msg)
	case *DefsChanged:
		r.handleDefsChanged(ctx, msg)
	case *DefsLoaded:
		r.awaiting = false
	case *StopShard:
		ctx.Send(r.shards, &stopShard{key: shardKey{msg.Scope, msg.Shard}})
	case *HostReplica:
		r.handleHostReplica(ctx, msg)
	}
}

// HostReplica makes sure this member runs its replica of a replicated
// shard (it is in the shard's replica set), whether or not any client asked
// for it: followers must apply what the leader sends. Repeating it is
// harmless; a replica that stopped (its storage failed) starts again.
type HostReplica struct {
	actors.ControlMessage
	Scope wire.Scope
	Shard uint32
}

func (r *registry) handleHostReplica(ctx actor.Context, msg *HostReplica) {
	def, ok := r.defs[msg.Scope]
	if !ok || !def.Replicated() || msg.Shard >= def.Shards || r.cfg.OpenLog == nil {
		return
	}
	ctx.Send(r.shards, &spawnShard{def: def, shard: msg.Shard})
}

// handleShardIdle forgets an implicit stream whose shard stopped for being
// idle: it holds nothing any more, and it no longer counts against its
// tenant's tenant_max_streams. The next publish or subscribe makes it anew.
// An explicit stream keeps its definition (a new shard starts on next use).
func (r *registry) handleShardIdle(msg *ShardIdle) {
	if d, ok := r.defs[msg.Scope]; ok && d.Implicit {
		r.remove(msg.Scope)
	}
}

// handleGetShard resolves the definition and forwards the request, with the
// original requester as sender, so the supervisor answers it directly and
// the registry never waits.
func (r *registry) handleGetShard(ctx actor.Context, msg *GetShard) {
	def, err := r.def(msg.Scope, false)
	if err != nil {
		ctx.Respond(&ShardRef{Err: err})
		return
	}
	if msg.Shard >= def.Shards {
		ctx.Respond(&ShardRef{Err: wire.NewError(wire.CodeNotFound, "stream %s has %d shard(s); there is no shard %d", msg.Scope, def.Shards, msg.Shard)})
		return
	}
	if def.Durable && r.cfg.OpenLog == nil {
		ctx.Respond(&ShardRef{Err: wire.NewError(wire.CodeStorage, "stream %s is durable but this broker has no durable storage", msg.Scope)})
		return
	}
	var fence Fence
	if r.cfg.Place != nil {
		if fence, err = r.cfg.Place(def, msg.Shard); err != nil {
			ctx.Respond(&ShardRef{Err: err})
			return
		}
	}
	ctx.RequestWithCustomSender(r.shards, &spawnShard{def: def, shard: msg.Shard, fence: fence}, ctx.Sender())
}

// Fence is a cluster member's ownership of a shard (cluster.Ownership):
// Check fails once the shard may be owned elsewhere.
type Fence interface {
	Check() error
}

// DefsChanged tells the registry of definitions written or deleted
// elsewhere (a cluster's etcd, by any member). A deleted stream's shards
// stop here as on a local delete.
type DefsChanged struct {
	actors.ControlMessage
	Put     []Def
	Deleted []wire.Scope
}

// DefsLoaded tells a registry with NotLoaded that the DefsChanged before
// it brought the cluster's definitions as of this member's join (sent
// after them, so it arrives after them).
type DefsLoaded struct{ actors.ControlMessage }

// StopShard stops one shard here: its ownership moved to another member.
// Its subscriptions end; queued publishes fail shard_unavailable.
type StopShard struct {
	actors.ControlMessage
	Scope wire.Scope
	Shard uint32
}

func (r *registry) handleDefsChanged(ctx actor.Context, msg *DefsChanged) {
	for _, d := range msg.Put {
		if old, ok := r.defs[d.Scope]; ok && !old.SameSettings(d) {
			// Deleted and made again with other settings while this
			// member missed the delete: the old shards must not serve.
			ctx.Send(r.shards, &stopShards{scope: d.Scope, def: old})
		}
		r.put(d)
	}
	for _, scope := range msg.Deleted {
		d, ok := r.defs[scope]
		if !ok {
			continue
		}
		r.remove(scope)
		ctx.Send(r.shards, &stopShards{scope: scope, def: d})
		if d.Durable && r.cfg.RemoveLogs != nil {
			r.cfg.RemoveLogs(d)
		}
	}
}
