package e2e_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/clustertest"
)

// replicatedCache is a durable cache with three replicas and one shard.
var replicatedCache = client.Cache{Namespace: "e2e", Name: "kv"}

// TestReplicatedCacheSurvivesALeaderKill: puts acknowledged by a
// replicated cache's leader are there, at their versions, after it is
// SIGKILLed; the new leader takes puts, and a put-if names a version the
// old leader gave.
func TestReplicatedCacheSurvivesALeaderKill(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{Nodes: 3, LeaseTTL: leaseTTL})
	c.WaitReady(t, 3)
	cc := dialAll(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for {
		info, err := cc.CreateCache(ctx, replicatedCache, client.CacheSpec{Shards: 1, Durable: true, Replicas: 3})
		if err == nil && info.Replicas == 3 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("create the cache: %+v, %v", info, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	versions := map[string]uint64{}
	for i := range 20 {
		key := fmt.Sprintf("k%02d", i)
		versions[key] = putUntilAcked(ctx, t, cc, key)
	}
	leader := cacheLeader(ctx, t, c)
	leader.Kill()
	for i := 20; i < 40; i++ {
		key := fmt.Sprintf("k%02d", i)
		versions[key] = putUntilAcked(ctx, t, cc, key)
	}
	for key, v := range versions {
		got, err := cc.Get(ctx, replicatedCache, key)
		if err != nil || !got.Found || string(got.Value) != "v-"+key || got.Version != v {
			t.Fatalf("%s after the kill of %s: %+v, %v; want its value at version %d", key, leader.NodeID, got, err, v)
		}
	}
	before := versions["k00"]
	res, err := cc.Put(ctx, replicatedCache, "k00", []byte("swapped"), client.PutOptions{IfVersion: &before})
	if err != nil || !res.Applied {
		t.Fatalf("put-if on the version from before the kill: %+v, %v", res, err)
	}
}

// putUntilAcked puts key's value until a leader acknowledges it. An
// unconditional put of the same value may be sent again: applied twice, it
// leaves the key as once; the version is the acknowledged one.
func putUntilAcked(ctx context.Context, t *testing.T, cc *client.ClusterClient, key string) uint64 {
	t.Helper()
	for {
		res, err := cc.Put(ctx, replicatedCache, key, []byte("v-"+key), client.PutOptions{})
		if err == nil && res.Applied {
			return res.Version
		}
		if ctx.Err() != nil {
			t.Fatalf("put %s: %+v, %v", key, res, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cacheLeader waits for the member whose replica leads the cache's shard.
func cacheLeader(ctx context.Context, t *testing.T, c *clustertest.Cluster) *clustertest.Member {
	t.Helper()
	s := client.Stream{Namespace: replicatedCache.Namespace, Name: replicatedCache.Name}
	for {
		for _, m := range c.Members() {
			if !m.Running() {
				continue
			}
			var leads bool
			_ = onMember(ctx, c, m, func(cl *client.Client) error {
				v, err := cl.Replication(ctx, s)
				leads = err == nil && len(v.Shards) == 1 && v.Shards[0].Leader == m.NodeID
				return err
			})
			if leads {
				return m
			}
		}
		if ctx.Err() != nil {
			t.Fatal("no member leads the cache's shard")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
