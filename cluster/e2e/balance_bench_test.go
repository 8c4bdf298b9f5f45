package e2e_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/clustertest"
)

// BenchmarkLeaderBalance opens one stream of FELIXBENCH_SHARDS (default
// 1,000) replicated shards on three members and reports how evenly they
// lead it: the busiest member's leads over an even share (1.0 is even;
// the goal is at most 1.1) and how long it took, after start, after
// node-3's kill (over two members), after its return, and after its drain
// (over the other two). bench/placement/run.sh runs it.
func BenchmarkLeaderBalance(b *testing.B) {
	shards := 1000
	if s := os.Getenv("FELIXBENCH_SHARDS"); s != "" {
		var err error
		if shards, err = strconv.Atoi(s); err != nil {
			b.Fatal(err)
		}
	}
	for range b.N {
		c := clustertest.Start(b, clustertest.Options{})
		c.WaitReady(b, 3)
		cc := dialAll(b, c)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		st := client.Stream{Namespace: "bench", Name: "balance"}
		start := time.Now()
		for {
			_, err := cc.CreateStream(ctx, st, client.StreamConfig{Durable: true, Replicas: 3, Shards: uint32(shards)})
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				b.Fatalf("create: %v", err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		ms := c.Members()
		all := []string{ms[0].NodeID, ms[1].NodeID, ms[2].NodeID}
		rest := all[:2]
		phase := func(name string, ids []string, from *clustertest.Member) {
			at := time.Now()
			l, led := balanceOf(ctx, b, c, from, st, shards, ids)
			ratio := busiest(l, ids, shards)
			b.Logf("%s: %v after %v (busiest %.3f of an even share)", name, l, time.Since(at).Round(100*time.Millisecond), ratio)
			b.ReportMetric(ratio, name+"-busiest/even")
			b.ReportMetric(led.Sub(at).Seconds(), name+"-s")
		}
		phase("start", all, ms[0])
		b.ReportMetric(time.Since(start).Seconds(), "open+balance-s")
		ms[2].Kill()
		phase("kill", rest, ms[0])
		ms[2].Restart(b)
		c.WaitReady(b, 3)
		phase("return", all, ms[0])
		c.Drain(b, ms[0], ms[2].NodeID)
		phase("drain", rest, ms[0])
		cancel()
	}
}

// balanceOf waits until every shard of st is led by a member of ids and
// the busiest leads at most 10 % over an even share (or, for a count that
// does not divide so finely, one more than the rest), or for 5 minutes
// after every shard is led, and returns the leads and when it settled.
func balanceOf(ctx context.Context, b *testing.B, c *clustertest.Cluster, m *clustertest.Member, st client.Stream, shards int, ids []string) (map[string]int, time.Time) {
	var ledAt time.Time
	for {
		status, err := c.TryStatus(m)
		if err != nil {
			if ctx.Err() != nil {
				b.Fatalf("status: %v", err)
			}
			b.Logf("status: %v; asking again", err)
			time.Sleep(time.Second)
			continue
		}
		l := map[string]int{}
		for _, s := range status.Shards {
			if s.Stream == "default/"+st.Namespace+"/"+st.Name {
				l[s.Owner]++
			}
		}
		in := 0
		for _, id := range ids {
			in += l[id]
		}
		if in == shards {
			if ledAt.IsZero() {
				ledAt = time.Now()
			}
			if even(l, ids, shards) || time.Since(ledAt) > 5*time.Minute {
				return l, time.Now()
			}
		}
		if ctx.Err() != nil {
			b.Fatalf("leads stayed %v", l)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// even: the busiest of ids leads at most 10 % over an even share, or no
// more than the shards divided up as evenly as they can be.
func even(l map[string]int, ids []string, shards int) bool {
	most := 0
	for _, id := range ids {
		most = max(most, l[id])
	}
	return busiest(l, ids, shards) <= 1.1 || most <= (shards+len(ids)-1)/len(ids)
}

func busiest(l map[string]int, ids []string, shards int) float64 {
	most := 0
	for _, id := range ids {
		most = max(most, l[id])
	}
	return float64(most) / (float64(shards) / float64(len(ids)))
}
