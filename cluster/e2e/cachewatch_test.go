package e2e_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/clustertest"
)

// TestReplicatedCacheWatchFollowsALeaderKill: a ClusterClient's watch of
// a 3-replica cache follows the shard when its leader is SIGKILLed: it
// watches again at the new leader from the version after its last event,
// and sees every acknowledged put, each once, in version order, with no
// snapshot in between.
func TestReplicatedCacheWatchFollowsALeaderKill(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{Nodes: 3, LeaseTTL: leaseTTL})
	c.WaitReady(t, 3)
	cc := dialAll(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	k := client.Cache{Namespace: replicatedCache.Namespace, Name: replicatedCache.Name}
	for {
		info, err := cc.CreateCache(ctx, k, client.CacheSpec{Shards: 1, Durable: true, Replicas: 3})
		if err == nil && info.Replicas == 3 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("create the cache: %+v, %v", info, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var w *client.Watcher
	for {
		var err error
		if w, err = cc.Watch(ctx, k, client.WatchPrefix("k"), client.WatchFrom{}); err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("watch: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	defer w.Close(ctx)
	events := make(chan client.WatchEvent, 1024)
	done := make(chan error, 1)
	go func() {
		for {
			ev, err := w.Next(ctx)
			if err != nil {
				done <- err
				return
			}
			events <- ev
		}
	}()

	acked := map[uint64]string{}
	for i := range 40 {
		if i == 20 {
			cacheLeader(ctx, t, c).Kill()
		}
		key := fmt.Sprintf("k%02d", i)
		acked[putUntilAcked(ctx, t, cc, key)] = key
	}
	got := map[uint64]string{}
	var last uint64
	for missing := len(acked); missing > 0; {
		select {
		case ev := <-events:
			if ev.Retained || (len(got) > 0 && ev.Version <= last) {
				t.Fatalf("event %+v after version %d: want changes only, in version order, none twice", ev, last)
			}
			last, got[ev.Version] = ev.Version, ev.Key
			if acked[ev.Version] == ev.Key {
				missing--
			}
		case err := <-done:
			t.Fatalf("the watch ended: %v", err)
		case <-ctx.Done():
			t.Fatalf("the watch saw %d events, %d acknowledged puts missing", len(got), missing)
		}
	}
	if w.Resumed() == 0 {
		t.Fatal("the watch never watched again: it cannot have been at the killed leader")
	}
	for v, key := range acked {
		if got[v] != key {
			t.Fatalf("acknowledged put of %s at %d: the watch saw %q there", key, v, got[v])
		}
	}
}
