package streams

import (
	"errors"
	"fmt"
	"time"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/internal/probe"
	"github.com/getfelix/felix-go/wire"
)

// The steps of a publish, in order: check, assign offsets, append, wait for
// durability (on_commit), deliver (ring and fanout), answer. Each is its own
// method so handlePublish reads as the list.

// ErrOffsetMismatch matches (errors.Is) every *OffsetMismatchError.
var ErrOffsetMismatch = errors.New("streams: expected offset mismatch")

// OffsetMismatchError refuses a conditional publish whose ExpectedOffset is
// not the stream's next offset. Nothing was written.
type OffsetMismatchError struct {
	Expected uint64 // what the publisher expected
	Tail     uint64 // the offset the next record would have got
}

func (e *OffsetMismatchError) Error() string {
	return fmt.Sprintf("streams: expected offset %d, but the next offset is %d", e.Expected, e.Tail)
}

func (e *OffsetMismatchError) Unwrap() error { return ErrOffsetMismatch }

// ErrConditionalInMemory refuses a conditional publish to an in-memory
// stream: its offsets are not kept across restarts, so there is nothing
// stable to compare against.
var ErrConditionalInMemory = wire.NewError(wire.CodeInvalidRequest, "conditional publishes (an expected offset) need a durable stream")

// step names a point in a publish's life, for ShardConfig.beforeStep.
type step uint8

const (
	stepCheck   step = iota // handlePublish, before anything is written
	stepAppend              // offsets assigned, before the log write
	stepDeliver             // written (and durable), before the fanout
	stepDurable             // handleDurable, the fsync done
)

func (s *shard) at(st step) {
	if s.cfg.beforeStep != nil {
		s.cfg.beforeStep(st)
	}
}

// check refuses a publish before it uses an offset. Order-dependent checks
// live here, where offsets are assigned, so no other publish can come between
// the check and the write: the conditional publish's expected offset, and an
// idempotent producer's sequence (producerTable.check), which may also find
// the batch is a re-send to answer without writing.
func (s *shard) check(p *Publish) (admission, error) {
	if s.fence != nil {
		if err := s.fence.Check(); err != nil {
			return admission{}, err
		}
	}
	if s.open != nil && s.log == nil {
		return admission{}, wire.NewError(wire.CodeStorage, "the log of %s shard %d is not open", s.scope, s.n)
	}
	if p.Producer != nil {
		switch {
		case s.log == nil:
			return admission{}, ErrIdempotentInMemory
		case p.ExpectedOffset != nil:
			return admission{}, errProducerConditional
		}
		return s.producers.check(*p.Producer, payloadDigest(p.Payloads))
	}
	if p.ExpectedOffset == nil {
		return admission{}, nil
	}
	if s.log == nil {
		return admission{}, ErrConditionalInMemory
	}
	if *p.ExpectedOffset != s.next {
		return admission{}, &OffsetMismatchError{Expected: *p.ExpectedOffset, Tail: s.next}
	}
	return admission{}, nil
}

// answerDuplicate answers a re-send of a remembered batch with the
// original's offset. The original may still be waiting for its fsync
// (on_commit, not yet delivered): then the answer waits for it too, in the
// waiter's order, so a Duplicate is never more than the original's ack.
func (s *shard) answerDuplicate(pe *pending, b *producerBatch) {
	res := PublishResult{Base: b.base, Durable: true, Duplicate: true}
	end := b.base + uint64(b.count)
	if s.waiter != nil && end > s.delivered {
		s.ledger.park(pe)
		s.waiter.wait(durableWait{upTo: end, pe: pe, dup: &res})
		return
	}
	s.ledger.answer(pe, res)
}

// assignOffsets gives the batch the next offsets. append claims them.
func (s *shard) assignOffsets(p *Publish) *Envelope {
	env := NewEnvelope(p.Payloads)
	env.Base = s.next
	env.Attrs, env.Published = p.Attrs, p.Received
	return env
}

// append writes a durable batch to the log (a page-cache copy; the fsync is
// the waiter's) and claims its offsets; an idempotent batch goes with its
// stamp, and its producer remembers it at once, before any later step can
// panic. A failed write claims nothing.
func (s *shard) append(env *Envelope, stamp *Stamp) error {
	if s.log != nil {
		var err error
		now := time.Now()
		if al, ok := s.log.(AttrsLog); ok && env.Attrs != nil {
			err = al.AppendWithAttrs(env.Base, env.Payloads, env.Attrs, now, stamp)
		} else if stamp != nil {
			err = s.log.AppendStamped(env.Base, env.Payloads, now, *stamp)
		} else {
			err = s.log.Append(env.Base, env.Payloads, now)
		}
		if err != nil {
			return wire.WrapError(wire.CodeStorage, err, "append to %s", s.scope)
		}
		if stamp != nil {
			s.producers.record(*stamp, env.Base, uint32(env.Len()))
		}
		env.Durable, env.Appended = true, now
	}
	s.next += uint64(env.Len())
	return nil
}

// awaitDurable hands an on_commit batch to the waiter, which sends it back
// as durableDone once its fsync is done. The handoff is bounded: when fsyncs
// fall behind it blocks this Receive, the shard's mailbox (the publish
// queue) fills, and publishers get overloaded: backpressure from the disk to
// the edge.
func (s *shard) awaitDurable(pe *pending, env *Envelope) {
	s.ledger.park(pe)
	s.waiter.wait(durableWait{upTo: s.next, env: env, pe: pe})
}

// deliver keeps the batch in the ring, fans it out and answers the publisher.
func (s *shard) deliver(pe *pending, env *Envelope) {
	s.at(stepDeliver)
	stats := s.publishBatch(env)
	s.ledger.answer(pe, s.fenced(PublishResult{Base: env.Base, Durable: env.Durable, AppendTime: env.Appended, Cache: s.cacheResult()}))
	s.report(stats)
}

// publishCommitted delivers a batch no publisher here waits for: one a
// replicated shard applies as a follower, or as a leader for a predecessor.
func (s *shard) publishCommitted(env *Envelope) {
	s.report(s.publishBatch(env))
}

// publishBatch keeps the batch in the ring, wakes the commit watchers and
// fans it out. The watchers go first: a fanout under block may wait on a
// full subscriber, and a reader of the log need not wait with it.
func (s *shard) publishBatch(env *Envelope) *FanoutStats {
	s.delivered = env.Base + uint64(env.Len())
	if s.cache != nil {
		s.applyCache(env)
	}
	s.ring.push(env)
	s.wakeWatchers()
	st := s.fanout(env)
	if s.cache != nil {
		w := &s.cache.watch
		st.WatchDelivered, st.WatchLagged = w.delivered, w.lagged
		w.delivered, w.lagged = 0, 0
	}
	return st
}

func (s *shard) report(stats *FanoutStats) {
	if s.onStats != nil {
		s.onStats(stats)
	}
}

// fenced turns an acknowledgement into leadership_lost when the shard's
// ownership ended since its check (an on_commit batch waits for its fsync
// in between): an owner that lost its lease acknowledges nothing. The
// batch was delivered here, and may or may not be anywhere else.
func (s *shard) fenced(res PublishResult) PublishResult {
	if s.fence == nil {
		return res
	}
	if err := s.fence.Check(); err != nil {
		return PublishResult{Err: wire.WrapError(wire.CodeLeadershipLost, err, "%s shard %d lost its owner before the acknowledgement; the publish may or may not be kept", s.scope, s.n)}
	}
	return res
}

// fanout offers env to every subscriber without waiting, then, under block,
// waits on the ones that were full: a batch reaches every subscriber with
// room before the shard waits on anyone.
func (s *shard) fanout(env *Envelope) *FanoutStats {
	s.stats = FanoutStats{Scope: s.scope, Records: env.Len(), Bytes: env.bytes}
	st := &s.stats
	s.full = s.full[:0]
	alive := s.subs[:0] // compacted in place: alive never runs ahead of the loop
	probe.Mark(probe.ShardFanout)
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
			s.full = append(s.full, sub)
		case actors.Closed:
			continue // the feeder stopped: forget it
		}
		alive = append(alive, sub)
	}
	clear(s.subs[len(alive):])
	s.subs = alive
	if len(s.full) > 0 {
		s.waitOnFull(env, st)
	}
	return st
}

// waitOnFull parks the shard on each full subscriber in turn, at most
// BlockMaxWait each: that is what block promises (nothing dropped, nothing
// reordered), up to a bound. A subscriber still full after it is evicted and
// told so, rather than holding every publisher of the shard for ever.
func (s *shard) waitOnFull(env *Envelope, st *FanoutStats) {
	start := time.Now()
	if s.cfg.OnBlocked != nil {
		s.cfg.OnBlocked(true)
		defer s.cfg.OnBlocked(false)
	}
	wait := s.cfg.BlockMaxWait
	if wait <= 0 {
		wait = defaultBlockMaxWait
	}
	for i, sub := range s.full {
		switch sub.feeder.TryPost(env, wait) {
		case actors.Posted, actors.PostedEvicting:
			st.Delivered++
		case actors.TimedOut:
			s.removeSubscriber(sub.id)
			// Control traffic: it enters the full queue, after what it holds.
			sub.feeder.TryPost(&SubscriberEvicted{ResumeFrom: env.Base}, 0)
			st.Evicted++
			s.logger.Warn().Uint64("subscription", sub.id).Dur("waited", wait).Msg("subscriber stayed full under block; evicted")
		}
		s.full[i] = subscriber{}
	}
	st.BlockedFor = time.Since(start)
}

// pending is a publish the shard accepted and has not answered yet.
type pending struct {
	p        *Publish
	answered bool
}

// ledger is the shard's publishes in flight: accepted from the mailbox and
// not yet answered. A restart fails the one in hand; a stop fails them all,
// including those waiting for their fsync. answer is the only way a publish
// the shard accepted is answered, and it answers each once. Only Receive
// touches it.
type ledger struct {
	inHand  *pending   // the one the current Receive works on
	syncing []*pending // handed to the waiter under on_commit, in append order
}

// accept takes p in hand.
func (l *ledger) accept(p *Publish) *pending {
	l.inHand = &pending{p: p}
	return l.inHand
}

// park moves pe from hand to the waiter.
func (l *ledger) park(pe *pending) {
	l.syncing = append(l.syncing, pe)
	if l.inHand == pe {
		l.inHand = nil
	}
}

// resume takes a batch back from the waiter into hand. It reports false if
// pe was answered already.
func (l *ledger) resume(pe *pending) bool {
	if pe.answered {
		return false
	}
	// The waiter answers in append order, so pe is the oldest.
	if i := indexOf(l.syncing, pe); i >= 0 {
		l.syncing[i] = nil
		l.syncing = append(l.syncing[:i], l.syncing[i+1:]...)
	}
	l.inHand = pe
	return true
}

func indexOf(ps []*pending, pe *pending) int {
	for i, p := range ps {
		if p == pe {
			return i
		}
	}
	return -1
}

// answer calls pe's Done unless it was answered already.
func (l *ledger) answer(pe *pending, res PublishResult) {
	if l.inHand == pe {
		l.inHand = nil
	}
	if pe.answered {
		return
	}
	pe.answered = true
	if pe.p.Done != nil {
		pe.p.Done(res)
	}
}

// failInHand fails the publish the crashed Receive was working on.
func (l *ledger) failInHand(err error) {
	if l.inHand != nil {
		l.answer(l.inHand, PublishResult{Err: err})
	}
}

// failAll fails every publish in flight.
func (l *ledger) failAll(err error) {
	l.failInHand(err)
	for _, pe := range l.syncing {
		l.answer(pe, PublishResult{Err: err})
	}
	clear(l.syncing)
	l.syncing = l.syncing[:0]
}
