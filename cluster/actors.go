package cluster

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	protocluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/etcd"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/remote"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The members' actor systems form one protoactor cluster (its etcd
// provider, under <prefix>/actors): each member's actors are reachable
// from the others over protoactor's remote. Felix uses it for what is
// about actors (every member's supervision tree), never for data: clients
// reach a shard's owner over felix/1, and placement follows the lease-bound
// member records, because those leases are what fences an owner.

// nodeActorName is each member's node actor, which answers other members.
const nodeActorName = "felix-node"

// treeRequest asks a node actor for its member's tree; remote messages
// must be protobuf, so it is a plain wrapper.
const treeRequest = "tree"

// actorMembership is this member's place in protoactor's cluster.
type actorMembership struct {
	once sync.Once
	mu   sync.RWMutex
	c    *protocluster.Cluster
	addr string
}

// join starts the member in protoactor's cluster, once, in the background
// (StartMember blocks for a second, and panics when etcd fails it).
func (a *actorMembership) join(n *Node) {
	if n.cfg.System == nil {
		return
	}
	a.once.Do(func() {
		n.done.Add(1)
		go func() {
			defer n.done.Done()
			if err := a.start(n); err != nil {
				n.log.Error().Err(err).Msg("joining the actor cluster failed; felix tree --cluster will miss this member")
			}
		}()
	})
}

func (a *actorMembership) start(n *Node) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("protoactor cluster: %v", r)
		}
	}()
	host, _, splitErr := net.SplitHostPort(n.cfg.Addr)
	if splitErr != nil {
		return splitErr
	}
	provider, err := etcd.NewWithConfig(n.keys.actors(), clientv3.Config{Endpoints: n.cfg.Endpoints, DialTimeout: 2 * time.Second, Logger: nopZap()})
	if err != nil {
		return err
	}
	sys := n.cfg.System
	if _, err := sys.Root.SpawnNamed(actor.PropsFromFunc(nodeActor(n)), nodeActorName); err != nil {
		return err
	}
	c := protocluster.New(sys, protocluster.Configure(n.cfg.Name, provider, disthash.New(), remote.Configure(host, 0)))
	c.StartMember()
	a.mu.Lock()
	a.c, a.addr = c, sys.Address()
	a.mu.Unlock()
	n.log.Info().Str("actor_addr", a.addr).Msg("joined the actor cluster")
	return n.publishActorAddr(a.addr)
}

// nodeActor answers other members' requests for this member's tree.
func nodeActor(n *Node) actor.ReceiveFunc {
	return func(ctx actor.Context) {
		req, ok := ctx.Message().(*wrapperspb.StringValue)
		if !ok || req.Value != treeRequest || n.cfg.Tree == nil {
			return
		}
		b, err := n.cfg.Tree()
		if err != nil {
			b = []byte(fmt.Sprintf(`{"error":%q}`, err.Error()))
		}
		ctx.Respond(&wrapperspb.BytesValue{Value: b})
	}
}

// publishActorAddr adds the actor address to the member record, so other
// members can reach this one's node actor.
func (n *Node) publishActorAddr(addr string) error {
	n.mu.RLock()
	rec, ok := n.state.members[n.cfg.NodeID]
	n.mu.RUnlock()
	if !ok {
		return fmt.Errorf("cluster: own member record missing")
	}
	rec.ActorAddr = addr
	ctx, cancel := context.WithTimeout(n.ctx, storeTimeout)
	defer cancel()
	_, err := n.etcd.Put(ctx, n.keys.member(n.cfg.NodeID), encode(rec), clientv3.WithLease(clientv3.LeaseID(rec.Lease)))
	return err
}

// has reports whether protoactor's member list has the member at addr.
func (a *actorMembership) has(addr string) bool {
	a.mu.RLock()
	c := a.c
	a.mu.RUnlock()
	if c == nil || addr == "" {
		return false
	}
	for _, m := range c.MemberList.Members().Members() {
		if m.Address() == addr {
			return true
		}
	}
	return false
}

// count is the size of protoactor's member list (0 before it joined).
func (a *actorMembership) count() int {
	a.mu.RLock()
	c := a.c
	a.mu.RUnlock()
	if c == nil {
		return 0
	}
	return c.MemberList.Members().Len()
}

// leave deregisters from protoactor's cluster and stops its remote. The
// actor system itself is the broker's to shut down.
func (a *actorMembership) leave() {
	a.mu.Lock()
	c := a.c
	a.c = nil
	a.mu.Unlock()
	if c == nil {
		return
	}
	_ = c.Config.ClusterProvider.Shutdown(false)
	c.Remote.Shutdown(false)
}

// Trees gathers every member's supervision tree: this member's directly,
// the others' from their node actors over protoactor's remote.
func (n *Node) Trees(ctx context.Context) Trees {
	n.mu.RLock()
	members := make([]memberRecord, 0, len(n.state.members))
	for _, m := range n.state.members {
		members = append(members, m)
	}
	n.mu.RUnlock()
	out := Trees{}
	slices.SortFunc(members, func(a, b memberRecord) int { return strings.Compare(a.NodeID, b.NodeID) })
	for _, m := range members {
		t := MemberTree{NodeID: m.NodeID}
		b, err := n.tree(ctx, m)
		if err != nil {
			t.Error = err.Error()
		} else {
			t.Actors = b
		}
		out.Members = append(out.Members, t)
	}
	return out
}

func (n *Node) tree(ctx context.Context, m memberRecord) ([]byte, error) {
	if m.NodeID == n.cfg.NodeID {
		if n.cfg.Tree == nil {
			return nil, fmt.Errorf("no tree")
		}
		return n.cfg.Tree()
	}
	if m.ActorAddr == "" || n.cfg.System == nil {
		return nil, fmt.Errorf("member %s has not joined the actor cluster", m.NodeID)
	}
	wait := 3 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		wait = max(time.Millisecond, min(wait, time.Until(dl)))
	}
	pid := actor.NewPID(m.ActorAddr, nodeActorName)
	res, err := n.cfg.System.Root.RequestFuture(pid, &wrapperspb.StringValue{Value: treeRequest}, wait).Result()
	if err != nil {
		return nil, fmt.Errorf("member %s did not answer: %w", m.NodeID, err)
	}
	b, ok := res.(*wrapperspb.BytesValue)
	if !ok {
		return nil, fmt.Errorf("member %s answered %T", m.NodeID, res)
	}
	return b.Value, nil
}
