package replication

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// cluster is a raft group of Replicas in one process, over an in-memory
// network the test controls: it drops, partitions and delays links, and
// time passes only when the test ticks. Nothing runs on its own, so a test
// reads as a sequence of steps.
//
// Every entry any replica applies is checked against the first replica
// that applied that index: same term, kind, base offset, time, stamp and
// records. Over a whole test, what was committed is never lost or changed.
type cluster struct {
	t     *testing.T
	ids   []uint64
	nodes map[uint64]*testNode
	net   network
	ticks int
	// committed is each index as the first replica to apply it applied it.
	committed map[uint64]Committed
	// sent counts the messages every replica sent.
	sent int
	// gone are the replicas the replicas' owners are told left the
	// cluster (Config.PeerGone).
	gone map[uint64]bool
	// onSnapshot, when set, takes the snapshots a replica's log does not
	// hold (Step's SnapshotNeeded); without it they fail the test.
	onSnapshot func(to uint64, need *SnapshotNeeded)
}

// testNode is one replica and its disk, which outlives the replica: kill
// drops the replica, restart opens a new one on the same log and dir.
type testNode struct {
	id      uint64
	log     *memLog
	dir     string
	replica *Replica // nil while the node is down
	// applied and next are what the replica handed to apply since it
	// started: the last index, and the offset the next record must have.
	applied, next uint64
}

type link struct{ from, to uint64 }

type network struct {
	inflight []envelope
	drop     map[link]bool
	delay    map[link]int // in ticks
}

type envelope struct {
	m   raftpb.Message
	due int // the tick from which it may be delivered
}

// tickDuration is how much the proposals' clock moves per tick: the
// shard's tick.
const tickDuration = 100 * time.Millisecond

var clusterEpoch = time.UnixMicro(1_700_000_000_000_000)

// newCluster starts a new group of n replicas, ids 1 to n.
func newCluster(t *testing.T, n int) *cluster {
	c := &cluster{
		t:         t,
		nodes:     make(map[uint64]*testNode),
		net:       network{drop: make(map[link]bool), delay: make(map[link]int)},
		committed: make(map[uint64]Committed),
		gone:      make(map[uint64]bool),
	}
	var peers []raft.Peer
	for id := uint64(1); id <= uint64(n); id++ {
		c.ids = append(c.ids, id)
		c.nodes[id] = &testNode{id: id, log: newMemLog(), dir: t.TempDir()}
		peers = append(peers, raft.Peer{ID: id})
	}
	for _, id := range c.ids {
		c.start(id, peers)
	}
	c.settle()
	return c
}

func (c *cluster) start(id uint64, peers []raft.Peer) {
	c.t.Helper()
	n := c.nodes[id]
	st, err := OpenStorage(n.log, n.dir)
	if err != nil {
		c.t.Fatalf("replica %d: OpenStorage: %v", id, err)
	}
	r, err := NewReplica(Config{ID: id, Storage: st, Peers: peers, Now: c.now, PeerGone: func(id uint64) bool { return c.gone[id] }})
	if err != nil {
		c.t.Fatalf("replica %d: NewReplica: %v", id, err)
	}
	// raft hands over the entries after the compaction point, which is
	// index 0 unless retention or a snapshot left the log starting later.
	n.replica, n.applied, n.next = r, st.w.first, n.log.next
	if st.w.has(st.w.first + 1) {
		n.next = st.w.at(st.w.first + 1).base
	}
}

func (c *cluster) now() time.Time { return clusterEpoch.Add(time.Duration(c.ticks) * tickDuration) }

// kill drops a replica as a crash would: what its log had not synced is
// lost, its raft.state is what it last wrote.
func (c *cluster) kill(id uint64) {
	n := c.nodes[id]
	n.replica = nil
	n.log.crash()
	n.log.floor = 0
}

// restart starts a killed replica again from its disk alone.
func (c *cluster) restart(id uint64) {
	c.t.Helper()
	c.start(id, nil)
}

func (c *cluster) replica(id uint64) *Replica {
	c.t.Helper()
	r := c.nodes[id].replica
	if r == nil {
		c.t.Fatalf("replica %d is down", id)
	}
	return r
}

// settle runs Ready on every replica and delivers what is due until nothing
// moves. Time does not pass: heartbeats and elections need ticks.
func (c *cluster) settle() {
	c.t.Helper()
	const maxRounds = 1000
	for range maxRounds {
		moved := c.readyAll()
		if c.deliver() {
			moved = true
		}
		if !moved {
			return
		}
	}
	c.t.Fatalf("the cluster did not settle in %d rounds", maxRounds)
}

func (c *cluster) readyAll() bool {
	c.t.Helper()
	moved := false
	for _, id := range c.ids {
		n := c.nodes[id]
		for n.replica != nil && n.replica.HasReady() {
			if err := n.replica.Ready(c.sender(id), c.applier(n)); err != nil {
				c.t.Fatalf("replica %d: Ready: %v", id, err)
			}
			moved = true
		}
	}
	return moved
}

// sender queues messages as a transport would: marshalled, so that no
// replica shares memory with another.
func (c *cluster) sender(from uint64) func([]raftpb.Message) {
	return func(msgs []raftpb.Message) {
		for _, m := range msgs {
			if m.From != from {
				c.t.Errorf("replica %d sent a message from %d", from, m.From)
			}
			c.checkPersistedBeforeSend(c.nodes[from], m)
			b, err := m.Marshal()
			if err != nil {
				c.t.Fatal(err)
			}
			var wire raftpb.Message
			if err := wire.Unmarshal(b); err != nil {
				c.t.Fatal(err)
			}
			c.sent++
			due := c.ticks + c.net.delay[link{from: m.From, to: m.To}]
			c.net.inflight = append(c.net.inflight, envelope{m: wire, due: due})
		}
	}
}

// checkPersistedBeforeSend checks raft's rule that nothing is sent before
// what it promises is on disk: the term (and a vote) in raft.state, and the
// entries an append acknowledges in the synced part of the log. Pre-votes
// are exempt: they promise nothing and are not persisted.
func (c *cluster) checkPersistedBeforeSend(n *testNode, m raftpb.Message) {
	c.t.Helper()
	hs, _, _, err := readState(n.dir)
	if err != nil {
		c.t.Fatalf("replica %d: %v", n.id, err)
	}
	switch m.Type {
	case raftpb.MsgPreVote, raftpb.MsgPreVoteResp:
		return
	case raftpb.MsgVoteResp:
		if !m.Reject && (hs.Term != m.Term || hs.Vote != m.To) {
			c.t.Errorf("replica %d granted its vote to %d in term %d with term %d, vote %d on disk", n.id, m.To, m.Term, hs.Term, hs.Vote)
		}
	case raftpb.MsgAppResp:
		durable := uint64(0)
		if n.log.durable > 0 {
			durable = n.log.entries[n.log.durable-1].Index
		}
		if !m.Reject && m.Index > durable {
			c.t.Errorf("replica %d acknowledged index %d with index %d synced", n.id, m.Index, durable)
		}
	}
	if m.Term > hs.Term {
		c.t.Errorf("replica %d sent %v in term %d with term %d on disk", n.id, m.Type, m.Term, hs.Term)
	}
}

// deliver steps every due message into its replica, in the order sent,
// unless its link drops it or the replica is down.
func (c *cluster) deliver() bool {
	c.t.Helper()
	var due []envelope
	kept := c.net.inflight[:0:0]
	for _, e := range c.net.inflight {
		if e.due <= c.ticks {
			due = append(due, e)
		} else {
			kept = append(kept, e)
		}
	}
	c.net.inflight = kept
	for _, e := range due {
		to := c.nodes[e.m.To]
		if c.net.drop[link{from: e.m.From, to: e.m.To}] || to.replica == nil {
			continue
		}
		err := to.replica.Step(e.m)
		var need *SnapshotNeeded
		if errors.As(err, &need) && c.onSnapshot != nil {
			c.onSnapshot(e.m.To, need)
			continue
		}
		if err != nil {
			c.t.Fatalf("replica %d: Step(%v from %d): %v", e.m.To, e.m.Type, e.m.From, err)
		}
	}
	return len(due) > 0
}

// applier checks what a replica applies: indexes one after the other from
// the first, records at consecutive offsets, and each index the same on
// every replica.
func (c *cluster) applier(n *testNode) func(Committed) {
	return func(got Committed) {
		if got.Index != n.applied+1 {
			c.t.Errorf("replica %d applied index %d after %d", n.id, got.Index, n.applied)
		}
		if got.Base != n.next {
			c.t.Errorf("replica %d applied index %d at base offset %d, want %d", n.id, got.Index, got.Base, n.next)
		}
		n.applied, n.next = got.Index, got.Base+uint64(len(got.Records))
		first, ok := c.committed[got.Index]
		if !ok {
			got.Records = cloneRecords(got.Records)
			c.committed[got.Index] = got
			return
		}
		if !sameCommitted(first, got) {
			c.t.Errorf("index %d committed as %s, then applied by replica %d as %s", got.Index, describe(first), n.id, describe(got))
		}
	}
}

func sameCommitted(a, b Committed) bool {
	return a.Kind == b.Kind && a.Index == b.Index && a.Term == b.Term && a.Base == b.Base &&
		a.Time.Equal(b.Time) && reflect.DeepEqual(a.Stamp, b.Stamp) && reflect.DeepEqual(a.Records, b.Records)
}

func describe(e Committed) string {
	return fmt.Sprintf("{kind %d term %d base %d time %v stamp %v records %q}", e.Kind, e.Term, e.Base, e.Time.UnixMicro(), e.Stamp, e.Records)
}

// tick advances time by one tick on every live replica. Replicas tick one
// after the other, each followed by a settle, as no two real replicas tick
// at the same instant: ticking all before delivering anything would make
// two followers whose timeouts fall on the same tick campaign against each
// other every time, where in practice the first one's votes arrive first.
func (c *cluster) tick() {
	c.t.Helper()
	c.ticks++
	for _, id := range c.ids {
		if r := c.nodes[id].replica; r != nil {
			r.Tick()
			c.settle()
		}
	}
}

// tickUntil ticks until done holds, at most limit times, and returns how
// many ticks it took.
func (c *cluster) tickUntil(limit int, what string, done func() bool) int {
	c.t.Helper()
	for n := 0; ; n++ {
		if done() {
			return n
		}
		if n == limit {
			c.t.Fatalf("%s: not after %d ticks", what, limit)
		}
		c.tick()
	}
}

// leader is the live replica leading at the highest term, or 0. A replica
// cut off from its group may still believe it leads an older term.
func (c *cluster) leader() uint64 {
	var lead, term uint64
	for _, id := range c.ids {
		if r := c.nodes[id].replica; r != nil {
			if st := r.Status(); st.State == raft.StateLeader && st.Term > term {
				lead, term = id, st.Term
			}
		}
	}
	return lead
}

func (c *cluster) elect(id uint64) {
	c.t.Helper()
	if err := c.replica(id).Campaign(); err != nil {
		c.t.Fatal(err)
	}
	c.settle()
	if lead := c.leader(); lead != id {
		c.t.Fatalf("replica %d campaigned, the leader is %d", id, lead)
	}
}

// propose proposes records on replica id and settles.
func (c *cluster) propose(id uint64, records ...string) {
	c.t.Helper()
	if err := c.replica(id).Propose(toRecords(records), nil); err != nil {
		c.t.Fatalf("replica %d: Propose(%q): %v", id, records, err)
	}
	c.settle()
}

func toRecords(records []string) [][]byte {
	var out [][]byte
	for _, r := range records {
		out = append(out, []byte(r))
	}
	return out
}

// partition cuts every link between the groups, both ways.
func (c *cluster) partition(groups ...[]uint64) {
	for i, a := range groups {
		for j, b := range groups {
			if i == j {
				continue
			}
			for _, from := range a {
				for _, to := range b {
					c.net.drop[link{from: from, to: to}] = true
				}
			}
		}
	}
}

func (c *cluster) heal() { clear(c.net.drop) }

// committedRecords lists the records committed so far, in log order.
func (c *cluster) committedRecords() []string {
	var out []string
	for i := uint64(1); ; i++ {
		e, ok := c.committed[i]
		if !ok {
			return out
		}
		for _, r := range e.Records {
			out = append(out, string(r))
		}
	}
}

// requireConverged checks that the live replicas' logs are identical and
// hold every committed entry as it was committed.
func (c *cluster) requireConverged() {
	c.t.Helper()
	var ref *testNode
	for _, id := range c.ids {
		n := c.nodes[id]
		if n.replica == nil {
			continue
		}
		if ref == nil {
			ref = n
			continue
		}
		if !reflect.DeepEqual(n.log.entries, ref.log.entries) {
			c.t.Fatalf("replica %d's log differs from replica %d's:\n%s\n%s", n.id, ref.id, dumpLog(n.log), dumpLog(ref.log))
		}
	}
	for index, want := range c.committed {
		i := slices.IndexFunc(ref.log.entries, func(e Entry) bool { return e.Index == index })
		if i < 0 && len(ref.log.entries) > 0 && index < ref.log.entries[0].Index {
			continue // retention removed it
		}
		if i < 0 {
			c.t.Fatalf("committed index %d is not in the logs", index)
		}
		e := ref.log.entries[i]
		got := Committed{Kind: e.Kind, Index: e.Index, Term: e.Term, Base: e.Base, Time: e.Time, Stamp: e.Stamp, Records: e.Records}
		if !sameCommitted(got, want) {
			c.t.Errorf("index %d committed as %s, in the logs as %s", index, describe(want), describe(got))
		}
	}
}

func dumpLog(l *memLog) string {
	var s string
	for _, e := range l.entries {
		s += fmt.Sprintf(" %d/%d@%d%q", e.Index, e.Term, e.Base, e.Records)
	}
	return s
}
