package e2e_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/internal/clustertest"
)

// Benchmarks of the cluster against one broker on the same machine, in
// the same run (docs/BENCHMARKS.md has the numbers and the command):
//
//	go test ./cluster/e2e/ -run '^$' -bench . -benchtime 200000x -count 3

const (
	benchStreams = 12
	benchPayload = 128
	benchBatch   = 32
)

// BenchmarkThroughput publishes b.N records over 12 in-memory streams
// (one pipelining publisher each, batches of 32 × 128 B, at each stream's
// owner) with F subscribers per stream, on one broker and on a 3-member
// cluster whose streams are spread over all three.
func BenchmarkThroughput(b *testing.B) {
	for _, topo := range []string{"single", "cluster3"} {
		for _, fanout := range []int{1, 4} {
			b.Run(fmt.Sprintf("%s/fanout=%d", topo, fanout), func(b *testing.B) {
				benchThroughput(b, topo, fanout)
			})
		}
	}
}

func benchThroughput(b *testing.B, topo string, fanout int) {
	opts := clustertest.Options{Nodes: 3}
	if topo == "single" {
		// One member with the cluster switched off: a plain broker.
		opts = clustertest.Options{Nodes: 1, ExtraArgs: []string{"--cluster-etcd="}}
	}
	c := clustertest.Start(b, opts)
	if topo != "single" {
		c.WaitReady(b, 3)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cc, err := client.DialCluster(ctx, c.Addrs(), c.ClientOptions())
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Close(context.Background())
	streams := make([]client.Stream, benchStreams)
	owners := map[string]bool{}
	for i := range streams {
		streams[i] = client.Stream{Namespace: "bench", Name: fmt.Sprintf("%s-%d", topo, i)}
		top, err := cc.ShardOwners(ctx, streams[i])
		if err != nil {
			b.Fatal(err)
		}
		owners[top.Owners[0].Owner.NodeID] = true
	}
	if topo != "single" && len(owners) != 3 {
		b.Fatalf("streams on %d members, want 3", len(owners))
	}
	perStream := max(b.N/benchStreams/benchBatch, 1) * benchBatch
	var subs sync.WaitGroup
	subErr := make(chan error, benchStreams*fanout)
	for _, st := range streams {
		for range fanout {
			sub, err := cc.Subscribe(ctx, st, client.SubscribeOptions{QueueCapacity: 4096})
			if err != nil {
				b.Fatal(err)
			}
			subs.Add(1)
			go func() {
				defer subs.Done()
				defer sub.Close(context.Background())
				for range perStream {
					if _, err := sub.Next(ctx); err != nil {
						subErr <- err
						return
					}
				}
			}()
		}
	}
	payloads := make([][]byte, benchBatch)
	for i := range payloads {
		payloads[i] = make([]byte, benchPayload)
	}
	b.ResetTimer()
	start := time.Now()
	var pubs sync.WaitGroup
	pubErr := make(chan error, benchStreams)
	for _, st := range streams {
		pubs.Add(1)
		go func() {
			defer pubs.Done()
			owner, err := cc.ClientFor(ctx, st, 0)
			if err != nil {
				pubErr <- err
				return
			}
			for sent := 0; sent < perStream; sent += benchBatch {
				if err := owner.Produce(ctx, st, payloads, client.PublishOptions{}, func(_ client.PublishResult, err error) {
					if err != nil {
						select {
						case pubErr <- err:
						default:
						}
					}
				}); err != nil {
					pubErr <- err
					return
				}
			}
			if err := owner.Flush(ctx); err != nil {
				pubErr <- err
			}
		}()
	}
	pubs.Wait()
	published := time.Since(start)
	subs.Wait()
	delivered := time.Since(start)
	b.StopTimer()
	select {
	case err := <-pubErr:
		b.Fatal(err)
	case err := <-subErr:
		b.Fatal(err)
	default:
	}
	total := float64(perStream * benchStreams)
	b.ReportMetric(total/published.Seconds(), "published/s")
	b.ReportMetric(total*float64(fanout)/delivered.Seconds(), "delivered/s")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkFailover measures unavailability: SIGKILL of a stream's owner
// to the first successful publish to that stream on its new owner, over
// 10 kills (the member is restarted between kills): with a 2 s lease and a
// client that gives up a silent connection after 1.5 s, and with the
// defaults (5 s lease; the ClusterClient's 5 s idle timeout). Run with
// -benchtime 1x.
func BenchmarkFailover(b *testing.B) {
	b.Run("lease=2s", func(b *testing.B) { benchFailover(b, leaseTTL, 1500*time.Millisecond) })
	b.Run("lease=5s-defaults", func(b *testing.B) { benchFailover(b, 0, 0) })
}

func benchFailover(b *testing.B, lease, idle time.Duration) {
	c := clustertest.Start(b, clustertest.Options{Nodes: 3, LeaseTTL: lease})
	c.WaitReady(b, 3)
	seed := c.Members()[0]
	o := c.ClientOptions()
	o.DialTimeout = time.Second
	if idle > 0 {
		o.IdleTimeout, o.KeepAlive = idle, idle/5
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cc, err := client.DialCluster(ctx, []string{seed.Addr}, o)
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Close(context.Background())
	const kills = 10
	var took []time.Duration
	for round := 0; len(took) < kills; round++ {
		st := client.Stream{Namespace: "failover", Name: fmt.Sprintf("r%d", round)}
		top, err := cc.ShardOwners(ctx, st)
		if err != nil {
			b.Fatal(err)
		}
		victim := c.Member(top.Owners[0].Owner.NodeID)
		if victim == nil || victim == seed {
			continue // the seed stays up: the client learns the new owner from it
		}
		if err := cc.Publish(ctx, st, []byte("before"), client.PublishOptions{}); err != nil {
			b.Fatal(err)
		}
		killed := time.Now()
		victim.Kill()
		for {
			pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
			err := cc.Publish(pctx, st, []byte("after"), client.PublishOptions{})
			pcancel()
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				b.Fatal(err)
			}
			time.Sleep(5 * time.Millisecond)
		}
		took = append(took, time.Since(killed))
		victim.Restart(b)
		c.WaitReady(b, 3)
	}
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	b.ReportMetric(float64(took[len(took)/2].Milliseconds()), "p50-ms")
	b.ReportMetric(float64(took[len(took)*99/100].Milliseconds()), "p99-ms")
	b.ReportMetric(0, "ns/op")
	b.Logf("SIGKILL to first publish on the new owner, %d kills: %v", kills, took)
}
