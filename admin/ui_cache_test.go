package admin_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/admin"
	"github.com/getfelix/felix-go/broker"
	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/config"
)

// Tests of GET /debug/cache, the cache page's and the caches list's
// document, and of a cache's place in the tree.

func cachePath(tenant, name string) string {
	return "/debug/cache?" + url.Values{"tenant": {tenant}, "ns": {"default"}, "cache": {name}}.Encode()
}

// makeCache creates the cache name of tenant (2 shards; durable or not)
// and returns a client of that tenant.
func makeCache(t *testing.T, ctx context.Context, b *broker.Broker, cfg config.Config, tenant, name string, durable bool) *client.Client {
	t.Helper()
	c := brokertest.DialOptions(t, b, cfg, client.Options{Tenant: tenant})
	if _, err := c.CreateCache(ctx, client.Cache{Name: name}, client.CacheSpec{Shards: 2, Durable: durable}); err != nil {
		t.Fatalf("create cache %s/%s: %v", tenant, name, err)
	}
	return c
}

// TestUICacheRouteAuth: /debug/cache is checked as /debug/stream is: 401
// without a token, 403 with a token of cache rights only; bad names and
// shard numbers are 400; a cache that does not exist is 404, and so is a
// stream's name (a stream is not a cache), and looking makes neither.
func TestUICacheRouteAuth(t *testing.T) {
	b, cfg := adminBroker(t, "")
	ctx := brokertest.Context(t, 30*time.Second)
	makeCache(t, ctx, b, cfg, "default", "sessions", false)
	view := brokertest.Token(t, cfg, "default", "node.view:*")
	if status, body := adminGet(t, b, "", cachePath("default", "sessions"), nil); status != http.StatusUnauthorized {
		t.Errorf("without a token: %d %s; want 401", status, body)
	}
	cacheOnly := brokertest.Token(t, cfg, "default", "cache.read:*/*", "stream.manage:*/*")
	if status, body := adminGet(t, b, cacheOnly, cachePath("default", "sessions"), nil); status != http.StatusForbidden {
		t.Errorf("with a cache.read token: %d %s; want 403", status, body)
	}
	for _, path := range []string{"/debug/cache", "/debug/cache?tenant=default&cache=a/b", "/debug/cache?tenant=bad:name&cache=c", cachePath("default", "sessions") + "&from=x"} {
		if status, body := adminGet(t, b, view, path, nil); status != http.StatusBadRequest {
			t.Errorf("GET %s: %d %s; want 400", path, status, body)
		}
	}
	if status, body := adminGet(t, b, view, cachePath("default", "ghost"), nil); status != http.StatusNotFound {
		t.Errorf("a cache that does not exist: %d %s; want 404", status, body)
	}
	c := brokertest.Dial(t, b, cfg)
	if _, err := c.CreateStream(ctx, client.Stream{Name: "orders"}, client.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	if status, body := adminGet(t, b, view, cachePath("default", "orders"), nil); status != http.StatusNotFound || !strings.Contains(body, "stream") {
		t.Errorf("a stream's name: %d %s; want 404 saying it is a stream", status, body)
	}
	list, err := c.ListStreams(ctx, "default")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list {
		if s.Stream.Name == "ghost" {
			t.Errorf("looking at cache ghost made it: %+v", s)
		}
	}
	var v admin.CacheView
	if status, body := adminGet(t, b, view, cachePath("default", "sessions"), &v); status != http.StatusOK || v.Cache != "default/default/sessions" {
		t.Errorf("the cache: %d %s; want 200 and its document", status, body)
	}
}

// TestUICacheRouteTenantKey: a node.view token of a key restricted to
// tenant acme reads acme's cache and is refused 403 on globex's; the
// operator's token (the broker's own key) reads both.
func TestUICacheRouteTenantKey(t *testing.T) {
	keys, signer := tenantKey(t, "acme")
	cfg := brokertest.Config(t)
	cfg.Admin = "127.0.0.1:0"
	cfg.AuthKeys = keys
	b := brokertest.Start(t, cfg)
	ctx := brokertest.Context(t, 30*time.Second)
	for _, tenant := range []string{"acme", "globex"} {
		makeCache(t, ctx, b, cfg, tenant, "sessions", false)
	}
	view := "Bearer " + mint(t, signer, "acme", "node.view:*")
	if code, body := adminDo(t, b, http.MethodGet, cachePath("globex", "sessions"), "", "Authorization", view); code != http.StatusForbidden || strings.Contains(body, "shard_list") {
		t.Errorf("globex's cache with acme's key's node.view token = %d %.200s; want 403", code, body)
	}
	if code, body := adminDo(t, b, http.MethodGet, cachePath("acme", "sessions"), "", "Authorization", view); code != http.StatusOK || !strings.Contains(body, `"cache":"acme/default/sessions"`) {
		t.Errorf("acme's cache with acme's key's node.view token = %d %.200s; want 200 and the cache", code, body)
	}
	operator := "Bearer " + brokertest.Token(t, cfg, "default", "node.view:*")
	for _, tenant := range []string{"acme", "globex"} {
		if code, body := adminDo(t, b, http.MethodGet, cachePath(tenant, "sessions"), "", "Authorization", operator); code != http.StatusOK {
			t.Errorf("%s's cache with the broker's own key's node.view token = %d %.200s; want 200", tenant, code, body)
		}
	}
}

// TestUICacheRoute: a durable cache's document counts its shards' keys,
// the writes applied and the reads answered, and its watches, each
// listed under its shard; in the tree the cache's shards and watches are
// labelled cache (not stream), a watch with what it covers.
func TestUICacheRoute(t *testing.T) {
	b, cfg := adminBroker(t, "none")
	ctx := brokertest.Context(t, 30*time.Second)
	c := makeCache(t, ctx, b, cfg, "default", "sessions", true)
	k := client.Cache{Name: "sessions"}
	const keys = 20
	for i := range keys {
		if _, err := c.Put(ctx, k, fmt.Sprintf("user/%d", i), []byte("v"), client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		if _, err := c.Get(ctx, k, fmt.Sprintf("user/%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	w, err := c.Watch(ctx, k, client.WatchPrefix("user/"), client.WatchFrom{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close(context.Background()) })

	var v admin.CacheView
	if status, body := adminGet(t, b, "", cachePath("default", "sessions"), &v); status != http.StatusOK {
		t.Fatalf("GET the cache: %d %s", status, body)
	}
	if v.Shards != 2 || !v.Durable || len(v.ShardList) != 2 || v.Keys != keys || v.Writes != keys || v.Reads != 5 || v.Watches != 2 {
		t.Fatalf("cache document %+v; want 2 durable shards, %d keys and writes, 5 reads, 2 watches (a prefix watch has one per shard)", v, keys)
	}
	for _, s := range v.ShardList {
		if s.Status == nil || s.Actor == "" || !s.Here || s.Status.Watchers != 1 || len(s.WatchList) != 1 || s.WatchList[0].Watch != "prefix user/" {
			t.Fatalf("shard %d: %+v (status %+v); want its actor, status and one prefix watch", s.Shard, s, s.Status)
		}
		if s.Status.Applied == nil || s.Status.LogRecords != s.Status.Keys {
			t.Errorf("shard %d status %+v; want an applied offset and one log record per key", s.Shard, s.Status)
		}
	}

	var shards, watches int
	for _, a := range b.Actors() {
		if a.Labels["cache"] != "default/default/sessions" {
			continue
		}
		if _, ok := a.Labels["stream"]; ok {
			t.Errorf("%s is labelled both cache and stream: %v", a.Path, a.Labels)
		}
		switch actors.Kind(a.Kind) {
		case actors.KindShard:
			shards++
		case actors.KindFeeder:
			watches++
			if a.Labels["watch"] != "prefix user/" {
				t.Errorf("watch %s labelled %v; want watch=prefix user/", a.Path, a.Labels)
			}
		}
	}
	if shards != 2 || watches != 2 {
		t.Errorf("the tree has %d shards and %d watches labelled cache; want 2 and 2", shards, watches)
	}
}
