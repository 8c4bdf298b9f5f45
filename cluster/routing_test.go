package cluster

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/getfelix/felix-go/wire"
)

// routedState is a mirror with one replicated stream whose shard 0 has the
// replica set a=1, b=2, c=3 and live members a, b (c is down).
func routedState() (state, ShardKey) {
	s := newState()
	scope := wire.Scope{Tenant: "t", Namespace: "ns", Stream: "r"}
	s.defs[scope] = StreamDef{Tenant: "t", Namespace: "ns", Stream: "r", Shards: 1, Durable: true, Replicas: 3}
	key := ShardKey{Scope: scope}
	s.replicaSets[key] = ReplicaSet{Members: []Replica{{ID: 1, Node: "a"}, {ID: 2, Node: "b"}, {ID: 3, Node: "c"}}}
	s.members["a"] = memberRecord{NodeID: "a", Addr: "addr-a"}
	s.members["b"] = memberRecord{NodeID: "b", Addr: "addr-b"}
	return s, key
}

// TestOwnersAnswerFromRaftWithoutARecord: a replicated shard's owner is its
// owner record unless this member's replica knows a leader of a later term,
// or there is no record (etcd expired it): then the raft leader, at its
// member record's address.
func TestOwnersAnswerFromRaftWithoutARecord(t *testing.T) {
	tests := []struct {
		name       string
		record     *ownerRecord
		lead, term uint64
		want       wire.ShardOwner
		missing    int
	}{
		{name: "no record, no leader known", missing: 1, want: wire.ShardOwner{}},
		{name: "no record, raft knows b", lead: 2, term: 4,
			want: wire.ShardOwner{Owner: wire.Owner{NodeID: "b", Addr: "addr-b", Generation: 4}, Available: true}},
		{name: "record of the same term wins", record: &ownerRecord{NodeID: "a", Addr: "addr-a", Term: 4}, lead: 2, term: 4,
			want: wire.ShardOwner{Owner: wire.Owner{NodeID: "a", Addr: "addr-a"}, Available: true}},
		{name: "raft's later term wins over the record", record: &ownerRecord{NodeID: "a", Addr: "addr-a", Term: 3}, lead: 2, term: 4,
			want: wire.ShardOwner{Owner: wire.Owner{NodeID: "b", Addr: "addr-b", Generation: 4}, Available: true}},
		{name: "a leader that is not a live member is not named", lead: 3, term: 5, missing: 1, want: wire.ShardOwner{}},
		{name: "a raft id outside the set is not named", lead: 9, term: 5, missing: 1, want: wire.ShardOwner{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, key := routedState()
			if tt.record != nil {
				s.owners[key] = *tt.record
			}
			raft := func(k ShardKey) (uint64, uint64) {
				if k != key {
					t.Fatalf("asked about %s, want %s", k, key)
				}
				return tt.lead, tt.term
			}
			got, missing := s.ownersOf(ShardDef{Scope: key.Scope, Shards: 1, Durable: true}, raft)
			if len(got) != 1 || got[0] != tt.want || missing != tt.missing {
				t.Fatalf("ownersOf = %+v (missing %d), want [%+v] (missing %d)", got, missing, tt.want, tt.missing)
			}
		})
	}
}

// TestOwnersOfUnreplicatedShardIgnoresRaft: an unreplicated shard is
// routed by its owner record alone.
func TestOwnersOfUnreplicatedShardIgnoresRaft(t *testing.T) {
	s, key := routedState()
	d := s.defs[key.Scope]
	d.Replicas = 0
	s.defs[key.Scope] = d
	s.owners[key] = ownerRecord{NodeID: "a", Addr: "addr-a"}
	got, _ := s.ownersOf(ShardDef{Scope: key.Scope, Shards: 1, Durable: true}, func(ShardKey) (uint64, uint64) { return 2, 9 })
	if got[0].Owner.NodeID != "a" {
		t.Fatalf("unreplicated shard routed to %+v, want its owner record's a", got[0])
	}
}

// TestLeaderClaimsAgainOnItsNewLease: a leader's claim stands while its
// record does (asked again, it writes nothing); when etcd expires the
// member's lease the record goes with it, the member joins again on a new
// lease, and the same claim, asked again as the leader's tick does, writes
// the record on the new lease.
func TestLeaderClaimsAgainOnItsNewLease(t *testing.T) {
	ep := startEtcd(t)
	n := startNode(t, ep, "a", "c1", &recorder{})
	eventually(t, "join", n.Ready)
	key := ShardKey{Scope: wire.Scope{Tenant: "t", Namespace: "ns", Stream: "r"}}
	record := func() (ownerRecord, bool) {
		n.mu.RLock()
		defer n.mu.RUnlock()
		rec, ok := n.state.owners[key]
		return rec, ok
	}
	n.ClaimLeader(key, 7)
	eventually(t, "the first claim", func() bool { rec, ok := record(); return ok && rec.Term == 7 })
	first, _ := record()
	eventually(t, "the first claim's end", func() bool { _, busy := n.claiming.Load(key); return !busy })

	n.ClaimLeader(key, 7)
	if _, busy := n.claiming.Load(key); busy {
		t.Fatal("a claim whose record stands wrote again")
	}
	n.ClaimLeader(key, 6) // a deposed leader's claim of an earlier term
	if _, busy := n.claiming.Load(key); busy {
		t.Fatal("a claim of an earlier term than the record's was tried")
	}

	// etcd expires the lease (as after an outage past the TTL).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := n.etcd.Revoke(ctx, clientv3.LeaseID(first.Lease)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a new lease", func() bool { return n.Ready() && n.lease.Load() != first.Lease })
	eventually(t, "the record gone with the old lease", func() bool { _, ok := record(); return !ok })
	n.ClaimLeader(key, 7)
	eventually(t, "the claim on the new lease", func() bool {
		rec, ok := record()
		return ok && rec.Term == 7 && rec.NodeID == "a" && rec.Lease == n.lease.Load()
	})
}
