package cluster

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Status is the cluster as one member sees it: GET /debug/cluster on the
// admin endpoint, and what `felix cluster ls` prints.
type Status struct {
	Cluster string `json:"cluster"`
	// NodeID is the member that answered.
	NodeID string `json:"node_id"`
	// Ready is false until the member has joined (etcd reachable, lease
	// granted, member record written); it serves nothing clustered before.
	Ready   bool           `json:"ready"`
	Members []MemberStatus `json:"members"`
	// Shards is every shard of every defined stream, with the member that
	// owns it (a replicated shard's leader), in stream and shard order.
	Shards []ShardStatus `json:"shards"`
}

// ShardStatus is one shard as the answering member mirrors it.
type ShardStatus struct {
	Stream string `json:"stream"` // tenant/namespace/stream
	Shard  uint32 `json:"shard"`
	// Kind is in-memory, durable or replicated.
	Kind string `json:"kind"`
	// Owner is the member serving it (for a replicated shard, the leader
	// that last claimed it); "" while no member does.
	Owner string `json:"owner"`
	// Home is the member holding a durable shard's data; Replicas a
	// replicated shard's set.
	Home     string   `json:"home,omitempty"`
	Replicas []string `json:"replicas,omitempty"`
}

// MemberStatus is one member.
type MemberStatus struct {
	NodeID string `json:"node_id"`
	// Addr is its felix/1 address; Admin its admin endpoint ("" when off).
	Addr  string `json:"addr"`
	Admin string `json:"admin"`
	// PeerAddr is its peer link's address; "" when it has none (no
	// cluster_tls_* set), so it cannot hold replicas.
	PeerAddr string `json:"peer_addr,omitempty"`
	// JoinedAt is when it wrote its member record (its current lease).
	JoinedAt time.Time `json:"joined_at"`
	// LeaseTTLLeft is what etcd says remains of its lease; it is renewed
	// every third of cluster_lease_ttl_ms, so a healthy member never
	// gets near 0. -1 when etcd did not say.
	LeaseTTLLeft time.Duration `json:"lease_ttl_left_ms"`
	// ShardsOwned counts the shards it owns; DurableShardsOwned those of
	// durable streams, which a drain does not move (an unreplicated one
	// stays on its home; a replicated one's leader hands its leadership
	// to another replica instead).
	ShardsOwned        int  `json:"shards_owned"`
	DurableShardsOwned int  `json:"durable_shards_owned"`
	Draining           bool `json:"draining"`
	// Zone is its cluster_zone ("" when none).
	Zone string `json:"zone,omitempty"`
	// Leads counts the replicated shards it leads (whose owner record
	// names it); Replicas the replicated shards it holds a replica of.
	Leads    int `json:"leads"`
	Replicas int `json:"replicas"`
	// ActorMember says the answering member can read this one's tree over
	// the actor remote: both run one (both have cluster_tls_*).
	ActorMember bool `json:"actor_member"`
	// ActorAddr is its actor system's remote address (TCP); "" before it
	// published one.
	ActorAddr string `json:"actor_addr,omitempty"`
	// Down marks a member the answering one saw leave or be lost (its
	// member record vanished: its lease expired, or it stopped) and that
	// has not joined again; LastSeen is when its record vanished. The
	// answering member remembers them for its own life only.
	Down     bool      `json:"down,omitempty"`
	LastSeen time.Time `json:"last_seen,omitzero"`
}

// Live is the members that are up: Members less those marked Down.
func (st Status) Live() []MemberStatus {
	live := make([]MemberStatus, 0, len(st.Members))
	for _, m := range st.Members {
		if !m.Down {
			live = append(live, m)
		}
	}
	return live
}

// MarshalJSON writes LeaseTTLLeft in milliseconds.
func (m MemberStatus) MarshalJSON() ([]byte, error) {
	type plain MemberStatus
	return json.Marshal(struct {
		plain
		LeaseTTLLeft int64 `json:"lease_ttl_left_ms"`
	}{plain(m), durationMS(m.LeaseTTLLeft)})
}

// UnmarshalJSON reads LeaseTTLLeft in milliseconds.
func (m *MemberStatus) UnmarshalJSON(b []byte) error {
	type plain MemberStatus
	var v struct {
		plain
		LeaseTTLLeft int64 `json:"lease_ttl_left_ms"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*m = MemberStatus(v.plain)
	m.LeaseTTLLeft = time.Duration(v.LeaseTTLLeft) * time.Millisecond
	if v.LeaseTTLLeft < 0 {
		m.LeaseTTLLeft = -1
	}
	return nil
}

func durationMS(d time.Duration) int64 {
	if d < 0 {
		return -1
	}
	return d.Milliseconds()
}

// MemberTree is one member's supervision tree: GET /debug/cluster/actors
// answers with every member's, gathered over the actor system's remote.
type MemberTree struct {
	NodeID string `json:"node_id"`
	// Actors is the member's /debug/actors document, as it sent it.
	Actors json.RawMessage `json:"actors,omitempty"`
	// Error says why the member's tree is missing (it did not answer, or
	// it is down).
	Error string `json:"error,omitempty"`
	// Down and LastSeen are as in MemberStatus: a member seen leaving or
	// lost, and when its record vanished.
	Down     bool      `json:"down,omitempty"`
	LastSeen time.Time `json:"last_seen,omitzero"`
}

// Trees is the answer of GET /debug/cluster/actors.
type Trees struct {
	Members []MemberTree `json:"members"`
}

// Status describes the cluster as this member mirrors it.
func (n *Node) Status(ctx context.Context) Status {
	st := Status{Cluster: n.cfg.Name, NodeID: n.cfg.NodeID, Ready: n.ready.Load()}
	n.mu.RLock()
	owned, durable := map[string]int{}, map[string]int{}
	for key, rec := range n.state.owners {
		owned[rec.NodeID]++
		if n.state.defs[key.Scope].Durable {
			durable[rec.NodeID]++
		}
	}
	leads := map[string]int{}
	for key, rec := range n.state.owners {
		if n.state.replicated(key) {
			leads[rec.NodeID]++
		}
	}
	replicas := map[string]int{}
	for key, set := range n.state.replicaSets {
		if n.state.replicated(key) {
			for _, r := range set.All() {
				replicas[r.Node]++
			}
		}
	}
	leases := make([]int64, 0, len(n.state.members))
	for id, m := range n.state.members {
		st.Members = append(st.Members, MemberStatus{
			NodeID: id, Addr: m.Addr, Admin: m.Admin, PeerAddr: m.PeerAddr, JoinedAt: m.JoinedAt,
			ShardsOwned: owned[id], DurableShardsOwned: durable[id], Draining: n.state.draining[id],
			ActorMember: n.actors.has(m.ActorAddr), ActorAddr: m.ActorAddr,
			Zone: m.Zone, Leads: leads[id], Replicas: replicas[id],
		})
		leases = append(leases, m.Lease)
	}
	live := len(st.Members)
	for id, l := range n.state.lost {
		st.Members = append(st.Members, MemberStatus{
			NodeID: id, Addr: l.rec.Addr, Admin: l.rec.Admin, PeerAddr: l.rec.PeerAddr, JoinedAt: l.rec.JoinedAt,
			LeaseTTLLeft: -1, Down: true, LastSeen: l.lastSeen, DurableShardsOwned: durable[id], ShardsOwned: owned[id],
			Zone: l.rec.Zone, Leads: leads[id], Replicas: replicas[id],
		})
	}
	st.Shards = n.shardsLocked()
	n.mu.RUnlock()
	// etcd is asked outside the lock, each live member's lease once.
	for i := range st.Members[:live] {
		st.Members[i].LeaseTTLLeft = n.ttlLeft(ctx, leases[i])
	}
	slices.SortFunc(st.Members, func(a, b MemberStatus) int { return strings.Compare(a.NodeID, b.NodeID) })
	return st
}

// shardsLocked lists every defined stream's shards with their owners.
//
// REQUIRES: n.mu is held (read).
func (n *Node) shardsLocked() []ShardStatus {
	out := []ShardStatus{}
	for scope, def := range n.state.defs {
		for shard := range def.Shards {
			key := ShardKey{Scope: scope, Shard: shard}
			s := ShardStatus{Stream: scope.String(), Shard: shard, Kind: "in-memory", Owner: n.state.owners[key].NodeID}
			switch {
			case n.state.replicated(key):
				s.Kind = "replicated"
				for _, r := range n.state.replicaSets[key].All() {
					s.Replicas = append(s.Replicas, r.Node)
				}
			case def.Durable:
				s.Kind, s.Home = "durable", n.state.homes[key]
			}
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b ShardStatus) int {
		if c := strings.Compare(a.Stream, b.Stream); c != 0 {
			return c
		}
		return int(a.Shard) - int(b.Shard)
	})
	return out
}

// ttlLeft asks etcd what remains of a lease; -1 when it does not say.
func (n *Node) ttlLeft(ctx context.Context, lease int64) time.Duration {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	res, err := n.etcd.TimeToLive(ctx, clientv3.LeaseID(lease))
	if err != nil || res.TTL < 0 {
		return -1
	}
	return time.Duration(res.TTL) * time.Second
}
