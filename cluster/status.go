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
	// durable streams, which cannot move off it (no replication yet).
	ShardsOwned        int  `json:"shards_owned"`
	DurableShardsOwned int  `json:"durable_shards_owned"`
	Draining           bool `json:"draining"`
	// ActorMember says protoactor's cluster (the actor system across the
	// members) lists it too.
	ActorMember bool `json:"actor_member"`
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
	// Error says why the member's tree is missing (it did not answer).
	Error string `json:"error,omitempty"`
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
	leases := make([]int64, 0, len(n.state.members))
	for id, m := range n.state.members {
		st.Members = append(st.Members, MemberStatus{
			NodeID: id, Addr: m.Addr, Admin: m.Admin, PeerAddr: m.PeerAddr, JoinedAt: m.JoinedAt,
			ShardsOwned: owned[id], DurableShardsOwned: durable[id], Draining: n.state.draining[id],
			ActorMember: n.actors.has(m.ActorAddr),
		})
		leases = append(leases, m.Lease)
	}
	n.mu.RUnlock()
	// etcd is asked outside the lock, each member's lease once.
	for i := range st.Members {
		st.Members[i].LeaseTTLLeft = n.ttlLeft(ctx, leases[i])
	}
	slices.SortFunc(st.Members, func(a, b MemberStatus) int { return strings.Compare(a.NodeID, b.NodeID) })
	return st
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
