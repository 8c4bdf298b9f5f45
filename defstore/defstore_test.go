package defstore

import (
	"testing"
	"time"

	"github.com/getfelix/felix-go/streams"
	"github.com/getfelix/felix-go/wire"
)

// A cache's definition survives both stores, and a stream's stays a
// stream: a definition read back without its cache settings would serve
// the cache's records as a plain stream's.
func TestCacheDefinitionsRoundTripBothStores(t *testing.T) {
	for _, d := range []streams.Def{
		{Scope: wire.Scope{Tenant: "t", Namespace: "n", Stream: "c"}, Shards: 2, Durable: true, Cache: &streams.CacheSettings{TTL: 90 * time.Second, History: 5}},
		{Scope: wire.Scope{Tenant: "t", Namespace: "n", Stream: "plain"}, Shards: 1, Durable: true},
	} {
		m, err := FromMeta(toMeta(d))
		if err != nil || (m.Cache == nil) != (d.Cache == nil) || (d.Cache != nil && *m.Cache != *d.Cache) {
			t.Fatalf("%s through metadata: cache %+v (%v); want %+v", d.Scope, m.Cache, err, d.Cache)
		}
		c, err := FromCluster(toCluster(d))
		if err != nil || !c.SameSettings(d) {
			t.Fatalf("%s through etcd: %+v (%v); want %+v", d.Scope, c, err, d)
		}
	}
	// A definition stored before history existed opens as one change per
	// key, from either store.
	oldMeta := toMeta(streams.Def{Shards: 1, Cache: &streams.CacheSettings{}})
	oldCluster := toCluster(streams.Def{Shards: 1, Cache: &streams.CacheSettings{}})
	if oldMeta.Cache.History != 0 || oldCluster.Cache.History != 0 {
		t.Fatalf("a history of 0 is stored as %d and %d; want it absent", oldMeta.Cache.History, oldCluster.Cache.History)
	}
	m, _ := FromMeta(oldMeta)
	c, _ := FromCluster(oldCluster)
	if m.Cache.History != 1 || c.Cache.History != 1 {
		t.Fatalf("an old definition opens with history %d (bbolt) and %d (etcd); want 1", m.Cache.History, c.Cache.History)
	}
	cacheDef := streams.Def{Shards: 1, Cache: &streams.CacheSettings{TTL: time.Second}}
	if cacheDef.SameSettings(streams.Def{Shards: 1}) || cacheDef.SameSettings(streams.Def{Shards: 1, Cache: &streams.CacheSettings{}}) {
		t.Fatal("a cache and a stream, or caches of other TTLs, compare as the same spec")
	}
}
