package member

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/getfelix/felix-go/cluster"
	"github.com/getfelix/felix-go/persistence"
	"github.com/getfelix/felix-go/replication"
	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/streams"
	"github.com/getfelix/felix-go/wire"
)

// A replicated shard's raft side: replication.Replica over the shard's own
// log (the log is raft's storage), messages to the other replicas over the
// peer link, the replica set and the members' addresses from the cluster.
// The shard (streams/replicated.go) drives it on its own goroutine.

// peerLink is what a replica needs of the members' link (Peers).
type peerLink interface {
	// Register routes a group's messages to h, which must not block.
	Register(group string, h func(from string, data []byte)) (unregister func(), err error)
	// Send queues data for group on member toNode; false when it was
	// dropped (unknown member, full queue): raft sends again.
	Send(toNode, group string, data []byte) bool
	// HeardAt is when anything last arrived from member node (liveness.go).
	HeardAt(node string) time.Time
}

// replicatedLog is a replicated shard's log as readers see it: they stop
// at what the shard applied (committed by a quorum), not at what this
// replica wrote. Appends go through raft's storage only.
type replicatedLog struct {
	streams.Log
	// raw is the log under Log, raft's storage; onCommit says durable_fsync
	// is on_commit.
	raw      *persistence.Log
	onCommit bool
	applied  *atomic.Uint64
}

// ReplicatedLog wraps a replicated shard's log for the registry's OpenLog
// hook: l is the broker's streams.Log over raw, opened in the shard's
// LogDir after PrepareReplicaDir. OpenReplica takes only such a log.
func ReplicatedLog(l streams.Log, raw *persistence.Log, onCommit bool) streams.Log {
	return replicatedLog{Log: l, raw: raw, onCommit: onCommit, applied: new(atomic.Uint64)}
}

var errAppendReplicated = errors.New("member: a replicated shard appends through raft only")

func (l replicatedLog) Append(uint64, [][]byte, time.Time) error { return errAppendReplicated }

func (l replicatedLog) AppendStamped(uint64, [][]byte, time.Time, streams.Stamp) error {
	return errAppendReplicated
}

func (l replicatedLog) Committed() uint64 { return l.applied.Load() }

// A replicated cache shard compacts its replica's log, entry by entry
// (streams.CompactableLog): the shard holds the horizon below what raft
// no longer serves (shardReplica.CompactableEnd) and commits no
// compaction while a follower may be copying the segments
// (CopyingSegments).
var _ streams.CompactableLog = replicatedLog{}

func (l replicatedLog) SealedEnd() uint64      { return l.raw.SealedEnd() }
func (l replicatedLog) CompactedBelow() uint64 { return l.raw.CompactedBelow() }

func (l replicatedLog) PrepareCompaction(horizon uint64, keep func(offset uint64, value []byte) ([]byte, bool, error)) (streams.PreparedCompaction, error) {
	cl, ok := l.Log.(streams.CompactableLog)
	if !ok {
		return nil, persistence.ErrNotCompactable
	}
	return cl.PrepareCompaction(horizon, keep)
}

// replicaGroup names a shard's raft group on the peer link. The creation
// time keeps a stream deleted and made again from taking the old group's
// messages.
func replicaGroup(def streams.Def, shard uint32) string {
	return fmt.Sprintf("%s/%d@%d", def.Scope, shard, def.CreatedAt.UnixNano())
}

// OpenReplica is the registry's OpenReplica hook: it starts this member's
// replica of a replicated shard over its log (a ReplicatedLog), with its
// raft group on the peer link. The shard's goroutine calls it.
func (m *Member) OpenReplica(def streams.Def, shard uint32, log streams.Log, inbox *streams.PeerInbox) (streams.Replica, error) {
	link := m.peerLink()
	if link == nil {
		return nil, errNoPeerLink
	}
	node, key, set, id, err := m.replicaHere(def, shard)
	if err != nil {
		return nil, err
	}
	rl, ok := log.(replicatedLog)
	if !ok {
		return nil, fmt.Errorf("shard %s: the log is not a replicated log", key)
	}
	storage, err := replication.OpenStorage(rl.raw, m.host.LogDir(def, shard))
	if err != nil {
		return nil, err
	}
	// durable_fsync on_commit: a quorum has each acknowledged entry on disk;
	// periodic (or none): in memory, made durable by the log's policy.
	storage.SetLazySync(!rl.onCommit)
	// Only the replicas the group was made with start it from an empty
	// log; one added later (a move) waits for the leader to contact it.
	var peers []raft.Peer
	if set.Bootstraps(id) {
		for _, m := range set.Members {
			if set.Bootstraps(m.ID) {
				peers = append(peers, raft.Peer{ID: m.ID})
			}
		}
	}
	logger := m.log.With().Str("stream", def.Scope.String()).Uint32("shard", shard).Logger()
	applied, appliedEnd := storage.Committed()
	// sr is made below; the replica asks only from Tick, after.
	var sr *shardReplica
	peerGone := func(id uint64) bool { return sr.replicaGone(id) }
	r, err := replication.NewReplica(replication.Config{ID: id, Storage: storage, Peers: peers, Applied: applied, Log: logger.Level(zerolog.WarnLevel), PeerGone: peerGone})
	if err != nil {
		return nil, err
	}
	logCfg, err := m.host.LogConfig(def)
	if err != nil {
		return nil, err
	}
	sr = &shardReplica{r: r, key: key, id: id, group: replicaGroup(def, shard), set: set, node: node, link: link, applied: rl.applied, log: logger, m: m,
		dir: m.host.LogDir(def, shard), logCfg: logCfg}
	sr.applied.Store(appliedEnd)
	sr.appliedIndex = applied
	if m.snaps != nil {
		m.snaps.dirs.Store(sr.group, sr.dir)
	}
	if sr.unregister, err = link.Register(sr.group, func(_ string, data []byte) { inbox.Deliver(data) }); err != nil {
		return nil, err
	}
	sr.view = m.addReplicaView(key)
	sr.watch = &replicaWatch{gone: func(node string) { inbox.MemberGone(node) }}
	sr.watchSet()
	m.watches.add(sr.watch)
	return sr, nil
}

// replicaHere is this member's replica of a replicated shard: the cluster
// node, the shard's key and replica set, and this member's raft id in it.
func (m *Member) replicaHere(def streams.Def, shard uint32) (*cluster.Node, cluster.ShardKey, cluster.ReplicaSet, uint64, error) {
	key := cluster.ShardKey{Scope: def.Scope, Shard: shard}
	node := m.host.Node()
	if node == nil {
		return nil, key, cluster.ReplicaSet{}, 0, errNoPeerLink
	}
	set, ok := node.ReplicaSet(key)
	if !ok {
		return nil, key, set, 0, fmt.Errorf("shard %s has no replica set yet", key)
	}
	id, in := set.Has(node.ID())
	if !in {
		return nil, key, set, 0, fmt.Errorf("member %s is not in the replica set of %s", node.ID(), key)
	}
	return node, key, set, id, nil
}

// errNoPeerLink refuses a replicated shard on a member without the link.
var errNoPeerLink = errors.New("this member has no peer link for replicated shards (set cluster_tls_ca, cluster_tls_cert and cluster_tls_key)")

// shardReplica adapts replication.Replica to streams.Replica. Only the
// shard's goroutine calls it.
type shardReplica struct {
	r          *replication.Replica
	key        cluster.ShardKey
	id         uint64 // this replica's raft id
	group      string
	set        cluster.ReplicaSet // as last read from the cluster (refreshSet)
	node       *cluster.Node
	link       peerLink
	applied    *atomic.Uint64
	unregister func()
	log        zerolog.Logger
	m          *Member
	view       *replicaView // the role, for consumer groups (groupcluster.go)
	// failed is the Ready error after which the replica takes nothing.
	failed error
	// claimed is the term this replica last claimed the shard's owner
	// record in; leader the last leader it saw.
	claimed, leader uint64
	ticks           uint64
	// lastHeard is when the leader last saw each replica active (heard).
	lastHeard map[uint64]time.Time
	// removed: the replica set no longer names this member (a move took
	// the replica elsewhere).
	removed bool
	// mover carries out the set's move when this replica leads.
	mover replicaMover
	// dir is the replica's log directory, logCfg its log's configuration;
	// copy the copy of the leader's segments under way or staged.
	dir    string
	logCfg persistence.Config
	copy   *snapshotCopy
	// contact is what this replica, as a follower, last heard from its
	// leader: when, in which term, and the highest commit index the
	// leader sent it (follower reads, LeaderContact). appliedIndex is the
	// last raft index applied.
	contact      leaderContact
	appliedIndex uint64
	// watch tells the member which members the group names, for
	// MemberGone (liveness.go).
	watch *replicaWatch
	// refusal is the last not_leader refusal, reused while it holds.
	refusal notLeaderRefusal
	// statusAt is when the status view was last refreshed while quiet;
	// quietStatus the leader's status then, reused while the replica has
	// stayed quiet since (quietStatusOf).
	statusAt     time.Time
	quietStatus  replication.Status
	quietStatusN uint64 // the replica's Quiesces count then; 0: none
}

// leaderContact is a follower's last news from its leader.
type leaderContact struct {
	heard        time.Time
	term, commit uint64
}

var _ streams.Replica = (*shardReplica)(nil)

func (s *shardReplica) Propose(records, attrs [][]byte, stamp *streams.Stamp) (streams.Ticket, error) {
	if s.failed != nil {
		return nil, s.failed
	}
	var ps *persistence.Stamp
	if stamp != nil {
		ps = &persistence.Stamp{Producer: stamp.Producer, Sequence: stamp.Sequence, Digest: stamp.Digest}
	}
	if attrs != nil {
		records = persistence.JoinRecords(records, attrs)
	}
	p, err := s.r.ProposeBatch(records, ps, attrs != nil)
	if err != nil {
		var nl *replication.ErrNotLeader
		if errors.As(err, &nl) {
			return nil, s.Role().NotLeader
		}
		return nil, err
	}
	return func() (uint64, uint64, bool) { return p.Index, p.Term, p.Lost }, nil
}

// Tick advances raft's clock, and every statusTicks ticks (quietStatusTicks
// while the group is quiet) refreshes the replica's entry in the member's
// status view.
func (s *shardReplica) Tick() {
	s.r.Tick()
	if s.statusDue() {
		s.r.CompactBehind(snapshotCatchUpEntries)
		s.refreshSet()
		st := s.quietStatusOf()
		if st.State == raft.StateLeader {
			// Again on every status tick: the record goes with an
			// expired lease while raft goes on (ClaimLeader).
			s.node.ClaimLeader(s.key, st.Term)
			s.mover.step(s, st)
			s.balance(st)
			s.followDataLeader(st)
		}
	}
}

// statusDue says the tick refreshes the status view: every statusTicks
// ticks while the group is awake, every quietStatusInterval while it is
// quiet (its ticks are slower then, and not evenly spaced: any message
// brings the fast tick back).
func (s *shardReplica) statusDue() bool {
	s.ticks++
	if !s.r.Quiet() {
		return s.ticks%statusTicks == 0
	}
	if now := time.Now(); now.Sub(s.statusAt) >= quietStatusInterval {
		s.statusAt = now
		return true
	}
	return false
}

// quietStatusOf is the replica's status, put in the member's view. A
// quiet replica that has stayed quiet since its last one, under the same
// replica set, reuses it: nothing in its group changed, and Status
// allocates (raft's progress map, the wire view) once a second per shard.
func (s *shardReplica) quietStatusOf() replication.Status {
	n := s.r.Quiesces()
	if s.r.Quiet() && n != 0 && n == s.quietStatusN {
		return s.quietStatus
	}
	st := s.r.Status()
	s.m.status.put(s.key, s.statusOf(st))
	s.quietStatusN = 0
	if s.r.Quiet() {
		s.quietStatus, s.quietStatusN = st, n
	}
	return st
}

func (s *shardReplica) Quiet() bool { return s.r.Quiet() }

// MemberGone is the member's news that member node, which this replica's
// group names, is gone (liveness.go). A follower of a leader on it ends
// the leader's lease and elects. A quiet leader that went quiet with it
// wakes, and goes quiet again without it (replicaGone): its heartbeats
// would only go to a member that is not there. Another follower's loss
// changes nothing here: woken alone, a follower would only time out
// against its quiet leader.
//
// An awake replica ignores it: its group's heartbeats find a dead leader,
// and ending the leader's lease there would only start elections early
// wherever the news was wrong (a member too starved of CPU to beat on
// time), more load on a machine that already has too much. A replica that
// goes quiet after the news does not under a gone leader
// (replication.Config.PeerGone).
func (s *shardReplica) MemberGone(node string) {
	id, in := s.set.Has(node)
	if !in || s.failed != nil || node == s.node.ID() || !s.r.Quiet() {
		return
	}
	state, lead, _ := s.r.Role()
	switch {
	case state == raft.StateLeader:
		if slices.Contains(s.r.QuietWith(), id) {
			s.r.Wake()
		}
	case lead == id:
		s.log.Debug().Str("leader", node).Msg("the group's leader is gone: electing")
		s.r.LeaderGone(lead)
	}
}

// watchSet tells the member which members the group names now.
func (s *shardReplica) watchSet() {
	all := s.set.All()
	nodes := make([]string, 0, len(all))
	for _, r := range all {
		nodes = append(nodes, r.Node)
	}
	s.watch.nodes.Store(&nodes)
}

// replicaGone says the member of replica id (in the set) is gone.
func (s *shardReplica) replicaGone(id uint64) bool {
	node, ok := s.set.NodeOf(id)
	return ok && !s.memberLive(node)
}

// memberLive says member node is in the cluster's membership with a peer
// link, and the link heard from it lately.
func (s *shardReplica) memberLive(node string) bool {
	_, ok := s.node.PeerAddr(node)
	return ok && time.Since(s.link.HeardAt(node)) < peerSilence
}

// refreshSet reads the replica set again: a move changes it.
func (s *shardReplica) refreshSet() {
	set, ok := s.node.ReplicaSet(s.key)
	if !ok {
		return
	}
	if !sameSet(set, s.set) {
		s.set = set
		s.quietStatusN = 0 // the view names the set's members
		s.watchSet()
	}
	// Named with another raft id: this replica was removed and the member
	// added again since (a move away and back faster than a refresh).
	if id, in := set.Has(s.node.ID()); !in || id != s.id {
		s.removed = true
	}
}

// CompactableEnd is where a cache shard's compaction must stop: below
// it, raft serves no entry and every entry is applied.
func (s *shardReplica) CompactableEnd() uint64 { return s.r.CompactableEnd() }

// CopyingSegments says a follower may be copying this replica's segment
// files: a snapshot went out, or the snapshot service served a chunk of
// them, within snapshotCopyHold (a follower that hears nothing for that
// long has given the copy up).
func (s *shardReplica) CopyingSegments() bool {
	if time.Since(s.r.LastSnapshotSent()) < snapshotCopyHold {
		return true
	}
	return s.m.snaps != nil && s.m.snaps.servedWithin(s.group, snapshotCopyHold)
}

// AppliedEnd is where the shard starts: what the storage knew committed.
func (s *shardReplica) AppliedEnd() uint64 { return s.applied.Load() }

// Removed says the replica set no longer names this replica (this member
// with this raft id): the shard stops and deletes its data.
func (s *shardReplica) Removed() bool { return s.removed }

// statusTicks is how often (in ticks, 200 ms) a replica refreshes its
// status view: Status allocates, so not on every tick.
const statusTicks = 2

// quietStatusInterval is how often a quiet replica refreshes its status
// view, reads its replica set again (a move) and checks a drain, at most:
// nothing in its group changes while it is quiet. Its ticks come no
// faster than this anyway (streams.QuietLeaderTick); a quiet follower's
// come slower still, so a move or a drain of a quiet shard starts up to a
// second later on its leader, and a moved-away follower notices on its
// next tick.
const quietStatusInterval = streams.QuietLeaderTick

// sameSet says two reads of a replica set name the same replicas and the
// same move.
func sameSet(a, b cluster.ReplicaSet) bool {
	switch {
	case !slices.Equal(a.Members, b.Members) || !slices.Equal(a.Initial, b.Initial):
		return false
	case a.Move == nil || b.Move == nil:
		return a.Move == b.Move
	}
	return *a.Move == *b.Move
}

func (s *shardReplica) HasReady() bool { return s.failed == nil && s.r.HasReady() }

func (s *shardReplica) Step(data []byte) error {
	var m raftpb.Message
	if err := m.Unmarshal(data); err != nil {
		return fmt.Errorf("member: undecodable raft message for %s: %w", s.key, err)
	}
	err := s.r.Step(m)
	if err == nil {
		s.noteContact(m)
	}
	var need *replication.SnapshotNeeded
	if errors.As(err, &need) {
		s.startCopy(need)
		return nil
	}
	return err
}

// noteContact records an append or a heartbeat from the leader of this
// replica's term: when it came and the commit index it carried (an append
// carries the leader's commit index; a heartbeat at most what this
// replica holds of it, which a caught-up follower holds entirely).
func (s *shardReplica) noteContact(m raftpb.Message) {
	if m.Type != raftpb.MsgApp && m.Type != raftpb.MsgHeartbeat {
		return
	}
	_, lead, term := s.r.Role()
	if m.From != lead || m.Term != term {
		return
	}
	if s.contact.term != term {
		s.contact = leaderContact{term: term}
	}
	s.contact.heard = time.Now()
	s.contact.commit = max(s.contact.commit, m.Commit)
}

// LeaderContact says when this follower last heard from the leader of its
// term, and whether it applied every entry that leader said committed.
//
// A quiet follower hears nothing from its leader's group, by design: it
// agreed with the leader on the whole log when it went quiet, and any
// later entry would have woken it. Its contact is then the leader's
// member's last beat over the peer link (liveness.go), so follower reads
// go on being served from an idle shard.
func (s *shardReplica) LeaderContact() (time.Time, bool) {
	_, lead, term := s.r.Role()
	if term != s.contact.term {
		return time.Time{}, false
	}
	heard := s.contact.heard
	if node, ok := s.set.NodeOf(lead); ok && s.r.Quiet() {
		heard = laterOf(heard, s.link.HeardAt(node))
	}
	return heard, s.appliedIndex >= s.contact.commit
}

func laterOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// ReadIndex asks raft to confirm a read as the group's leader.
func (s *shardReplica) ReadIndex(id uint64) {
	if s.failed == nil {
		s.r.ReadIndex(id)
	}
}

// EnforceRetention runs the log's retention over what the replica applied.
func (s *shardReplica) EnforceRetention(now time.Time) {
	if n, err := s.r.EnforceRetention(now); err != nil {
		s.log.Warn().Err(err).Int("segments", n).Msg("retention")
	}
}

// Restart says the replica has a copy of its leader's segments staged: the
// shard stops, and the replica starts again on the copy.
func (s *shardReplica) Restart() bool { return s.copyStaged() }

func (s *shardReplica) Ready(apply func(streams.Applied), read func(id, index uint64)) error {
	err := s.r.Ready(s.send, func(c replication.Committed) {
		a := streams.Applied{Index: c.Index, Term: c.Term, Base: c.Base, Time: c.Time, Records: c.Records}
		if c.Attributed {
			a.Records = values(c.Records)
		}
		if c.Stamp != nil {
			a.Stamp = &streams.Stamp{Producer: c.Stamp.Producer, Sequence: c.Stamp.Sequence, Digest: c.Stamp.Digest}
		}
		// Readers may read up to here once the shard fans it out.
		s.applied.Store(c.Base + uint64(len(c.Records)))
		s.view.appliedTerm.Store(c.Term)
		s.appliedIndex = c.Index
		apply(a)
	})
	if err != nil {
		s.failed = fmt.Errorf("%w: %w", streams.ErrReplicaFailed, err)
		s.m.metrics.ReplicaFailures.Inc()
		return s.failed
	}
	s.r.TakeReadStates(read)
	s.observeRole()
	return nil
}

// values are the values of records stored with their attributes.
func values(stored [][]byte) [][]byte {
	out := make([][]byte, len(stored))
	for i, r := range stored {
		out[i], _, _ = persistence.SplitRecord(r) // the log checked each splits
	}
	return out
}

// send hands raft's messages to the link, serialised now (raft's rule).
func (s *shardReplica) send(msgs []raftpb.Message) {
	for _, m := range msgs {
		node, ok := s.set.NodeOf(m.To)
		if !ok {
			continue
		}
		data, err := m.Marshal()
		if err != nil {
			s.log.Warn().Err(err).Msg("marshal raft message")
			continue
		}
		if !s.link.Send(node, s.group, data) {
			s.m.metrics.ReplicationDropped.Inc()
		} else if m.Type == raftpb.MsgSnap {
			s.m.metrics.SnapshotsSent.Inc()
		}
	}
}

// observeRole logs leader changes and, on becoming leader, claims the
// shard's owner record so clients are routed here.
func (s *shardReplica) observeRole() {
	state, lead, term := s.r.Role()
	s.view.observe(state == raft.StateLeader, lead, term)
	if lead != s.leader {
		from, _ := s.set.NodeOf(s.leader)
		to, _ := s.set.NodeOf(lead)
		s.log.Info().Str("from", from).Str("to", to).Uint64("term", term).Msg("shard leader changed")
		s.leader = lead
		s.m.metrics.LeaderChanges.Inc()
		s.m.status.put(s.key, s.statusOf(s.r.Status()))
	}
	if state == raft.StateLeader && s.claimed != term {
		s.claimed = term
		s.node.ClaimLeader(s.key, term)
	}
}

func (s *shardReplica) Role() streams.Role {
	state, lead, term := s.r.Role()
	if state == raft.StateLeader {
		return streams.Role{Leader: true, Term: term}
	}
	return streams.Role{Term: term, NotLeader: s.notLeader(lead, term)}
}

// notLeader is the refusal a follower gives: not_leader naming the leader
// and its address, or shard_unavailable while there is none. The last one
// is kept while the leader, the term and its address stay: the shard asks
// a follower's Role after every Ready, and formatting the error each time
// was a seventh of a member's CPU while a thousand groups elected.
// Nothing modifies a wire.Error once made, so handing out one is safe.
func (s *shardReplica) notLeader(lead, term uint64) error {
	node, known := s.set.NodeOf(lead)
	var addr string
	reachable := false
	if known {
		addr, reachable = s.node.MemberAddr(node)
	}
	c := &s.refusal
	if c.err != nil && c.lead == lead && c.term == term && c.node == node && c.addr == addr && c.reachable == reachable {
		return c.err
	}
	var err error
	switch {
	case !known:
		err = wire.NewError(wire.CodeShardUnavailable, "electing: replicated shard %s has no leader yet; retry", s.key)
	case !reachable:
		err = wire.NewError(wire.CodeShardUnavailable, "electing: the leader of %s (member %s) is not reachable from here; retry", s.key, node)
	default:
		e := wire.NewError(wire.CodeNotLeader, "replicated shard %s is led by member %s at %s", s.key, node, addr)
		e.Owner = &wire.Owner{NodeID: node, Addr: addr, Generation: term}
		err = e
	}
	*c = notLeaderRefusal{lead: lead, term: term, node: node, addr: addr, reachable: reachable, err: err}
	return err
}

// notLeaderRefusal is the last refusal notLeader made, and what it named.
type notLeaderRefusal struct {
	lead, term uint64
	node, addr string
	reachable  bool
	err        error
}

func (s *shardReplica) Close() {
	s.m.dropReplicaView(s.key, s.view)
	s.m.watches.remove(s.watch)
	if s.unregister != nil {
		s.unregister()
	}
	s.stopCopy()
	if s.m.snaps != nil {
		s.m.snaps.dirs.CompareAndDelete(s.group, s.dir)
	}
	s.m.status.remove(s.key)
}

// peerLink is the members' link, nil until it started (or when the
// cluster_tls_* knobs are not set).
func (m *Member) peerLink() peerLink {
	if p := m.Peers(); p != nil {
		return p
	}
	return nil
}

// defaultReplicas is a durable stream's replication factor in a cluster of
// at least that many members with a peer link, when the creator gives none.
const defaultReplicas = 3

// ReplicasFor decides a new stream's replication factor: what the creator
// asked for, checked against what this member can give, or the default.
func (m *Member) ReplicasFor(spec *service.StreamSpec) (int, error) {
	asked := spec.Replicas
	switch {
	case asked < 0:
		return 0, wire.NewError(wire.CodeInvalidRequest, "replicas cannot be negative")
	case asked > 1 && !spec.Durable:
		return 0, wire.NewError(wire.CodeInvalidRequest, "replicas %d: only durable streams are replicated (add --durable)", asked)
	case !spec.Durable:
		return 0, nil
	}
	node := m.host.Node()
	if node == nil || m.peerLink() == nil {
		if asked > 1 {
			return 0, wire.NewError(wire.CodeInvalidRequest, "replicas %d: replication needs a cluster whose members have a peer link (cluster_etcd and cluster_tls_ca/cert/key)", asked)
		}
		return 0, nil
	}
	if !node.Ready() {
		return 0, wire.NewError(wire.CodeShardUnavailable, "not_ready: member %s has not joined the cluster yet; try another member", node.ID())
	}
	live := node.LiveMembers()
	if asked == 0 {
		if live >= defaultReplicas {
			return defaultReplicas, nil
		}
		return 0, nil
	}
	if asked > live {
		return 0, wire.NewError(wire.CodeInvalidRequest, "replicas %d: the cluster has %d live members; start more or ask for fewer", asked, live)
	}
	if asked == 1 {
		return 0, nil
	}
	return asked, nil
}

// replicaIDFile, in a replicated shard's log directory, holds the raft id
// the data belongs to.
const replicaIDFile = "replica.id"

// checkReplicaID makes sure a replicated shard's log directory holds this
// member's current replica: data left by a replica of this member that was
// removed from the group (it moved away, and back while this member was
// down) would start a raft node under the new id with the old one's votes
// and log. Such data is deleted; the new replica catches up from the
// leader. The id is written on first use.
func (m *Member) checkReplicaID(def streams.Def, shard uint32) error {
	_, key, _, id, err := m.replicaHere(def, shard)
	if err != nil {
		return err
	}
	dir := m.host.LogDir(def, shard)
	path := filepath.Join(dir, replicaIDFile)
	raw, err := os.ReadFile(path)
	switch {
	case err == nil && strings.TrimSpace(string(raw)) == strconv.FormatUint(id, 10):
		return nil
	case err == nil:
		m.log.Warn().Str("shard", key.String()).Str("was", strings.TrimSpace(string(raw))).Uint64("now", id).
			Msg("the replica's data belongs to a removed replica of this member; deleted, it catches up from the leader")
		m.RemoveShardData(def.Scope, shard)
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("read %s: %w", path, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return writeFileAtomic(path, strconv.FormatUint(id, 10))
}

// writeFileAtomic writes through a temporary file renamed over path, so a
// crash never leaves half an id.
func writeFileAtomic(path, content string) error {
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, []byte(content+"\n"), 0o644); err != nil {
		return fmt.Errorf("member: write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("member: write %s: %w", path, err)
	}
	return nil
}

// RemoveShardData is the shard's RemoveShardData hook: it deletes one
// shard's log, its replica moved to another member. Renamed away first,
// like the broker's deleted streams, so the shard made again here later
// (the replica moved back) starts empty.
func (m *Member) RemoveShardData(scope wire.Scope, shard uint32) {
	dir := m.host.LogDir(streams.Def{Scope: scope}, shard)
	// A copy of a leader's segments staged for the replica goes with it.
	if err := os.RemoveAll(dir + replication.StagedSuffix); err != nil {
		m.log.Warn().Err(err).Str("dir", dir).Msg("delete a moved replica's staged snapshot")
	}
	trash := fmt.Sprintf("%s%s%d", dir, wire.TrashSuffix, time.Now().UnixNano())
	if err := os.Rename(dir, trash); err != nil {
		m.log.Warn().Err(err).Str("dir", dir).Msg("delete a moved replica's data")
		return
	}
	if err := os.RemoveAll(trash); err != nil {
		m.log.Warn().Err(err).Str("dir", trash).Msg("delete a moved replica's data")
	}
}
