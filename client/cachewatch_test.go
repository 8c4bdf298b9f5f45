package client_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/wire"
)

// pushPastHistory writes more changes to other keys than a shard keeps
// for resumes (4,096), so a resume from before them starts over retained.
func pushPastHistory(ctx context.Context, t *testing.T, c *client.Client, k client.Cache) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			for i := range 4200 / 8 {
				if _, err := c.Put(ctx, k, fmt.Sprintf("fill/%d/%d", w, i), []byte("x"), client.PutOptions{}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
}

// nextWithin is Next bounded by a few seconds: a watch that reports
// nothing fails the test instead of hanging it.
func nextWithin(ctx context.Context, t *testing.T, w *client.Watcher) client.WatchEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ev, err := w.Next(ctx)
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	return ev
}

// wantDeletedWhileAway: the resnapshot of a key watch whose key was
// deleted while it was away reports the delete, then the snapshot's end.
func wantDeletedWhileAway(ctx context.Context, t *testing.T, w *client.Watcher, key string) {
	t.Helper()
	ev := nextWithin(ctx, t, w)
	if ev.Kind != wire.WatchDelete || ev.Key != key || !ev.Retained || !ev.Resnapshot {
		t.Fatalf("first event after the resume: %+v; want %s reported deleted by a resnapshot", ev, key)
	}
	end := nextWithin(ctx, t, w)
	if end.Kind != wire.WatchSnapshotEnd || !end.Retained || !end.Resnapshot || end.Key != "" || end.Version != ev.Version {
		t.Fatalf("after the delete: %+v; want the snapshot's end at %d", end, ev.Version)
	}
}

// TestKeyWatchResumedPastItsDeleteOnOneBroker: a key watch resumed after
// its key was deleted and the shard forgot the delete (a resnapshot that
// holds no key) learns the key is gone, then sees later changes.
func TestKeyWatchResumedPastItsDeleteOnOneBroker(t *testing.T) {
	cfg := brokertest.Config(t)
	b := brokertest.Start(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := brokertest.Dial(t, b, cfg)
	k := client.Cache{Name: "flags"}
	if _, err := c.CreateCache(ctx, k, client.CacheSpec{Shards: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, k, "dark-mode", []byte("on"), client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	w, err := c.Watch(ctx, k, client.WatchKey("dark-mode"), client.WatchFrom{Retained: true})
	if err != nil {
		t.Fatal(err)
	}
	if ev := nextWithin(ctx, t, w); ev.Kind != wire.WatchPut || !ev.Retained || string(ev.Value) != "on" {
		t.Fatalf("first event: %+v; want the retained value", ev)
	}
	if end := nextWithin(ctx, t, w); end.Kind != wire.WatchSnapshotEnd || end.Resnapshot {
		t.Fatalf("after the retained value: %+v; want the snapshot's end", end)
	}
	resume := w.Resume()
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}

	if _, err := c.Delete(ctx, k, "dark-mode", nil); err != nil {
		t.Fatal(err)
	}
	pushPastHistory(ctx, t, c, k)

	again, err := c.Watch(ctx, k, client.WatchKey("dark-mode"), client.WatchFrom{Versions: resume})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close(ctx)
	wantDeletedWhileAway(ctx, t, again, "dark-mode")
	res, err := c.Put(ctx, k, "dark-mode", []byte("off"), client.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ev := nextWithin(ctx, t, again); ev.Kind != wire.WatchPut || ev.Retained || ev.Version != res.Version {
		t.Fatalf("after the snapshot: %+v; want the put at %d", ev, res.Version)
	}
}

// TestClusterKeyWatchResumedPastItsDelete: a ClusterClient's key watch
// that lagged, whose key was then deleted and the delete forgotten by
// the shard, is watched again by Next as a resnapshot of no key and
// reports the key deleted.
func TestClusterKeyWatchResumedPastItsDelete(t *testing.T) {
	cfg := brokertest.Config(t)
	// A connection's egress share small enough that a stalled reader's
	// bytes back up into its watch's queue within a few hundred changes.
	cfg.SubscriberEgressMaxBytes = 1 << 20
	b := brokertest.Start(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c := brokertest.Dial(t, b, cfg)
	k := client.Cache{Name: "flags"}
	if _, err := c.CreateCache(ctx, k, client.CacheSpec{Shards: 1}); err != nil {
		t.Fatal(err)
	}
	o := clusterOptions(t, cfg)
	o.SubscriptionBuffer = 1
	cc := dialCluster(t, []string{b.Addr().String()}, o)
	w, err := cc.Watch(ctx, k, client.WatchKey("hot"), client.WatchFrom{QueueCapacity: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)

	// Changes of 8 KiB while nothing reads: the watch lags at the broker.
	value := bytes.Repeat([]byte("v"), 8<<10)
	for i := range 600 {
		if _, err := c.Put(ctx, k, "hot", value, client.PutOptions{}); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	if _, err := c.Delete(ctx, k, "hot", nil); err != nil {
		t.Fatal(err)
	}
	pushPastHistory(ctx, t, c, k)

	// What the watch had queued comes first (the puts it took before it
	// lagged), then the resume Next makes: past the history, so a
	// resnapshot.
	for {
		ev := nextWithin(ctx, t, w)
		if ev.Kind == wire.WatchPut && !ev.Retained {
			continue
		}
		if w.Resumed() == 0 {
			t.Fatalf("%+v before the watch was made again: it cannot have lagged", ev)
		}
		if ev.Kind != wire.WatchDelete || !ev.Resnapshot {
			t.Fatalf("after the lag: %+v; want the delete reported by a resnapshot", ev)
		}
		end := nextWithin(ctx, t, w)
		if end.Kind != wire.WatchSnapshotEnd || !end.Resnapshot {
			t.Fatalf("after the delete: %+v; want the snapshot's end", end)
		}
		break
	}
}
