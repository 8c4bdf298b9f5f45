//go:build felixprobe

package latprobe

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/internal/probe"
	"github.com/getfelix/felix-go/wire"
)

var (
	count  = flag.Int("latprobe.n", 3000, "messages measured")
	warmup = flag.Int("latprobe.warmup", 500, "messages published first and not measured")
)

// TestBreakdown publishes one message at a time, each acked (as felix
// bench's latency profile does), paced at 1000 msg/s, and for each takes
// the time of every hop from the probes. It fails if a hop was not marked
// or the marks ran out of order, which would make the table meaningless.
func TestBreakdown(t *testing.T) {
	cfg := brokertest.Config(t)
	br := brokertest.Start(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st := client.Stream{Name: "latprobe"}
	sub, err := brokertest.Dial(t, br, cfg).Subscribe(ctx, st, client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pub := brokertest.Dial(t, br, cfg)
	got := make(chan error, 1)
	go func() {
		for {
			_, err := sub.Next(ctx)
			probe.Mark(probe.Received)
			got <- err
			if err != nil {
				return
			}
		}
	}()
	payload := make([]byte, 128)
	opts := client.PublishOptions{Ack: wire.AckPerMessage}
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	var samples [][probe.NumHops]int64
	for i := range *warmup + *count {
		<-tick.C
		probe.Reset()
		probe.Mark(probe.PublishCall)
		if err := pub.Publish(ctx, st, payload, opts); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		if err := <-got; err != nil {
			t.Fatalf("delivery %d: %v", i, err)
		}
		if i >= *warmup {
			samples = append(samples, probe.Snapshot())
		}
	}
	t.Log("\n" + table(t, samples))
}

// table checks every sample and formats each hop's median and p90 (time
// since the hop before it) and the whole path's. A sample whose marks are
// out of order or missing (a goroutine marked late, after the next hop's or
// after the next message's Reset) is left out and counted; more than a
// tenth of them fails the test, which a probe not wired would do.
func table(t *testing.T, samples [][probe.NumHops]int64) string {
	hops := make([][]int64, probe.NumHops)
	unordered := 0
	for _, s := range samples {
		if !ordered(s) {
			unordered++
			continue
		}
		for h := probe.Hop(1); h < probe.NumHops; h++ {
			hops[h] = append(hops[h], s[h]-s[h-1])
		}
		hops[0] = append(hops[0], s[probe.Received]-s[probe.PublishCall])
	}
	if unordered > len(samples)/10 {
		t.Fatalf("%d of %d samples had marks missing or out of order", unordered, len(samples))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d deliveries (%d more left out: marks missing or out of order), 128 B, fanout 1, 1000 msg/s, one in flight, acked per message\n", len(hops[0]), unordered)
	fmt.Fprintf(&b, "| hop (time since the previous one) | p50 µs | p90 µs |\n|---|---|---|\n")
	var sum float64
	for h := probe.Hop(1); h < probe.NumHops; h++ {
		p50, p90 := pct(hops[h], 50), pct(hops[h], 90)
		sum += p50
		fmt.Fprintf(&b, "| %s → %s | %.1f | %.1f |\n", h-1, h, p50, p90)
	}
	fmt.Fprintf(&b, "| sum of the medians | %.1f | |\n", sum)
	fmt.Fprintf(&b, "| publish call → received (whole path) | %.1f | %.1f |\n", pct(hops[0], 50), pct(hops[0], 90))
	return b.String()
}

// ordered reports whether every hop of s was marked, in hop order.
func ordered(s [probe.NumHops]int64) bool {
	for h := probe.Hop(0); h < probe.NumHops; h++ {
		if s[h] == 0 || h > 0 && s[h] < s[h-1] {
			return false
		}
	}
	return true
}

// pct is the p-th percentile of ns values, in µs.
func pct(ns []int64, p int) float64 {
	s := slices.Clone(ns)
	slices.Sort(s)
	return float64(s[(len(s)-1)*p/100]) / 1e3
}
