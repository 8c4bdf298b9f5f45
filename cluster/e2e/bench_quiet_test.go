package e2e_test

import (
	"context"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/clustertest"
)

// BenchmarkQuietFailover kills a member of a 3-member cluster whose
// replicated shards are all idle and quiet, FELIXBENCH_QUIET_KILLS times
// (default 1; the member restarted between kills), and times until every
// shard the dead member led is led again, by a survivor's own view (a
// leader puts its view as it wins); then how long the restarted member
// takes to have every shard open and following a leader. The stream has
// FELIXBENCH_QUIET_SHARDS shards (default 300), 3 replicas each; the
// victim is the member leading the most. Nothing publishes: a quiet
// group's followers learn of the death from the members' beats alone.
//
//	FELIXBENCH_QUIET_SHARDS=1000 go test ./cluster/e2e/ -run '^$' -bench QuietFailover -benchtime 1x -v
func BenchmarkQuietFailover(b *testing.B) {
	shards, kills := envInt(b, "FELIXBENCH_QUIET_SHARDS", 300), envInt(b, "FELIXBENCH_QUIET_KILLS", 1)
	c := clustertest.Start(b, clustertest.Options{Nodes: 3, LeaseTTL: leaseTTL})
	c.WaitReady(b, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	st := client.Stream{Namespace: "bench", Name: "quiet"}
	opened := time.Now()
	if err := onMember(ctx, c, c.Members()[0], func(cl *client.Client) error {
		_, err := cl.CreateStream(ctx, st, client.StreamConfig{Durable: true, Replicas: 3, Shards: uint32(shards)})
		return err
	}); err != nil {
		b.Fatal(err)
	}
	views := func() map[string][]string { return quietViews(ctx, b, c, st) }
	waitQuietAll(ctx, b, c, st, shards, "after creating the stream")
	b.Logf("%d shards led and quiet on every member %v after the create", shards, time.Since(opened).Round(time.Millisecond))
	var took []time.Duration
	var reopen []time.Duration
	for k := range kills {
		led := views()
		var victim *clustertest.Member
		for _, m := range c.Members() {
			if victim == nil || len(led[m.NodeID]) > len(led[victim.NodeID]) {
				victim = m
			}
		}
		lost := led[victim.NodeID]
		killed := time.Now()
		victim.Kill()
		again := map[string]time.Duration{}
		for len(again) < len(lost) {
			if ctx.Err() != nil {
				b.Fatalf("kill %d: %d of the %d shards %s led are led again", k, len(again), len(lost), victim.NodeID)
			}
			now := time.Since(killed)
			for node, shards := range views() {
				if node == victim.NodeID {
					continue
				}
				for _, s := range shards {
					if _, ok := again[s]; !ok && slices.Contains(lost, s) {
						again[s] = now
					}
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		var ds []time.Duration
		for _, d := range again {
			ds = append(ds, d)
		}
		slices.Sort(ds)
		b.Logf("kill %d: %s led %d shards; led again: p50 %v, p99 %v, last %v", k, victim.NodeID, len(lost),
			ds[len(ds)/2].Round(time.Millisecond), ds[len(ds)*99/100].Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond))
		took = append(took, ds...)
		restarted := time.Now()
		victim.Restart(b)
		waitFollowing(ctx, b, c, victim, st, shards)
		reopen = append(reopen, time.Since(restarted))
		b.Logf("kill %d: %s restarted and follows a leader in all %d shards %v after its restart", k, victim.NodeID, shards, time.Since(restarted).Round(time.Millisecond))
		waitQuietAll(ctx, b, c, st, shards, "after the restart")
	}
	slices.Sort(took)
	slices.Sort(reopen)
	b.ReportMetric(float64(took[len(took)/2].Milliseconds()), "p50-ms")
	b.ReportMetric(float64(took[len(took)*99/100].Milliseconds()), "p99-ms")
	b.ReportMetric(float64(took[len(took)-1].Milliseconds()), "max-ms")
	b.ReportMetric(float64(reopen[len(reopen)/2].Milliseconds()), "reopen-ms")
	b.ReportMetric(0, "ns/op")
}

func envInt(b *testing.B, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q: want a positive number", name, s)
	}
	return n
}

// quietViews is, by member, the shards (as numbers) it says it leads.
func quietViews(ctx context.Context, b *testing.B, c *clustertest.Cluster, st client.Stream) map[string][]string {
	out := map[string][]string{}
	for _, m := range c.Members() {
		if !m.Running() {
			continue
		}
		_ = onMember(ctx, c, m, func(cl *client.Client) error {
			v, err := cl.Replication(ctx, st)
			for _, s := range v.Shards {
				if s.Leader == m.NodeID {
					out[m.NodeID] = append(out[m.NodeID], strconv.Itoa(int(s.Shard)))
				}
			}
			return err
		})
	}
	return out
}

// waitQuietAll waits until the running members lead all shards between
// them and every running member's replicas are all quiet.
func waitQuietAll(ctx context.Context, b *testing.B, c *clustertest.Cluster, st client.Stream, shards int, what string) {
	b.Helper()
	for {
		led, quiet, running := 0, 0, 0
		for _, m := range c.Members() {
			if !m.Running() {
				continue
			}
			running++
			_ = onMember(ctx, c, m, func(cl *client.Client) error {
				v, err := cl.Replication(ctx, st)
				n := 0
				for _, s := range v.Shards {
					if s.Leader == m.NodeID {
						led++
					}
					if s.Quiet {
						n++
					}
				}
				if n == shards {
					quiet++
				}
				return err
			})
		}
		if led == shards && quiet == running {
			return
		}
		if ctx.Err() != nil {
			b.Fatalf("%s: %d of %d shards led, %d of %d members all quiet", what, led, shards, quiet, running)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitFollowing waits until m has every shard open and knows its leader.
func waitFollowing(ctx context.Context, b *testing.B, c *clustertest.Cluster, m *clustertest.Member, st client.Stream, shards int) {
	b.Helper()
	for {
		n := 0
		_ = onMember(ctx, c, m, func(cl *client.Client) error {
			v, err := cl.Replication(ctx, st)
			for _, s := range v.Shards {
				if s.Leader != "" {
					n++
				}
			}
			return err
		})
		if n == shards {
			return
		}
		if ctx.Err() != nil {
			b.Fatalf("%s follows a leader in %d of %d shards", m.NodeID, n, shards)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
