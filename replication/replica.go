package replication

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/rs/zerolog"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// Replica is one replica of one shard's raft group: it drives a
// raft.RawNode over its Storage. The group's leader is the shard's owner;
// only it proposes.
//
// A Replica is not safe for concurrent use. One owner (the shard actor)
// calls every method: Tick on a timer, Step for each message from a peer,
// Propose to append, and Ready until HasReady is false after each of these.
type Replica struct {
	rn      *raft.RawNode
	storage *Storage
	now     func() time.Time
	// lastTime is the latest time this replica proposed; with the log's
	// own (Storage.lastTime) it keeps append times from going back.
	lastTime time.Time
	// sentSnapshots are the peers this Ready sent a snapshot to; raft is
	// told after Advance that it went, so it probes them again: a follower
	// that installed it (from the leader's segments, which takes longer
	// than a probe) then matches, one that has not yet is sent another.
	sentSnapshots []uint64
	snapshotsSent uint64 // since the Replica started, for Status
	// snapshotSentAt is when the last snapshot went (LastSnapshotSent).
	snapshotSentAt time.Time
	// awaiting are the proposals raft took whose index the next Ready
	// will tell (ProposeAt).
	awaiting []*Proposal
	// readStates are the reads raft confirmed in the Ready being handled
	// (ReadIndex), handed to the owner by TakeReadStates.
	readStates []raft.ReadState
	// quiet: the group is idle and this replica does not tick
	// (quiesce.go); idleTicks counts a leader's idle ticks before it goes
	// quiet. outbox holds the quiesce heartbeats for the next Ready.
	quiet       bool
	idleTicks   int
	outbox      []raftpb.Message
	peerScratch []peerView
	// quietWith are the replicas a quiet leader went quiet with;
	// peerGone is Config.PeerGone.
	quietWith []uint64
	peerGone  func(id uint64) bool
	// quiesces counts the times it went quiet (Quiesces).
	quiesces uint64
	// reads counts the ReadIndex requests of term readTerm that raft has
	// not confirmed: a leader stays awake for them, as raft's heartbeats
	// carry the last one's context until a quorum answers.
	reads    int
	readTerm uint64
	// err is the error a Ready returned. raft's state is then ahead of what
	// was persisted, so the Replica refuses everything from then on.
	err error
}

// raft's settings for every group. The owner ticks every 100 ms.
const (
	// A follower that hears nothing from the leader for electionTicks to
	// 2×electionTicks ticks (raft randomizes in between), 0.5 s to 1 s,
	// campaigns; the leader sends a heartbeat every tick, so a follower
	// campaigns only after five heartbeats in a row went missing. Ten
	// ticks (1–2 s) made a leader's death cost 1–2 s before a campaign,
	// and up to a second more when the first pre-vote was refused by a
	// follower still inside CheckQuorum's lease (until that one timed out
	// too): failover's p99 near 2 s even with a client that leaves the
	// dead leader at once (docs/BENCHMARKS.md, BenchmarkReplicatedFailover).
	electionTicks  = 5
	heartbeatTicks = 1
	// maxSizePerMsg is 1 MiB of entries per append message: the most a
	// shard appends at once, so one message carries a full append.
	maxSizePerMsg = 1 << 20
	// maxInflightMsgs and maxInflightBytes bound the appends sent to one
	// follower and not yet acknowledged. etcd sends up to 512 messages of
	// 1 MiB; half the count and a 32 MiB cap keep a slow follower from
	// pinning more than that of the leader's memory.
	maxInflightMsgs  = 256
	maxInflightBytes = 32 << 20
	// maxUncommittedBytes is how much a leader holds uncommitted before
	// refusing proposals (raft.ErrProposalDropped): a leader cut off from
	// its quorum keeps accepting until CheckQuorum steps it down, up to an
	// election timeout later, and must not buffer without bound meanwhile.
	maxUncommittedBytes = 64 << 20
)

// Config configures a Replica. ID and Storage are required.
type Config struct {
	// ID is the replica's id in its group: not zero, and never reused by
	// another replica of the same group.
	ID uint64
	// Storage is the replica's log and raft.state.
	Storage *Storage
	// Peers are the replicas of a new group, this one included. They are
	// used only when Storage is empty (no entry, no HardState); a replica
	// with a non-empty Storage restarts from it and ignores them. Nil with
	// an empty Storage: the replica waits for a group that adds it.
	Peers []raft.Peer
	// Now is the clock that stamps proposals with their append time. Nil
	// means time.Now.
	Now func() time.Time
	// Log receives raft's log lines. The zero Logger discards them.
	Log zerolog.Logger
	// Applied is the last index the application applied before a restart
	// (Storage.Committed): raft hands over only the entries after it.
	Applied uint64
	// PeerGone, if set, says replica id's member left the cluster: a
	// leader's group goes quiet without it, and a follower does not go
	// quiet under a leader on it (quiesce.go). Called from Tick and Step,
	// on the owner's goroutine. Nil: no replica is ever gone, and a group
	// with one down stays awake.
	PeerGone func(id uint64) bool
}

// Committed is one committed entry, handed to the application in index
// order by Ready. Every replica hands over the same entries with the same
// Base.
type Committed struct {
	Kind        EntryKind
	Index, Term uint64
	// Base is the offset of the first record: the entry's records are at
	// offsets Base to Base+len(Records)-1 in every replica's log. For an
	// entry without records, the offset the next record will take.
	Base  uint64
	Time  time.Time // the append time, for EntryRecords
	Stamp *Stamp    // the producer's stamp, if the batch has one
	// Records alias raft's copy of the entry: read them, do not modify
	// them. Attributed: they are stored joined with their attributes
	// (persistence.SplitRecord gives the value back).
	Records    [][]byte
	Attributed bool
}

// Status is a replica's view of its group.
type Status struct {
	ID     uint64
	State  raft.StateType
	Leader uint64 // 0: none known
	Term   uint64
	// Commit is the highest index known committed, Applied the highest
	// handed to the application, LastIndex the last in this replica's log.
	Commit, Applied, LastIndex uint64
	// Match is, on the leader, the highest index known to be in each
	// replica's log, the leader's own included: a follower's lag is
	// LastIndex minus its Match. Nil on any other replica.
	Match map[uint64]uint64
	// LagRecords is, on the leader, how many of the leader's records each
	// replica does not have yet (by its Match); Active whether the leader
	// heard from it within the last election timeout. Nil elsewhere.
	LagRecords map[uint64]uint64
	Active     map[uint64]bool
	// SnapshotsSent counts the snapshots this replica, as leader, sent
	// since it started: each means a follower was behind the compaction
	// point and is catching up from this replica's segments.
	SnapshotsSent uint64
	// Quiet says the group is idle and this replica does not tick.
	Quiet bool
}

// NewReplica starts a replica over cfg.Storage: a new group's first replica
// when the storage is empty and cfg.Peers are given, otherwise a restart
// from what the storage holds.
func NewReplica(cfg Config) (*Replica, error) {
	if cfg.Storage == nil {
		return nil, errors.New("replication: Config.Storage is required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	rn, err := raft.NewRawNode(&raft.Config{
		ID:                        cfg.ID,
		ElectionTick:              electionTicks,
		HeartbeatTick:             heartbeatTicks,
		Storage:                   cfg.Storage,
		MaxSizePerMsg:             maxSizePerMsg,
		MaxInflightMsgs:           maxInflightMsgs,
		MaxInflightBytes:          maxInflightBytes,
		MaxUncommittedEntriesSize: maxUncommittedBytes,
		// A leader that no longer hears from a quorum steps down, so a
		// partitioned owner stops accepting appends; PreVote keeps a
		// replica that was cut off from raising the term, and deposing a
		// healthy leader, when it comes back.
		CheckQuorum: true,
		PreVote:     true,
		// Only the owner appends: a follower refuses a proposal with the
		// leader's id instead of forwarding it, so the caller can redirect
		// the producer.
		DisableProposalForwarding: true,
		StepDownOnRemoval:         true,
		// A read's index is confirmed by a heartbeat round that a quorum
		// answers (ReadIndex), not by a leader lease: a lease
		// (ReadOnlyLeaseBased) holds only while no member's clock runs
		// slower than the election timeout assumes, and a leader paused
		// by SIGSTOP or a long GC pause resumes still believing in its
		// lease. The round costs one heartbeat's round trip, which the
		// shard shares among every read that arrived meanwhile.
		ReadOnlyOption: raft.ReadOnlySafe,
		Applied:        cfg.Applied,
		Logger:         raftLogger{log: cfg.Log.With().Uint64("replica", cfg.ID).Logger()},
	})
	if err != nil {
		return nil, fmt.Errorf("replication: start replica %d: %w", cfg.ID, err)
	}
	if cfg.Storage.empty() && len(cfg.Peers) > 0 {
		// Bootstrap writes the peers as conf change entries 1 to n, the same
		// on every replica of the group: the log holds its membership.
		if err := rn.Bootstrap(cfg.Peers); err != nil {
			return nil, fmt.Errorf("replication: bootstrap replica %d: %w", cfg.ID, err)
		}
	}
	cfg.Storage.applied = cfg.Applied
	return &Replica{rn: rn, storage: cfg.Storage, now: cfg.Now, peerGone: cfg.PeerGone}, nil
}

// Propose appends records, with the producer's stamp if any, as one entry.
// It returns once raft has the entry, which is not yet committed: Ready
// hands it to apply when it is. Only the leader proposes; any other replica
// returns *ErrNotLeader. A leader may still drop a proposal
// (raft.ErrProposalDropped: a leadership transfer is under way, or too much
// is uncommitted).
func (r *Replica) Propose(records [][]byte, stamp *Stamp) error {
	_, err := r.ProposeAt(records, stamp)
	return err
}

// Proposal is where a leader's proposal went in its log, filled in by the
// Ready that persists it (raft appends a proposal to its log at once, but
// says at which index only in the next Ready). Until then Index is 0. The
// entry that commits at Index is this proposal if its term is Term; if
// another term's entry commits there, the proposal was lost with the
// leadership. Lost is set when the replica saw it go before it had an
// index (it stepped down and its unstable tail was replaced).
type Proposal struct {
	Index, Term uint64
	Lost        bool
}

// ProposeAt is Propose, returning the Proposal that the next Ready fills
// in: the shard keeps it to answer the publish when its index applies.
func (r *Replica) ProposeAt(records [][]byte, stamp *Stamp) (*Proposal, error) {
	return r.ProposeBatch(records, stamp, false)
}

// ProposeBatch is ProposeAt for records that may carry attributes:
// attributed records are in their stored form (persistence.JoinRecords).
func (r *Replica) ProposeBatch(records [][]byte, stamp *Stamp, attributed bool) (*Proposal, error) {
	if r.err != nil {
		return nil, r.err
	}
	st := r.rn.BasicStatus()
	if st.RaftState != raft.StateLeader {
		return nil, &ErrNotLeader{Leader: st.Lead}
	}
	r.Wake()
	t := r.appendTime()
	data, err := EncodeRecords(nil, Batch{Time: t, Stamp: stamp, Records: records, Attributed: attributed})
	if err != nil {
		return nil, err
	}
	if err := r.rn.Propose(data); err != nil {
		return nil, fmt.Errorf("replication: propose: %w", err)
	}
	r.lastTime = t
	p := &Proposal{Term: st.Term}
	r.awaiting = append(r.awaiting, p)
	return p, nil
}

// placeProposals gives the proposals awaiting an index theirs, in order:
// a leader's log takes only its own proposals' data entries, in the order
// proposed, in its term. A data entry of another term means the replica
// lost the leadership and its proposals with it.
func (r *Replica) placeProposals(entries []raftpb.Entry) {
	for _, e := range entries {
		if len(r.awaiting) == 0 {
			return
		}
		if e.Type != raftpb.EntryNormal || len(e.Data) == 0 {
			continue
		}
		p := r.awaiting[0]
		if e.Term != p.Term {
			for _, lost := range r.awaiting {
				lost.Lost = true
			}
			r.awaiting = r.awaiting[:0]
			return
		}
		p.Index = e.Index
		r.awaiting[0] = nil
		r.awaiting = r.awaiting[1:]
	}
}

// appendTime is now to the microsecond the log keeps, but never before a
// time already in the log or proposed: the log would raise it, and then
// the time stored would differ from the time in the entry.
func (r *Replica) appendTime() time.Time {
	t := time.UnixMicro(r.now().UnixMicro())
	if last := laterOf(r.lastTime, r.storage.lastTime); t.Before(last) {
		return last
	}
	return t
}

func laterOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// ReadIndex asks the group, as its leader, for the index a read started
// now must see applied to be linearizable: raft confirms the leadership
// with a heartbeat round a quorum answers (ReadOnlySafe), and a later
// Ready confirms the read (TakeReadStates) with id. A replica that is not
// the leader, or loses the leadership first, never confirms it: the
// owner gives up after a timeout of its own. A leader that has not yet
// committed an entry of its term holds the read until it has.
func (r *Replica) ReadIndex(id uint64) {
	if r.err != nil {
		return
	}
	r.Wake()
	if st := r.rn.BasicStatus(); st.RaftState == raft.StateLeader {
		if st.Term != r.readTerm {
			r.reads, r.readTerm = 0, st.Term
		}
		r.reads++
	}
	var ctx [8]byte
	binary.BigEndian.PutUint64(ctx[:], id)
	r.rn.ReadIndex(ctx[:])
}

// TakeReadStates hands over, in order, the reads the last Readies
// confirmed: each one's id (ReadIndex) and the index to wait for.
func (r *Replica) TakeReadStates(fn func(id, index uint64)) {
	for _, rs := range r.readStates {
		if len(rs.RequestCtx) == 8 {
			fn(binary.BigEndian.Uint64(rs.RequestCtx), rs.Index)
		}
	}
	clear(r.readStates)
	r.readStates = r.readStates[:0]
}

// Tick advances raft's logical clock by one tick, unless the group is
// quiet; a leader whose group has been idle long enough goes quiet
// instead of ticking (quiesce.go).
func (r *Replica) Tick() {
	if r.err != nil || r.quiet {
		return
	}
	if r.rn.BasicStatus().RaftState == raft.StateLeader && r.maybeQuiesce() {
		return
	}
	r.rn.Tick()
}

// Step hands raft a message from a peer. A snapshot this replica's log
// does not already hold is not stepped: Step returns *SnapshotNeeded, and
// the owner copies the leader's segments (see SnapshotNeeded) and starts
// the replica again on them. raft never installs a snapshot itself.
func (r *Replica) Step(m raftpb.Message) error {
	if r.err != nil {
		return r.err
	}
	if m.Type == raftpb.MsgSnap && m.Snapshot != nil && r.needsSnapshot(m) {
		return &SnapshotNeeded{From: m.From, Metadata: m.Snapshot.Metadata, Data: m.Snapshot.Data}
	}
	var err error
	switch {
	case isQuiesceHeartbeat(m):
		err = r.stepQuiesceHeartbeat(m)
	case isQuiesceAnswer(m) && r.quiet:
		err = r.rn.Step(m) // a follower agreeing: the leader stays quiet
	default:
		// Only a quiet replica wakes: an awake leader's idle count must
		// survive its followers' answers to the heartbeats.
		if r.quiet {
			r.Wake()
		}
		err = r.rn.Step(m)
	}
	if err != nil {
		if errors.Is(err, raft.ErrStepPeerNotFound) {
			return nil // from a replica the group removed: stale, dropped
		}
		return fmt.Errorf("replication: step %v from %d: %w", m.Type, m.From, err)
	}
	return nil
}

// needsSnapshot reports whether stepping snapshot message m would make raft
// install it: it is of this replica's term or later, beyond its commit
// index, and its last entry is not in this replica's log. Otherwise raft
// answers it alone (a stale one is ignored; one this log holds moves the
// commit index to it).
func (r *Replica) needsSnapshot(m raftpb.Message) bool {
	st := r.rn.BasicStatus()
	meta := m.Snapshot.Metadata
	if m.Term < st.Term || meta.Index <= st.Commit {
		return false
	}
	t, err := r.storage.Term(meta.Index)
	return err != nil || t != meta.Term
}

// HasReady reports whether Ready has work.
func (r *Replica) HasReady() bool { return r.err == nil && (len(r.outbox) > 0 || r.rn.HasReady()) }

// Ready processes one raft Ready, in the order raft's README requires:
//
//  1. persist: the new entries (truncating a conflicting tail) and make
//     them durable, then the HardState. Entries go first because the
//     HardState's commit index may point into them; a durable commit index
//     beyond the log would stop raft from starting again.
//  2. send the messages. Only now for responses: a vote or an append
//     acknowledgement promises that the vote or the entries are on disk.
//     A leader sends its appends and heartbeats before step 1
//     (splitMessages), so that the followers write while it does:
//     measured with 512 records in flight (bench/compare.sh's replicated
//     row), 1.13× the acknowledged throughput under on_commit.
//  3. apply the committed entries in index order: a conf change first to
//     raft (and the ConfState it returns to raft.state), then every entry
//     to apply.
//  4. Advance.
//
// The HardState is written when its term or vote changed; a commit index
// that merely moved is kept in memory (Storage.SetHardState).
//
// send must serialise the messages before it returns (raft's README:
// marshalling is not safe once later entries are persisted) and must not
// modify them; apply must not modify the records. An error leaves raft
// ahead of storage: the Replica returns it from then on, and its owner must
// drop it and start a new one from the Storage, reopened.
func (r *Replica) Ready(send func([]raftpb.Message), apply func(Committed)) error {
	if r.err != nil {
		return r.err
	}
	if len(r.outbox) > 0 {
		// Heartbeats promise nothing about this replica's disk: sent first.
		send(r.outbox)
		clear(r.outbox)
		r.outbox = r.outbox[:0]
	}
	if !r.rn.HasReady() {
		return nil
	}
	rd := r.rn.Ready()
	if err := r.handleReady(rd, send, apply); err != nil {
		r.err = err
		return err
	}
	r.rn.Advance(rd)
	r.reportSentSnapshots()
	return nil
}

func (r *Replica) handleReady(rd raft.Ready, send func([]raftpb.Message), apply func(Committed)) error {
	if !raft.IsEmptySnap(rd.Snapshot) {
		// Step never hands raft a snapshot to install (SnapshotNeeded).
		return fmt.Errorf("%w: raft has one to install at index %d", ErrSnapshotUnsupported, rd.Snapshot.Metadata.Index)
	}
	for _, m := range rd.Messages {
		if m.Type == raftpb.MsgSnap {
			r.sentSnapshots = append(r.sentSnapshots, m.To)
		}
	}
	early, late := r.splitMessages(rd.Messages)
	if len(early) > 0 {
		send(early)
	}
	if err := r.storage.Append(rd.Entries); err != nil {
		return err
	}
	r.placeProposals(rd.Entries)
	if !raft.IsEmptyHardState(rd.HardState) {
		if err := r.storage.SetHardState(rd.HardState); err != nil {
			return err
		}
	}
	if len(late) > 0 {
		send(late)
	}
	for _, e := range rd.CommittedEntries {
		if err := r.applyEntry(e, apply); err != nil {
			return err
		}
	}
	r.readStates = append(r.readStates, rd.ReadStates...)
	r.reads = max(0, r.reads-len(rd.ReadStates))
	return nil
}

// splitMessages splits a Ready's messages into those a leader may send
// before it persists the Ready (early) and the rest. A leader's appends,
// heartbeats and snapshots promise nothing about its own disk: its term
// and vote were durable before it could count its own vote, and it counts
// its own copy of the entries only once they are (raft hands that
// acknowledgement back after Advance). Sending them first lets the
// followers write while the leader does (Raft thesis 10.2.1; raft sends
// its messages this way with asynchronous storage writes), so an
// acknowledgement under on_commit waits for the slower of the fsyncs, not
// their sum. Responses (an append or vote acknowledged) always wait, and
// a replica that is not the leader sends everything after.
func (r *Replica) splitMessages(msgs []raftpb.Message) (early, late []raftpb.Message) {
	if len(msgs) == 0 || r.rn.BasicStatus().RaftState != raft.StateLeader {
		return nil, msgs
	}
	n := 0
	for n < len(msgs) && !isResponse(msgs[n].Type) {
		n++
	}
	if !slices.ContainsFunc(msgs[n:], func(m raftpb.Message) bool { return !isResponse(m.Type) }) {
		return msgs[:n], msgs[n:] // the common case: no copy
	}
	for _, m := range msgs {
		if isResponse(m.Type) {
			late = append(late, m)
		} else {
			early = append(early, m)
		}
	}
	return early, late
}

// isResponse reports the messages raft sends only once what they
// acknowledge is durable (its msgsAfterAppend).
func isResponse(t raftpb.MessageType) bool {
	return t == raftpb.MsgAppResp || t == raftpb.MsgVoteResp || t == raftpb.MsgPreVoteResp
}

// reportSentSnapshots tells raft the snapshots it wanted sent went out, so
// it moves those followers from waiting on the snapshot back to probing.
func (r *Replica) reportSentSnapshots() {
	for _, to := range r.sentSnapshots {
		r.rn.ReportSnapshot(to, raft.SnapshotFinish)
		r.snapshotsSent++
		r.snapshotSentAt = r.now()
	}
	r.sentSnapshots = r.sentSnapshots[:0]
}

func (r *Replica) applyEntry(e raftpb.Entry, apply func(Committed)) error {
	base, ok := r.storage.base(e.Index)
	if !ok {
		return fmt.Errorf("%w: committed entry %d is not in the window", ErrLogMismatch, e.Index)
	}
	meta, b, err := toLogEntry(e)
	if err != nil {
		return err
	}
	switch meta.Kind {
	case EntryConfChange:
		var cc raftpb.ConfChange
		if err := cc.Unmarshal(meta.Control); err != nil {
			return fmt.Errorf("replication: conf change in entry %d: %w", e.Index, err)
		}
		err = r.applyConfChange(cc)
	case EntryConfChangeV2:
		var cc raftpb.ConfChangeV2
		if err := cc.Unmarshal(meta.Control); err != nil {
			return fmt.Errorf("replication: conf change in entry %d: %w", e.Index, err)
		}
		err = r.applyConfChange(cc)
	}
	if err != nil {
		return err
	}
	apply(Committed{
		Kind: meta.Kind, Index: e.Index, Term: e.Term, Base: base,
		Time: b.Time, Stamp: b.Stamp, Records: b.Records, Attributed: b.Attributed,
	})
	r.storage.applied = e.Index
	return nil
}

func (r *Replica) applyConfChange(cc raftpb.ConfChangeI) error {
	return r.storage.SetConfState(*r.rn.ApplyConfChange(cc))
}

// Status returns the replica's view of its group.
func (r *Replica) Status() Status {
	st := r.rn.Status()
	last, _ := r.storage.LastIndex()
	s := Status{
		ID: st.ID, State: st.RaftState, Leader: st.Lead, Term: st.Term,
		Commit: st.Commit, Applied: st.Applied, LastIndex: last,
		SnapshotsSent: r.snapshotsSent, Quiet: r.quiet,
	}
	if st.RaftState == raft.StateLeader {
		next := r.storage.log.NextOffset()
		s.Match = make(map[uint64]uint64, len(st.Progress))
		s.LagRecords = make(map[uint64]uint64, len(st.Progress))
		s.Active = make(map[uint64]bool, len(st.Progress))
		for id, pr := range st.Progress {
			s.Match[id] = pr.Match
			s.Active[id] = pr.RecentActive || id == st.ID
			// The records after Match start at the next entry's base; a
			// replica that has every entry lacks nothing.
			if pr.Match < last {
				b, ok := r.storage.base(pr.Match + 1)
				if !ok { // behind the window: it lacks all the log holds
					b = r.storage.log.StartOffset()
				}
				s.LagRecords[id] = next - b
			}
		}
	}
	return s
}

// Role is the replica's place in its group, from raft's basic status: no
// allocation, so the shard may ask on every publish.
func (r *Replica) Role() (state raft.StateType, leader, term uint64) {
	st := r.rn.BasicStatus()
	return st.RaftState, st.Lead, st.Term
}

// Membership is the group's voters and learners as this replica applied
// them.
func (r *Replica) Membership() (voters, learners []uint64) {
	return slices.Clone(r.storage.cs.Voters), slices.Clone(r.storage.cs.Learners)
}

// ProposeConfChange asks the group, as its leader, to change its
// membership: add a learner (it receives the log but does not vote), make
// a learner a voter, or remove a replica. raft takes one change at a time:
// one proposed while another is pending is dropped (it becomes an empty
// entry), and the caller proposes it again once the first applied.
func (r *Replica) ProposeConfChange(cc raftpb.ConfChange) error {
	if r.err != nil {
		return r.err
	}
	if st := r.rn.BasicStatus(); st.RaftState != raft.StateLeader {
		return &ErrNotLeader{Leader: st.Lead}
	}
	r.Wake()
	if err := r.rn.ProposeConfChange(cc); err != nil {
		return fmt.Errorf("replication: propose %v of %d: %w", cc.Type, cc.NodeID, err)
	}
	return nil
}

// Campaign makes the replica campaign to become leader now, rather than
// after an election timeout. raft ignores it while committed conf changes
// are not applied yet: on a new group, until the first Ready.
func (r *Replica) Campaign() error {
	if r.err != nil {
		return r.err
	}
	r.Wake()
	return r.rn.Campaign()
}

// TransferLeadership asks the leader to hand leadership to replica to,
// which campaigns as soon as its log is caught up. Only the leader acts on
// it; raft drops proposals while the transfer is under way.
func (r *Replica) TransferLeadership(to uint64) {
	if r.err == nil {
		r.Wake()
		r.rn.TransferLeader(to)
	}
}

// CompactBehind moves the compaction point to keep entries behind the
// applied index, when that is past it: a follower further behind is sent a
// snapshot and copies the leader's segments instead of being sent the
// entries one append at a time. It also bounds the window Storage keeps in
// memory. The entries stay in the log.
func (r *Replica) CompactBehind(keep uint64) {
	if r.err == nil {
		r.storage.compactBehind(keep)
	}
}

// LastSnapshotSent is when this replica, as leader, last sent a snapshot
// (zero: never since it started): the follower then copies the segment
// files it names, which the application must not swap meanwhile.
func (r *Replica) LastSnapshotSent() time.Time { return r.snapshotSentAt }

// CompactableEnd is the offset below which the application may compact
// the log (persistence's PrepareCompaction): the records of entries this
// replica applied and raft no longer serves, so nothing raft may still
// send a follower, or truncate, is rewritten. It moves with the
// compaction point (CompactBehind, EnforceRetention).
func (r *Replica) CompactableEnd() uint64 { return r.storage.compactableEnd() }

// EnforceRetention applies the log's retention to entries this replica
// applied, and moves the compaction point to the log's new first entry.
func (r *Replica) EnforceRetention(now time.Time) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	return r.storage.enforceRetention(now)
}
