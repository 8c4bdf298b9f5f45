package broker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/wire"
)

// change is a watch event as the tests compare them.
type change struct {
	kind    wire.WatchKind
	key     string
	value   string
	version uint64
}

func (c change) String() string {
	return fmt.Sprintf("@%d %s %s=%q", c.version, c.kind, c.key, c.value)
}

func nextChange(t *testing.T, ctx context.Context, w *client.Watcher) (client.WatchEvent, change) {
	t.Helper()
	ev, err := w.Next(ctx)
	if err != nil {
		t.Fatalf("watch next: %v", err)
	}
	return ev, change{ev.Kind, ev.Key, string(ev.Value), ev.Version}
}

// TestCacheWatchOverQUIC: a watch from now sees puts, deletes, a delete-if
// that held (not one that failed), a commit's changes then its event, and
// a TTL expiry, each with the version its write answered, in version
// order; a key watch beside it sees its key only.
func TestCacheWatchOverQUIC(t *testing.T) {
	cfg := brokertest.Config(t)
	b := brokertest.Start(t, cfg)
	ctx := brokertest.Context(t, 30*time.Second)
	c := brokertest.Dial(t, b, cfg)
	k := client.Cache{Name: "users"}
	if _, err := c.CreateCache(ctx, k, client.CacheSpec{Shards: 1, Durable: true}); err != nil {
		t.Fatal(err)
	}
	all, err := c.Watch(ctx, k, client.WatchPrefix("user/"), client.WatchFrom{})
	if err != nil {
		t.Fatal(err)
	}
	defer all.Close(ctx)
	one, err := c.Watch(ctx, k, client.WatchKey("user/1"), client.WatchFrom{})
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close(ctx)

	var want []change
	put := func(key, value string, o client.PutOptions) uint64 {
		res, err := c.Put(ctx, k, key, []byte(value), o)
		if err != nil || !res.Applied {
			t.Fatalf("put %s: %+v, %v", key, res, err)
		}
		want = append(want, change{wire.WatchPut, key, value, res.Version})
		return res.Version
	}
	v1 := put("user/1", "ann", client.PutOptions{})
	if _, err := c.Put(ctx, k, "other", []byte("x"), client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	put("user/2", "bob", client.PutOptions{})
	stale := v1 + 100
	if res, err := c.Delete(ctx, k, "user/1", &stale); err != nil || res.Applied {
		t.Fatalf("delete-if at a wrong version: %+v, %v; want refused", res, err)
	}
	del, err := c.Delete(ctx, k, "user/1", &v1)
	if err != nil || !del.Applied {
		t.Fatalf("delete-if: %+v, %v", del, err)
	}
	want = append(want, change{wire.WatchDelete, "user/1", "", del.Version})
	commit, err := c.Commit(ctx, k, "user/3", []byte("signed-up"), []client.CacheOp{{Key: "user/3", Value: []byte("cy")}, {Key: "user/2", Delete: true}})
	if err != nil || !commit.Applied {
		t.Fatalf("commit: %+v, %v", commit, err)
	}
	want = append(want,
		change{wire.WatchPut, "user/3", "cy", commit.Version},
		change{wire.WatchDelete, "user/2", "", commit.Version},
		change{wire.WatchCommitEvent, "", "signed-up", commit.Version})
	short := put("user/4", "dee", client.PutOptions{TTL: 50 * time.Millisecond})

	for i, w := range want {
		ev, got := nextChange(t, ctx, all)
		if got != w || ev.Commit != (w.version == commit.Version) {
			t.Fatalf("prefix watch event %d: %v (commit %v); want %v", i, got, ev.Commit, w)
		}
	}
	// The expiry comes on the shard's next round, as an expire of the
	// version that expired, at a version of its own.
	ev, got := nextChange(t, ctx, all)
	if got.kind != wire.WatchExpire || got.key != "user/4" || got.version <= short {
		t.Fatalf("after user/4's TTL: %v; want its expire after %d", got, short)
	}
	_ = ev
	for _, w := range []change{want[0], want[2]} {
		if _, got := nextChange(t, ctx, one); got != w {
			t.Fatalf("key watch: %v; want %v", got, w)
		}
	}
	if n := brokertest.Value(t, b, "felix_cache_watches"); n != 2 {
		t.Fatalf("felix_cache_watches = %v; want 2", n)
	}
	if n := brokertest.Value(t, b, "felix_cache_watch_events_total"); n < float64(len(want)+3) {
		t.Fatalf("felix_cache_watch_events_total = %v; want at least %d", n, len(want)+3)
	}
}

// TestCacheWatchRetainedUnderRacingWriters: a retained prefix watch
// started while writers race gets every key's value first, then every
// change after it on each shard: no change twice, none missing (what the
// watch ends up holding is what the cache holds).
func TestCacheWatchRetainedUnderRacingWriters(t *testing.T) {
	cfg := brokertest.Config(t)
	b := brokertest.Start(t, cfg)
	ctx := brokertest.Context(t, 60*time.Second)
	c := brokertest.Dial(t, b, cfg)
	k := client.Cache{Name: "race"}
	if _, err := c.CreateCache(ctx, k, client.CacheSpec{Shards: 4}); err != nil {
		t.Fatal(err)
	}
	const writers, keys, rounds = 4, 8, 40
	var wg sync.WaitGroup
	started := make(chan struct{})
	var once sync.Once
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				if r == rounds/4 {
					once.Do(func() { close(started) })
				}
				key := fmt.Sprintf("k/%d", (w*keys+r)%(writers*keys))
				if r%5 == 4 {
					_, _ = c.Delete(ctx, k, key, nil)
					continue
				}
				if _, err := c.Put(ctx, k, key, fmt.Appendf(nil, "w%d-r%d", w, r), client.PutOptions{}); err != nil {
					t.Errorf("put %s: %v", key, err)
					return
				}
			}
		}()
	}
	<-started
	w, err := c.Watch(ctx, k, client.WatchPrefix("k/"), client.WatchFrom{Retained: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	wg.Wait()
	// Markers written last, enough of them to land on every shard: once
	// the watch has them all, it has every change before them.
	markers := map[string]bool{}
	for n := range 64 {
		key := fmt.Sprintf("k/end-%d", n)
		if _, err := c.Put(ctx, k, key, []byte("end"), client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		markers[key] = true
	}
	held := map[string]string{}
	last := map[uint32]uint64{}
	changed := map[uint32]bool{}
	seenMarkers := 0
	for seenMarkers < len(markers) {
		ev, err := w.Next(ctx)
		if err != nil {
			t.Fatalf("watch: %v", err)
		}
		switch {
		case ev.Kind == wire.WatchSnapshotEnd:
			if changed[ev.Shard] {
				t.Fatalf("shard %d: its snapshot ended after its changes began", ev.Shard)
			}
			continue
		case ev.Retained:
			if changed[ev.Shard] {
				t.Fatalf("shard %d: a retained event %s after its changes began", ev.Shard, ev.Key)
			}
		case changed[ev.Shard] && ev.Version <= last[ev.Shard]:
			t.Fatalf("shard %d: change at %d after %d: repeated or out of order", ev.Shard, ev.Version, last[ev.Shard])
		default:
			changed[ev.Shard], last[ev.Shard] = true, ev.Version
		}
		if ev.Kind == wire.WatchDelete {
			delete(held, ev.Key)
		} else {
			held[ev.Key] = string(ev.Value)
		}
		if _, ok := markers[ev.Key]; ok && !ev.Retained {
			seenMarkers++
		}
	}
	for shard := range uint32(4) {
		for after := ""; ; {
			page, err := c.ListShard(ctx, k, shard, "k/", after, 100)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range page.Entries {
				if held[e.Key] != string(e.Value) {
					t.Errorf("%s: the watch holds %q, the cache %q", e.Key, held[e.Key], e.Value)
				}
				delete(held, e.Key)
			}
			if after = page.Next; after == "" {
				break
			}
		}
	}
	for key := range held {
		if _, marker := markers[key]; !marker {
			t.Errorf("the watch holds %s, which the cache does not", key)
		}
	}
}

// TestCacheWatchResumesAfterARestart: a watch of a durable cache ended
// by a broker restart, resumed from its Resume versions, gets exactly
// the changes it had not seen, those from before the restart first.
func TestCacheWatchResumesAfterARestart(t *testing.T) {
	cfg := brokertest.Config(t)
	b := brokertest.Start(t, cfg)
	ctx := brokertest.Context(t, 60*time.Second)
	c := brokertest.Dial(t, b, cfg)
	k := client.Cache{Name: "durable"}
	if _, err := c.CreateCache(ctx, k, client.CacheSpec{Shards: 2, Durable: true}); err != nil {
		t.Fatal(err)
	}
	w, err := c.Watch(ctx, k, client.WatchPrefix(""), client.WatchFrom{})
	if err != nil {
		t.Fatal(err)
	}
	var wrote []string
	write := func(c *client.Client, key, value string) {
		if _, err := c.Put(ctx, k, key, []byte(value), client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		wrote = append(wrote, key+"="+value)
	}
	for i := range 6 {
		write(c, fmt.Sprintf("k%d", i), "before")
	}
	for range 3 {
		nextChange(t, ctx, w)
	}
	resume := w.Resume()
	seen := 3
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		write(c, fmt.Sprintf("k%d", i), "unseen")
	}
	_ = c.Close(ctx)
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	b2 := brokertest.Start(t, cfg)
	c2 := brokertest.Dial(t, b2, cfg)
	w2, err := c2.Watch(ctx, k, client.WatchPrefix(""), client.WatchFrom{Versions: resume})
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close(ctx)
	for i := range 2 {
		write(c2, fmt.Sprintf("k%d", i), "after")
	}
	got := map[string]int{}
	for range len(wrote) - seen {
		ev, _ := nextChange(t, ctx, w2)
		if ev.Retained {
			t.Fatalf("resumed watch got a retained event %+v; want changes only", ev)
		}
		got[ev.Key+"="+string(ev.Value)]++
	}
	// The first three seen before the close, in some shard order; every
	// other write exactly once.
	missing := 0
	for _, kv := range wrote {
		switch got[kv] {
		case 0:
			missing++
		case 1:
		default:
			t.Errorf("%s delivered %d times", kv, got[kv])
		}
	}
	if missing != seen {
		t.Fatalf("resumed watch got %v; want every write but the %d seen before the restart", got, seen)
	}
}

// TestSlowCacheWatcherLagsAlone: a watcher that stops reading ends lagged
// with the version to resume from, while the writer goes on unrefused and
// a fast watcher gets every change; resumed, the slow one misses nothing.
func TestSlowCacheWatcherLagsAlone(t *testing.T) {
	cfg := brokertest.Config(t)
	// A connection's egress share small enough that a stalled reader's
	// bytes back up into its watch's queue within a few hundred changes.
	cfg.SubscriberEgressMaxBytes = 1 << 20
	b := brokertest.Start(t, cfg)
	ctx := brokertest.Context(t, 60*time.Second)
	c := brokertest.Dial(t, b, cfg)
	k := client.Cache{Name: "firehose"}
	if _, err := c.CreateCache(ctx, k, client.CacheSpec{Shards: 1}); err != nil {
		t.Fatal(err)
	}
	// No client-side buffer to speak of: what the slow watcher does not
	// read stays in QUIC's window, then in its queue at the broker.
	slowConn := brokertest.DialOptions(t, b, cfg, client.Options{SubscriptionBuffer: 1})
	slow, err := slowConn.Watch(ctx, k, client.WatchKey("hot"), client.WatchFrom{QueueCapacity: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close(ctx)
	fast, err := c.Watch(ctx, k, client.WatchKey("hot"), client.WatchFrom{})
	if err != nil {
		t.Fatal(err)
	}
	defer fast.Close(ctx)

	// 600 changes of 8 KiB: past what QUIC's window and the egress share
	// hold for a reader that stopped, within the shard's change history
	// (8 MiB), so the resume is a replay, not a resnapshot.
	value := bytes.Repeat([]byte("v"), 8<<10)
	const writes = 600
	fastGot := make(chan error, 1)
	go func() {
		var prev uint64
		for i := range writes {
			ev, err := fast.Next(ctx)
			if err == nil && i > 0 && ev.Version <= prev {
				err = fmt.Errorf("version %d after %d", ev.Version, prev)
			}
			if err != nil {
				fastGot <- fmt.Errorf("fast watcher's event %d: %w", i, err)
				return
			}
			prev = ev.Version
		}
		fastGot <- nil
	}()
	versions := make([]uint64, 0, writes)
	for i := range writes {
		res, err := c.Put(ctx, k, "hot", append(fmt.Appendf(nil, "%04d", i), value...), client.PutOptions{})
		if err != nil || !res.Applied {
			t.Fatalf("put %d while a watcher is stalled: %+v, %v", i, res, err)
		}
		versions = append(versions, res.Version)
	}
	if err := <-fastGot; err != nil {
		t.Fatal(err)
	}

	// The slow watcher reads what reached it, then learns it lagged.
	var lag *client.WatchLaggedError
	read := map[uint64]bool{}
	for len(read) < writes {
		ev, err := slow.Next(ctx)
		if errors.As(err, &lag) {
			break
		}
		if err != nil {
			t.Fatalf("slow watcher: %v; want *WatchLaggedError", err)
		}
		read[ev.Version] = true
	}
	if lag == nil || lag.Shard != 0 {
		t.Fatalf("lag %+v after %d of %d events", lag, len(read), writes)
	}
	if brokertest.Value(t, b, "felix_cache_watches_lagged_total") != 1 {
		t.Fatalf("felix_cache_watches_lagged_total = %v; want 1", brokertest.Value(t, b, "felix_cache_watches_lagged_total"))
	}
	again, err := slowConn.Watch(ctx, k, client.WatchKey("hot"), client.WatchFrom{Versions: map[uint32]uint64{0: lag.ResumeFrom}})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close(ctx)
	for len(read) < writes {
		ev, _ := nextChange(t, ctx, again)
		if ev.Retained {
			t.Fatalf("resumed from %d: a resnapshot (%+v); want the changes replayed", lag.ResumeFrom, ev)
		}
		if read[ev.Version] {
			t.Fatalf("resumed from %d, got version %d again", lag.ResumeFrom, ev.Version)
		}
		read[ev.Version] = true
	}
	for _, v := range versions {
		if !read[v] {
			t.Fatalf("version %d never reached the slow watcher", v)
		}
	}
}

// TestCacheWatchRights: cache.read on a key watches that key and nothing
// wider; a prefix grant watches within its prefix only.
func TestCacheWatchRights(t *testing.T) {
	cfg := brokertest.Config(t)
	b := brokertest.Start(t, cfg)
	ctx := brokertest.Context(t, 30*time.Second)
	admin := brokertest.Dial(t, b, cfg)
	k := client.Cache{Name: "conf"}
	if _, err := admin.CreateCache(ctx, k, client.CacheSpec{Shards: 2}); err != nil {
		t.Fatal(err)
	}
	keyOnly := brokertest.DialOptions(t, b, cfg, client.Options{Token: brokertest.Token(t, cfg, "default", "cache.read:default/conf/user.1")})
	w, err := keyOnly.Watch(ctx, k, client.WatchKey("user.1"), client.WatchFrom{Retained: true})
	if err != nil {
		t.Fatalf("watch the granted key: %v", err)
	}
	_ = w.Close(ctx)
	for _, target := range []client.WatchTarget{client.WatchPrefix("user.1"), client.WatchPrefix("user."), client.WatchPrefix(""), client.WatchKey("user.2")} {
		if _, err := keyOnly.Watch(ctx, k, target, client.WatchFrom{}); !errors.Is(err, wire.ErrForbidden) {
			t.Fatalf("watch %+v under a grant of user.1: %v; want forbidden", target, err)
		}
	}
	prefix := brokertest.DialOptions(t, b, cfg, client.Options{Token: brokertest.Token(t, cfg, "default", "cache.read:default/conf/user.*")})
	w, err = prefix.Watch(ctx, k, client.WatchPrefix("user."), client.WatchFrom{})
	if err != nil {
		t.Fatalf("watch the granted prefix: %v", err)
	}
	_ = w.Close(ctx)
	if _, err := prefix.Watch(ctx, k, client.WatchPrefix("us"), client.WatchFrom{}); !errors.Is(err, wire.ErrForbidden) {
		t.Fatalf("watch a wider prefix: %v; want forbidden", err)
	}
	writer := brokertest.DialOptions(t, b, cfg, client.Options{Token: brokertest.Token(t, cfg, "default", "cache.write:default/conf")})
	if _, err := writer.Watch(ctx, k, client.WatchKey("user.1"), client.WatchFrom{}); !errors.Is(err, wire.ErrForbidden) {
		t.Fatalf("watch with cache.write only: %v; want forbidden", err)
	}
}
