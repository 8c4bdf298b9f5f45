package e2e_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/clustertest"
)

// balancedStream has 24 replicated shards: 8 for each of three members.
var balancedStream = client.Stream{Namespace: "e2e", Name: "balanced"}

// leads counts the replicated shards each member leads, as m's status
// names their owners (the leader's claim); shards with no leader yet are
// counted under "".
func leads(t *testing.T, c *clustertest.Cluster, m *clustertest.Member) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, s := range c.Status(t, m).Shards {
		if s.Kind == "replicated" && s.Stream == "default/"+balancedStream.Namespace+"/"+balancedStream.Name {
			out[s.Owner]++
		}
	}
	return out
}

// waitLeads waits until ok holds of the leads m sees.
func waitLeads(ctx context.Context, t *testing.T, c *clustertest.Cluster, m *clustertest.Member, what string, ok func(map[string]int) bool) map[string]int {
	t.Helper()
	start := time.Now()
	for {
		l := leads(t, c, m)
		if ok(l) {
			t.Logf("%s after %v: %v", what, time.Since(start).Round(100*time.Millisecond), l)
			return l
		}
		if ctx.Err() != nil {
			t.Fatalf("%s: leads stayed %v", what, l)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// within says every member of ids leads between lo and hi shards, and no
// shard is without a leader.
func within(ids []string, lo, hi int) func(map[string]int) bool {
	return func(l map[string]int) bool {
		if l[""] > 0 {
			return false
		}
		for _, id := range ids {
			if l[id] < lo || l[id] > hi {
				return false
			}
		}
		return true
	}
}

// TestLeadersBalanced: 24 shards of three replicas on three members. Raft
// alone leaves leadership wherever elections fell; the members hand it
// over until each leads 8. A member killed, its shards elect leaders on
// the other two (12/12); back, it takes its 8 again. Drained, it gives up
// every shard at once.
func TestLeadersBalanced(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{})
	c.WaitReady(t, 3)
	cc := dialAll(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for {
		_, err := cc.CreateStream(ctx, balancedStream, client.StreamConfig{Durable: true, Replicas: 3, Shards: 24})
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("create the stream: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	ms := c.Members()
	all := []string{ms[0].NodeID, ms[1].NodeID, ms[2].NodeID}
	waitLeads(ctx, t, c, ms[0], "balanced after start", within(all, 8, 8))

	victim := ms[2]
	victim.Kill()
	rest := []string{ms[0].NodeID, ms[1].NodeID}
	waitLeads(ctx, t, c, ms[0], fmt.Sprintf("led by the others with %s down", victim.NodeID), within(rest, 12, 12))
	victim.Restart(t)
	c.WaitReady(t, 3)
	waitLeads(ctx, t, c, ms[0], fmt.Sprintf("balanced with %s back", victim.NodeID), within(all, 8, 8))

	c.Drain(t, ms[0], victim.NodeID)
	waitLeads(ctx, t, c, ms[0], fmt.Sprintf("%s drained", victim.NodeID), func(l map[string]int) bool {
		return l[victim.NodeID] == 0 && within(rest, 12, 12)(l)
	})
}
