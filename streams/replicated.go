package streams

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/wire"
)

// A replicated shard (Def.Replicas > 1, in a cluster) is one replica of a
// raft group over its members; the group's leader is the shard's owner.
// The shard drives its Replica: a publish on the leader is checked as on
// any durable shard (expected offset, producer sequence) against its tail
// of proposed records, then proposed; it is answered, and fanned out,
// when its entry applies, that is once a quorum has it on disk. A refusal
// that rests on entries still in flight waits for them to apply
// (refuseReplicated), so it never reports a tail no read sees. Every
// replica applies every committed entry in order: subscribers, range
// reads and the producer table see committed records only, the same on
// every replica, so a new leader carries on where the old one stopped.
// Reads are confirmed by the leader with raft's ReadIndex (reads.go). The
// shard never appends to its log itself: raft's storage does, one write
// per record per replica.

// Replica is the raft side of a replicated shard, which the broker builds
// over replication.Replica and the peer link. Only the shard calls it, on
// its own goroutine.
type Replica interface {
	// Propose appends a batch as the group's leader, with its records'
	// attributes when attrs is not nil (Publish.Attrs). The Ticket says,
	// after the next Ready, at which raft index and term it went, or that
	// it was lost with the leadership.
	Propose(records, attrs [][]byte, stamp *Stamp) (Ticket, error)
	// Tick advances raft's clock by one tick: ReplicaTick apart while the
	// group is awake, further apart while it is quiet (replicaclock.go),
	// when raft's clock does not run.
	Tick()
	// Quiet says the replica's group is quiet: it needs no ticks for raft,
	// and anything that wakes it comes as a message, a proposal, a read or
	// MemberGone.
	Quiet() bool
	// MemberGone tells the replica that member node, which its group
	// names, left the cluster or went silent: a quiet group has no
	// heartbeats to notice it by. PeerInbox.MemberGone brings it.
	MemberGone(node string)
	// Step hands raft a message from a peer.
	Step(data []byte) error
	// ReadIndex asks the group, as its leader, to confirm a read: raft's
	// ReadIndex, a heartbeat round a quorum answers. A later Ready hands
	// read the index the read must see applied, with id; one never
	// confirmed (the leadership went) is never handed over.
	ReadIndex(id uint64)
	// LeaderContact is, on a follower, when it last heard from the leader
	// of its term (zero: not in this term), and whether it applied every
	// entry that leader told it was committed.
	LeaderContact() (heard time.Time, caughtUp bool)
	// HasReady reports whether Ready has work.
	HasReady() bool
	// Ready persists, sends, then applies committed entries in index
	// order, and hands over the reads raft confirmed. An error means the
	// replica is unusable (its storage failed).
	Ready(apply func(Applied), read func(id, index uint64)) error
	// Role is the replica's place in the group now.
	Role() Role
	// Removed says the replica set no longer names this member (the
	// replica moved): the shard stops and deletes its log.
	Removed() bool
	// EnforceRetention applies the log's retention to what the replica
	// applied (the shard calls it every RetentionInterval).
	EnforceRetention(now time.Time)
	// Restart says the replica must start again from its storage: it
	// copied its leader's segments, which replace its log when it opens.
	Restart() bool
	// CompactableEnd is the offset below which the shard may compact its
	// log (a cache's, cachecompact.go): the records of entries the replica
	// applied and raft no longer serves, so nothing raft may still send or
	// truncate is rewritten.
	CompactableEnd() uint64
	// CopyingSegments says a follower may be copying this replica's
	// segment files (a snapshot went out, or a chunk was served, lately):
	// a compaction must not swap them under the copy.
	CopyingSegments() bool
	// AppliedEnd is the offset after the records the replica had applied
	// before it started (what its storage knows committed): raft hands
	// over only the entries after them.
	AppliedEnd() uint64
	// Close stops the replica's sends; the shard closes the log after it.
	Close()
}

// Ticket is where a proposal went: its raft index and term, zero until the
// Ready that persisted it, or lost (never given an index: the leadership
// went first).
type Ticket func() (index, term uint64, lost bool)

// Role is a replica's place in its group.
type Role struct {
	Leader bool
	Term   uint64
	// NotLeader, on any replica but the leader, is the error a publish
	// gets: not_leader naming the leader when one is known, else
	// shard_unavailable while the group elects one. Both are retryable.
	NotLeader error
}

// Applied is one committed entry handed to the shard, in index order.
// Entries without records (a new leader's empty entry, membership changes)
// come too: they move the applied term.
type Applied struct {
	Index, Term uint64
	// Base is the first record's offset, identical on every replica.
	Base  uint64
	Time  time.Time
	Stamp *Stamp
	// Records are the values (attributes stay in the log).
	Records [][]byte
}

// ReplicaTick is how often the shard ticks its replica: raft's election
// timeout is five to ten ticks (replication's electionTicks, randomised).
const ReplicaTick = 100 * time.Millisecond

// maxPeerQueued bounds the raft messages from peers queued in a shard's
// mailbox. They are control traffic (a heartbeat must not wait behind the
// publish queue), which the mailbox does not bound, so the inbox does:
// past it a message is dropped, and raft sends again what it needs.
const maxPeerQueued = 1024

// errLeaderCatchingUp answers a publish on a new leader that has not yet
// applied every entry of the terms before its own: until then its producer
// table and tail may miss batches the old leader committed.
var errLeaderCatchingUp = wire.NewError(wire.CodeShardUnavailable, "catching_up: the shard's new leader is applying its predecessor's entries; retry")

// errProposalLost answers a publish whose entry the leadership took with it
// before it was written anywhere.
var errProposalLost = wire.NewError(wire.CodeLeadershipLost, "the shard's leadership moved before the publish was replicated; it was not kept, send it again")

// errEntryReplaced answers a publish whose entry was replaced by another
// leader's: it is not in the log.
var errEntryReplaced = wire.NewError(wire.CodeLeadershipLost, "the shard's leadership moved and a new leader replaced the publish's entry; it was not kept, send it again")

// errLeadershipMoved answers the publishes a leader had proposed and not
// yet seen committed when it stepped down: the new leader may have their
// entries (they will be in the log) or not. Waiting for the answer could
// take as long as a partition lasts.
var errLeadershipMoved = wire.NewError(wire.CodeLeadershipLost, "the shard's leader stepped down before the publish was committed; it may or may not be kept (an idempotent producer sends it again safely)")

// peerMessage is a raft message from a peer, queued as control traffic.
type peerMessage struct {
	actors.ControlMessage
	data []byte
}

// replicaTick is the shard's raft clock.
type replicaTick struct{ actors.ControlMessage }

// memberGone is PeerInbox.MemberGone's message.
type memberGone struct {
	actors.ControlMessage
	node string
}

// PeerInbox takes a replicated shard's raft messages from the peer link
// into its mailbox without waiting, at most maxPeerQueued at a time.
type PeerInbox struct {
	mailbox *actors.Mailbox
	queued  atomic.Int32
}

// Deliver queues data for the shard, or drops it when the inbox is full
// or the shard stopped; it never blocks.
func (in *PeerInbox) Deliver(data []byte) bool {
	if in.queued.Add(1) > maxPeerQueued {
		in.queued.Add(-1)
		return false
	}
	if in.mailbox.TryPost(&peerMessage{data: data}, 0) != actors.Posted {
		in.queued.Add(-1)
		return false
	}
	return true
}

// MemberGone tells the shard's replica that member node is gone
// (Replica.MemberGone), without waiting. It is control traffic, which the
// mailbox takes whatever its queue (unlike Deliver's, not counted against
// maxPeerQueued): the member says it once, so it must not be dropped. It
// is false only once the shard stopped.
func (in *PeerInbox) MemberGone(node string) bool {
	return in.mailbox.TryPost(&memberGone{node: node}, 0) == actors.Posted
}

// replicated is a replicated shard's raft state. Only Receive touches it.
type replicated struct {
	replica Replica
	inbox   *PeerInbox
	clock   *replicaClock
	// retained is when retention last ran.
	retained time.Time
	// tickQueued keeps at most one tick in the mailbox: a shard blocked on
	// a full subscriber must not come back to a backlog of them.
	tickQueued atomic.Bool
	// appliedTerm is the term of the last applied entry. A leader takes
	// publishes only once it applied an entry of its own term: every
	// earlier entry is applied then. appliedIndex is its raft index, which
	// confirmed reads wait for (reads.go).
	appliedTerm, appliedIndex uint64
	// reads are the reads waiting for their confirmation (reads.go).
	reads reads
	// readyTerm is the term in which this replica, as leader, last set its
	// tail (shard.next) from what it applied.
	readyTerm uint64
	// proposed are this leader's publishes awaiting their entry's apply,
	// in proposal order (raft index order).
	proposed []proposal
	// inFlight is each idempotent producer's last proposed, not yet
	// applied, sequence: the producer table holds applied batches only.
	inFlight map[uint64]uint64
	// unreadied counts proposals since the last Ready.
	unreadied int
	// leading: the replica was the leader after the last Ready.
	leading bool
	// removed: the replica moved away; the log is deleted once closed.
	removed bool
}

type proposal struct {
	pe     *pending
	ticket Ticket
	// refusals are the publishes refused against the tail this proposal
	// ended (refuseReplicated): answered once it applied.
	refusals []*refusal
}

// refusal is a refused publish waiting for the entries its refusal rests
// on to commit.
type refusal struct {
	pe  *pending
	err error
}

// errRefusalUnsettled answers a refused publish whose refusal rested on
// entries the leadership took with it: what it was refused against may
// never be in the log. Nothing was written.
var errRefusalUnsettled = wire.NewError(wire.CodeLeadershipLost, "the shard's leadership moved before the entries the publish was checked against committed; it was not written, send it again")

// startReplica starts the raft side after the log opened: the ticker and
// the inbox. What the replica had applied before (up to AppliedEnd) is not
// handed over again: the producer table is rebuilt from the stamps of
// those batches, as an unreplicated shard's is, and raft applies the rest.
func (s *shard) startReplica(log Log) error {
	inbox := &PeerInbox{mailbox: s.ref.Mailbox}
	r, err := s.openReplica(log, inbox)
	if err != nil {
		return err
	}
	end := r.AppliedEnd()
	producers := newProducerTable(s.cfg.maxProducers)
	if err := log.Stamps(log.StartOffset(), func(st Stamp, base uint64, count uint32) bool {
		if base+uint64(count) > end {
			return false // not known committed: raft applies it, if it commits
		}
		producers.record(st, base, count)
		return true
	}); err != nil {
		r.Close()
		return err
	}
	if err := s.rebuildCache(log, end); err != nil {
		r.Close()
		return err
	}
	s.producers = producers
	s.repl = &replicated{replica: r, inbox: inbox, inFlight: make(map[uint64]uint64)}
	s.next, s.delivered = end, end
	s.repl.retained = time.Now()
	self, rp := s.self, s.repl
	s.repl.clock = startReplicaClock(func() {
		if rp.tickQueued.CompareAndSwap(false, true) {
			s.root.Send(self, &replicaTick{})
		}
	})
	return nil
}

func (s *shard) handleReplicaTick() {
	if s.repl == nil {
		return
	}
	s.repl.tickQueued.Store(false)
	if s.repl.clock.ended() {
		return
	}
	s.repl.replica.Tick()
	s.tickReads()
	s.processReady()
	if now := time.Now(); now.Sub(s.repl.retained) >= s.retentionInterval() {
		s.repl.retained = now
		s.repl.replica.EnforceRetention(now)
	}
	s.repl.clock.arm(s.nextReplicaTick())
	switch {
	case s.stopping:
	case s.repl.replica.Removed():
		s.stopping, s.repl.removed = true, true
		s.logger.Info().Msg("replica moved to another member; shard stops and deletes its log here")
		s.root.Stop(s.self)
	case s.repl.replica.Restart():
		s.stopping = true
		s.failProposed(errLeadershipMoved)
		s.logger.Info().Msg("replica copied its leader's segments; shard stops and starts again on them")
		s.root.Stop(s.self)
	}
}

// retentionInterval is how often a replicated shard runs retention.
func (s *shard) retentionInterval() time.Duration {
	if every := s.cfg.RetentionInterval; every > 0 {
		return every
	}
	return defaultRetentionInterval
}

// nextReplicaTick is the interval to the replica's next tick
// (replicaTickEvery).
func (s *shard) nextReplicaTick() time.Duration {
	rd := &s.repl.reads
	waiting := len(s.repl.proposed) > 0 || rd.asked != nil || len(rd.queued) > 0 || len(rd.confirmed) > 0
	quiet := s.repl.replica.Quiet()
	if !quiet || waiting {
		return ReplicaTick
	}
	// Role only now: a follower's builds its not_leader error, too dear
	// for every tick of an awake group.
	return replicaTickEvery(quiet, s.repl.replica.Role().Leader, waiting, s.retentionInterval())
}

// hurryIfAwake brings the fast tick back once the replica is awake (a
// message, a proposal, a read or a member's loss woke it).
func (s *shard) hurryIfAwake() {
	if !s.repl.replica.Quiet() {
		s.repl.clock.hurry()
	}
}

func (s *shard) handleMemberGone(msg *memberGone) {
	if s.repl == nil {
		return
	}
	s.repl.replica.MemberGone(msg.node)
	s.processReady()
	s.hurryIfAwake()
}

func (s *shard) handlePeerMessage(msg *peerMessage) {
	if s.repl == nil {
		return
	}
	s.repl.inbox.queued.Add(-1)
	if err := s.repl.replica.Step(msg.data); err != nil {
		s.logger.Debug().Err(err).Msg("raft message refused")
	}
	s.processReadyIfIdle()
	s.hurryIfAwake()
}

// publishReplicated is handlePublish on a replicated shard: the same
// checks, against the leader's tail of proposed records, then a proposal.
func (s *shard) publishReplicated(pe *pending, p *Publish) {
	role := s.repl.replica.Role()
	switch {
	case !role.Leader:
		s.ledger.answer(pe, PublishResult{Err: role.NotLeader})
		return
	case s.repl.appliedTerm != role.Term:
		s.ledger.answer(pe, PublishResult{Err: errLeaderCatchingUp})
		return
	case s.repl.readyTerm != role.Term:
		// Everything before this term is applied: the tail is what was
		// applied, and nothing of this term is in flight yet.
		s.repl.readyTerm = role.Term
		s.next = s.delivered
		clear(s.repl.inFlight)
	}
	s.at(stepCheck)
	adm, err := s.checkReplicated(p)
	if err != nil {
		s.refuseReplicated(pe, err)
		return
	}
	if adm.dup != nil {
		s.ledger.answer(pe, PublishResult{Base: adm.dup.base, Durable: true, Duplicate: true})
		return
	}
	s.at(stepAppend)
	ticket, err := s.repl.replica.Propose(p.Payloads, p.Attrs, adm.stamp)
	if err != nil {
		s.ledger.answer(pe, PublishResult{Err: wire.WrapError(wire.CodeShardUnavailable, err, "%s shard %d refused the proposal; retry", s.scope, s.n)})
		s.stopIfReplicaFailed(err)
		return
	}
	s.next += uint64(len(p.Payloads))
	if adm.stamp != nil {
		s.repl.inFlight[adm.stamp.Producer] = adm.stamp.Sequence
	}
	s.ledger.park(pe)
	s.repl.proposed = append(s.repl.proposed, proposal{pe: pe, ticket: ticket})
	s.repl.unreadied++
	s.processReadyIfIdle()
	s.hurryIfAwake()
}

// refuseReplicated answers a publish the checks refused. A refusal read
// off the leader's tail or its producers' batches in flight (an offset
// mismatch, a sequence gap) rests on entries not committed yet: answered
// now, it would report a tail no read can see, and be wrong outright if
// those entries were lost with the leadership. So while anything is
// proposed and not applied, a refusal waits for the last entry proposed
// before it: answered when that one applies (everything it rested on has
// committed then, and a read sees the tail it reports), failed
// retryably when that one is lost. Other errors are answered at once.
func (s *shard) refuseReplicated(pe *pending, err error) {
	n := len(s.repl.proposed)
	if n == 0 || !(errors.Is(err, ErrOffsetMismatch) || errors.Is(err, ErrProducer)) {
		s.ledger.answer(pe, PublishResult{Err: err})
		return
	}
	s.ledger.park(pe)
	last := &s.repl.proposed[n-1]
	last.refusals = append(last.refusals, &refusal{pe: pe, err: err})
}

// checkReplicated is check for the leader: a producer with a batch in
// flight continues from it; a re-send of a batch in flight (the last, or
// one before it that has not applied yet either) waits for its outcome,
// which the producer learns by sending it again. Only a sequence the
// producer table holds (applied) is checked against it.
func (s *shard) checkReplicated(p *Publish) (admission, error) {
	if p.Producer != nil && p.ExpectedOffset == nil {
		if last, ok := s.repl.inFlight[p.Producer.ID]; ok {
			applied, known := s.producers.lastWritten(p.Producer.ID)
			switch {
			case p.Producer.Seq == last+1:
				return admission{stamp: &Stamp{Producer: p.Producer.ID, Sequence: p.Producer.Seq, Digest: payloadDigest(p.Payloads)}}, nil
			case p.Producer.Seq > last:
				return admission{}, &ProducerError{Reason: ReasonSequenceGap, Expected: last + 1}
			case p.Producer.Seq == last, !known || p.Producer.Seq > applied:
				return admission{}, errInFlight
			}
		}
	}
	return s.check(p)
}

// errInFlight answers a re-send of an idempotent batch still being
// replicated.
var errInFlight = wire.NewError(wire.CodeShardUnavailable, "in_flight: the batch with this sequence is still being replicated; send it again for its outcome")

// processReadyIfIdle runs Ready once nothing else waits in the mailbox, or
// once maxBatchProposals proposals wait for it: publishes queued together
// then share one Ready, so one fsync on each replica and one append message
// to each follower. The last message of a burst runs it, and every tick
// does, so nothing waits longer than a tick.
func (s *shard) processReadyIfIdle() {
	if s.repl.unreadied < maxBatchProposals && s.ref.Mailbox.UserMessageCount() > 0 {
		return
	}
	s.processReady()
}

// maxBatchProposals bounds the proposals one Ready takes, so a shard that
// is never idle still persists and sends as it goes.
const maxBatchProposals = 256

// processReady runs raft's Ready until it has no more work, then settles
// what it decided: lost proposals, a step-down, confirmed reads. Asking
// for the next ReadIndex makes more work, which runs at once.
func (s *shard) processReady() {
	s.repl.unreadied = 0
	for {
		for s.repl.replica.HasReady() {
			if err := s.repl.replica.Ready(s.applyEntry, s.readConfirmed); err != nil {
				s.stopIfReplicaFailed(err)
				return
			}
		}
		s.settleLost()
		leading := s.repl.replica.Role().Leader
		if s.repl.leading && !leading {
			s.failProposed(errLeadershipMoved)
		}
		s.repl.leading = leading
		s.settleReads(leading)
		if !s.repl.replica.HasReady() {
			return
		}
	}
}

// failProposed answers every publish still waiting for its entry.
func (s *shard) failProposed(err error) {
	for i, p := range s.repl.proposed {
		s.failProposal(p, err)
		s.repl.proposed[i] = proposal{}
	}
	s.repl.proposed = s.repl.proposed[:0]
}

// applyEntry takes one committed entry: its stamp into the producer table,
// its records to the subscribers, and its publish, on the replica that
// proposed it, answered.
func (s *shard) applyEntry(a Applied) {
	s.repl.appliedTerm, s.repl.appliedIndex = a.Term, a.Index
	if len(a.Records) == 0 {
		return
	}
	env := NewEnvelope(a.Records)
	env.Base, env.Durable, env.Appended = a.Base, true, a.Time
	if a.Stamp != nil {
		s.producers.record(*a.Stamp, a.Base, uint32(len(a.Records)))
		if last, ok := s.repl.inFlight[a.Stamp.Producer]; ok && last == a.Stamp.Sequence {
			delete(s.repl.inFlight, a.Stamp.Producer)
		}
	}
	if mine, ok := s.settleUpTo(a.Index, a.Term); ok {
		env.Published = mine.pe.p.Received // timed where it was published: elsewhere its receipt is not known
		s.ledger.resume(mine.pe)
		s.deliver(mine.pe, env)
		for _, r := range mine.refusals {
			if s.ledger.resume(r.pe) {
				s.ledger.answer(r.pe, PublishResult{Err: r.err})
			}
		}
		return
	}
	s.publishCommitted(env)
}

// settleUpTo resolves the proposals whose index is at or before index:
// the one at index with term is the entry applying (returned, still to
// answer); any other there was replaced by another leader's entry.
func (s *shard) settleUpTo(index, term uint64) (mine proposal, ok bool) {
	for len(s.repl.proposed) > 0 {
		head := s.repl.proposed[0]
		at, t, lost := head.ticket()
		if !lost && (at == 0 || at > index) {
			break
		}
		s.repl.proposed[0] = proposal{}
		s.repl.proposed = s.repl.proposed[1:]
		switch {
		case lost:
			s.failProposal(head, errProposalLost)
		case at == index && t == term:
			mine, ok = head, true
		default:
			s.failProposal(head, errEntryReplaced)
		}
	}
	return mine, ok
}

// settleLost fails the proposals at the head that raft reports lost.
func (s *shard) settleLost() {
	for len(s.repl.proposed) > 0 {
		if _, _, lost := s.repl.proposed[0].ticket(); !lost {
			return
		}
		s.failProposal(s.repl.proposed[0], errProposalLost)
		s.repl.proposed[0] = proposal{}
		s.repl.proposed = s.repl.proposed[1:]
	}
}

// failProposal answers a proposal that will not apply, and the refusals
// that rested on it.
func (s *shard) failProposal(p proposal, err error) {
	if s.ledger.resume(p.pe) {
		s.ledger.answer(p.pe, PublishResult{Err: err})
	}
	for _, r := range p.refusals {
		if s.ledger.resume(r.pe) {
			s.ledger.answer(r.pe, PublishResult{Err: errRefusalUnsettled})
		}
	}
}

// stopIfReplicaFailed stops a shard whose replica refuses everything from
// now on (its storage failed under a Ready): a new shard starts over from
// the log on disk.
func (s *shard) stopIfReplicaFailed(err error) {
	if s.stopping || !errors.Is(err, ErrReplicaFailed) {
		return
	}
	s.stopping = true
	s.logger.Error().Err(err).Msg("replica failed; shard stops, and starts again from its log")
	s.root.Stop(s.self)
}

// ErrReplicaFailed matches (errors.Is) a Replica's error after which it
// takes nothing more.
var ErrReplicaFailed = errors.New("streams: replica failed")

// stopReplica stops the ticker and the replica's sends; the log closes
// after.
func (s *shard) stopReplica() {
	if s.repl == nil {
		return
	}
	s.repl.clock.stop()
	s.failReads(errReadShardStopped)
	s.repl.replica.Close()
}
