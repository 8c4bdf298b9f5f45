package e2e_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/clustertest"
)

// handled is what a group's consumer was handed: each offset in order of
// hand-out.
type handled struct {
	mu      sync.Mutex
	offsets []uint64
	seen    map[uint64]int
	// changed is signalled on each hand-out (waitHandled).
	changed chan struct{}
}

func (h *handled) add(off uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.offsets = append(h.offsets, off)
	h.seen[off]++
	select {
	case h.changed <- struct{}{}:
	default:
	}
}

// mark is how many hand-outs there were so far.
func (h *handled) mark() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.offsets)
}

// distinct counts the offsets handed out at least once.
func (h *handled) distinct() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.seen)
}

// TestGroupLeaderKilled: a consumer group consumes the replicated stream
// while idempotent producers publish and the shard's leader is SIGKILLed
// three times (and restarted). Every record in the log is handed out at
// least once, and nothing below a cursor the group reported (a describe
// writes the cursor first) is handed out again after it.
func TestGroupLeaderKilled(t *testing.T) {
	r := startFaultRun(t, clustertest.Options{}, 2, 50, 3*time.Minute)
	if _, err := r.cc.CreateGroup(r.ctx, replicatedStream, "workers", client.GroupStart{Kind: "earliest"}); err != nil {
		t.Fatalf("create the group: %v", err)
	}
	h := &handled{seen: map[uint64]int{}, changed: make(chan struct{}, 1)}
	g := r.cc.Group(replicatedStream, "workers", client.GroupOptions{Consumer: "e2e", Visibility: 30 * time.Second})
	defer g.Close()
	cctx, stopConsumer := context.WithCancel(r.ctx)
	consumed := make(chan error, 1)
	go func() {
		consumed <- g.Consume(cctx, client.ConsumeOptions{Batch: 32, Wait: time.Second}, func(_ context.Context, rec client.GroupRecord) error {
			h.add(rec.Offset)
			return nil
		})
	}()
	type floor struct {
		cursor uint64
		from   int // hand-outs handled when the cursor was reported
	}
	var floors []floor
	for kill := range 3 {
		waitHandled(r.ctx, t, h, h.distinct()+30, fmt.Sprintf("before kill %d", kill+1))
		info, err := r.cc.DescribeGroup(r.ctx, replicatedStream, "workers")
		if err != nil {
			t.Fatalf("describe before kill %d: %v", kill+1, err)
		}
		// Every record below the cursor was settled before the describe;
		// records handed out but not yet handled hold the cursor below them.
		floors = append(floors, floor{cursor: info.Shards[0].Cursor, from: h.mark()})
		leader := leaderOf(r.ctx, t, r.c)
		leader.Kill()
		r.progress(t, 40, fmt.Sprintf("after kill %d of %s", kill+1, leader.NodeID))
		waitHandled(r.ctx, t, h, h.distinct()+30, fmt.Sprintf("consuming after kill %d of %s", kill+1, leader.NodeID))
		leader.Restart(t)
	}
	log := r.finish(t)
	waitHandled(r.ctx, t, h, len(log), "after the producers stopped")
	stopConsumer()
	if err := <-consumed; err != nil {
		t.Fatalf("consume: %v", err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, rec := range log {
		if h.seen[rec.Offset] == 0 {
			t.Errorf("record %d (%s) was never handed out", rec.Offset, rec.Payload)
		}
	}
	for i, f := range floors {
		for _, off := range h.offsets[f.from:] {
			if off < f.cursor {
				t.Fatalf("record %d was handed out again after the cursor was reported at %d (before kill %d)", off, f.cursor, i+1)
			}
		}
	}
	t.Logf("%d records, %d hand-outs through 3 leader kills (cursors before them: %v)", len(log), len(h.offsets), floors)
}

// waitHandled waits until n distinct offsets were handed out.
func waitHandled(ctx context.Context, t *testing.T, h *handled, n int, what string) {
	t.Helper()
	for h.distinct() < n {
		select {
		case <-h.changed:
		case <-ctx.Done():
			t.Fatalf("%s: %d records handed out, want %d", what, h.distinct(), n)
		}
	}
}
