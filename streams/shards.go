package streams

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/wire"
)

// The shard supervisor is the parent of every shard and the only place
// shards are created, so two publishers racing to a new stream get the same
// shard. It does no I/O and nothing else that can fail: its restart would
// stop every shard. Only the registry messages it.

// spawnShard asks for a definition's shard; the supervisor responds with
// *ShardRef (to the original requester: the registry forwards with it as
// sender).
type spawnShard struct {
	actors.ControlMessage
	def   Def
	shard uint32
	fence Fence
}

// stopShard stops one shard (its ownership moved elsewhere).
type stopShard struct {
	actors.ControlMessage
	key shardKey
}

// stopShards stops a deleted stream's shards; the supervisor responds with
// *StreamResult{Def: def} once their mailboxes refuse publishes.
type stopShards struct {
	actors.ControlMessage
	scope wire.Scope
	def   Def
}

// ShardRef addresses a shard: its PID for actor messages and its mailbox for
// admission with a bounded wait (TryPost), which Send cannot express.
type ShardRef struct {
	PID     *actor.PID
	Mailbox *actors.Mailbox
	Durable bool
	// Replicated: a raft group's replica, whose readers ask it first
	// (ConfirmRead) for a linearizable read.
	Replicated bool
	Err        error
	// fence is the ownership the shard was made under (nil on a single
	// broker).
	fence Fence

	// A durable shard opens its log after it started; openDone is closed
	// when that finished, with log or logErr set. Nil for in-memory.
	openDone chan struct{}
	openOnce sync.Once
	log      Log
	logErr   error
}

// errInMemory answers Log on an in-memory shard.
var errInMemory = wire.NewError(wire.CodeInvalidRequest, "the stream is in memory; it has no log")

// Log waits until a durable shard has opened its log and returns it, for
// readers outside the actor (range reads and replay never go through the
// shard's mailbox); or the storage error that kept it from opening.
func (r *ShardRef) Log(ctx context.Context) (Log, error) {
	if r.openDone == nil {
		return nil, errInMemory
	}
	select {
	case <-r.openDone:
		return r.log, r.logErr
	case <-ctx.Done():
		return nil, fmt.Errorf("streams: wait for the log of %s: %w", r.PID.Id, ctx.Err())
	}
}

// opened records the open's outcome; only the first call counts.
// WatchCommitted registers w with the shard and returns what unregisters
// it. Both are control traffic: they never wait behind the publish queue.
// A shard that stops wakes its watchers a last time (their records come
// from its successor now); one that stopped before the registration
// reached it is the same, so w is woken here.
func (r *ShardRef) WatchCommitted(w CommitWaker, after uint64) (unwatch func()) {
	if r.Mailbox.TryPost(&WatchCommitted{Waker: w, After: after}, 0) == actors.Closed {
		w.Wake()
	}
	return func() { r.Mailbox.TryPost(&UnwatchCommitted{Waker: w}, 0) }
}

func (r *ShardRef) opened(log Log, err error) {
	if r == nil || r.openDone == nil {
		return
	}
	r.openOnce.Do(func() {
		r.log, r.logErr = log, err
		close(r.openDone)
	})
}

// storageErr is the error that kept the log from opening, once known.
func (r *ShardRef) storageErr() error {
	if r.openDone == nil {
		return nil
	}
	select {
	case <-r.openDone:
		if errors.Is(r.logErr, &wire.Error{Code: wire.CodeStorage}) {
			return r.logErr
		}
	default:
	}
	return nil
}

// shardSupervisor owns the shards. Only Receive touches it.
type shardSupervisor struct {
	cfg    RegistryConfig
	shards map[shardKey]*ShardRef
	// generations counts shards spawned per key, naming replacements.
	generations map[shardKey]int
}

type shardKey struct {
	scope wire.Scope
	shard uint32
}

// ShardSupervisorProps returns the props of the shard supervisor.
func ShardSupervisorProps(cfg RegistryConfig, created func(*actors.Mailbox)) *actor.Props {
	// One instance across restarts: losing the map would create a second
	// shard for a stream that has one.
	s := &shardSupervisor{cfg: cfg, shards: make(map[shardKey]*ShardRef), generations: make(map[shardKey]int)}
	return actors.SupervisorPropsFor(func() actor.Actor { return s }, created)
}

func (s *shardSupervisor) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *spawnShard:
		s.handleSpawnShard(ctx, msg)
	case *stopShards:
		s.handleStopShards(ctx, msg)
	case *stopShard:
		s.stop(ctx, msg.key)
	case *actor.Terminated:
		s.handleTerminated(msg)
	}
}

func (s *shardSupervisor) handleSpawnShard(ctx actor.Context, msg *spawnShard) {
	key := shardKey{msg.def.Scope, msg.shard}
	if ref, ok := s.shards[key]; ok && !ref.Mailbox.IsClosed() {
		if ref.fence == msg.fence {
			respond(ctx, ref)
			return
		}
		// A new ownership (this member lost the shard and got it back):
		// the old shard's fence has failed; a new shard serves.
		s.stop(ctx, key)
	}
	ref, sh := s.newShard(msg.def, msg.shard)
	ref.fence, sh.fence = msg.fence, msg.fence
	props := actors.Props(
		// The same instance on every restart: see shard.handleRestarting.
		func() actor.Actor { return sh },
		actors.MailboxConfig{Capacity: s.cfg.PubQueueDepth, Policy: actors.Block, OnDrop: func(m any, _ actors.DropReason) { failQueued(m, ref) }},
		func(m *actors.Mailbox) { ref.Mailbox = m },
	)
	// A replacement for a stopped shard gets a new name: the old one's
	// death may not be final in protoactor's registry yet, and reusing the
	// name would fail the spawn ("name exists").
	name := ShardName(msg.def.Scope, msg.shard)
	if gen := s.generations[key]; gen > 0 {
		name = fmt.Sprintf("%s.%d", name, gen)
	}
	s.generations[key]++
	pid, err := ctx.SpawnNamed(props, name)
	if err != nil {
		respond(ctx, &ShardRef{Err: fmt.Errorf("streams: spawn shard %s: %w", msg.def.Scope, err)})
		return
	}
	ref.PID = pid
	if s.cfg.OnSpawned != nil {
		s.cfg.OnSpawned(pid, ref.Mailbox, msg.def, msg.shard)
	}
	ctx.Watch(pid)
	s.shards[key] = ref
	respond(ctx, ref)
}

// respond answers a request; HostReplica's spawn has no requester.
func respond(ctx actor.Context, msg any) {
	if ctx.Sender() != nil {
		ctx.Respond(msg)
	}
}

// errNoReplication refuses a replicated shard on a member without the
// peer link its raft group needs.
var errNoReplication = errors.New("the stream is replicated, and this member has no peer link (set cluster_tls_ca, cluster_tls_cert and cluster_tls_key)")

// newShard builds a shard and its ref; a durable one opens its log itself.
func (s *shardSupervisor) newShard(def Def, n uint32) (*ShardRef, *shard) {
	ref := &ShardRef{Durable: def.Durable, Replicated: def.Durable && def.Replicated()}
	sh := newShard(def.Scope, n, s.cfg.Shard, s.cfg.Log, s.cfg.OnStats)
	sh.ref, sh.root, sh.waitDepth = ref, s.cfg.Root, s.cfg.PubQueueDepth
	if def.Cache != nil {
		sh.cache = newCacheState(def.Cache, s.cfg.Shard)
	}
	if def.Durable {
		ref.openDone = make(chan struct{})
		openLog := s.cfg.OpenLog
		sh.open = func() (Log, bool, error) { return openLog(def, n) }
		if def.Replicated() {
			open := s.cfg.OpenReplica
			if open == nil {
				// Serving it as one copy would acknowledge what no
				// other member has.
				sh.open = func() (Log, bool, error) { return nil, false, errNoReplication }
			}
			sh.openReplica = func(log Log, inbox *PeerInbox) (Replica, error) { return open(def, n, log, inbox) }
		}
	}
	return ref, sh
}

// stop closes one shard's mailbox at once, then stops it (see
// handleStopShards).
func (s *shardSupervisor) stop(ctx actor.Context, key shardKey) {
	if ref, ok := s.shards[key]; ok {
		ref.Mailbox.Close()
		ctx.Stop(ref.PID)
		delete(s.shards, key)
	}
}

// handleStopShards closes each shard's mailbox at once, then stops it: a
// stop is asynchronous, and until the shard had processed it its mailbox
// would still take publishes for a stream that no longer exists. Publishes
// queued are failed by the mailbox's drop hook (shard_unavailable, not
// delivered); the one in hand finishes first.
func (s *shardSupervisor) handleStopShards(ctx actor.Context, msg *stopShards) {
	for k, ref := range s.shards {
		if k.scope == msg.scope {
			ref.Mailbox.Close()
			ctx.Stop(ref.PID)
			delete(s.shards, k)
		}
	}
	if ctx.Sender() != nil {
		ctx.Respond(&StreamResult{Def: msg.def})
	}
}

// handleTerminated forgets a stopped shard. The supervisor hears of a death
// twice (as parent and as watcher), and a replacement may already stand at
// the key: only the entry of the actor that died is removed.
func (s *shardSupervisor) handleTerminated(msg *actor.Terminated) {
	for k, ref := range s.shards {
		if ref.PID.Equal(msg.Who) {
			delete(s.shards, k)
			return
		}
	}
}

// ShardName is a shard's actor name under the shard supervisor. ':' cannot
// occur in a valid name, so the mapping is unambiguous.
func ShardName(scope wire.Scope, shard uint32) string {
	return fmt.Sprintf("%s:%s:%s:%d", scope.Tenant, scope.Namespace, scope.Stream, shard)
}

// failQueued answers a publish the shard will never handle because it
// stopped with the publish still queued: with the storage error if its log
// never opened, else ErrShardStopped. A queued durableDone needs nothing:
// the shard failed its publish when it stopped.
func failQueued(msg any, ref *ShardRef) {
	if env, ok := msg.(*actor.MessageEnvelope); ok {
		msg = env.Message
	}
	p, ok := msg.(*Publish)
	if !ok || p.Done == nil {
		return
	}
	err := error(ErrShardStopped)
	if serr := ref.storageErr(); serr != nil {
		err = serr
	}
	p.Done(PublishResult{Err: err})
}
