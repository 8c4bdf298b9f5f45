package cluster

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/getfelix/felix-go/wire"
)

// TestStatusShowsLostMembersDown: a member that left stays in Status and
// Trees, down, with when its record vanished, until it joins again; and
// Status names each shard's owner.
func TestStatusShowsLostMembersDown(t *testing.T) {
	endpoint := startEtcd(t)
	a := startNode(t, endpoint, "a", "c", &recorder{})
	b := startNode(t, endpoint, "b", "c", &recorder{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	eventually(t, "a sees both members", func() bool { return len(a.Status(ctx).Members) == 2 && b.Ready() })

	scope := wire.Scope{Tenant: "t", Namespace: "ns", Stream: "s"}
	if _, err := a.CreateDef(ctx, StreamDef{Tenant: "t", Namespace: "ns", Stream: "s", Shards: 2, Routing: "modulo"}); err != nil {
		t.Fatal(err)
	}
	for shard := range uint32(2) {
		if !a.WaitPlaced(ctx, ShardKey{Scope: scope, Shard: shard}) {
			t.Fatalf("shard %d of %s was not placed", shard, scope)
		}
	}
	eventually(t, "a's status to name both shards' owners", func() bool {
		sh := a.Status(ctx).Shards
		return len(sh) == 2 && sh[0].Owner != "" && sh[1].Owner != "" && sh[1].Shard == 1 && sh[0].Stream == "t/ns/s" && sh[0].Kind == "in-memory"
	})

	before := time.Now().UTC()
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	var down MemberStatus
	eventually(t, "a to show b down", func() bool {
		for _, m := range a.Status(ctx).Members {
			if m.NodeID == "b" && m.Down {
				down = m
				return true
			}
		}
		return false
	})
	if down.LastSeen.Before(before) || down.LastSeen.After(time.Now()) || down.Addr != "127.0.0.1:b" || down.LeaseTTLLeft != -1 {
		t.Errorf("b down in a's status: %+v; want its address, no lease, last seen between %s and now", down, before)
	}
	trees := a.Trees(ctx)
	if len(trees.Members) != 2 || trees.Members[1].NodeID != "b" || !trees.Members[1].Down || !strings.HasPrefix(trees.Members[1].Error, "down: ") {
		t.Errorf("a's Trees after b left: %+v, want b listed down", trees.Members)
	}
	for _, s := range a.Status(ctx).Shards {
		if s.Owner == "b" {
			t.Errorf("shard %d is still owned by b, which is down", s.Shard)
		}
	}

	startNode(t, endpoint, "b", "c", &recorder{})
	eventually(t, "a to show b up again", func() bool {
		for _, m := range a.Status(ctx).Members {
			if m.NodeID == "b" {
				return !m.Down && m.LastSeen.IsZero()
			}
		}
		return false
	})
	if n := len(a.Status(ctx).Members); n != 2 {
		t.Errorf("a lists %d members after b rejoined, want 2", n)
	}
}
