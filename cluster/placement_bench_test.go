package cluster

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// BenchmarkPlaceReplicaSets places a stream of 1,000 replicated shards on
// three in-process members over one embedded etcd, writing the sets one
// transaction per shard (batch=1, how placement wrote them before) or up
// to setsPerTxn a transaction, and reports shards placed per second and
// the process's CPU per shard placed. Each round is a new stream.
//
//	go test -run '^$' -bench BenchmarkPlaceReplicaSets -benchtime 1x ./cluster/
//
// (bench/placement/run.sh runs it three times.)
func BenchmarkPlaceReplicaSets(b *testing.B) {
	for _, batch := range []int32{1, setsPerTxn} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			e, err := StartEtcd(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			var nodes []*Node
			for i := range 3 {
				n := startNode(b, e.Endpoint(), fmt.Sprintf("n%d", i+1), "felix", &recorder{})
				nodes = append(nodes, n)
			}
			eventually(b, "three ready members", func() bool {
				for _, n := range nodes {
					if !n.Ready() || n.memberCount() != 3 {
						return false
					}
				}
				return true
			})
			for _, n := range nodes {
				n.setBatch.Store(batch)
			}
			cli, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Endpoint()}, DialTimeout: 5 * time.Second})
			if err != nil {
				b.Fatal(err)
			}
			defer cli.Close()
			const shards = 1000
			var took time.Duration
			cpu0 := processCPU()
			b.ResetTimer()
			for i := range b.N {
				def := StreamDef{Tenant: "t", Namespace: "ns", Stream: fmt.Sprintf("s%d", i), Shards: shards, Routing: "modulo",
					Durable: true, Replicas: 3, CreatedAt: time.Now()}
				start := time.Now()
				if _, err := nodes[0].CreateDef(context.Background(), def); err != nil {
					b.Fatal(err)
				}
				prefix := nodes[0].keys.streamReplicas(def.Scope())
				for {
					res, err := cli.Get(context.Background(), prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
					if err != nil {
						b.Fatal(err)
					}
					if res.Count == shards {
						break
					}
					if time.Since(start) > 5*time.Minute {
						b.Fatalf("%d of %d sets after %v", res.Count, shards, time.Since(start))
					}
					time.Sleep(10 * time.Millisecond)
				}
				took += time.Since(start)
			}
			b.StopTimer()
			cpu := processCPU() - cpu0
			b.ReportMetric(float64(shards*b.N)/took.Seconds(), "shards/s")
			b.ReportMetric(float64(cpu.Microseconds())/float64(shards*b.N), "cpu-µs/shard")
		})
	}
}

// processCPU is the process's user and system CPU so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
