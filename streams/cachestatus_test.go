package streams

import (
	"testing"

	"github.com/getfelix/felix-go/cache"
)

// TestCacheStatusCountsWritesReadsAndKeys: a cache shard's status counts
// what its index holds, the records it applied and the reads it
// answered; a read refused does not count.
func TestCacheStatusCountsWritesReadsAndKeys(t *testing.T) {
	ts := spawnCacheShard(t, ShardConfig{}, nil, CacheSettings{})
	status := func() *CacheStatusResult {
		t.Helper()
		res, err := ts.sys.Root.RequestFuture(ts.ref.PID, &CacheStatus{}, eventTimeout).Result()
		if err != nil {
			t.Fatal(err)
		}
		st := res.(*CacheStatusResult)
		if st.Err != nil {
			t.Fatalf("status: %v", st.Err)
		}
		return st
	}
	if st := status(); st.Keys != 0 || st.Writes != 0 || st.Reads != 0 || st.HasApplied || st.Compactions != 0 || st.LastCompaction != nil {
		t.Fatalf("a new shard's status %+v; want all zero", st)
	}
	ts.applied(t, put("a", "1"), 0)
	ts.applied(t, put("b", "2"), 1)
	ts.applied(t, CacheOp{Record: cache.Record{Kind: cache.KindDelete, Key: "a"}}, 2)
	ts.read(t, &CacheGet{Key: "a"})
	ts.read(t, &CacheGet{Key: "b"})
	ts.read(t, &CacheList{Limit: 10})
	st := status()
	if st.Keys != 1 || st.Tombstones != 1 || st.Writes != 3 || st.Reads != 3 || !st.HasApplied || st.Applied != 2 || st.Watchers != 0 {
		t.Errorf("status after 3 writes and 3 reads: %+v; want 1 key, 1 tombstone, 3 writes, 3 reads, applied 2, no watchers", st)
	}
	if st.LogRecords != 3 {
		t.Errorf("log records %d, want the 3 applied", st.LogRecords)
	}
}
