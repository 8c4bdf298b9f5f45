package member

import (
	"testing"

	"github.com/getfelix/felix-go/cluster"
	"github.com/getfelix/felix-go/wire"
)

// TestReplicaViewServing: a replica serves groups only as leader once it
// applied an entry of its own term; a later term, even its own again, is
// another term; a closed replica's view serves nothing.
func TestReplicaViewServing(t *testing.T) {
	m := &Member{}
	key := cluster.ShardKey{Scope: wire.Scope{Tenant: "t", Namespace: "n", Stream: wire.GroupStreamPrefix + "s"}}
	v := m.addReplicaView(key)
	check := func(what string, wantTerm uint64, want bool) {
		t.Helper()
		if term, ok := v.serving(); ok != want || term != wantTerm {
			t.Fatalf("%s: serving %d %v; want %d %v", what, term, ok, wantTerm, want)
		}
	}
	check("new", 0, false)
	v.appliedTerm.Store(2)
	v.observe(true, 1, 3)
	check("leader of term 3 that applied only term 2", 0, false)
	v.appliedTerm.Store(3)
	check("leader of term 3 that applied its term", 3, true)
	v.observe(false, 2, 4)
	check("follower", 0, false)
	v.observe(true, 1, 5)
	check("leader again, term 5, nothing of it applied", 0, false)
	v.appliedTerm.Store(5)
	check("leader of term 5", 5, true)
	stale := v
	other := m.addReplicaView(key) // the shard's next replica
	m.dropReplicaView(key, stale)
	if got, ok := m.views.Load(key); !ok || got.(*replicaView) != other {
		t.Fatal("dropping an old replica's view removed its successor's")
	}
	check("closed", 0, false)
}
