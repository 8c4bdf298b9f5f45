package client_test

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
)

// TestClusterWatchResumesAfterANextThatEnded: a ClusterClient's watch
// that lagged is watched again by Next; a Next whose context ends while
// that resume is being made leaves it to the next Next, which resumes and
// misses nothing, instead of leaving the shard unwatched.
func TestClusterWatchResumesAfterANextThatEnded(t *testing.T) {
	cfg := brokertest.Config(t)
	// A connection's egress share small enough that a stalled reader's
	// bytes back up into its watch's queue within a few hundred changes.
	cfg.SubscriberEgressMaxBytes = 1 << 20
	b := brokertest.Start(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := brokertest.Dial(t, b, cfg)
	k := client.Cache{Name: "firehose"}
	if _, err := c.CreateCache(ctx, k, client.CacheSpec{Shards: 1}); err != nil {
		t.Fatal(err)
	}
	o := clusterOptions(t, cfg)
	o.SubscriptionBuffer = 1
	cc := dialCluster(t, []string{b.Addr().String()}, o)
	// Once armed, the first routed call (the lagged watch's resume) ends
	// the context of the Next that makes it, as a caller's deadline would.
	reading, stop := context.WithCancel(ctx)
	var armed atomic.Bool
	client.SetRouteHook(cc, func(string) error {
		if armed.CompareAndSwap(true, false) {
			stop()
			return context.Canceled
		}
		return nil
	})
	w, err := cc.Watch(ctx, k, client.WatchKey("hot"), client.WatchFrom{QueueCapacity: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)

	// 600 changes of 8 KiB while nothing reads: the watch lags at the
	// broker (within the shard's change history, so a resume replays).
	value := bytes.Repeat([]byte("v"), 8<<10)
	const writes = 600
	var last uint64
	for i := range writes {
		res, err := c.Put(ctx, k, "hot", append(fmt.Appendf(nil, "%04d", i), value...), client.PutOptions{})
		if err != nil || !res.Applied {
			t.Fatalf("put %d: %+v, %v", i, res, err)
		}
		last = res.Version
	}

	armed.Store(true)
	var prev uint64
	seen := 0
	for {
		ev, err := w.Next(reading)
		if err != nil {
			break
		}
		if seen > 0 && ev.Version <= prev {
			t.Fatalf("event at %d after %d", ev.Version, prev)
		}
		prev = ev.Version
		seen++
	}
	if seen >= writes || armed.Load() {
		t.Fatalf("read %d events of %d, the resume's route armed %v: the watch did not lag", seen, writes, armed.Load())
	}
	// Every change after the last one read comes, in order.
	for prev < last {
		next, cancel := context.WithTimeout(ctx, 10*time.Second)
		ev, err := w.Next(next)
		cancel()
		if err != nil {
			t.Fatalf("after %d events (the last at %d of %d), Next: %v; want the watch resumed", seen, prev, last, err)
		}
		if ev.Version <= prev {
			t.Fatalf("event at %d after %d", ev.Version, prev)
		}
		prev = ev.Version
		seen++
	}
	if w.Resumed() == 0 {
		t.Fatal("the watch was never made again: it cannot have lagged")
	}
}
