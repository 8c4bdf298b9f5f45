package cluster_test

import (
	"fmt"
	"testing"

	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
)

// TestReplicatedDeliveryTimedAtLeader: a replicated stream's records are
// timed from their publish to their delivery on the member that took the
// publish, its leader, once each applies from raft.
func TestReplicatedDeliveryTimedAtLeader(t *testing.T) {
	members, cc, ctx, st := startReplicated(t, "timed", 3)
	sub, err := cc.Subscribe(ctx, st, client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Close(ctx) }()
	top, err := cc.ShardOwners(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	leader := members[top.Owners[0].Owner.NodeID]
	delivered := func() float64 {
		families, err := leader.Metrics().Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range families {
			if mf.GetName() == "felix_publish_delivery_seconds" {
				return float64(mf.GetMetric()[0].GetHistogram().GetSampleCount())
			}
		}
		return 0
	}
	for i := range 3 {
		p := fmt.Sprint("timed-", i)
		if err := cc.Publish(ctx, st, []byte(p), client.PublishOptions{}); err != nil {
			t.Fatal(err)
		}
		if ev, err := sub.Next(ctx); err != nil || string(ev.Payload) != p {
			t.Fatalf("subscriber: %q, %v; want %q", ev.Payload, err, p)
		}
		want := float64(i + 1)
		brokertest.Eventually(t, ctx, fmt.Sprintf("%v delivery samples at the leader", want), func() bool { return delivered() == want })
	}
}
