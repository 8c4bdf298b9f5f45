package e2e_test

import (
	"context"
	"testing"
	"time"

	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/clustertest"
)

// TestReplicasSpreadOverZones: four members in zones a, a, b and c. A
// stream's replica sets each span all three zones; `felix cluster ls`'s
// status names each member's zone. A stream created while zone c's only
// member is down can span only a and b; once it is back, its shards
// count as not spread.
func TestReplicasSpreadOverZones(t *testing.T) {
	zones := []string{"a", "a", "b", "c"}
	c := clustertest.Start(t, clustertest.Options{Nodes: 4, Zones: zones})
	c.WaitReady(t, 4)
	cc := dialAll(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ms := c.Members()
	zoneOf := map[string]string{}
	for i, m := range ms {
		zoneOf[m.NodeID] = zones[i]
	}
	for _, m := range c.Status(t, ms[0]).Members {
		if m.Zone != zoneOf[m.NodeID] {
			t.Fatalf("status gives %s zone %q, want %q", m.NodeID, m.Zone, zoneOf[m.NodeID])
		}
	}

	spread := client.Stream{Namespace: "e2e", Name: "spread"}
	create(ctx, t, cc, spread, 12)
	sets := replicaSets(ctx, t, c, ms[0], spread, 12)
	for shard, set := range sets {
		seen := map[string]bool{}
		for _, node := range set {
			seen[zoneOf[node]] = true
		}
		if len(seen) != 3 {
			t.Errorf("shard %d: replicas %v span zones %v, want a, b and c", shard, set, seen)
		}
	}
	if n := c.Metric(t, ms[0], "felix_shards_not_zone_spread"); n != 0 {
		t.Fatalf("felix_shards_not_zone_spread = %v with every set spread", n)
	}

	ms[3].Kill()
	c.WaitReady(t, 3)
	crowded := client.Stream{Namespace: "e2e", Name: "crowded"}
	create(ctx, t, cc, crowded, 6)
	for shard, set := range replicaSets(ctx, t, c, ms[0], crowded, 6) {
		seen := map[string]bool{}
		for _, node := range set {
			seen[zoneOf[node]] = true
		}
		if len(seen) != 2 {
			t.Errorf("shard %d of the stream made with zone c down: replicas %v span %v, want a and b", shard, set, seen)
		}
	}
	if n := c.Metric(t, ms[0], "felix_shards_not_zone_spread"); n != 0 {
		t.Fatalf("felix_shards_not_zone_spread = %v with only two zones live", n)
	}
	ms[3].Restart(t)
	c.WaitReady(t, 4)
	for c.Metric(t, ms[0], "felix_shards_not_zone_spread") != 6 {
		if ctx.Err() != nil {
			t.Fatalf("felix_shards_not_zone_spread = %v with zone c back, want the crowded stream's 6", c.Metric(t, ms[0], "felix_shards_not_zone_spread"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func create(ctx context.Context, t *testing.T, cc *client.ClusterClient, st client.Stream, shards uint32) {
	t.Helper()
	for {
		_, err := cc.CreateStream(ctx, st, client.StreamConfig{Durable: true, Replicas: 3, Shards: shards})
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("create %s: %v", st.Name, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// replicaSets waits until m's status lists a replica set for each of the
// stream's shards, and returns them.
func replicaSets(ctx context.Context, t *testing.T, c *clustertest.Cluster, m *clustertest.Member, st client.Stream, shards int) map[uint32][]string {
	t.Helper()
	for {
		out := map[uint32][]string{}
		for _, s := range c.Status(t, m).Shards {
			if s.Stream == "default/"+st.Namespace+"/"+st.Name && len(s.Replicas) == 3 {
				out[s.Shard] = s.Replicas
			}
		}
		if len(out) == shards {
			return out
		}
		if ctx.Err() != nil {
			t.Fatalf("%s: %d of %d replica sets written", st.Name, len(out), shards)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
