package e2e_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/getfelix/felix-go/cache"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/clustertest"
	"github.com/getfelix/felix-go/persistence"
	"github.com/getfelix/felix-go/wire"
)

// compactingCache is a 3-replica cache whose members roll segments small
// and keep no resume window, so its replicas compact as soon as raft's
// compaction point, snapshotCatchUpEntries behind, lets them.
var compactingCache = client.Cache{Namespace: "e2e", Name: "compacting"}

var compactArgs = []string{"--durable-segment-bytes", "65536", "--cache-resume-window-ms", "0"}

const compactHistory = 2

// ackedPuts are the puts a leader acknowledged: each key's last value and
// version, and the key of every version.
type ackedPuts struct {
	mu       sync.Mutex
	last     map[string]uint64
	values   map[string]string
	versions map[uint64]string
}

// putUntil writes puts to keys from writers goroutines, and polls done
// every second, until it says stop.
func putUntil(ctx context.Context, t *testing.T, cc *client.ClusterClient, keys, writers int, done func() bool) *ackedPuts {
	t.Helper()
	var stop atomic.Bool
	more := func() bool { return !stop.Load() }
	a := &ackedPuts{last: map[string]uint64{}, values: map[string]string{}, versions: map[uint64]string{}}
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil && more(); i++ {
				key := fmt.Sprintf("k%02d", (w*7+i)%keys)
				value := fmt.Sprintf("%s-w%d-%d", key, w, i)
				res, err := cc.Put(ctx, compactingCache, key, []byte(value), client.PutOptions{})
				if err != nil || !res.Applied {
					continue // retried: another value goes next
				}
				a.mu.Lock()
				a.versions[res.Version] = key
				if res.Version > a.last[key] {
					a.last[key], a.values[key] = res.Version, value
				}
				a.mu.Unlock()
			}
			errs <- ctx.Err()
		}()
	}
	for !done() && ctx.Err() == nil {
		time.Sleep(time.Second) // polling the members' metrics
	}
	stop.Store(true)
	wg.Wait()
	if err := <-errs; err != nil {
		t.Fatalf("writing: %v", err)
	}
	return a
}

// leaderOfCache waits for the member whose replica leads k's shard, by
// its own view.
func leaderOfCache(ctx context.Context, t *testing.T, c *clustertest.Cluster, k client.Cache) *clustertest.Member {
	t.Helper()
	s := client.Stream{Namespace: k.Namespace, Name: k.Name}
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

// floorAt is member m's floor for k's one shard, read from m (a member
// tells floors only for the shards it leads).
func floorAt(ctx context.Context, t *testing.T, c *clustertest.Cluster, m *clustertest.Member, k client.Cache) uint64 {
	t.Helper()
	var info wire.CacheInfo
	if err := onMember(ctx, c, m, func(cl *client.Client) error {
		var err error
		info, err = cl.DescribeCache(ctx, k)
		return err
	}); err != nil || len(info.Floors) != 1 {
		t.Fatalf("%s's floor for %s: %+v, %v", m.NodeID, k.Name, info, err)
	}
	return info.Floors[0]
}

// TestReplicatedCacheCompactsOnEveryReplica: a 3-replica cache written
// far past raft's compaction point compacts on every member; every key
// reads at its last acknowledged value and version; the leader's floor is
// above the log's start; a watch resumed at a recent version sees every
// acknowledged put after it, none retained, and one resumed below the
// floor starts over retained (resnapshot); and each member's log keeps,
// below its own horizon, exactly the newest History puts of each key.
func TestReplicatedCacheCompactsOnEveryReplica(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{Nodes: 3, LeaseTTL: leaseTTL, ExtraArgs: compactArgs})
	c.WaitReady(t, 3)
	cc := dialAll(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	for {
		info, err := cc.CreateCache(ctx, compactingCache, client.CacheSpec{Shards: 1, Durable: true, Replicas: 3, History: compactHistory})
		if err == nil && info.Replicas == 3 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("create the cache: %+v, %v", info, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	compacted := func() bool {
		for _, m := range c.Members() {
			if c.Metric(t, m, "felix_cache_compactions_total") < 1 {
				return false
			}
		}
		return true
	}
	started := time.Now()
	acked := putUntil(ctx, t, cc, 16, 8, compacted)
	t.Logf("%d puts acknowledged before every member compacted, in %v", len(acked.versions), time.Since(started))
	for key, v := range acked.last {
		got, err := cc.Get(ctx, compactingCache, key)
		if err != nil || !got.Found || string(got.Value) != acked.values[key] || got.Version != v {
			t.Fatalf("%s after compaction: %+v, %v; want %q at %d", key, got, err, acked.values[key], v)
		}
	}
	floor := floorAt(ctx, t, c, leaderOfCache(ctx, t, c, compactingCache), compactingCache)
	if floor == 0 {
		t.Fatal("the leader compacted, and its floor is the log's start")
	}
	// A resume from a recent version: every acknowledged put after it.
	var newest uint64
	for v := range acked.versions {
		newest = max(newest, v)
	}
	from := newest - 100
	w, err := cc.Watch(ctx, compactingCache, client.WatchPrefix("k"), client.WatchFrom{Versions: map[uint32]uint64{0: from}})
	if err != nil {
		t.Fatal(err)
	}
	for v := from; v <= newest; {
		ev, err := w.Next(ctx)
		if err != nil || ev.Retained || ev.Version < v {
			t.Fatalf("resumed from %d: %+v, %v after %d; want changes only, in order", from, ev, err, v)
		}
		for ; v < ev.Version; v++ {
			if key, ok := acked.versions[v]; ok {
				t.Fatalf("resumed from %d: the acknowledged put of %s at %d is missing (next event at %d)", from, key, v, ev.Version)
			}
		}
		v = ev.Version + 1
	}
	_ = w.Close(ctx)
	below, err := cc.Watch(ctx, compactingCache, client.WatchPrefix("k"), client.WatchFrom{Versions: map[uint32]uint64{0: floor - 1}})
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := below.Next(ctx); err != nil || !ev.Retained || !ev.Resnapshot {
		t.Fatalf("resumed below the floor %d: %+v, %v; want a resnapshot", floor, ev, err)
	}
	_ = below.Close(ctx)
	// Every member's log, read after it stops: below its own horizon each
	// key keeps exactly its newest History puts.
	for _, m := range c.Members() {
		m.Stop(t)
		checkCompactedReplica(t, m, acked)
	}
}

// checkCompactedReplica reads member m's log of the cache's shard: it was
// compacted, and below its horizon each key holds exactly compactHistory
// records, with no acknowledged put of the key missing after the oldest
// of them. (A put whose answer was lost may be in the log too: it is a
// change like any other, so the check is on acknowledged ones only.)
func checkCompactedReplica(t *testing.T, m *clustertest.Member, acked *ackedPuts) {
	t.Helper()
	dir := filepath.Join(m.DataDir, "streams", "default", compactingCache.Namespace, compactingCache.Name, "0")
	l, err := persistence.Open(dir, persistence.Config{})
	if err != nil {
		t.Fatalf("%s: open its log: %v", m.NodeID, err)
	}
	defer l.Close()
	horizon := l.CompactedBelow()
	if horizon == 0 {
		t.Fatalf("%s: its log was never compacted", m.NodeID)
	}
	kept := map[string][]uint64{}
	for next := l.StartOffset(); next < horizon; {
		page, err := l.Read(next, 0, 0)
		if err != nil {
			t.Fatalf("%s: read from %d: %v", m.NodeID, next, err)
		}
		for _, rec := range page.Records {
			if rec.Offset >= horizon {
				break
			}
			r, err := cache.DecodeRecord(rec.Value)
			if err != nil {
				t.Fatalf("%s: record %d: %v", m.NodeID, rec.Offset, err)
			}
			kept[r.Key] = append(kept[r.Key], rec.Offset)
		}
		next = page.Next
	}
	for key, offs := range kept {
		if len(offs) != compactHistory {
			t.Fatalf("%s: below its horizon %d, %s keeps %v; want its newest %d", m.NodeID, horizon, key, offs, compactHistory)
		}
		for v, k := range acked.versions {
			if k == key && v > offs[0] && v < horizon && !slices.Contains(offs, v) {
				t.Fatalf("%s: below its horizon %d, %s keeps %v, not its acknowledged put at %d", m.NodeID, horizon, key, offs, v)
			}
		}
	}
	t.Logf("%s: compacted below %d, %d keys kept there", m.NodeID, horizon, len(kept))
}

// TestReplicatedCacheFollowerCatchesUpOnCompactedSegments: a follower
// SIGKILLed before its cache's replicas compacted, and restarted after,
// is behind the leader's compaction point: it installs a copy of the
// leader's compacted segments, and once it leads it answers every key at
// its last acknowledged value and version, with a floor at least the old
// leader's (the horizon came with the segments), and a put-if naming an
// acknowledged version applies.
func TestReplicatedCacheFollowerCatchesUpOnCompactedSegments(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{Nodes: 3, LeaseTTL: leaseTTL, ExtraArgs: compactArgs})
	c.WaitReady(t, 3)
	cc := dialAll(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	for {
		info, err := cc.CreateCache(ctx, compactingCache, client.CacheSpec{Shards: 1, Durable: true, Replicas: 3, History: compactHistory})
		if err == nil && info.Replicas == 3 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("create the cache: %+v, %v", info, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	putUntilAckedIn(ctx, t, cc, compactingCache, "k00")
	leader := leaderOfCache(ctx, t, c, compactingCache)
	var follower *clustertest.Member
	for _, m := range c.Members() {
		if m != leader && follower == nil {
			follower = m
		}
	}
	follower.Kill()
	acked := putUntil(ctx, t, cc, 16, 8, func() bool {
		return c.Metric(t, leader, "felix_cache_compactions_total") >= 1
	})
	leaderFloor := floorAt(ctx, t, c, leader, compactingCache)
	if leaderFloor == 0 {
		t.Fatal("the leader compacted, and its floor is the log's start")
	}
	follower.Restart(t)
	for c.Metric(t, follower, "felix_replication_snapshots_installed_total") < 1 {
		if ctx.Err() != nil {
			t.Fatal("the restarted follower never installed the leader's segments")
		}
		time.Sleep(200 * time.Millisecond) // polling its metrics
	}
	// Make the follower the leader: kill whoever else leads until it
	// does, each restarted once another leads (two of three stay up).
	for {
		l := leaderOfCache(ctx, t, c, compactingCache)
		if l == follower {
			break
		}
		l.Kill()
		leaderOfCache(ctx, t, c, compactingCache) // another, l being down
		l.Restart(t)
	}
	for key, v := range acked.last {
		got, err := cc.Get(ctx, compactingCache, key)
		if err != nil || !got.Found || string(got.Value) != acked.values[key] || got.Version != v {
			t.Fatalf("%s on the caught-up follower: %+v, %v; want %q at %d", key, got, err, acked.values[key], v)
		}
	}
	if floor := floorAt(ctx, t, c, follower, compactingCache); floor < leaderFloor {
		t.Fatalf("the caught-up follower's floor is %d, the old leader's %d", floor, leaderFloor)
	}
	v := acked.last["k01"]
	if res, err := cc.Put(ctx, compactingCache, "k01", []byte("swapped"), client.PutOptions{IfVersion: &v}); err != nil || !res.Applied {
		t.Fatalf("put-if on the version acknowledged before the catch-up: %+v, %v", res, err)
	}
}

// putUntilAckedIn puts key's value into k until a leader acknowledges it.
func putUntilAckedIn(ctx context.Context, t *testing.T, cc *client.ClusterClient, k client.Cache, key string) uint64 {
	t.Helper()
	for {
		res, err := cc.Put(ctx, k, key, []byte("v-"+key), client.PutOptions{})
		if err == nil && res.Applied {
			return res.Version
		}
		if ctx.Err() != nil {
			t.Fatalf("put %s: %+v, %v", key, res, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestReplicatedCacheLeaderKilledInsideACompaction: the leader of a
// compacting 3-replica cache is SIGKILLed while its compacted copies
// (<base>.log.compact) are on disk, between a compaction's prepare and
// the end of its commit (the test watches the leader's log directory for
// them). No acknowledged put is lost: the new leader answers every key at
// its last acknowledged version (or a later one whose answer the kill
// took), and so does the old leader once restarted and leading again.
func TestReplicatedCacheLeaderKilledInsideACompaction(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{Nodes: 3, LeaseTTL: leaseTTL, ExtraArgs: compactArgs})
	c.WaitReady(t, 3)
	cc := dialAll(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	for {
		info, err := cc.CreateCache(ctx, compactingCache, client.CacheSpec{Shards: 1, Durable: true, Replicas: 3, History: compactHistory})
		if err == nil && info.Replicas == 3 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("create the cache: %+v, %v", info, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	putUntilAckedIn(ctx, t, cc, compactingCache, "k00")
	leader := leaderOfCache(ctx, t, c, compactingCache)
	dir := filepath.Join(leader.DataDir, "streams", "default", compactingCache.Namespace, compactingCache.Name, "0")
	caught := false
	acked := putUntil(ctx, t, cc, 16, 8, func() bool {
		// Watch for a compaction's copies, and kill the leader the moment
		// one is there.
		for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); {
			if compactCopies(dir) > 0 {
				leader.Kill()
				caught = compactCopies(dir) > 0
				return true
			}
			time.Sleep(time.Millisecond) // polling the directory
		}
		return true
	})
	if !caught {
		t.Fatal("the leader was not killed with a compaction's copies on its disk")
	}
	check := func(what string) {
		t.Helper()
		for key, v := range acked.last {
			got, err := cc.Get(ctx, compactingCache, key)
			for err != nil && ctx.Err() == nil { // while a leader is elected
				time.Sleep(50 * time.Millisecond)
				got, err = cc.Get(ctx, compactingCache, key)
			}
			// A later version is a put whose answer the kill took: it
			// applied, so it is the key's value now.
			if err != nil || !got.Found || got.Version < v || (got.Version == v && string(got.Value) != acked.values[key]) {
				t.Fatalf("%s: %s is %+v, %v; want its acknowledged put %q at %d or a later one", what, key, got, err, acked.values[key], v)
			}
		}
	}
	check("after the kill")
	// (Its open removes the copies; it may start compacting again at
	// once, so a copy seen now proves nothing either way.)
	leader.Restart(t)
	for {
		l := leaderOfCache(ctx, t, c, compactingCache)
		if l == leader {
			break
		}
		l.Kill()
		leaderOfCache(ctx, t, c, compactingCache)
		l.Restart(t)
	}
	check("leading again after the restart")
}

// compactCopies counts the compacted copies in a log directory.
func compactCopies(dir string) int {
	n, _ := filepath.Glob(filepath.Join(dir, "*.log.compact"))
	return len(n)
}
