package e2e_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/getfelix/felix-go/bench/procstat"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/clustertest"
)

// BenchmarkPublishSpread publishes the same records, with the same
// publishers in flight, to a replicated stream of few shards and to one of
// many, on three member processes (R=3, default fsync), and reports the
// acknowledged records per second of each: spreading the work over more
// raft groups must not cost much of the throughput, though each shard's
// proposals then batch less. Each shard count gets a fresh cluster; the
// stream is published to once its shards are led and balanced.
//
// FELIXBENCH_SPREAD lists the shard counts (default "10,1000");
// FELIXBENCH_SPREAD_RECORDS the records per count (default 200000);
// FELIXBENCH_SPREAD_PROFILE a directory for the first member's CPU
// profile of each timed run (3 s from its start); FELIXBENCH_SPREAD_ARGS
// more flags for every member (e.g. --durable-fsync none). Run with
// -benchtime 1x.
func BenchmarkPublishSpread(b *testing.B) {
	counts := []int{10, 1000}
	if s := os.Getenv("FELIXBENCH_SPREAD"); s != "" {
		counts = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(f)
			if err != nil {
				b.Fatal(err)
			}
			counts = append(counts, n)
		}
	}
	records := 200_000
	if s := os.Getenv("FELIXBENCH_SPREAD_RECORDS"); s != "" {
		var err error
		if records, err = strconv.Atoi(s); err != nil {
			b.Fatal(err)
		}
	}
	for _, shards := range counts {
		b.Run(fmt.Sprintf("shards=%d", shards), func(b *testing.B) {
			for range b.N {
				benchSpread(b, shards, records)
			}
		})
	}
}

// The publishers: spreadPublishers batches of spreadBatch records in
// flight, each batch keyed apart so batches land on every shard.
const (
	spreadPublishers = 64
	spreadBatch      = 16
)

func benchSpread(b *testing.B, shards, records int) {
	profile := os.Getenv("FELIXBENCH_SPREAD_PROFILE") // a directory: node-1's CPU profile of each run
	var opts clustertest.Options
	if profile != "" {
		opts.ExtraArgs = []string{"--pprof"}
	}
	opts.ExtraArgs = append(opts.ExtraArgs, strings.Fields(os.Getenv("FELIXBENCH_SPREAD_ARGS"))...)
	c := clustertest.Start(b, opts)
	c.WaitReady(b, 3)
	cc := dialAll(b, c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	st := client.Stream{Namespace: "bench", Name: "spread"}
	for {
		_, err := cc.CreateStream(ctx, st, client.StreamConfig{Durable: true, Replicas: 3, Shards: uint32(shards)})
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			b.Fatalf("create: %v", err)
		}
		time.Sleep(100 * time.Millisecond) // the cluster settling after start; no event to wait on
	}
	ms := c.Members()
	leads, _ := balanceOf(ctx, b, c, ms[0], st, shards, []string{ms[0].NodeID, ms[1].NodeID, ms[2].NodeID})
	b.Logf("%d shards led %v", shards, leads)

	payloads := make([][]byte, spreadBatch)
	for i := range payloads {
		payloads[i] = make([]byte, benchPayload)
	}
	// A warm-up of a few batches per shard, the same way, untimed: each
	// shard's first publish opens the client's stream to it and wakes its
	// quiet group, costs a run over few batches per shard would count.
	if err := publishSpread(ctx, cc, st, payloads, 0, int64(min(shards*4, 4096))); err != nil {
		b.Fatalf("warm-up: %v", err)
	}
	batches := records / spreadBatch
	cpuBefore := membersCPU(b, c)
	b.ResetTimer()
	start := time.Now()
	profiled := make(chan error, 1)
	if profile != "" {
		go func() {
			profiled <- cpuProfile(ctx, c, ms[0], filepath.Join(profile, fmt.Sprintf("spread-%d.pprof", shards)))
		}()
	}
	if err := publishSpread(ctx, cc, st, payloads, 1<<40, int64(batches)); err != nil {
		b.Fatalf("a publish failed: %v", err)
	}
	took := time.Since(start)
	if profile != "" {
		if err := <-profiled; err != nil {
			b.Errorf("profile: %v", err)
		}
	}
	b.StopTimer()
	cpu := membersCPU(b, c) - cpuBefore
	b.ReportMetric(float64(batches*spreadBatch)/took.Seconds(), "records/s")
	b.ReportMetric(cpu.Seconds()/float64(batches*spreadBatch)*1e6, "member-cpu-µs/record")
	b.ReportMetric(0, "ns/op")
}

// publishSpread publishes batches keyed first, first+1, ... from
// spreadPublishers goroutines, each with one batch in flight, and returns
// the first error.
func publishSpread(ctx context.Context, cc *client.ClusterClient, st client.Stream, payloads [][]byte, first, batches int64) error {
	var next atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	for range spreadPublishers {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= batches || failed.Load() != nil {
					return
				}
				key := []byte(strconv.FormatInt(first+i, 10))
				if err := cc.PublishBatch(ctx, st, payloads, client.PublishOptions{Key: key}); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		return *err
	}
	return nil
}

// cpuProfile writes 3 s of member m's CPU profile (its admin endpoint's
// /debug/pprof, which --pprof serves) to path.
func cpuProfile(ctx context.Context, c *clustertest.Cluster, m *clustertest.Member, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+m.Admin+"/debug/pprof/profile?seconds=3", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.Token())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", req.URL, resp.Status)
	}
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

// membersCPU is the user and system CPU the member processes used so far
// (Linux's clock ticks are 100 a second).
func membersCPU(b *testing.B, c *clustertest.Cluster) time.Duration {
	var total time.Duration
	for _, m := range c.Members() {
		s := procstat.Take(m.Pid(), 100)
		if !s.ServerOK {
			b.Fatalf("no CPU time for %s (pid %d)", m.NodeID, m.Pid())
		}
		total += s.Server
	}
	return total
}
