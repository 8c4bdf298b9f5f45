package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/getfelix/felix-go/wire"
)

// Config configures a Node.
type Config struct {
	// Name is the cluster's name (cluster_name); Prefix the etcd key
	// prefix of its state (cluster_etcd_prefix).
	Name, Prefix string
	// Endpoints are etcd's client URLs.
	Endpoints []string
	// EtcdTLS, when set, is the etcd client's TLS (the endpoints are then
	// https://); EtcdUser and EtcdPassword log it in where etcd has auth
	// enabled. Every etcd client of the member uses them (etcdclient.go).
	EtcdTLS                *tls.Config
	EtcdUser, EtcdPassword string
	// NodeID is this member's id; Addr its felix/1 address for clients;
	// Admin its admin endpoint ("" when off).
	NodeID, Addr, Admin string
	// PeerAddr is its peer link's address (peerlink), where other members
	// send replication traffic; "" when it has no peer link.
	PeerAddr string
	// KafkaAddr is its Kafka listener's host:port for clients
	// (kafka_advertise, or the bound address); "" when it has none.
	KafkaAddr string
	// Zone is the member's failure domain (cluster_zone: a rack, an
	// availability zone); replica sets spread over zones. "" is none.
	Zone string
	// LeaseTTL is the member's etcd lease TTL, whole seconds.
	LeaseTTL time.Duration
	Log      zerolog.Logger
	// System, when set with TLS, serves protoactor's remote over mutual
	// TLS, so the members' actor systems reach each other: Trees asks
	// every member's node actor for its supervision tree.
	System *actor.ActorSystem
	// TLS is the member's certificate and the cluster CA; nil runs no
	// actor remote.
	TLS *TLS
	// Tree returns this member's supervision tree (/debug/actors JSON),
	// answered to other members.
	Tree func() ([]byte, error)
	// RaftLeader, when set, is this member's replica's view of a
	// replicated shard's raft group: the leader's raft id (0: none known,
	// or no replica here) and its term. Routing answers from it while the
	// shard's owner record is missing or older (etcd away, or the record
	// gone with an expired lease and not claimed again yet). Called under
	// the node's read lock: it must only read, never block or call back.
	RaftLeader func(key ShardKey) (leader, term uint64)
	// Hooks, called on the node's own goroutine and never under the
	// node's lock (a hook may call the node's readers); they must not
	// block.
	Hooks Hooks
}

// Hooks tell the broker what changed.
type Hooks struct {
	// Defs: definitions were written (put) or deleted in etcd, by any member.
	Defs func(put []StreamDef, deleted []wire.Scope)
	// Lost: this member no longer owns a shard; next is the new owner when
	// known. The broker stops the shard (its subscriptions end). The
	// ownership was fenced before the hook runs.
	Lost func(key ShardKey, next *wire.Owner)
	// Members: the number of live members changed.
	Members func(n int)
	// Owned: the number of shards this member owns changed.
	Owned func(n int)
	// Moved counts a shard that came to ("in") or left ("out") this member.
	Moved func(direction string)
	// Joined: the member joined the cluster (a lease, its member record,
	// the state loaded): at start, and again after a lost lease. The
	// broker starts serving then (its address file); the hook may write a
	// small local file, nothing slower.
	Joined func()
	// Replica: this member is in the replica set of a replicated shard and
	// must run its replica. Called again on every placement round.
	Replica func(key ShardKey)
	// NotZoneSpread: how many replicated shards have two replicas in one
	// zone while the live members span enough zones (each placement round).
	NotZoneSpread func(n int)
	// Producer: an idempotent producer id was given out (by any member).
	Producer func(id uint64, tenant string)
}

// Node is this broker's membership in a cluster. Its state (members,
// definitions, owners, homes, drains) mirrors etcd through one watch and is
// changed only by the node's loop goroutine; readers (Place, Owners,
// Status) take mu's read lock.
type Node struct {
	cfg  Config
	keys keys
	log  zerolog.Logger
	etcd *clientv3.Client
	// login gives etcd's clients EtcdUser's token; nil without a user.
	login *etcdLogin

	// lease is the member's current lease (0 before join); validUntil is
	// the monotonic instant (nanoseconds since base) before which etcd
	// cannot have expired it: acknowledgements stop there (lease.go).
	lease      atomic.Int64
	validUntil atomic.Int64
	base       time.Time

	mu    sync.RWMutex
	state state
	// changed is closed and replaced whenever state changes, so Owners can
	// wait for a placement.
	changed chan struct{}

	// claiming holds the replicated shards whose owner record a claim is
	// writing now (ClaimLeader): ShardKey → struct{}.
	claiming sync.Map

	ready atomic.Bool
	// kick asks the loop to place unowned shards soon.
	kick  chan struct{}
	fatal chan error
	stop  context.CancelFunc
	ctx   context.Context
	done  sync.WaitGroup

	actors actorRemote

	// setBatch is how many replica sets one etcd transaction writes: at
	// most setsPerTxn, less where etcd refused that many (placement.go).
	setBatch atomic.Int32
}

// New checks cfg and connects nothing yet: Start joins in the background.
func New(cfg Config) (*Node, error) {
	if cfg.NodeID == "" || cfg.Addr == "" || cfg.Name == "" || len(cfg.Endpoints) == 0 {
		return nil, errors.New("cluster: node id, address, cluster name and etcd endpoints are required")
	}
	if cfg.LeaseTTL < 2*time.Second {
		return nil, fmt.Errorf("cluster: lease TTL %s is below 2 s", cfg.LeaseTTL)
	}
	if err := checkEtcdEndpoints(cfg); err != nil {
		return nil, err
	}
	login := newEtcdLogin(cfg)
	cli, err := clientv3.New(cfg.etcdClientConfig(login))
	if err != nil {
		return nil, fmt.Errorf("cluster: etcd client for %s: %w", strings.Join(cfg.Endpoints, ","), err)
	}
	if login != nil {
		login.bind(cli)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &Node{
		cfg: cfg, keys: keys{prefix: strings.TrimSuffix(cfg.Prefix, "/")}, log: cfg.Log.With().Str("node", cfg.NodeID).Logger(),
		etcd: cli, login: login, base: time.Now(), changed: make(chan struct{}), kick: make(chan struct{}, 1),
		fatal: make(chan error, 1), ctx: ctx, stop: cancel, state: newState(),
	}
	n.setBatch.Store(setsPerTxn)
	return n, nil
}

// Start starts the actor remote (when Config has System and TLS), then
// joins the cluster in the background and returns at once: a broker whose
// etcd is unreachable starts, says so, and serves nothing clustered until
// it connects.
func (n *Node) Start() {
	n.actors.start(n)
	n.done.Add(1)
	go n.run()
}

// Fatal reports a configuration error found at join (another cluster's
// name under the prefix): the member will never join, and should exit.
func (n *Node) Fatal() <-chan error { return n.fatal }

// Ready reports whether the member has joined and mirrors the cluster.
func (n *Node) Ready() bool { return n.ready.Load() }

// ID is this member's node id.
func (n *Node) ID() string { return n.cfg.NodeID }

// Stop leaves the cluster: it revokes the member's lease, so its shards are
// placed elsewhere at once rather than after the TTL, and stops the loop.
func (n *Node) Stop(ctx context.Context) error {
	n.ready.Store(false)
	n.revokeAll(nil)
	n.stop()
	n.done.Wait()
	n.actors.stop()
	if id := n.lease.Load(); id != 0 {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := n.etcd.Revoke(rctx, clientv3.LeaseID(id))
		cancel()
		if err != nil {
			n.log.Warn().Err(err).Msg("revoke lease at leave; the shards move when it expires")
		}
	}
	return n.etcd.Close()
}

// run joins, then serves the watch and the lease until Stop; a lost lease
// (expired while the member was cut off or frozen) means joining again
// with a new one.
func (n *Node) run() {
	defer n.done.Done()
	for n.ctx.Err() == nil {
		if err := n.join(); err != nil {
			if errors.Is(err, errWrongCluster) {
				n.fatal <- err
				return
			}
			if n.ctx.Err() == nil {
				n.log.Warn().Err(err).Strs("etcd", n.cfg.Endpoints).Msg("not in the cluster yet; serving nothing clustered; retrying in 1 s")
				n.sleep(time.Second)
			}
			continue
		}
		n.serve()
	}
}

func (n *Node) sleep(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-n.ctx.Done():
	}
}

// errWrongCluster refuses a member configured for another cluster than
// the one under the prefix.
var errWrongCluster = errors.New("cluster: wrong cluster name")

// join checks the cluster's name, takes a lease, writes the member record
// and loads the state. It returns once the member is ready.
func (n *Node) join() error {
	ctx, cancel := context.WithTimeout(n.ctx, 5*time.Second)
	defer cancel()
	if err := n.checkName(ctx); err != nil {
		return err
	}
	grant, err := n.etcd.Grant(ctx, int64(n.cfg.LeaseTTL/time.Second))
	if err != nil {
		return fmt.Errorf("cluster: grant lease: %w", err)
	}
	start := n.mono()
	if err := n.register(ctx, grant.ID); err != nil {
		_, _ = n.etcd.Revoke(context.Background(), grant.ID)
		return err
	}
	n.lease.Store(int64(grant.ID))
	n.validUntil.Store(start + int64(grant.TTL)*int64(time.Second) - int64(leaseMargin))
	if _, err := n.etcd.Delete(ctx, n.keys.drain(n.cfg.NodeID)); err != nil {
		return fmt.Errorf("cluster: clear drain mark: %w", err)
	}
	if _, err := n.load(ctx); err != nil {
		return err
	}
	n.ready.Store(true)
	n.log.Info().Str("addr", n.cfg.Addr).Int64("lease", int64(grant.ID)).Int("members", n.memberCount()).Msg("joined the cluster")
	if n.cfg.Hooks.Joined != nil {
		n.cfg.Hooks.Joined()
	}
	return nil
}

// checkName makes the first member's cluster name the prefix's, and
// refuses a member whose name differs.
func (n *Node) checkName(ctx context.Context) error {
	k := n.keys.name()
	res, err := n.etcd.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, n.cfg.Name)).
		Else(clientv3.OpGet(k)).Commit()
	if err != nil {
		return fmt.Errorf("cluster: reach etcd: %w", err)
	}
	if res.Succeeded {
		return nil
	}
	kvs := res.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 1 && string(kvs[0].Value) != n.cfg.Name {
		return fmt.Errorf("%w: etcd prefix %q holds cluster %q, and this broker is configured for %q: use --cluster-name %s, or another --cluster-etcd-prefix for a separate cluster",
			errWrongCluster, n.keys.prefix, kvs[0].Value, n.cfg.Name, kvs[0].Value)
	}
	return nil
}

// register writes the member record on lease, unless a live member has
// this node id (a second broker, or this one's previous run whose lease has
// not expired yet: it will, within the TTL).
func (n *Node) register(ctx context.Context, lease clientv3.LeaseID) error {
	k := n.keys.member(n.cfg.NodeID)
	rec := memberRecord{NodeID: n.cfg.NodeID, Addr: n.cfg.Addr, Admin: n.cfg.Admin, PeerAddr: n.cfg.PeerAddr, KafkaAddr: n.cfg.KafkaAddr, ActorAddr: n.actors.address(), Zone: n.cfg.Zone, Lease: int64(lease), JoinedAt: time.Now().UTC()}
	res, err := n.etcd.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, encode(rec), clientv3.WithLease(lease))).
		Else(clientv3.OpGet(k)).Commit()
	if err != nil {
		return fmt.Errorf("cluster: write member record: %w", err)
	}
	if !res.Succeeded {
		other := "?"
		if kvs := res.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
			if r, err := decode[memberRecord](kvs[0].Value); err == nil {
				other = r.Addr
			}
		}
		return fmt.Errorf("cluster: node id %q is in use by a live member at %s (another broker with the same --cluster-node-id, or this broker's previous run, whose lease expires within %s)", n.cfg.NodeID, other, n.cfg.LeaseTTL)
	}
	return nil
}

// mono is the monotonic time in nanoseconds since the node was made.
func (n *Node) mono() int64 { return int64(time.Since(n.base)) }

// PeerAddr is the peer link address of the live member nodeID, as the
// mirror has it: false when the member is not live or has no peer link.
// It takes the read lock only, so a shard may ask on every send.
func (n *Node) PeerAddr(nodeID string) (string, bool) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	m, ok := n.state.members[nodeID]
	return m.PeerAddr, ok && m.PeerAddr != ""
}

// PeerMembers lists the live members other than this one that have a
// peer link, sorted: whom the member's peer link beats to.
func (n *Node) PeerMembers() []string {
	n.mu.RLock()
	defer n.mu.RUnlock()
	out := make([]string, 0, len(n.state.members))
	for id, m := range n.state.members {
		if id != n.cfg.NodeID && m.PeerAddr != "" {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// Etcd is the node's etcd client, for the broker's other cluster-wide
// records (producer ids).
func (n *Node) etcdClient() *clientv3.Client { return n.etcd }
