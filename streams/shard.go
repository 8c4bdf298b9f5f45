// Package streams owns stream shards: the actor that admits publishes for one
// (tenant, namespace, stream, shard), keeps its subscriber set and replay
// ring, and fans every publish batch out to the subscribers' feeder mailboxes
// as one shared Envelope. It also owns the registry that creates shards on
// first use.
package streams

import (
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/wire"
)

// Messages a shard accepts. The shard's mailbox is the publish queue
// (pub_queue_depth, policy block): a publisher waits there, then gets
// overloaded. Registration is control traffic and never waits behind publishes.

// Publish appends a batch and fans it out. Done, if set, is called exactly
// once, on the shard's goroutine, once every subscriber with room has the
// batch (on a durable stream: once it is durable under on_commit, or written
// to the log otherwise), with the batch's first offset and whether the
// stream is durable; or with the error that stopped it. It must not block.
type Publish struct {
	Payloads [][]byte
	Done     func(base uint64, durable bool, err error)
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

// ErrShardRestarted fails a publish that was in the shard when it crashed.
var ErrShardRestarted = wire.NewError(wire.CodeShardUnavailable, "shard restarted while handling the publish; it may or may not have been delivered")

// ErrShardStopped fails a publish still queued when its shard stopped.
var ErrShardStopped = wire.NewError(wire.CodeShardUnavailable, "shard stopped before handling the publish; it was not delivered")

// ShardConfig bounds one shard.
type ShardConfig struct {
	// SubscriberPolicy is the stream's overflow policy; under Block the shard
	// waits on full subscribers after serving the ones with room.
	SubscriberPolicy actors.Policy
	// RingRecords and RingBytes bound the replay ring.
	RingRecords int
	RingBytes   int64
	// RetentionInterval is how often a durable shard enforces retention
	// (zero: 10 s).
	RetentionInterval time.Duration
	// OnBlocked, when set, is called with true when the shard starts waiting
	// on a full subscriber (block) and false when it stops, so a shard
	// parked indefinitely is visible while it is parked.
	OnBlocked func(waiting bool)
	// RingTotal, when set, bounds every shard's ring together
	// (replay_ring_max_bytes_total): a ring that cannot take a batch from it
	// gives up its own oldest batches first.
	RingTotal *actors.ByteBudget
}

// FanoutStats are reported per publish so the broker can count without the
// shard knowing about metrics.
type FanoutStats struct {
	Scope      wire.Scope
	Records    int
	Bytes      int64
	Delivered  int // subscribers that took the batch
	Evicting   int // of those, how many evicted older batches to take it
	Dropped    int // subscribers whose queue refused it
	BlockedFor time.Duration
}

type subscriber struct {
	id     uint64
	feeder *actors.Mailbox
}

// shard is the actor for one shard. Every field is owned by Receive.
type shard struct {
	scope   wire.Scope
	cfg     ShardConfig
	logger  zerolog.Logger
	onStats func(*FanoutStats)
	// log is the durable log, nil for an in-memory stream. waits carries
	// appended batches to the waiter goroutine under on_commit (nil
	// otherwise); the waiter sends each back as durableDone, in order.
	log            Log
	waits          chan durableWait
	stopped        atomic.Bool
	root           *actor.RootContext
	retentionTimer *time.Timer

	subs      []subscriber
	ring      ring
	next      uint64            // records appended so far: the next record's offset
	delivered uint64            // the offset after the last batch fanned out
	current   *Publish          // the publish in hand, failed explicitly if we crash
	full      []*actors.Mailbox // scratch: feeders that were full (block)
}

func newShard(scope wire.Scope, cfg ShardConfig, log zerolog.Logger, onStats func(*FanoutStats)) *shard {
	return &shard{
		scope: scope, cfg: cfg, onStats: onStats,
		logger: log.With().Str("stream", scope.String()).Logger(),
		ring:   ring{maxRecords: cfg.RingRecords, maxBytes: cfg.RingBytes, total: cfg.RingTotal},
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
	case *durableDone:
		s.handleDurable(msg)
	case *enforceRetention:
		s.handleEnforceRetention()
	case *actor.Stopped:
		s.handleStopped()
	default:
		s.logger.Debug().Type("message", msg).Msg("shard ignored message")
	}
}

// handleRestarting keeps the subscriber set and ring (the producer returns
// this same instance: losing them would silently end every subscription) and
// fails the publish that was in hand, so its publisher is not left waiting
// for an ack that can never come.
func (s *shard) handleRestarting() {
	if s.current != nil && s.current.Done != nil {
		s.current.Done(0, false, ErrShardRestarted)
	}
	s.current = nil
}

func (s *shard) handlePublish(p *Publish) {
	s.current = p
	defer func() { s.current = nil }()
	env := NewEnvelope(p.Payloads)
	env.Base = s.next
	if s.log == nil {
		s.next += uint64(len(p.Payloads))
		s.deliver(env, p)
		return
	}
	// Durable: claim offsets, write, then (under on_commit) wait for the
	// fsync before anyone sees the batch. The write is a page-cache copy;
	// the wait is not done here but by the shard's waiter goroutine.
	if err := s.log.Append(env.Base, p.Payloads, time.Now()); err != nil {
		if p.Done != nil {
			p.Done(0, false, wire.NewError(wire.CodeStorage, "append to %s: %v", s.scope, err))
		}
		return
	}
	env.Durable = true
	s.next += uint64(len(p.Payloads))
	if s.waits == nil {
		s.deliver(env, p)
		return
	}
	// The waits channel is bounded; when fsyncs fall behind it fills, this
	// Receive waits, the shard's mailbox (the publish queue) fills, and
	// publishers get overloaded: backpressure from the disk to the edge.
	s.waits <- durableWait{upTo: s.next, env: env, p: p}
}

// handleDurable delivers a batch whose fsync completed, in append order.
func (s *shard) handleDurable(msg *durableDone) {
	if msg.err != nil {
		if msg.p.Done != nil {
			msg.p.Done(0, false, wire.NewError(wire.CodeStorage, "sync %s: %v", s.scope, msg.err))
		}
		return
	}
	s.deliver(msg.env, msg.p)
}

// deliver keeps the batch in the ring, fans it out and answers the publisher.
func (s *shard) deliver(env *Envelope, p *Publish) {
	s.delivered = env.Base + uint64(env.Len())
	s.ring.push(env)
	stats := s.fanout(env)
	if p.Done != nil {
		p.Done(env.Base, env.Durable, nil)
	}
	if s.onStats != nil {
		s.onStats(stats)
	}
}

// fanout offers env to every subscriber without waiting, then, under block,
// waits on the ones that were full: a batch reaches every subscriber with
// room before the shard waits on anyone.
func (s *shard) fanout(env *Envelope) *FanoutStats {
	st := &FanoutStats{Scope: s.scope, Records: env.Len(), Bytes: env.bytes}
	s.full = s.full[:0]
	alive := s.subs[:0] // compacted in place: alive never runs ahead of the loop
	for _, sub := range s.subs {
		switch sub.feeder.TryPost(env, 0) {
		case actors.Posted:
			st.Delivered++
		case actors.PostedEvicting:
			st.Delivered++
			st.Evicting++
		case actors.Dropped:
			st.Dropped++
		case actors.TimedOut: // block policy, full
			s.full = append(s.full, sub.feeder)
		case actors.Closed:
			continue // the feeder stopped: forget it
		}
		alive = append(alive, sub)
	}
	clear(s.subs[len(alive):])
	s.subs = alive
	if len(s.full) > 0 {
		start := time.Now()
		if s.cfg.OnBlocked != nil {
			s.cfg.OnBlocked(true)
			defer s.cfg.OnBlocked(false)
		}
		for i, feeder := range s.full {
			// Parks the shard until this subscriber reads or goes away: that
			// is what block promises (nothing dropped, nothing reordered).
			if feeder.TryPost(env, -1).Accepted() {
				st.Delivered++
			}
			s.full[i] = nil
		}
		st.BlockedFor = time.Since(start)
	}
	return st
}

func (s *shard) handleAddSubscriber(ctx actor.Context, msg *AddSubscriber) {
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

func (s *shard) handleRemoveSubscriber(msg *RemoveSubscriber) {
	for i, sub := range s.subs {
		if sub.id == msg.ID {
			s.subs = append(s.subs[:i], s.subs[i+1:]...)
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
