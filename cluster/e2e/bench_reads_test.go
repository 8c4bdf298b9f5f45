package e2e_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/clustertest"
)

// BenchmarkReplicatedReads measures range reads of a replicated shard
// (3 members, one shard with 3 replicas holding readRecords records of
// 128 B): readConns connections, each with readsPerConn reads in flight,
// read pages of readPage records from offset 0 until b.N reads are done.
// "leader": plain (linearizable) reads at the shard's leader, each
// confirmed by a ReadIndex round shared with the reads that arrived
// meanwhile; "follower": follower reads (FollowerMaxLag 1 s) at a member
// that does not lead. Reported: reads/s and each read's p50 and p99
// latency. A broker built before linearizable reads serves both from its
// own copy at once, so the same test binary run with its working
// directory in an older checkout (clustertest builds felix from there)
// gives the rows to compare against (docs/BENCHMARKS.md):
//
//	go test -c -o /tmp/e2e.test ./cluster/e2e/
//	/tmp/e2e.test -test.run '^$' -test.bench ReplicatedReads -test.benchtime 20000x
func BenchmarkReplicatedReads(b *testing.B) {
	b.Run("leader", func(b *testing.B) { benchReplicatedReads(b, false) })
	b.Run("follower", func(b *testing.B) { benchReplicatedReads(b, true) })
}

const (
	readRecords  = 1000
	readPage     = 16
	readConns    = 4
	readsPerConn = 8
)

func benchReplicatedReads(b *testing.B, follower bool) {
	opts := clustertest.Options{Nodes: 3, LeaseTTL: leaseTTL}
	c, cc, ctx := startBench(b, opts, true)
	replicatedLeader(ctx, b, c, cc, 3)
	payloads := make([][]byte, 100)
	for i := range payloads {
		payloads[i] = make([]byte, benchPayload)
	}
	for range readRecords / len(payloads) {
		if err := cc.PublishBatch(ctx, benchReplicatedStream, payloads, client.PublishOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	target := waitLeader(ctx, b, c, benchReplicatedStream)
	ro := client.ReadOptions{MaxRecords: readPage}
	if follower {
		for _, m := range c.Members() {
			if m != target {
				target = m
				break
			}
		}
		ro.FollowerMaxLag = time.Second
	}
	conns := make([]*client.Client, readConns)
	for i := range conns {
		cl, err := client.Dial(ctx, target.Addr, c.ClientOptions())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = cl.Close(context.Background()) })
		conns[i] = cl
	}
	// The follower has every record before the clock starts.
	for {
		p, err := conns[0].Read(ctx, benchReplicatedStream, 0, ro)
		if err == nil && p.Committed >= readRecords {
			break
		}
		if ctx.Err() != nil {
			b.Fatalf("%s never served %d records: %v", target.NodeID, readRecords, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	lat := readLatencies(ctx, b, conns, ro)
	took := lat.took
	b.StopTimer()
	slices.Sort(lat.each)
	b.ReportMetric(float64(len(lat.each))/took.Seconds(), "reads/s")
	b.ReportMetric(float64(lat.each[len(lat.each)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat.each[len(lat.each)*99/100].Microseconds()), "p99-µs")
	b.ReportMetric(0, "ns/op")
}

type latencies struct {
	each []time.Duration
	took time.Duration
}

// readLatencies runs b.N reads over conns, readsPerConn at a time on each,
// and times each one.
func readLatencies(ctx context.Context, b *testing.B, conns []*client.Client, ro client.ReadOptions) latencies {
	workers := len(conns) * readsPerConn
	per := max(b.N/workers, 1)
	out := make([][]time.Duration, workers)
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for w := range workers {
		cl := conns[w%len(conns)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := make([]time.Duration, 0, per)
			for range per {
				t0 := time.Now()
				if _, err := cl.Read(ctx, benchReplicatedStream, 0, ro); err != nil {
					b.Errorf("read: %v", err)
					return
				}
				mine = append(mine, time.Since(t0))
			}
			out[w] = mine
		}()
	}
	wg.Wait()
	took := time.Since(start)
	if b.Failed() {
		b.FailNow()
	}
	var all []time.Duration
	for _, o := range out {
		all = append(all, o...)
	}
	return latencies{each: all, took: took}
}
