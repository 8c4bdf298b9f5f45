package broker_test

import (
	"errors"
	"testing"
	"time"

	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/cache"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/routing"
	"github.com/getfelix/felix-go/wire"
)

// TestCacheOverQUIC drives a sharded durable cache through the client:
// conditional writes judged on the key's shard, deletes answering what they
// removed, listing every shard, counters, and a commit read back whole.
func TestCacheOverQUIC(t *testing.T) {
	cfg := brokertest.Config(t)
	b := brokertest.Start(t, cfg)
	ctx := brokertest.Context(t, 30*time.Second)
	c := brokertest.Dial(t, b, cfg)
	k := client.Cache{Name: "flags"}
	info, err := c.CreateCache(ctx, k, client.CacheSpec{Shards: 4, Durable: true})
	if err != nil || info.Shards != 4 || !info.Durable || info.History != 1 {
		t.Fatalf("create: %+v, %v; want 4 durable shards, history 1", info, err)
	}
	if d, err := c.DescribeCache(ctx, k); err != nil || len(d.Floors) != 4 || d.Floors[0] != 0 {
		t.Fatalf("info of a new cache: floors %v (%v); want four at 0, the logs' start", d.Floors, err)
	}
	if _, err := c.CreateCache(ctx, client.Cache{Name: "deep"}, client.CacheSpec{Shards: 1, History: cache.MaxHistory + 1}); !errors.Is(err, wire.ErrInvalidRequest) {
		t.Fatalf("create with history %d: %v; want invalid_request", cache.MaxHistory+1, err)
	}

	first, err := c.Put(ctx, k, "user/1", []byte("ann"), client.PutOptions{IfAbsent: true})
	if err != nil || !first.Applied {
		t.Fatalf("put if absent: %+v, %v", first, err)
	}
	if again, err := c.Put(ctx, k, "user/1", []byte("bob"), client.PutOptions{IfAbsent: true}); err != nil || again.Applied || again.Reason != "condition_failed" || again.Version != first.Version {
		t.Fatalf("second put if absent: %+v, %v; want condition_failed at version %d", again, err, first.Version)
	}
	swapped, err := c.Put(ctx, k, "user/1", []byte("cy"), client.PutOptions{IfVersion: &first.Version})
	if err != nil || !swapped.Applied || !swapped.HadPrev || string(swapped.Prev) != "ann" {
		t.Fatalf("put if version %d: %+v, %v", first.Version, swapped, err)
	}
	if stale, err := c.Put(ctx, k, "user/1", []byte("dee"), client.PutOptions{IfVersion: &first.Version}); err != nil || stale.Applied || stale.Version != swapped.Version {
		t.Fatalf("put with a stale version: %+v, %v; want refused at %d", stale, err, swapped.Version)
	}
	if got, err := c.Get(ctx, k, "user/1"); err != nil || !got.Found || string(got.Value) != "cy" || got.Version != swapped.Version {
		t.Fatalf("get: %+v, %v; want cy at %d", got, err, swapped.Version)
	}

	for _, key := range []string{"user/2", "user/3", "user/4", "user/5", "other"} {
		if res, err := c.Put(ctx, k, key, []byte(key), client.PutOptions{}); err != nil || !res.Applied {
			t.Fatalf("put %s: %+v, %v", key, res, err)
		}
	}
	removed, err := c.Delete(ctx, k, "user/5", nil)
	if err != nil || !removed.Applied || string(removed.Prev) != "user/5" {
		t.Fatalf("delete: %+v, %v; want user/5's value back", removed, err)
	}
	if gone, err := c.Delete(ctx, k, "user/5", nil); err != nil || gone.Applied || gone.Reason != "not_found" {
		t.Fatalf("delete again: %+v, %v; want not_found", gone, err)
	}
	listed := map[string]bool{}
	for shard := range info.Shards {
		for after := ""; ; {
			page, err := c.ListShard(ctx, k, shard, "user/", after, 1)
			if err != nil {
				t.Fatalf("list shard %d: %v", shard, err)
			}
			for _, e := range page.Entries {
				if got := findRouting(t, info).ShardFor([]byte(e.Key), info.Shards); got != shard {
					t.Fatalf("shard %d listed %s, which routes to %d", shard, e.Key, got)
				}
				listed[e.Key] = true
			}
			if after = page.Next; after == "" {
				break
			}
		}
	}
	if len(listed) != 4 || !listed["user/1"] || listed["user/5"] || listed["other"] {
		t.Fatalf("listed %v; want user/1 to user/4", listed)
	}

	for range 2 {
		if _, err := c.CounterAdd(ctx, k, "hits", 21); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := c.CounterGet(ctx, k, "hits"); err != nil || !n.Found || n.Value != 42 {
		t.Fatalf("counter: %+v, %v; want 42", n, err)
	}

	other := sameShardKey(t, info, "order/1")
	done, err := c.Commit(ctx, k, "order/1", []byte("paid"), []client.CacheOp{{Key: "order/1", Value: []byte("paid")}, {Key: other, Value: []byte("open")}})
	if err != nil || !done.Applied {
		t.Fatalf("commit: %+v, %v", done, err)
	}
	state, err := c.StateGet(ctx, k, "order/1", other)
	if err != nil || state.Applied != done.Version || len(state.Values) != 2 || state.Values[0].Version != done.Version || state.Values[1].Version != done.Version {
		t.Fatalf("state after the commit at %d: %+v, %v", done.Version, state, err)
	}
	if _, err := c.Commit(ctx, k, "order/1", nil, []client.CacheOp{{Key: "order/1"}, {Key: otherShardKey(t, info, "order/1")}}); !errors.Is(err, wire.ErrInvalidRequest) {
		t.Fatalf("a commit over two shards: %v; want invalid_request", err)
	}
}

// TestCacheSurvivesARestart: a durable cache's shards rebuild their index
// from the log, so keys, versions and counters come back and a put-if
// names a version written before the restart.
func TestCacheSurvivesARestart(t *testing.T) {
	cfg := brokertest.Config(t)
	b := brokertest.Start(t, cfg)
	ctx := brokertest.Context(t, 30*time.Second)
	c := brokertest.Dial(t, b, cfg)
	k := client.Cache{Name: "sessions"}
	if info, err := c.CreateCache(ctx, k, client.CacheSpec{Shards: 2, Durable: true, TTL: time.Hour, History: 3}); err != nil || info.History != 3 {
		t.Fatalf("create with history 3: %+v, %v", info, err)
	}
	put, err := c.Put(ctx, k, "s1", []byte("alice"), client.PutOptions{})
	if err != nil || !put.Applied {
		t.Fatalf("put: %+v, %v", put, err)
	}
	if _, err := c.CounterAdd(ctx, k, "logins", 3); err != nil {
		t.Fatal(err)
	}
	_ = c.Close(ctx)
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	b2 := brokertest.Start(t, cfg)
	c2 := brokertest.Dial(t, b2, cfg)
	if info, err := c2.DescribeCache(ctx, k); err != nil || info.History != 3 {
		t.Fatalf("info after the restart: %+v, %v; want history 3", info, err)
	}
	got, err := c2.Get(ctx, k, "s1")
	if err != nil || !got.Found || string(got.Value) != "alice" || got.Version != put.Version || got.ExpiresMS == 0 {
		t.Fatalf("s1 after the restart: %+v, %v; want alice at %d with the cache's TTL", got, err, put.Version)
	}
	if n, err := c2.CounterGet(ctx, k, "logins"); err != nil || n.Value != 3 {
		t.Fatalf("counter after the restart: %+v, %v", n, err)
	}
	if res, err := c2.Put(ctx, k, "s1", []byte("bob"), client.PutOptions{IfVersion: &put.Version}); err != nil || !res.Applied {
		t.Fatalf("put if the version from before the restart: %+v, %v", res, err)
	}
}

// TestCacheRights: cache.read reads and cannot write, a grant naming keys
// reaches those keys only, a stream right reaches no cache, and a cache is
// neither published to nor subscribed.
func TestCacheRights(t *testing.T) {
	cfg := brokertest.Config(t)
	b := brokertest.Start(t, cfg)
	ctx := brokertest.Context(t, 30*time.Second)
	admin := brokertest.Dial(t, b, cfg)
	k := client.Cache{Name: "conf"}
	if _, err := admin.CreateCache(ctx, k, client.CacheSpec{Shards: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Put(ctx, k, "a", []byte("1"), client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	reader := brokertest.DialOptions(t, b, cfg, client.Options{Token: brokertest.Token(t, cfg, "default", "cache.read:default/conf")})
	if got, err := reader.Get(ctx, k, "a"); err != nil || !got.Found {
		t.Fatalf("get with cache.read: %+v, %v", got, err)
	}
	if _, err := reader.Put(ctx, k, "a", []byte("2"), client.PutOptions{}); !errors.Is(err, wire.ErrForbidden) {
		t.Fatalf("put with cache.read only: %v; want forbidden", err)
	}
	scoped := brokertest.DialOptions(t, b, cfg, client.Options{Token: brokertest.Token(t, cfg, "default", "cache.write:default/conf/user.*", "cache.read:default/conf/user.*")})
	if res, err := scoped.Put(ctx, k, "user.1", []byte("x"), client.PutOptions{}); err != nil || !res.Applied {
		t.Fatalf("put under a key-scoped grant: %+v, %v", res, err)
	}
	if _, err := scoped.Put(ctx, k, "admin", []byte("x"), client.PutOptions{}); !errors.Is(err, wire.ErrForbidden) {
		t.Fatalf("put outside the grant's keys: %v; want forbidden", err)
	}
	if page, err := scoped.ListShard(ctx, k, 0, "user.", "", 10); err != nil || len(page.Entries) != 1 {
		t.Fatalf("list within the grant's prefix: %+v, %v", page, err)
	}
	if _, err := scoped.ListShard(ctx, k, 0, "", "", 10); !errors.Is(err, wire.ErrForbidden) {
		t.Fatalf("list of every key under a key-scoped grant: %v; want forbidden", err)
	}
	if _, err := scoped.Commit(ctx, k, "user.2", nil, []client.CacheOp{{Key: "user.2"}, {Key: "admin", Delete: true}}); !errors.Is(err, wire.ErrForbidden) {
		t.Fatalf("a commit with one key outside the grant: %v; want forbidden", err)
	}
	streamer := brokertest.DialOptions(t, b, cfg, client.Options{Token: brokertest.Token(t, cfg, "default", "stream.publish:default/*", "stream.subscribe:default/*")})
	if _, err := streamer.Get(ctx, k, "a"); !errors.Is(err, wire.ErrForbidden) {
		t.Fatalf("get with stream rights: %v; want forbidden", err)
	}
	if _, err := admin.PublishResult(ctx, client.Stream{Name: "conf"}, [][]byte{[]byte("x")}, client.PublishOptions{Ack: wire.AckPerBatch}); !errors.Is(err, wire.ErrInvalidRequest) {
		t.Fatalf("a plain publish to a cache: %v; want invalid_request", err)
	}
	if _, err := admin.Get(ctx, client.Cache{Name: "never-made"}, "a"); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("get from a cache nobody made: %v; want not_found", err)
	}
}

// sameShardKey and otherShardKey find a key on (or off) key's shard, as a
// client routing by itself would.
func sameShardKey(t *testing.T, info wire.CacheInfo, key string) string {
	return findKey(t, info, key, true)
}

func otherShardKey(t *testing.T, info wire.CacheInfo, key string) string {
	return findKey(t, info, key, false)
}

func findKey(t *testing.T, info wire.CacheInfo, key string, same bool) string {
	t.Helper()
	r := findRouting(t, info)
	want := r.ShardFor([]byte(key), info.Shards)
	for i := range 1000 {
		k := key + "/" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		if (r.ShardFor([]byte(k), info.Shards) == want) == same {
			return k
		}
	}
	t.Fatalf("no key found %v to %s's shard", same, key)
	return ""
}

func findRouting(t *testing.T, info wire.CacheInfo) routing.Routing {
	t.Helper()
	r, err := routing.Parse(info.Routing)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
