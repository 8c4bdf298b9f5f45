package replication

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// electionLimit is the most ticks a follower waits without hearing from a
// leader before it campaigns: raft randomizes the timeout in
// [electionTicks, 2×electionTicks).
const electionLimit = 2 * electionTicks

// TestProposeReplicatesToEveryReplica: what the leader proposes, every
// replica applies, as the same entries at the same offsets.
func TestProposeReplicatesToEveryReplica(t *testing.T) {
	c := newCluster(t, 3)
	c.elect(1)
	c.propose(1, "a")
	c.propose(1, "b", "c")
	stamp := &Stamp{Producer: 9, Sequence: 4, Digest: 0xFEED}
	if err := c.replica(1).Propose(toRecords([]string{"d", "e", "f"}), stamp); err != nil {
		t.Fatal(err)
	}
	c.settle()

	if got, want := c.committedRecords(), []string{"a", "b", "c", "d", "e", "f"}; !slices.Equal(got, want) {
		t.Errorf("committed records %q, want %q", got, want)
	}
	var bases []uint64
	for i := uint64(1); i <= uint64(len(c.committed)); i++ {
		if e := c.committed[i]; e.Kind == EntryRecords {
			bases = append(bases, e.Base)
		}
	}
	if want := []uint64{0, 1, 3}; !slices.Equal(bases, want) {
		t.Errorf("the record entries' base offsets are %v, want %v", bases, want)
	}
	last := c.committed[uint64(len(c.committed))]
	if !reflect.DeepEqual(last.Stamp, stamp) {
		t.Errorf("the last entry's stamp is %+v, want %+v", last.Stamp, stamp)
	}
	st := c.replica(1).Status()
	for _, id := range c.ids {
		if n := c.nodes[id]; n.applied != st.Commit || st.Match[id] != st.LastIndex {
			t.Errorf("replica %d applied %d, matched %d; want the commit index %d and the last index %d", id, n.applied, st.Match[id], st.Commit, st.LastIndex)
		}
	}
	c.requireConverged()
}

func TestProposeOnAFollowerNamesTheLeader(t *testing.T) {
	c := newCluster(t, 3)
	if err := c.replica(2).Propose(toRecords([]string{"x"}), nil); !isNotLeader(err, 0) {
		t.Errorf("Propose before any election: %v, want *ErrNotLeader naming no leader", err)
	}
	c.elect(1)
	if err := c.replica(2).Propose(toRecords([]string{"x"}), nil); !isNotLeader(err, 1) {
		t.Errorf("Propose on a follower: %v, want *ErrNotLeader naming replica 1", err)
	}
	if err := c.replica(1).Propose(nil, nil); !errors.Is(err, ErrNoRecords) {
		t.Errorf("Propose without records: %v, want ErrNoRecords", err)
	}
}

func isNotLeader(err error, leader uint64) bool {
	var notLeader *ErrNotLeader
	return errors.As(err, &notLeader) && notLeader.Leader == leader
}

// TestLeaderFailover: the leader dies; another is elected within the
// election timeout and takes proposals; the old leader restarts from its
// disk, catches up without disturbing the new leader, and every log ends
// the same.
func TestLeaderFailover(t *testing.T) {
	c := newCluster(t, 3)
	c.elect(1)
	c.propose(1, "a", "b")
	c.propose(1, "c")

	c.kill(1)
	took := c.tickUntil(electionLimit, "a new leader", func() bool { return c.leader() != 0 })
	t.Logf("replica %d elected %d ticks after the leader died", c.leader(), took)
	lead := c.leader()
	c.propose(lead, "d")
	c.propose(lead, "e", "f")
	term := c.replica(lead).Status().Term

	c.restart(1)
	c.tickUntil(3, "replica 1 catches up", func() bool { return c.nodes[1].applied == c.replica(lead).Status().Commit })
	c.propose(lead, "g")
	if st := c.replica(lead).Status(); st.Term != term || c.leader() != lead {
		t.Errorf("after replica 1 rejoined: leader %d at term %d, want %d at term %d", c.leader(), st.Term, lead, term)
	}
	if got, want := c.committedRecords(), []string{"a", "b", "c", "d", "e", "f", "g"}; !slices.Equal(got, want) {
		t.Errorf("committed records %q, want %q", got, want)
	}
	c.requireConverged()
}

// TestConflictingTailIsReplaced: a leader cut off from its group appends
// entries nobody else has; the others elect a new leader and go on; when
// the old leader rejoins, its uncommitted tail is replaced by the new
// leader's log, offsets included, and nothing committed changes.
func TestConflictingTailIsReplaced(t *testing.T) {
	c := newCluster(t, 3)
	c.elect(1)
	c.propose(1, "a")

	c.partition([]uint64{1}, []uint64{2, 3})
	c.propose(1, "lost1")
	c.propose(1, "lost2", "lost3")
	if got := c.nodes[1].log.next; got != 4 {
		t.Fatalf("replica 1's log is at offset %d after appending alone, want 4", got)
	}
	c.tickUntil(electionLimit, "a leader among 2 and 3", func() bool { return c.leader() == 2 || c.leader() == 3 })
	lead := c.leader()
	c.propose(lead, "b")
	c.propose(lead, "c", "d")
	c.tickUntil(electionLimit, "replica 1 steps down", func() bool { return c.replica(1).Status().State != raft.StateLeader })

	c.heal()
	c.tickUntil(3, "replica 1 catches up", func() bool { return c.nodes[1].applied == c.replica(lead).Status().Commit })
	if got, want := c.committedRecords(), []string{"a", "b", "c", "d"}; !slices.Equal(got, want) {
		t.Errorf("committed records %q, want %q", got, want)
	}
	c.requireConverged()
	for _, e := range c.nodes[1].log.entries {
		for _, r := range e.Records {
			if strings.HasPrefix(string(r), "lost") {
				t.Errorf("replica 1's log still holds %q at index %d", r, e.Index)
			}
		}
	}
}

// TestPartitionedLeaderCommitsNothing: a leader in a minority appends but
// commits nothing, steps down within an election timeout (CheckQuorum), and
// then refuses proposals.
func TestPartitionedLeaderCommitsNothing(t *testing.T) {
	c := newCluster(t, 3)
	c.elect(1)
	c.propose(1, "a")
	commit := c.replica(1).Status().Commit

	c.partition([]uint64{1}, []uint64{2, 3})
	c.propose(1, "alone")
	for range electionTicks / 2 {
		c.tick()
	}
	if st := c.replica(1).Status(); st.State != raft.StateLeader || st.Commit != commit || st.LastIndex != commit+1 {
		t.Errorf("cut-off leader: state %v, commit %d, last index %d; want still leader, commit %d, last index %d", st.State, st.Commit, st.LastIndex, commit, commit+1)
	}
	c.tickUntil(electionLimit, "replica 1 steps down", func() bool { return c.replica(1).Status().State != raft.StateLeader })
	if err := c.replica(1).Propose(toRecords([]string{"late"}), nil); !errors.As(err, new(*ErrNotLeader)) {
		t.Errorf("Propose after stepping down: %v, want *ErrNotLeader", err)
	}
	if got := c.committedRecords(); !slices.Equal(got, []string{"a"}) {
		t.Errorf("committed records %q, want only a", got)
	}

	c.heal()
	c.tickUntil(electionLimit, "a leader", func() bool { return c.leader() != 0 })
	c.propose(c.leader(), "b")
	c.tickUntil(3, "every replica applies b", func() bool {
		return c.nodes[1].applied == c.replica(c.leader()).Status().Commit
	})
	if got := c.committedRecords(); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("committed records %q, want a, b", got)
	}
	c.requireConverged()
}

// TestLaggingFollowerCatchesUp: a follower behind a lossy, then a slow,
// link does not hold the group back, shows as lagging in the leader's
// Status, and catches up once its link recovers.
func TestLaggingFollowerCatchesUp(t *testing.T) {
	c := newCluster(t, 3)
	c.elect(1)
	c.propose(1, "a")

	c.net.drop[link{from: 1, to: 3}] = true
	c.propose(1, "b")
	c.propose(1, "c")
	st := c.replica(1).Status()
	if st.Commit != st.LastIndex || st.Match[3] >= st.LastIndex {
		t.Errorf("with 1→3 down: commit %d, replica 3 matched %d; want the group to commit the last index %d without 3, and 3 behind", st.Commit, st.Match[3], st.LastIndex)
	}

	delete(c.net.drop, link{from: 1, to: 3})
	c.net.delay[link{from: 1, to: 3}] = 3
	c.propose(1, "d")
	if got := c.committedRecords(); !slices.Equal(got, []string{"a", "b", "c", "d"}) {
		t.Errorf("committed records %q with a slow follower, want a to d", got)
	}
	c.tickUntil(3*electionTicks, "replica 3 catches up", func() bool { return c.nodes[3].applied == c.replica(1).Status().Commit })
	c.requireConverged()
}

// TestRestartFromStorageAlone: a replica's storage opened again over its
// disk reproduces InitialState, FirstIndex, LastIndex and the entries; the
// replica restarted on it applies the same entries again and goes on.
func TestRestartFromStorageAlone(t *testing.T) {
	c := newCluster(t, 3)
	c.elect(1)
	c.propose(1, "a", "b")
	c.propose(1, "c")

	before := map[uint64]storageView{}
	for _, id := range c.ids {
		before[id] = viewOf(t, c.replica(id).storage)
	}
	for _, id := range c.ids {
		c.kill(id)
	}
	for _, id := range c.ids {
		st, err := OpenStorage(c.nodes[id].log, c.nodes[id].dir)
		if err != nil {
			t.Fatal(err)
		}
		// The commit index is written lazily (with the next term or vote):
		// it may come back lower, never higher.
		got, want := viewOf(t, st), before[id]
		if got.hs.Commit > want.hs.Commit {
			t.Errorf("replica %d's commit index came back as %d, above the %d it had", id, got.hs.Commit, want.hs.Commit)
		}
		got.hs.Commit = want.hs.Commit
		if !reflect.DeepEqual(got, want) {
			t.Errorf("replica %d's storage reopened:\n%+v\nbefore:\n%+v", id, got, want)
		}
	}

	c.restart(1)
	c.start(2, []raft.Peer{{ID: 1}, {ID: 2}, {ID: 3}}) // ignored: the storage is not empty
	c.restart(3)
	c.settle()
	c.tickUntil(electionLimit, "a leader after a full restart", func() bool { return c.leader() != 0 })
	c.propose(c.leader(), "d")
	c.settle()
	if got := c.committedRecords(); !slices.Equal(got, []string{"a", "b", "c", "d"}) {
		t.Errorf("committed records %q, want a to d", got)
	}
	c.requireConverged()
}

type storageView struct {
	hs          raftpb.HardState
	cs          raftpb.ConfState
	first, last uint64
	entries     []raftpb.Entry
}

func viewOf(t *testing.T, s *Storage) storageView {
	t.Helper()
	hs, cs, err := s.InitialState()
	if err != nil {
		t.Fatal(err)
	}
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	ents, err := s.Entries(first, last+1, noLimit)
	if err != nil {
		t.Fatal(err)
	}
	return storageView{hs: hs, cs: cs, first: first, last: last, entries: ents}
}

// TestFollowerBehindRetentionCatchesUpFromASnapshot: retention removes
// the entries a stopped follower lacks; the leader sends it a snapshot
// naming its segments, which the follower does not step into raft (its
// log does not hold it) but hands to its owner. The owner's copy of the
// leader's log up to the snapshot's index, with a raft.state committing
// it, lets the follower continue from the leader's log, identical.
func TestFollowerBehindRetentionCatchesUpFromASnapshot(t *testing.T) {
	c := newCluster(t, 3)
	c.elect(1)
	c.propose(1, "a")
	c.kill(3)
	c.propose(1, "b")
	c.propose(1, "c")
	c.propose(1, "d")
	for _, id := range []uint64{1, 2} {
		c.nodes[id].log.keep = 2
		if n, err := c.replica(id).EnforceRetention(c.now()); n == 0 || err != nil {
			t.Fatalf("replica %d: retention removed %d entries: %v", id, n, err)
		}
	}
	if first, _ := c.replica(1).storage.FirstIndex(); first <= c.nodes[3].log.last+1 {
		t.Fatalf("leader's first index %d; replica 3 ends at %d: not behind", first, c.nodes[3].log.last)
	}
	var need *SnapshotNeeded
	c.onSnapshot = func(to uint64, n *SnapshotNeeded) {
		if to == 3 && need == nil {
			need = n
		}
	}
	c.restart(3)
	c.tickUntil(3*electionTicks, "a snapshot reaches replica 3", func() bool { return need != nil })
	if st := c.replica(1).Status(); st.SnapshotsSent == 0 || need.From != 1 {
		t.Fatalf("snapshots sent %d, from %d", st.SnapshotsSent, need.From)
	}
	if _, _, err := DecodeSnapshotFiles(need.Data); err != nil {
		t.Fatalf("the snapshot's segment list: %v", err)
	}
	c.installSnapshot(3, 1, need)
	c.propose(1, "e")
	c.tickUntil(3*electionTicks, "replica 3 catches up", func() bool {
		return c.nodes[3].log.last == c.nodes[1].log.last
	})
	c.requireConverged()
}

// installSnapshot does what the broker does with a SnapshotNeeded: replica
// to's log becomes a copy of replica from's up to the snapshot's index,
// its raft.state commits that index with the snapshot's ConfState and its
// own term and vote, and it starts again.
func (c *cluster) installSnapshot(to, from uint64, need *SnapshotNeeded) {
	c.t.Helper()
	c.kill(to)
	src, dst := c.nodes[from].log, newMemLog()
	for _, e := range src.entries {
		if e.Index <= need.Metadata.Index {
			dst.entries = append(dst.entries, e)
		}
	}
	last := dst.entries[len(dst.entries)-1]
	dst.start, dst.last, dst.next, dst.durable = dst.entries[0].Base, last.Index, last.Base+uint64(len(last.Records)), len(dst.entries)
	c.nodes[to].log = dst
	hs, _, _, err := readState(c.nodes[to].dir)
	if err != nil {
		c.t.Fatal(err)
	}
	if need.Metadata.Term > hs.Term {
		hs.Term, hs.Vote = need.Metadata.Term, 0
	}
	hs.Commit = need.Metadata.Index
	if err := writeState(c.nodes[to].dir, hs, need.Metadata.ConfState); err != nil {
		c.t.Fatal(err)
	}
	c.restart(to)
}

func TestTransferLeadership(t *testing.T) {
	c := newCluster(t, 3)
	c.elect(1)
	c.propose(1, "a")
	c.replica(1).TransferLeadership(2)
	c.settle()
	if lead := c.leader(); lead != 2 {
		t.Fatalf("leader %d after transferring to 2", lead)
	}
	if err := c.replica(1).Propose(toRecords([]string{"x"}), nil); !isNotLeader(err, 2) {
		t.Errorf("Propose on the old leader: %v, want *ErrNotLeader naming 2", err)
	}
	c.propose(2, "b")
	c.requireConverged()
}

// failingLog is a log whose Sync fails once fail is set, as a full disk
// would make it.
type failingLog struct {
	*memLog
	fail bool
}

var errDiskFull = errors.New("disk full")

func (l *failingLog) Sync() error {
	if l.fail {
		return errDiskFull
	}
	return l.memLog.Sync()
}

// TestReadyErrorStopsTheReplica: when persisting fails, raft is ahead of
// the disk; the replica sends nothing of that Ready and refuses everything
// from then on.
func TestReadyErrorStopsTheReplica(t *testing.T) {
	l := &failingLog{memLog: newMemLog()}
	st, err := OpenStorage(l, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewReplica(Config{ID: 1, Storage: st, Peers: []raft.Peer{{ID: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	var applied []Committed
	readyAll := func() error {
		for r.HasReady() {
			if err := r.Ready(func([]raftpb.Message) {}, func(c Committed) { applied = append(applied, c) }); err != nil {
				return err
			}
		}
		return nil
	}
	if err := readyAll(); err != nil { // applies the bootstrap's conf change
		t.Fatal(err)
	}
	if err := r.Campaign(); err != nil {
		t.Fatal(err)
	}
	if err := readyAll(); err != nil {
		t.Fatal(err)
	}
	l.fail = true
	if err := r.Propose(toRecords([]string{"x"}), nil); err != nil {
		t.Fatal(err)
	}
	if err := readyAll(); !errors.Is(err, errDiskFull) {
		t.Fatalf("Ready with a failing disk: %v, want errDiskFull", err)
	}
	for _, c := range applied {
		if c.Kind == EntryRecords {
			t.Errorf("entry %d was applied although it is not durable", c.Index)
		}
	}
	if err := r.Propose(toRecords([]string{"y"}), nil); !errors.Is(err, errDiskFull) {
		t.Errorf("Propose after a failed Ready: %v, want errDiskFull", err)
	}
	if err := r.Ready(nil, nil); !errors.Is(err, errDiskFull) || r.HasReady() {
		t.Errorf("Ready after a failed Ready: %v, HasReady %v; want errDiskFull, false", err, r.HasReady())
	}
}

// TestProposeAtSaysWhereTheEntryWent: the index and term ProposeAt returns
// are where the entry commits; a proposal lost with the leadership finds
// another term's entry at its index.
func TestProposeAtSaysWhereTheEntryWent(t *testing.T) {
	c := newCluster(t, 3)
	c.elect(1)
	p1, err := c.replica(1).ProposeAt(toRecords([]string{"a"}), nil)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := c.replica(1).ProposeAt(toRecords([]string{"b", "c"}), nil)
	if err != nil {
		t.Fatal(err)
	}
	c.settle()
	if p1.Index == 0 || p2.Index != p1.Index+1 || p2.Term != p1.Term {
		t.Fatalf("proposals at %+v then %+v, want consecutive in one term", p1, p2)
	}
	for _, tc := range []struct {
		p    *Proposal
		want string
	}{{p1, "a"}, {p2, "b"}} {
		e, ok := c.committed[tc.p.Index]
		if !ok || e.Term != tc.p.Term || len(e.Records) == 0 || string(e.Records[0]) != tc.want {
			t.Fatalf("entry %d committed as %+v, want term %d holding %q", tc.p.Index, e, tc.p.Term, tc.want)
		}
	}

	// Cut off, the leader still takes a proposal; the others elect a new
	// leader and commit their own entry at that index.
	c.partition([]uint64{1}, []uint64{2, 3})
	lost, err := c.replica(1).ProposeAt(toRecords([]string{"lost"}), nil)
	if err != nil {
		t.Fatal(err)
	}
	c.settle() // its own Ready places it, uncommitted
	if lost.Index == 0 {
		t.Fatal("the cut-off leader's proposal got no index from its Ready")
	}
	c.tickUntil(electionLimit*2, "a new leader among 2 and 3", func() bool {
		l := c.leader()
		return l == 2 || l == 3
	})
	for c.replica(c.leader()).Status().LastIndex < lost.Index {
		c.propose(c.leader(), "other")
	}
	c.heal()
	c.tickUntil(electionLimit*2, "replica 1 applies past the lost index", func() bool { return c.nodes[1].applied >= lost.Index })
	if e := c.committed[lost.Index]; e.Term == lost.Term {
		t.Fatalf("the entry at %d has the lost proposal's term %d: %+v", lost.Index, lost.Term, e)
	}
}

// TestPlaceProposals: a leader's data entries of its term take its
// proposals in order; empty entries take none; a data entry of another
// term means the leadership went, with every proposal still awaiting.
func TestPlaceProposals(t *testing.T) {
	a, b, c := &Proposal{Term: 3}, &Proposal{Term: 3}, &Proposal{Term: 3}
	r := &Replica{awaiting: []*Proposal{a, b, c}}
	r.placeProposals([]raftpb.Entry{
		{Index: 7, Term: 3, Type: raftpb.EntryNormal},                  // a new leader's empty entry
		{Index: 8, Term: 3, Type: raftpb.EntryNormal, Data: []byte{1}}, // a
		{Index: 9, Term: 3, Type: raftpb.EntryNormal, Data: []byte{1}}, // b
	})
	if a.Index != 8 || b.Index != 9 || c.Index != 0 || len(r.awaiting) != 1 {
		t.Fatalf("placed a at %d, b at %d, c at %d, %d awaiting; want 8, 9, unplaced, 1", a.Index, b.Index, c.Index, len(r.awaiting))
	}
	r.placeProposals([]raftpb.Entry{{Index: 10, Term: 4, Type: raftpb.EntryNormal, Data: []byte{1}}})
	if !c.Lost || c.Index != 0 || len(r.awaiting) != 0 {
		t.Fatalf("after another term's entry: c %+v, %d awaiting; want c lost", c, len(r.awaiting))
	}
}

// TestMoveAReplica: a fourth replica joins with an empty log (no peers:
// it waits to be contacted), catches up as a learner, becomes a voter,
// and the third is removed; the group goes on with 1, 2 and 4, whose logs
// are the same, and every replica applied the same membership.
func TestMoveAReplica(t *testing.T) {
	c := newCluster(t, 3)
	c.elect(1)
	c.propose(1, "a", "b")
	c.nodes[4] = &testNode{id: 4, log: newMemLog(), dir: t.TempDir()}
	c.ids = append(c.ids, 4)
	c.start(4, nil)
	change := func(typ raftpb.ConfChangeType, id uint64, want func(voters, learners []uint64) bool) {
		t.Helper()
		if err := c.replica(1).ProposeConfChange(raftpb.ConfChange{Type: typ, NodeID: id}); err != nil {
			t.Fatal(err)
		}
		c.tickUntil(3*electionTicks, fmt.Sprintf("%v %d applied", typ, id), func() bool {
			return want(c.replica(1).Membership())
		})
	}
	change(raftpb.ConfChangeAddLearnerNode, 4, func(_, learners []uint64) bool { return slices.Contains(learners, 4) })
	c.tickUntil(3*electionTicks, "the learner catches up", func() bool {
		return c.nodes[4].applied == c.replica(1).Status().Commit
	})
	change(raftpb.ConfChangeAddNode, 4, func(voters, _ []uint64) bool { return slices.Contains(voters, 4) })
	change(raftpb.ConfChangeRemoveNode, 3, func(voters, _ []uint64) bool { return !slices.Contains(voters, 3) })
	c.kill(3)
	c.ids = slices.DeleteFunc(c.ids, func(id uint64) bool { return id == 3 })
	c.propose(1, "c")
	c.tickUntil(3*electionTicks, "replica 4 applies the last entry", func() bool {
		return c.nodes[4].applied == c.replica(1).Status().Commit
	})
	c.requireConverged()
	for _, id := range c.ids {
		if voters, learners := c.replica(id).Membership(); !slices.Equal(voters, []uint64{1, 2, 4}) || len(learners) != 0 {
			t.Errorf("replica %d: voters %v, learners %v; want voters [1 2 4]", id, voters, learners)
		}
	}
	if got := c.committedRecords(); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("committed records %q", got)
	}
}

// TestReadIndexConfirmsOnlyWithAQuorum: a leader's ReadIndex is confirmed,
// at its commit index, once a quorum answered the heartbeat round; a
// leader cut off from its group never confirms one, even before it knows
// it was deposed, while the new leader confirms reads at an index past
// everything it committed.
func TestReadIndexConfirmsOnlyWithAQuorum(t *testing.T) {
	c := newCluster(t, 3)
	c.elect(1)
	c.propose(1, "a", "b")
	confirmed := func(id uint64) map[uint64]uint64 {
		got := make(map[uint64]uint64)
		c.replica(id).TakeReadStates(func(id, index uint64) { got[id] = index })
		return got
	}
	commit := c.replica(1).Status().Commit
	c.replica(1).ReadIndex(7)
	c.settle()
	if got := confirmed(1); got[7] != commit || len(got) != 1 {
		t.Fatalf("leader's reads confirmed %v, want read 7 at the commit index %d", got, commit)
	}

	c.partition([]uint64{1}, []uint64{2, 3})
	c.replica(1).ReadIndex(8)
	c.settle()
	if got := confirmed(1); len(got) != 0 {
		t.Fatalf("a leader cut off from its quorum confirmed reads %v", got)
	}
	c.tickUntil(electionLimit, "a leader among 2 and 3", func() bool { return c.leader() == 2 || c.leader() == 3 })
	lead := c.leader()
	c.propose(lead, "c")
	c.replica(lead).ReadIndex(9)
	c.settle()
	if got, want := confirmed(lead)[9], c.replica(lead).Status().Commit; got != want {
		t.Fatalf("new leader confirmed read 9 at %d, want its commit index %d", got, want)
	}
	if got := confirmed(1); len(got) != 0 {
		t.Fatalf("the deposed leader confirmed reads %v", got)
	}
}
