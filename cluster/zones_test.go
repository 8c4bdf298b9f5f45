package cluster

import (
	"fmt"
	"testing"

	"github.com/getfelix/felix-go/wire"
)

func zonedMembers(zones ...string) []memberRecord {
	var out []memberRecord
	for i, z := range zones {
		out = append(out, memberRecord{NodeID: fmt.Sprintf("n%d", i+1), Zone: z})
	}
	return out
}

// placeAll plans n shards' sets in order, as a placement round does.
func placeAll(t *testing.T, n, replicas int, members []memberRecord, load map[string]int) []ReplicaSet {
	t.Helper()
	var sets []ReplicaSet
	for shard := range n {
		key := ShardKey{Scope: wire.Scope{Tenant: "t", Namespace: "ns", Stream: "s"}, Shard: uint32(shard)}
		set, ok := planReplicaSet(key, replicas, members, load)
		if !ok {
			t.Fatalf("shard %d: no set from %d members", shard, len(members))
		}
		for _, r := range set.Members {
			load[r.Node]++
		}
		sets = append(sets, set)
	}
	return sets
}

func TestReplicaSetsSpreadByZoneAndCount(t *testing.T) {
	for _, tc := range []struct {
		name  string
		zones []string
		// wantZones is how many zones each set must span; wantLoad each
		// member's replicas after 300 shards of three.
		wantZones int
		wantLoad  map[string]int
		before    map[string]int
	}{
		{name: "three zones of two", zones: []string{"a", "a", "b", "b", "c", "c"}, wantZones: 3,
			wantLoad: map[string]int{"n1": 150, "n2": 150, "n3": 150, "n4": 150, "n5": 150, "n6": 150}},
		// Two zones for three replicas: both in every set, so zone b's
		// only member holds every shard.
		{name: "two zones", zones: []string{"a", "a", "a", "b"}, wantZones: 2,
			wantLoad: map[string]int{"n1": 200, "n2": 200, "n3": 200, "n4": 300}},
		{name: "no zones", zones: []string{"", "", "", ""}, wantZones: 3,
			wantLoad: map[string]int{"n1": 225, "n2": 225, "n3": 225, "n4": 225}},
		// A member that joined holds nothing yet: new shards go to it
		// first until the counts are even.
		{name: "after a join", zones: []string{"", "", "", ""}, wantZones: 3,
			before:   map[string]int{"n1": 100, "n2": 100, "n3": 100},
			wantLoad: map[string]int{"n1": 300, "n2": 300, "n3": 300, "n4": 300}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			members := zonedMembers(tc.zones...)
			load := map[string]int{}
			for id, n := range tc.before {
				load[id] = n
			}
			for i, set := range placeAll(t, 300, 3, members, load) {
				zones := map[string]bool{}
				for _, r := range set.Members {
					for _, m := range members {
						if m.NodeID == r.Node {
							zones[zoneOf(m)] = true
						}
					}
				}
				if len(zones) != tc.wantZones {
					t.Fatalf("shard %d: set %v spans %d zones, want %d", i, set.Members, len(zones), tc.wantZones)
				}
			}
			for id, want := range tc.wantLoad {
				if load[id] != want {
					t.Errorf("%s holds %d replicas, want %d (all: %v)", id, load[id], want, load)
				}
			}
		})
	}
}

// TestNotZoneSpread counts sets with two replicas in one zone only while
// the live members span enough zones to do better.
func TestNotZoneSpread(t *testing.T) {
	s := newState()
	for _, m := range zonedMembers("a", "a", "b", "c") {
		s.members[m.NodeID] = m
	}
	scope := wire.Scope{Tenant: "t", Namespace: "ns", Stream: "s"}
	s.defs[scope] = StreamDef{Tenant: "t", Namespace: "ns", Stream: "s", Shards: 2, Durable: true, Replicas: 3}
	set := func(nodes ...string) ReplicaSet {
		var rs ReplicaSet
		for i, n := range nodes {
			rs.Members = append(rs.Members, Replica{ID: uint64(i + 1), Node: n})
		}
		return rs
	}
	s.replicaSets[ShardKey{Scope: scope, Shard: 0}] = set("n1", "n3", "n4")
	s.replicaSets[ShardKey{Scope: scope, Shard: 1}] = set("n1", "n2", "n3")
	if got := s.notZoneSpread(); got != 1 {
		t.Fatalf("not spread = %d, want 1 (shard 1 has n1 and n2 in zone a)", got)
	}
	// Zone c gone: two zones left, and shard 1 spans both.
	delete(s.members, "n4")
	if got := s.notZoneSpread(); got != 0 {
		t.Fatalf("with two zones live, not spread = %d, want 0", got)
	}
}
