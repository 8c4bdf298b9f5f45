// Package streams owns stream shards: the actor that admits publishes for one
// (tenant, namespace, stream, shard), keeps its subscriber set and replay
// ring, and fans every publish batch out to the subscribers' feeder mailboxes
// as one shared Envelope. It also owns the registry of stream definitions and
// the supervisor that creates shards on first use.
//
// The publish pipeline (publish.go) reads as its steps. Check: a
// publish_if's ExpectedOffset, here where offsets are assigned so nothing
// comes between the check and the write (a mismatch is refused
// offset_mismatch with the tail); an idempotent producer's sequence against
// the shard's producer table (the next one is written with its stamp, a
// re-send of one of the last 64 batches is answered Duplicate with its
// original offset and writes nothing, anything else is a ProducerError).
// Assign offsets. Append (a durable stream; a page-cache write). Wait for
// durability (under on_commit the batch goes to the fsync waiter, which
// sends it back as durableDone in append order). Deliver (ring, then
// fanout: TryPost with no wait, or under block at most BlockMaxWait per
// full subscriber, which is then evicted, SubscriberEvicted). Answer, once
// (Done(PublishResult)). Every publish accepted and not answered is in the
// ledger: a restart fails the one in hand with shard_unavailable, a stop
// fails them all, and nothing is answered twice. The fsync waiter and the
// retention ticker each have a Stop after which nothing fires.
//
// A durable shard opens (recovers) its own log in its Started handler and
// rebuilds its producer table from the log's stamps; publishes queued
// meanwhile are answered after it, with the storage error if the log will
// not open (the shard then stops; the next request tries again). A shard
// whose log fails (a write or fsync error) stops too. An in-memory shard
// with no subscriber and no publish for stream_idle_timeout_ms stops itself
// and tells the registry, which forgets an implicit stream's definition.
//
// A replicated shard (replicated.go) drives a Replica the broker provides:
// the leader checks a publish against its proposed tail and proposes it
// (a refusal resting on entries in flight waits until they applied);
// every replica applies committed entries (producer table, fanout, the
// readers' end), and the leader answers a publish when its entry applies at
// the index and term it was proposed at. A reader asks first (ConfirmRead,
// reads.go): the leader answers once raft's ReadIndex confirmed its
// leadership and it applied up to the read's index, one ReadIndex out at a
// time for every read that arrived meanwhile; a follower refuses
// not_leader, or serves a follower read from what it applied. Ready runs when the mailbox is
// idle, every 256 proposals and on each 100 ms tick. A leader that steps
// down answers what it proposed leadership_lost (outcome unknown). Peer
// messages arrive as control traffic bounded by PeerInbox; HostReplica
// makes a member run its replica without a client.
//
// A cache's shard (cache.go) keeps a key index over its records: a cache
// write is a one-record publish the shard stamps with its clock, applied
// to the index where every committed batch passes (publishBatch), on
// every replica, and answered with what it did; reads come from the
// applied index (a replicated cache's leader only); an index is rebuilt
// from the log on open; expired keys are written as expire records.
//
// Commit watches (commits.go): whoever waits for a shard's next records
// (a Kafka Fetch's long poll, a group actor's parked polls) registers a
// CommitWaker (WatchCommitted), and the shard wakes it without blocking at
// every advance of its committed end, which every path goes through
// publishBatch for: a delivered publish, and every applied entry on a
// leader or a follower. At most 1024 a shard; one that reports itself gone
// is dropped, and a stop wakes them all a last time.
//
// What a restart keeps: the same instance, so its subscribers, ring, log,
// waiter, ticker and (replicated) raft replica; the publish in hand fails
// shard_unavailable, publishes waiting for their fsync or their commit are
// answered normally. A stop fails every publish in flight with
// shard_unavailable (queued ones through the mailbox's drop hook); its
// feeders watch it and stop; the supervisor forgets it, and the next
// request makes a new shard (in memory, what the old one held is lost). The
// registry restarted keeps its definitions and loses only the request in
// hand; it has no children, so nothing else notices.
package streams

import (
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/cache"
	"github.com/getfelix/felix-go/internal/probe"
	"github.com/getfelix/felix-go/wire"
)

// Messages a shard accepts. The shard's mailbox is the publish queue
// (pub_queue_depth, policy block): a publisher waits there, then gets
// overloaded. Registration is control traffic and never waits behind publishes.

// Publish appends a batch and fans it out. Done, if set, is called exactly
// once: on the shard's goroutine once every subscriber with room has the
// batch (on a durable stream: once it is durable under on_commit, or written
// to the log otherwise), or with the error that stopped it; or by the
// mailbox's drop hook if the shard stopped with the publish still queued.
// It must not block.
type Publish struct {
	Payloads [][]byte
	// ExpectedOffset, when set, makes the publish conditional: it is
	// written only if the stream's next offset is *ExpectedOffset, and
	// fails with *OffsetMismatchError otherwise (nothing written, no offset
	// used). Durable streams only.
	ExpectedOffset *uint64
	// Producer, when set, makes the publish idempotent: the shard writes
	// the batch only if Seq is the producer's next sequence, answers a
	// re-send of a batch it remembers as Duplicate with its original offset,
	// and refuses anything else with *ProducerError (nothing written).
	// Durable streams only, and never with ExpectedOffset.
	Producer *ProducerSeq
	Done     func(PublishResult)
	// Cache, on a cache's shard and only there, is the write this
	// publish is (Payloads are the shard's to make: leave them nil).
	Cache *CacheOp
	// Attrs, when set, are the records' attributes (a key and headers,
	// encoded by the caller; nil for a record without), parallel to
	// Payloads: a durable shard writes them with the records (AttrsLog).
	// Subscribers get the payloads only.
	Attrs [][]byte
	// Received is when the broker took the publish (unix ns), carried to
	// the subscribers' writes for the delivery latency metric; 0 is not
	// timed.
	Received int64
}

// PublishResult answers a Publish: the batch's first offset and whether the
// stream is durable, or the error that stopped it.
type PublishResult struct {
	Base    uint64
	Durable bool
	// Duplicate: a re-send of a remembered batch: Base is its original
	// first offset; nothing was written.
	Duplicate bool
	// Cache is what a cache write did when it applied (Base is its
	// offset, the version it gave its key).
	Cache *cache.Result
	// AppendTime is a written batch's append time (Envelope.Appended).
	AppendTime time.Time
	Err        error
}

// AddSubscriber registers a feeder's mailbox. The shard responds with
// *SubscriberAdded once the subscriber will see every later publish.
type AddSubscriber struct {
	actors.ControlMessage
	ID     uint64
	Feeder *actors.Mailbox
	// Backlog asks for the replay ring's batches (an in-memory stream's
	// history), returned in SubscriberAdded.
	Backlog bool
}

// SubscriberAdded answers AddSubscriber. Live is the offset of the first
// record the new subscriber will receive from the shard (every record from it
// on reaches its queue); Start is the oldest record retention kept. On a
// durable stream everything below Live is on disk, so [requested, Live) can
// be read from the log with nothing lost in between: register, then read.
type SubscriberAdded struct {
	ID    uint64
	Live  uint64
	Start uint64
	// Backlog is the ring's batches, oldest first, when asked: everything
	// before Live the shard still holds in memory. They are immutable and
	// shared: the caller only reads their frames.
	Backlog []*Envelope
}

// RemoveSubscriber forgets a subscriber. A closed feeder mailbox is also
// forgotten on the next publish, so this is an optimisation, not a duty.
type RemoveSubscriber struct {
	actors.ControlMessage
	ID uint64
}

// Messages a shard emits besides the answers above.

// SubscriberEvicted is posted into a feeder's mailbox when, under block, it
// stayed full past ShardConfig.BlockMaxWait: the shard has forgotten it, and
// it gets nothing more. ResumeFrom is the base offset of the batch it did not
// get (meaningful on a durable stream: a resume from there loses nothing).
type SubscriberEvicted struct {
	actors.ControlMessage
	ResumeFrom uint64
}

// ErrShardRestarted fails a publish that was in the shard when it crashed.
var ErrShardRestarted = wire.NewError(wire.CodeShardUnavailable, "shard restarted while handling the publish; it may or may not have been delivered")

// ErrShardStopped fails a publish still queued when its shard stopped.
var ErrShardStopped = wire.NewError(wire.CodeShardUnavailable, "shard stopped before handling the publish; it was not delivered")

// errStoppedInFlight fails a publish the shard had accepted but not answered
// when it stopped (one waiting for its fsync, most often).
var errStoppedInFlight = wire.NewError(wire.CodeShardUnavailable, "shard stopped while handling the publish; it may or may not have been delivered")

// ShardConfig bounds one shard.
type ShardConfig struct {
	// SubscriberPolicy is the stream's overflow policy; under Block the shard
	// waits on full subscribers after serving the ones with room.
	SubscriberPolicy actors.Policy
	// BlockMaxWait bounds the wait on one full subscriber under Block
	// (subscriber_block_max_wait_ms; zero: 30 s). Past it the subscriber is
	// evicted (SubscriberEvicted), so one stalled reader cannot hold every
	// publisher of the shard for ever.
	BlockMaxWait time.Duration
	// RingRecords and RingBytes bound the replay ring.
	RingRecords int
	RingBytes   int64
	// RetentionInterval is how often a durable shard enforces retention
	// (zero: 10 s).
	RetentionInterval time.Duration
	// IdleTimeout stops an in-memory shard that had no subscriber and no
	// publish for this long (stream_idle_timeout_ms; zero: never).
	IdleTimeout time.Duration
	// OnIdle, when set, is told of a shard stopping for being idle, before
	// it stops; it must not block.
	OnIdle func(scope wire.Scope, shard uint32)
	// OnBlocked, when set, is called with true when the shard starts waiting
	// on a full subscriber (block) and false when it stops, so a shard
	// parked indefinitely is visible while it is parked.
	OnBlocked func(waiting bool)
	// RemoveShardData, when set, deletes a shard's log once the shard
	// stopped because its replica was moved to another member.
	RemoveShardData func(scope wire.Scope, shard uint32)
	// CacheResumeWindow keeps a durable cache's records newer than this out
	// of compaction, so a watcher may resume past them
	// (cache_resume_window_ms; zero: no window, every record in a sealed
	// segment may be compacted).
	CacheResumeWindow time.Duration
	// OnCacheCompacted, when set, is told of every compaction a cache
	// shard commits; it must not block.
	OnCacheCompacted func(*CacheCompacted)
	// RingTotal, when set, bounds every shard's ring together
	// (replay_ring_max_bytes_total): a ring that cannot take a batch from it
	// gives up its own oldest batches first.
	RingTotal *actors.ByteBudget

	// beforeStep, set only by tests, runs at each step of a publish, so a
	// test can make the shard panic there.
	beforeStep func(step)
	// maxProducers, set only by tests, replaces defaultMaxProducers.
	maxProducers int
	// now, set only by tests, replaces time.Now as a cache's clock;
	// cacheExpiryInterval replaces cacheExpiryInterval.
	now                 func() time.Time
	cacheExpiryInterval time.Duration
	// watchHistoryChanges, set only by tests, replaces watchHistoryChanges.
	watchHistoryChanges int
}

// defaultBlockMaxWait is the wait on a full subscriber under block when
// ShardConfig.BlockMaxWait is zero: long enough for a reader that pauses
// (a GC, a slow disk), short enough that publishers see overloaded, not a
// hang.
const defaultBlockMaxWait = 30 * time.Second

// FanoutStats are reported per publish so the broker can count without the
// shard knowing about metrics. The shard reuses one for every publish: a
// receiver reads it during the call and keeps no pointer to it.
type FanoutStats struct {
	Scope      wire.Scope
	Records    int
	Bytes      int64
	Delivered  int // subscribers that took the batch
	Evicting   int // of those, how many evicted older batches to take it
	Dropped    int // subscribers whose queue refused it
	Evicted    int // subscribers removed for staying full past BlockMaxWait
	BlockedFor time.Duration
	// A cache's watches: changes taken by watchers' queues, and watchers
	// forgotten because their queue was full (their watch ends lagged).
	WatchDelivered, WatchLagged int
}

type subscriber struct {
	id     uint64
	feeder *actors.Mailbox
}

// shard is the actor for one shard. Every field is owned by Receive; the
// waiter and the retention ticker only send it messages.
type shard struct {
	scope   wire.Scope
	n       uint32
	cfg     ShardConfig
	logger  zerolog.Logger
	onStats func(*FanoutStats)
	stats   FanoutStats // the current publish's, reused (see FanoutStats)
	ref     *ShardRef   // tells readers when the log is open
	// open opens (recovering) a durable stream's log and says whether acks
	// wait for the fsync; nil for an in-memory stream. It runs once, after
	// Started, on this shard's goroutine.
	open func() (log Log, onCommit bool, err error)
	// fence, in a cluster, is this member's ownership of the shard: the
	// shard takes and acknowledges publishes only while it holds. Nil on
	// a single broker.
	fence     Fence
	waitDepth int
	root      *actor.RootContext
	self      *actor.PID
	started   bool
	stopping  bool             // asked itself to stop: its log failed
	log       Log              // nil until open succeeded
	waiter    *syncWaiter      // on_commit only
	retention *retentionTicker // durable only
	idle      *retentionTicker // in-memory only, with an IdleTimeout
	lastUsed  time.Time        // the last publish or subscriber change (idle check)
	ledger    ledger
	producers *producerTable // idempotent producers (durable only)
	// openReplica, for a replicated shard, starts its raft side over the
	// opened log; repl is that side once started.
	openReplica func(log Log, inbox *PeerInbox) (Replica, error)
	repl        *replicated
	cache       *cacheState // a cache's shard only (cache.go)
	subs        []subscriber
	watchers    []CommitWaker // commits.go
	ring        ring
	next        uint64       // records appended so far: the next record's offset
	delivered   uint64       // the offset after the last batch fanned out
	full        []subscriber // scratch: subscribers that were full (block)
}

func newShard(scope wire.Scope, n uint32, cfg ShardConfig, log zerolog.Logger, onStats func(*FanoutStats)) *shard {
	return &shard{
		scope: scope, n: n, cfg: cfg, onStats: onStats,
		logger:    log.With().Str("stream", scope.String()).Uint32("shard", n).Logger(),
		ring:      ring{maxRecords: cfg.RingRecords, maxBytes: cfg.RingBytes, total: cfg.RingTotal},
		producers: newProducerTable(cfg.maxProducers),
	}
}

func (s *shard) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		s.handleStarted(ctx)
	case *actor.Restarting:
		s.handleRestarting()
	case *Publish:
		s.handlePublish(msg)
	case *AddSubscriber:
		s.handleAddSubscriber(ctx, msg)
	case *RemoveSubscriber:
		s.handleRemoveSubscriber(msg)
	case *ConfirmRead:
		s.handleConfirmRead(msg, s.replyTo(ctx))
	case *WatchCommitted:
		s.handleWatchCommitted(msg)
	case *UnwatchCommitted:
		s.handleUnwatchCommitted(msg)
	case *durableDone:
		s.handleDurable(msg)
	case *enforceRetention:
		s.handleEnforceRetention()
	case *checkIdle:
		s.handleCheckIdle(ctx)
	case *replicaTick:
		s.handleReplicaTick()
	case *peerMessage:
		s.handlePeerMessage(msg)
	case *memberGone:
		s.handleMemberGone(msg)
	case *CacheGet:
		s.handleCacheGet(ctx, msg)
	case *CacheList:
		s.handleCacheList(ctx, msg)
	case *CounterGet:
		s.handleCounterGet(ctx, msg)
	case *StateGet:
		s.handleStateGet(ctx, msg)
	case *AddWatcher:
		s.handleAddWatcher(ctx, msg)
	case *expireDue:
		s.handleExpireDue()
	case *CacheFloor:
		s.handleCacheFloor(ctx)
	case *CacheStatus:
		s.handleCacheStatus(ctx)
	case *cacheCompactionDone:
		s.handleCacheCompactionDone()
	case *actor.Stopped:
		s.handleStopped()
	default:
		s.logger.Debug().Type("message", msg).Msg("shard ignored message")
	}
}

// handleStarted opens a durable shard's log, on this shard's goroutine:
// recovery can take a while, and it blocks only this shard (publishes queue
// meanwhile and are answered in order after it), never the supervisor or
// the registry. A log that will not open stops the shard; queued publishes
// fail with its storage error and the next request makes a new shard, which
// tries again.
func (s *shard) handleStarted(ctx actor.Context) {
	if s.started {
		// A restart: the log, waiter and ticker still run. If the open
		// itself crashed, there is no log: stop, so the next request retries.
		if s.open != nil && s.log == nil {
			ctx.Stop(ctx.Self())
		}
		return
	}
	s.started = true
	s.self = ctx.Self()
	if s.open == nil {
		s.startIdleTicker()
		s.startCacheTicker(ctx.Self())
		return
	}
	if err := s.openLog(ctx.Self()); err != nil {
		s.logger.Warn().Err(err).Msg("durable log did not open; shard stops")
		ctx.Stop(ctx.Self())
		return
	}
	s.startCacheTicker(ctx.Self())
}

// handleRestarting keeps the subscriber set and ring (the producer returns
// this same instance: losing them would silently end every subscription) and
// fails the publish that was in hand, so its publisher is not left waiting
// for an ack that can never come. Publishes waiting for their fsync are not
// in hand: the waiter still hands them back.
func (s *shard) handleRestarting() {
	s.ledger.failInHand(ErrShardRestarted)
	clear(s.full)
	s.full = s.full[:0]
}

// handlePublish runs a publish through its steps; each step answers the
// publish itself when it ends it early.
func (s *shard) handlePublish(p *Publish) {
	probe.Mark(probe.ShardReceive)
	s.used()
	pe := s.ledger.accept(p)
	if s.cache != nil || p.Cache != nil {
		inner, err := s.cachePublish(p)
		if err != nil {
			s.ledger.answer(pe, PublishResult{Err: err})
			return
		}
		// The same Done: the inner publish is the one answered, once.
		pe = s.ledger.accept(inner)
		p = inner
	}
	if s.repl != nil {
		s.publishReplicated(pe, p)
		return
	}
	s.at(stepCheck)
	adm, err := s.check(p)
	if err != nil {
		s.ledger.answer(pe, PublishResult{Err: err})
		return
	}
	if adm.dup != nil {
		s.answerDuplicate(pe, adm.dup)
		return
	}
	env := s.assignOffsets(p)
	s.at(stepAppend)
	if err := s.append(env, adm.stamp); err != nil {
		s.ledger.answer(pe, PublishResult{Err: err})
		s.stopIfLogFailed()
		return
	}
	if s.waiter != nil {
		s.awaitDurable(pe, env)
		return
	}
	s.deliver(pe, env)
}

// handleDurable delivers a batch whose fsync completed, in append order.
func (s *shard) handleDurable(msg *durableDone) {
	if !s.ledger.resume(msg.pe) {
		return // already answered (the shard stopped meanwhile)
	}
	s.at(stepDurable)
	if msg.err != nil {
		s.ledger.answer(msg.pe, PublishResult{Err: wire.WrapError(wire.CodeStorage, msg.err, "sync %s", s.scope)})
		s.stopIfLogFailed()
		return
	}
	if msg.dup != nil {
		s.ledger.answer(msg.pe, *msg.dup)
		return
	}
	s.deliver(msg.pe, msg.env)
}

// stopIfLogFailed stops the shard once its log takes no more appends
// (Log.Failed: a write or fsync failed, a full disk most often). Keeping it
// would fail every publish until a restart; stopped, it closes
// the log (handleStopped), its subscriptions end (their feeders watch it),
// and the next request makes a new shard that opens the log again, which
// truncates what the failure left and works once the disk has room.
func (s *shard) stopIfLogFailed() {
	if s.log == nil || s.stopping {
		return
	}
	if err := s.log.Failed(); err != nil {
		s.stopping = true
		s.logger.Warn().Err(err).Msg("durable log failed; shard stops, the next request reopens the log")
		s.root.Stop(s.self)
	}
}

func (s *shard) handleAddSubscriber(ctx actor.Context, msg *AddSubscriber) {
	s.used()
	s.subs = append(s.subs, subscriber{id: msg.ID, feeder: msg.Feeder})
	added := &SubscriberAdded{ID: msg.ID, Live: s.delivered}
	if s.log != nil {
		added.Start = s.log.StartOffset()
	}
	if msg.Backlog {
		added.Backlog = append([]*Envelope(nil), s.ring.envs...)
	}
	ctx.Respond(added)
}

// replyTo is how to answer the message in hand later, from another
// Receive: a read waits for its confirmation.
func (s *shard) replyTo(ctx actor.Context) readWaiter {
	sender := ctx.Sender()
	return func(res any) {
		if sender != nil {
			s.root.Send(sender, res)
		}
	}
}

func (s *shard) handleRemoveSubscriber(msg *RemoveSubscriber) {
	s.removeSubscriber(msg.ID)
}

// removeSubscriber forgets subscriber (or cache watcher) id, if the
// shard has it.
func (s *shard) removeSubscriber(id uint64) {
	s.used()
	if s.removeWatcher(id) {
		return
	}
	for i, sub := range s.subs {
		if sub.id == id {
			s.subs = slices.Delete(s.subs, i, i+1)
			return
		}
	}
}

// ring keeps the most recent envelopes, bounded by record count and payload
// bytes; the oldest go first. It is the in-memory history a resume reads.
type ring struct {
	maxRecords int
	maxBytes   int64
	total      *actors.ByteBudget
	envs       []*Envelope
	records    int
	bytes      int64
}

func (r *ring) push(e *Envelope) {
	if r.maxRecords <= 0 {
		return
	}
	// Make room in the shared total first: from this ring's own oldest,
	// never from another shard's, so one busy stream cannot empty the
	// others' history. An empty ring still takes one batch (forced).
	drop := 0
	for !r.total.TryAcquire(e.bytes) {
		if drop == len(r.envs) {
			r.total.ForceAcquire(e.bytes)
			break
		}
		drop = r.evict(drop)
	}
	r.envs = append(r.envs, e)
	r.records += e.Len()
	r.bytes += e.bytes
	for len(r.envs)-drop > 1 && (r.records > r.maxRecords || (r.maxBytes > 0 && r.bytes > r.maxBytes)) {
		drop = r.evict(drop)
	}
	if drop > 0 {
		clear(r.envs[:drop])
		r.envs = r.envs[drop:]
	}
}

// evict forgets the envelope at index i (the oldest not yet evicted) and
// returns the next index.
func (r *ring) evict(i int) int {
	old := r.envs[i]
	r.records -= old.Len()
	r.bytes -= old.bytes
	r.total.Release(old.bytes)
	return i + 1
}
