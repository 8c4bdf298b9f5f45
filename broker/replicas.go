package broker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
}

// replicatedLog is a replicated shard's log as readers see it: they stop
// at what the shard applied (committed by a quorum), not at what this
// replica wrote. Appends go through raft's storage only.
type replicatedLog struct {
	durableLog
	applied *atomic.Uint64
}

var errAppendReplicated = errors.New("broker: a replicated shard appends through raft only")

func (l replicatedLog) Append(uint64, [][]byte, time.Time) error { return errAppendReplicated }

func (l replicatedLog) AppendStamped(uint64, [][]byte, time.Time, streams.Stamp) error {
	return errAppendReplicated
}

func (l replicatedLog) Committed() uint64 { return l.applied.Load() }

// replicaGroup names a shard's raft group on the peer link. The creation
// time keeps a stream deleted and made again from taking the old group's
// messages.
func replicaGroup(def streams.Def, shard uint32) string {
	return fmt.Sprintf("%s/%d@%d", def.Scope, shard, def.CreatedAt.UnixNano())
}

// openReplica is the registry's OpenReplica hook.
func (b *Broker) openReplica(def streams.Def, shard uint32, log streams.Log, inbox *streams.PeerInbox) (streams.Replica, error) {
	link := b.peerLink()
	if link == nil {
		return nil, errNoPeerLink
	}
	node, key, set, id, err := b.replicaHere(def, shard)
	if err != nil {
		return nil, err
	}
	rl, ok := log.(replicatedLog)
	if !ok {
		return nil, fmt.Errorf("shard %s: the log is not a replicated log", key)
	}
	storage, err := replication.OpenStorage(rl.Log, b.logDir(def, shard))
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
	logger := b.log.With().Str("stream", def.Scope.String()).Uint32("shard", shard).Logger()
	applied, appliedEnd := storage.Committed()
	r, err := replication.NewReplica(replication.Config{ID: id, Storage: storage, Peers: peers, Applied: applied, Log: logger.Level(zerolog.WarnLevel)})
	if err != nil {
		return nil, err
	}
	logCfg, err := b.logConfig(def)
	if err != nil {
		return nil, err
	}
	sr := &shardReplica{r: r, key: key, id: id, group: replicaGroup(def, shard), set: set, node: node, link: link, applied: rl.applied, log: logger, b: b,
		dir: b.logDir(def, shard), logCfg: logCfg}
	sr.applied.Store(appliedEnd)
	if b.snaps != nil {
		b.snaps.dirs.Store(sr.group, sr.dir)
	}
	if sr.unregister, err = link.Register(sr.group, func(_ string, data []byte) { inbox.Deliver(data) }); err != nil {
		return nil, err
	}
	sr.view = b.addReplicaView(key)
	return sr, nil
}

// replicaHere is this member's replica of a replicated shard: the cluster
// node, the shard's key and replica set, and this member's raft id in it.
func (b *Broker) replicaHere(def streams.Def, shard uint32) (*cluster.Node, cluster.ShardKey, cluster.ReplicaSet, uint64, error) {
	key := cluster.ShardKey{Scope: def.Scope, Shard: shard}
	node := b.node.Load()
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
	b          *Broker
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

// Tick advances raft's clock, and every statusTicks ticks refreshes the
// replica's entry in the broker's status view.
func (s *shardReplica) Tick() {
	s.r.Tick()
	if s.ticks++; s.ticks%statusTicks == 0 {
		s.r.CompactBehind(snapshotCatchUpEntries)
		s.refreshSet()
		st := s.r.Status()
		s.b.replStatus.put(s.key, s.statusOf(st))
		if st.State == raft.StateLeader {
			s.mover.step(s, st)
			s.leaveIfDraining(st)
			s.followDataLeader(st)
		}
	}
}

// leaveIfDraining hands the leadership to the most caught-up other voter
// while an operator drains this member: its replicas stay (move them with
// felix cluster move-replica), but clients go elsewhere before it stops.
func (s *shardReplica) leaveIfDraining(st replication.Status) {
	if !s.node.Draining() {
		return
	}
	voters, _ := s.r.Membership()
	var to, best uint64
	for _, v := range voters {
		if m := st.Match[v]; v != st.ID && (to == 0 || m > best) {
			to, best = v, m
		}
	}
	if to != 0 {
		s.r.TransferLeadership(to)
	}
}

// refreshSet reads the replica set again: a move changes it.
func (s *shardReplica) refreshSet() {
	set, ok := s.node.ReplicaSet(s.key)
	if !ok {
		return
	}
	s.set = set
	// Named with another raft id: this replica was removed and the member
	// added again since (a move away and back faster than a refresh).
	if id, in := set.Has(s.node.ID()); !in || id != s.id {
		s.removed = true
	}
}

// AppliedEnd is where the shard starts: what the storage knew committed.
func (s *shardReplica) AppliedEnd() uint64 { return s.applied.Load() }

// Removed says the replica set no longer names this replica (this member
// with this raft id): the shard stops and deletes its data.
func (s *shardReplica) Removed() bool { return s.removed }

// statusTicks is how often (in ticks, 200 ms) a replica refreshes its
// status view: Status allocates, so not on every tick.
const statusTicks = 2

func (s *shardReplica) HasReady() bool { return s.failed == nil && s.r.HasReady() }

func (s *shardReplica) Step(data []byte) error {
	var m raftpb.Message
	if err := m.Unmarshal(data); err != nil {
		return fmt.Errorf("broker: undecodable raft message for %s: %w", s.key, err)
	}
	err := s.r.Step(m)
	var need *replication.SnapshotNeeded
	if errors.As(err, &need) {
		s.startCopy(need)
		return nil
	}
	return err
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

func (s *shardReplica) Ready(apply func(streams.Applied)) error {
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
		apply(a)
	})
	if err != nil {
		s.failed = fmt.Errorf("%w: %w", streams.ErrReplicaFailed, err)
		s.b.metrics.ReplicaFailures.Inc()
		return s.failed
	}
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
			s.b.metrics.ReplicationDropped.Inc()
		} else if m.Type == raftpb.MsgSnap {
			s.b.metrics.SnapshotsSent.Inc()
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
		s.b.metrics.LeaderChanges.Inc()
		s.b.replStatus.put(s.key, s.statusOf(s.r.Status()))
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
// and its address, or shard_unavailable while there is none.
func (s *shardReplica) notLeader(lead, term uint64) error {
	node, ok := s.set.NodeOf(lead)
	if !ok {
		return wire.NewError(wire.CodeShardUnavailable, "electing: replicated shard %s has no leader yet; retry", s.key)
	}
	addr, ok := s.node.MemberAddr(node)
	if !ok {
		return wire.NewError(wire.CodeShardUnavailable, "electing: the leader of %s (member %s) is not reachable from here; retry", s.key, node)
	}
	e := wire.NewError(wire.CodeNotLeader, "replicated shard %s is led by member %s at %s", s.key, node, addr)
	e.Owner = &wire.Owner{NodeID: node, Addr: addr, Generation: term}
	return e
}

func (s *shardReplica) Close() {
	s.b.dropReplicaView(s.key, s.view)
	if s.unregister != nil {
		s.unregister()
	}
	s.stopCopy()
	if s.b.snaps != nil {
		s.b.snaps.dirs.CompareAndDelete(s.group, s.dir)
	}
	s.b.replStatus.remove(s.key)
}

// peerLink is the members' link, nil until it started (or when the
// cluster_tls_* knobs are not set).
func (b *Broker) peerLink() peerLink {
	if p := b.Peers(); p != nil {
		return p
	}
	return nil
}

// defaultReplicas is a durable stream's replication factor in a cluster of
// at least that many members with a peer link, when the creator gives none.
const defaultReplicas = 3

// replicasFor decides a new stream's replication factor: what the creator
// asked for, checked against what this broker can give, or the default.
func (b *Broker) replicasFor(spec *service.StreamSpec) (int, error) {
	asked := spec.Replicas
	switch {
	case asked < 0:
		return 0, wire.NewError(wire.CodeInvalidRequest, "replicas cannot be negative")
	case asked > 1 && !spec.Durable:
		return 0, wire.NewError(wire.CodeInvalidRequest, "replicas %d: only durable streams are replicated (add --durable)", asked)
	case !spec.Durable:
		return 0, nil
	}
	node := b.node.Load()
	if node == nil || b.peerLink() == nil {
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
func (b *Broker) checkReplicaID(def streams.Def, shard uint32) error {
	_, key, _, id, err := b.replicaHere(def, shard)
	if err != nil {
		return err
	}
	dir := b.logDir(def, shard)
	path := filepath.Join(dir, replicaIDFile)
	raw, err := os.ReadFile(path)
	switch {
	case err == nil && strings.TrimSpace(string(raw)) == strconv.FormatUint(id, 10):
		return nil
	case err == nil:
		b.log.Warn().Str("shard", key.String()).Str("was", strings.TrimSpace(string(raw))).Uint64("now", id).
			Msg("the replica's data belongs to a removed replica of this member; deleted, it catches up from the leader")
		b.removeShardLog(def.Scope, shard)
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("read %s: %w", path, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return writeAddrFile(path, strconv.FormatUint(id, 10))
}
