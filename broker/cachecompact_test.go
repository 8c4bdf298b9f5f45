package broker_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
)

// TestCacheCompactionOverQUICSurvivesARestart: a durable cache whose
// segments fill compacts its log on its own (no resume window here), the
// compaction is counted, and a broker restarted on the compacted log
// answers every key at the value and version it had, a put-if naming one
// of those versions applies, and the floor survived.
func TestCacheCompactionOverQUICSurvivesARestart(t *testing.T) {
	cfg := brokertest.Config(t)
	cfg.DurableSegmentBytes = 64 << 10
	cfg.CacheResumeWindow = 0
	b := brokertest.Start(t, cfg)
	ctx := brokertest.Context(t, 60*time.Second)
	c := brokertest.Dial(t, b, cfg)
	k := client.Cache{Name: "profiles"}
	if _, err := c.CreateCache(ctx, k, client.CacheSpec{Shards: 1, Durable: true}); err != nil {
		t.Fatal(err)
	}
	value := bytes.Repeat([]byte("v"), 1024)
	versions := map[string]uint64{}
	for i := range 160 {
		key := fmt.Sprintf("user/%d", i%4)
		res, err := c.Put(ctx, k, key, append([]byte(fmt.Sprint(i)), value...), client.PutOptions{})
		if err != nil || !res.Applied {
			t.Fatalf("put %d: %+v, %v", i, res, err)
		}
		versions[key] = res.Version
	}
	brokertest.Eventually(t, ctx, "a compaction of the cache's log", func() bool {
		n, _, _ := brokertest.MetricValue(b.Metrics().Registry, "felix_cache_compactions_total")
		return n >= 1
	})
	if n, _, _ := brokertest.MetricValue(b.Metrics().Registry, "felix_cache_compaction_records_removed_total"); n == 0 {
		t.Fatal("a compaction was counted, but no record removed")
	}
	info, err := c.DescribeCache(ctx, k)
	if err != nil || len(info.Floors) != 1 || info.Floors[0] == 0 || info.Floors[0] > versions["user/0"] {
		t.Fatalf("info after a compaction: floors %v (%v); want the horizon, above 0", info.Floors, err)
	}
	_ = c.Close(ctx)
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	b2 := brokertest.Start(t, cfg)
	c2 := brokertest.Dial(t, b2, cfg)
	for key, v := range versions {
		got, err := c2.Get(ctx, k, key)
		if err != nil || !got.Found || got.Version != v || !bytes.HasSuffix(got.Value, value) {
			t.Fatalf("%s after compaction and a restart: found %v at %d (%v); want version %d", key, got.Found, got.Version, err, v)
		}
	}
	again, err := c2.DescribeCache(ctx, k)
	if err != nil || len(again.Floors) != 1 || again.Floors[0] != info.Floors[0] {
		t.Fatalf("floors after the restart: %v (%v); want %v", again.Floors, err, info.Floors)
	}
	v := versions["user/0"]
	if res, err := c2.Put(ctx, k, "user/0", []byte("new"), client.PutOptions{IfVersion: &v}); err != nil || !res.Applied {
		t.Fatalf("put if the version from before the compaction: %+v, %v", res, err)
	}
}
