package streams

import (
	"time"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/wire"
)

// Reads of a replicated shard. Readers read the log from their own
// goroutine, up to what the shard applied; on a replicated shard that is
// linearizable only if this replica still leads and has applied every
// entry committed before the read began. A reader asks the shard first
// (ConfirmRead); the leader confirms its leadership with raft's ReadIndex,
// waits until it applied up to the read's index, then answers. One
// ReadIndex is outstanding at a time: the reads that arrive while it is
// out wait for the next one, which covers all of them (as etcd batches
// its linearizable reads), so a read under load costs a share of one
// heartbeat round, not a round of its own. A follower refuses with
// not_leader, unless the reader asks for a follower read.

// ConfirmRead asks a shard whether a read that starts now may read its
// log: answered with *ReadConfirmed once it may, or with a *wire.Error
// (not_leader naming the leader, on a follower; shard_unavailable when the
// leadership could not be confirmed in time, or the shard stopped). An
// unreplicated shard answers at once.
type ConfirmRead struct {
	actors.ControlMessage
	// FollowerMaxLag, when not zero, asks for a follower read: a follower
	// answers from what it applied, without asking its group, if it heard
	// from its leader within FollowerMaxLag and applied every entry that
	// leader told it was committed; otherwise it refuses as for any read.
	// The leader answers a follower read as any read.
	FollowerMaxLag time.Duration
}

// ReadConfirmed answers ConfirmRead.
type ReadConfirmed struct {
	// Committed is the end of the records the shard applied when it
	// answered: a read sees at least up to it.
	Committed uint64
	// Follower: a follower answered from its own applied state, which
	// may miss records the leader committed since it last heard from it.
	Follower bool
}

// Bounds on reads waiting at a replicated shard.
const (
	// maxWaitingReads bounds the reads a shard holds for confirmation.
	// Each is a caller waiting (at most its request timeout); past it a
	// read is refused overloaded rather than held.
	maxWaitingReads = 4096
	// readIndexTicks is how long a ReadIndex may stay unconfirmed: raft
	// drops one silently (a leader that loses its quorum), and CheckQuorum
	// deposes such a leader within an election timeout (5 to 10 ticks).
	readIndexTicks = 10
	// readApplyTicks is how long a confirmed read may wait for its index
	// to apply: at once on a leader, but a leader deposed meanwhile
	// applies it only when its new leader reaches it, which a partition
	// can delay for as long as it lasts.
	readApplyTicks = 30
)

// errReadUnconfirmed answers the reads whose ReadIndex raft did not
// confirm in time.
var errReadUnconfirmed = wire.NewError(wire.CodeShardUnavailable, "read_unconfirmed: the shard's leader could not confirm its leadership with a quorum in time; retry")

// errReadUnapplied answers the confirmed reads whose index did not apply
// in time.
var errReadUnapplied = wire.NewError(wire.CodeShardUnavailable, "read_unapplied: the shard's replica has not applied up to the read's index in time; retry")

// errReadsOverloaded refuses a read past maxWaitingReads.
var errReadsOverloaded = wire.NewError(wire.CodeOverloaded, "too many reads are waiting for the shard's leader to confirm them; retry later")

// errReadNoReplica answers a read of a replicated shard whose replica
// is not running.
var errReadNoReplica = wire.NewError(wire.CodeShardUnavailable, "the shard's replica is not running; retry")

// errReadShardStopped answers the reads waiting when the shard stopped.
var errReadShardStopped = wire.NewError(wire.CodeShardUnavailable, "the shard stopped before the read was confirmed; retry")

// followerStaleReason says why a follower read was refused: the replica
// lost touch with its leader, or has not applied what the leader last
// said was committed.
const followerStaleReason = "follower read refused: this replica is not in touch with its leader or is behind it"

// readWaiter is one read waiting for its answer.
type readWaiter func(res any)

// readBatch is the reads one ReadIndex covers.
type readBatch struct {
	id      uint64
	index   uint64 // once confirmed: the raft index to wait for
	ticks   int    // ticks since it was asked
	waiters []readWaiter
}

// reads is a replicated shard's reads waiting for their answer. Only
// Receive touches it.
type reads struct {
	// queued arrived since the outstanding ReadIndex was asked: the next
	// one covers them.
	queued []readWaiter
	// asked is the outstanding ReadIndex, if any.
	asked *readBatch
	// confirmed are ReadIndexes confirmed at an index not yet applied, in
	// index order.
	confirmed []readBatch
	lastID    uint64
	// confirmedNow are the confirmations the last Ready handed over, to
	// take once the Ready is done (raft is asked nothing inside it).
	confirmedNow []readBatch
}

func (r *reads) waiting() int {
	n := len(r.queued)
	if r.asked != nil {
		n += len(r.asked.waiters)
	}
	for _, b := range r.confirmed {
		n += len(b.waiters)
	}
	return n
}

// handleConfirmRead answers a read at once (an unreplicated shard, a
// follower), or queues it for the next ReadIndex (the leader).
func (s *shard) handleConfirmRead(msg *ConfirmRead, answer readWaiter) {
	switch {
	case s.repl == nil && s.openReplica != nil:
		// A replicated shard whose replica did not start: nothing it
		// holds is known committed.
		answer(errReadNoReplica)
		return
	case s.repl == nil:
		answer(&ReadConfirmed{Committed: s.delivered})
		return
	}
	role := s.repl.replica.Role()
	if !role.Leader {
		s.confirmFollowerRead(msg, role, answer)
		return
	}
	rd := &s.repl.reads
	if rd.waiting() >= maxWaitingReads {
		answer(errReadsOverloaded)
		return
	}
	rd.queued = append(rd.queued, answer)
	s.askReadIndex()
	s.processReadyIfIdle()
}

// confirmFollowerRead answers a read on a follower: refused, naming the
// leader, unless it is a follower read this replica is fresh enough for.
func (s *shard) confirmFollowerRead(msg *ConfirmRead, role Role, answer readWaiter) {
	if msg.FollowerMaxLag <= 0 {
		answer(role.NotLeader)
		return
	}
	s.processReady() // apply what arrived before the read
	heard, caughtUp := s.repl.replica.LeaderContact()
	if heard.IsZero() || time.Since(heard) > msg.FollowerMaxLag || !caughtUp {
		answer(followerStale(role.NotLeader))
		return
	}
	answer(&ReadConfirmed{Committed: s.delivered, Follower: true})
}

// followerStale is notLeader (naming the leader, so the reader can go
// there) saying why the follower read was refused.
func followerStale(notLeader error) error {
	we, ok := notLeader.(*wire.Error)
	if !ok {
		return wire.NewError(wire.CodeShardUnavailable, "%s", followerStaleReason)
	}
	out := *we
	out.Message = followerStaleReason + ": " + we.Message
	return &out
}

// askReadIndex asks raft to confirm the queued reads, unless a ReadIndex
// is already out: those reads wait for the next one, which also covers
// every read that arrives meanwhile.
func (s *shard) askReadIndex() {
	rd := &s.repl.reads
	if rd.asked != nil || len(rd.queued) == 0 {
		return
	}
	rd.lastID++
	rd.asked = &readBatch{id: rd.lastID, waiters: rd.queued}
	rd.queued = nil
	s.repl.replica.ReadIndex(rd.lastID)
	s.hurryIfAwake()
}

// readConfirmed is Ready's read callback: raft confirmed ReadIndex id at
// index. It is taken after the Ready (takeReadConfirmations).
func (s *shard) readConfirmed(id, index uint64) {
	rd := &s.repl.reads
	if rd.asked == nil || rd.asked.id != id {
		return // given up on (timed out, or the leadership moved)
	}
	b := *rd.asked
	b.index, b.ticks = index, 0
	rd.asked = nil
	rd.confirmedNow = append(rd.confirmedNow, b)
}

// settleReads, after a Ready: queues what raft confirmed, answers every
// confirmed read whose index applied, fails what a leader that stepped
// down had not had confirmed, and asks for the next ReadIndex. A read
// confirmed at an index stays valid once this replica stepped down: its
// index covers every entry committed before it began, whoever applies it.
func (s *shard) settleReads(leading bool) {
	rd := &s.repl.reads
	rd.confirmed = append(rd.confirmed, rd.confirmedNow...)
	clear(rd.confirmedNow)
	rd.confirmedNow = rd.confirmedNow[:0]
	n := 0
	for _, b := range rd.confirmed {
		if b.index > s.repl.appliedIndex {
			break
		}
		for _, w := range b.waiters {
			w(&ReadConfirmed{Committed: s.delivered})
		}
		n++
	}
	clear(rd.confirmed[:n])
	rd.confirmed = rd.confirmed[n:]
	if !leading {
		s.failUnconfirmedReads(s.repl.replica.Role().NotLeader)
		return
	}
	s.askReadIndex()
}

// tickReads gives up on a ReadIndex raft has not confirmed in
// readIndexTicks, and asks again for the reads queued behind it; and on
// confirmed reads whose index has not applied in readApplyTicks.
func (s *shard) tickReads() {
	rd := &s.repl.reads
	n := 0
	for i := range rd.confirmed {
		b := &rd.confirmed[i]
		b.ticks++
		// Confirmed in order: the expired ones are a prefix.
		if b.ticks >= readApplyTicks && n == i {
			for _, w := range b.waiters {
				w(errReadUnapplied)
			}
			n++
		}
	}
	clear(rd.confirmed[:n])
	rd.confirmed = rd.confirmed[n:]
	if rd.asked == nil {
		return
	}
	if rd.asked.ticks++; rd.asked.ticks < readIndexTicks {
		return
	}
	for _, w := range rd.asked.waiters {
		w(errReadUnconfirmed)
	}
	rd.asked = nil
	s.askReadIndex()
}

// failUnconfirmedReads answers err to every read not yet confirmed.
func (s *shard) failUnconfirmedReads(err error) {
	rd := &s.repl.reads
	if rd.asked != nil {
		for _, w := range rd.asked.waiters {
			w(err)
		}
		rd.asked = nil
	}
	for _, w := range rd.queued {
		w(err)
	}
	rd.queued = nil
}

// failReads answers err to every read waiting: the shard stops.
func (s *shard) failReads(err error) {
	if s.repl == nil {
		return
	}
	s.failUnconfirmedReads(err)
	for _, b := range s.repl.reads.confirmed {
		for _, w := range b.waiters {
			w(err)
		}
	}
	s.repl.reads.confirmed = nil
}
