package broker_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
)

// TestSubscriptionChurnFreesMemory: subscriptions that come and go leave
// nothing behind. A stopped feeder stayed reachable through its shard's
// watcher set (protoactor keeps a stopped watcher's PID, and the PID its
// process): about 5 KiB a subscription for the life of the shard; the soak
// kept 90 MiB after every client left.
func TestSubscriptionChurnFreesMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("churns 5000 subscriptions; -short skips it")
	}
	cfg := brokertest.Config(t)
	b := brokertest.Start(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	token := brokertest.Token(t, cfg, "default")
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	round := func() {
		var cs []*client.Client
		for i := range 25 {
			// Not brokertest.Dial: its cleanup would keep every client (and
			// its memory, in this same process) until the test ends.
			c, err := client.Dial(ctx, b.Addr().String(), client.Options{CAFile: cfg.DataDir + "/cert.pem", Token: token})
			if err != nil {
				t.Fatal(err)
			}
			for j := range 20 {
				if _, err := c.Subscribe(ctx, client.Stream{Name: fmt.Sprint("s", (i+j)%20)}, client.SubscribeOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			cs = append(cs, c)
		}
		for _, c := range cs {
			if err := c.Close(ctx); err != nil {
				t.Fatal(err)
			}
		}
		waitGauge(t, b, "felix_subscriptions", 0)
	}
	// Two rounds first: maps inside the runtime and protoactor's registry
	// grow to their working size, which is not a leak.
	round()
	round()
	before := heap()
	const rounds, perRound = 10, 500
	for range rounds {
		round()
	}
	grew := int64(heap()) - int64(before)
	// A leak of ~5 KiB per subscription is ~25 MB here; what remains is
	// the registry's maps settling (a few MB at most).
	if grew > 10<<20 {
		t.Fatalf("the heap grew %d KiB over %d rounds of %d subscriptions that all ended (%d bytes each)", grew>>10, rounds, perRound, grew/(rounds*perRound))
	}
	t.Logf("heap grew %d KiB over %d churned subscriptions", grew>>10, rounds*perRound)
}
