package main

import (
	"context"
	"encoding/binary"
	"sync"
	"testing"
	"time"
)

func valueOf(seq uint64, put time.Time) []byte {
	v := make([]byte, 16)
	binary.BigEndian.PutUint64(v, seq)
	binary.BigEndian.PutUint64(v[8:], uint64(put.UnixNano()))
	return v
}

// TestFanoutGatesTheWriter: a put may go only once every watcher has the
// one ahead puts before it; deliveries in the window are counted and
// timed, the ones before it are not.
func TestFanoutGatesTheWriter(t *testing.T) {
	f := newFanout(2, 2, 1)
	var mu sync.Mutex
	ctx := context.Background()
	for seq := range uint64(2) {
		if err := f.waitFor(ctx, seq, 2); err != nil {
			t.Fatalf("seq %d within the window: %v", seq, err)
		}
	}
	blocked, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := f.waitFor(blocked, 2, 2); err == nil {
		t.Fatal("seq 2 went before any watcher had seq 0")
	}
	f.deliver(0, &mu, valueOf(0, time.Now()))
	if f.complete.Load() != 0 {
		t.Fatal("seq 0 complete with one watcher of two")
	}
	f.inWindow.Store(true)
	f.deliver(0, &mu, valueOf(0, time.Now().Add(-time.Millisecond)))
	if err := f.waitFor(ctx, 2, 2); err != nil {
		t.Fatalf("seq 2 once both watchers had seq 0: %v", err)
	}
	if f.delivered.Load() != 1 || f.hists[0].TotalCount() != 1 || f.hists[0].Max() < 1000 {
		t.Fatalf("delivered %d, timed %d (max %d µs); want the one in the window, about 1 ms", f.delivered.Load(), f.hists[0].TotalCount(), f.hists[0].Max())
	}
}
