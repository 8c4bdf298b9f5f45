package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/getfelix/felix-go/actors"
)

// Each member's actor system serves protoactor's remote (gRPC over TCP),
// so a member can ask another's node actor for its supervision tree:
// `felix tree --cluster` and the live page. Felix uses it for nothing
// else, never for data: clients reach a shard's owner over felix/1, and
// placement follows the lease-bound member records, because those leases
// are what fences an owner.
//
// The remote is a way into every actor of the member, so it runs only
// over mutual TLS with the cluster's CA (the peer link's certificates,
// cluster_tls_*), behind a guard that lets through only what a tree
// request needs (guard.go); without those certificates it does not start
// at all, and Trees says so for every other member. protoactor's cluster
// (its etcd provider, gossip and identity actors) is not run: it would
// add message kinds the guard must let through, for a member list the
// member records already are.

// nodeActorName is each member's node actor, which answers other members.
const nodeActorName = "felix-node"

// treeRequest asks a node actor for its member's tree; remote messages
// must be protobuf, so it is a plain wrapper.
const treeRequest = "tree"

// TLS is a member's certificate and the cluster's CA (cluster_tls_*),
// which the actor remote presents and verifies peers against.
type TLS struct {
	Cert tls.Certificate
	CAs  *x509.CertPool
}

// actorRemote is this member's actor remote; addr is "" when it does not
// run (no System or no TLS, or it failed to listen).
type actorRemote struct {
	mu   sync.RWMutex
	r    *remote.Remote
	addr string
}

// start spawns the node actor and starts the remote, before the member
// first registers, so every member record it writes carries the address.
// A failure is logged, not returned: the member serves without the
// remote, as it does without TLS.
func (a *actorRemote) start(n *Node) {
	if n.cfg.System == nil {
		return
	}
	if n.cfg.TLS == nil {
		n.log.Warn().Msg("no actor remote: cluster_tls_ca, cluster_tls_cert and cluster_tls_key are not set; felix tree --cluster shows only this member's tree")
		return
	}
	r, err := startRemote(n)
	if err != nil {
		n.log.Error().Err(err).Msg("starting the actor remote failed; felix tree --cluster will miss this member")
		return
	}
	a.mu.Lock()
	a.r, a.addr = r, n.cfg.System.Address()
	a.mu.Unlock()
	n.log.Info().Str("actor_addr", a.addr).Msg("actor remote listening (mutual TLS)")
}

// startRemote listens on the host of the member's felix/1 address, port 0
// (the member record tells others which); protoactor's Start panics when
// it cannot listen.
func startRemote(n *Node) (r *remote.Remote, err error) {
	defer func() {
		if p := recover(); p != nil {
			r, err = nil, fmt.Errorf("cluster: actor remote: %v", p)
		}
	}()
	host, _, err := net.SplitHostPort(n.cfg.Addr)
	if err != nil {
		return nil, err
	}
	sys := n.cfg.System
	if _, err := sys.Root.SpawnNamed(actor.PropsFromFunc(nodeActor(n)), nodeActorName); err != nil {
		return nil, err
	}
	g := &guard{self: sys.Address, log: n.log}
	r = remote.NewRemote(sys, remote.Configure(host, 0,
		remote.WithServerOptions(g.serverOptions(*n.cfg.TLS)...),
		remote.WithDialOptions(dialOptions(*n.cfg.TLS)...)))
	r.Start()
	return r, nil
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

// address is the remote's address, "" when it does not run.
func (a *actorRemote) address() string {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.addr
}

// has reports whether this member can reach the member whose record
// says addr over the remote: both run one.
func (a *actorRemote) has(addr string) bool { return addr != "" && a.address() != "" }

// stop stops the remote's server. The actor system itself is the
// broker's to shut down.
func (a *actorRemote) stop() {
	a.mu.Lock()
	r := a.r
	a.r, a.addr = nil, ""
	a.mu.Unlock()
	if r != nil {
		// Not graceful: a graceful stop waits for the other members'
		// streams into this one, which they keep open.
		r.Shutdown(false)
	}
}

// Trees gathers every member's supervision tree: this member's directly,
// the others' from their node actors over protoactor's remote.
func (n *Node) Trees(ctx context.Context) Trees {
	n.mu.RLock()
	members := make([]memberRecord, 0, len(n.state.members))
	for _, m := range n.state.members {
		members = append(members, m)
	}
	out := Trees{}
	for id, l := range n.state.lost {
		out.Members = append(out.Members, MemberTree{NodeID: id, Down: true, LastSeen: l.lastSeen,
			Error: "down: its member record vanished at " + l.lastSeen.Format(time.RFC3339) + " (it stopped, or its lease expired)"})
	}
	n.mu.RUnlock()
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
	slices.SortFunc(out.Members, func(a, b MemberTree) int { return strings.Compare(a.NodeID, b.NodeID) })
	return out
}

func (n *Node) tree(ctx context.Context, m memberRecord) ([]byte, error) {
	if m.NodeID == n.cfg.NodeID {
		if n.cfg.Tree == nil {
			return nil, fmt.Errorf("no tree")
		}
		return n.cfg.Tree()
	}
	switch {
	case n.actors.address() == "":
		return nil, fmt.Errorf("this member runs no actor remote (it needs cluster_tls_*), so it cannot ask %s", m.NodeID)
	case m.ActorAddr == "":
		return nil, fmt.Errorf("member %s runs no actor remote (it needs cluster_tls_*)", m.NodeID)
	}
	pid := actor.NewPID(m.ActorAddr, nodeActorName)
	b, err := actors.Request[*wrapperspb.BytesValue](ctx, n.cfg.System.Root, pid, &wrapperspb.StringValue{Value: treeRequest}, 3*time.Second)
	if err != nil {
		return nil, fmt.Errorf("member %s did not answer: %w", m.NodeID, err)
	}
	return b.Value, nil
}
