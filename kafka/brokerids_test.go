package kafka

import (
	"hash/fnv"
	"testing"
)

// TestBrokerIDs: a member's broker id depends on its node id alone (not
// on who else is in), ids are non-negative and distinct, and a collision
// is told apart by probing upwards in node id order.
func TestBrokerIDs(t *testing.T) {
	three := brokerIDs(map[string]string{"a": "", "b": "", "c": ""})
	two := brokerIDs(map[string]string{"c": "", "a": ""})
	if three["a"] != two["a"] || three["c"] != two["c"] {
		t.Fatalf("ids changed with the membership: %v then %v", three, two)
	}
	seen := map[int32]bool{}
	for node, id := range three {
		if id < 0 || seen[id] {
			t.Fatalf("%s: id %d negative or repeated in %v", node, id, three)
		}
		seen[id] = true
	}
	// "costarring" and "liquid" collide under FNV-1a 32.
	h := func(s string) uint32 { f := fnv.New32a(); _, _ = f.Write([]byte(s)); return f.Sum32() }
	if h("costarring") != h("liquid") {
		t.Fatal("the known FNV-1a collision pair does not collide")
	}
	ids := brokerIDs(map[string]string{"liquid": "", "costarring": ""})
	if ids["costarring"] == ids["liquid"] || ids["liquid"] != (ids["costarring"]+1)&0x7fffffff {
		t.Fatalf("colliding node ids got %v, want the later one probed to the next id", ids)
	}
}
