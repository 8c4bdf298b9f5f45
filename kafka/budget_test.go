package kafka

import (
	"context"
	"testing"
)

func granted(r *reservation) bool {
	select {
	case <-r.ready:
		return true
	default:
		return false
	}
}

// TestBudgetOrder: reservations are granted in asking order, a later
// small one never passes an earlier large one, an oversized one is
// granted alone, and an answer larger than its reservation overdraws the
// budget until it is released.
func TestBudgetOrder(t *testing.T) {
	b := newBudget(100)
	a := b.reserve(60)
	big := b.reserve(80)
	small := b.reserve(10)
	if !granted(a) || granted(big) || granted(small) {
		t.Fatalf("60, 80, 10 of 100: granted %v %v %v, want only the first", granted(a), granted(big), granted(small))
	}
	b.adjust(a, 120) // the answer came out larger
	b.release(a)
	if !granted(big) || !granted(small) {
		t.Fatalf("after the first was released: granted %v %v, want both", granted(big), granted(small))
	}
	b.release(big)
	b.release(small)
	huge := b.reserve(500)
	if !granted(huge) {
		t.Fatal("a reservation past the whole budget was not granted with nothing held")
	}
	next := b.reserve(1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := b.wait(ctx, next); err == nil {
		t.Fatal("a reservation behind an oversized one was granted before it was released")
	}
	b.release(huge)
	if !granted(next) {
		t.Fatal("releasing the oversized reservation did not grant the next")
	}

	// One that gave up waiting leaves the queue, and the one behind it
	// moves up.
	full := b.reserve(99)
	gaveUp := b.reserve(50)
	behind := b.reserve(1)
	if !granted(full) || granted(gaveUp) || granted(behind) {
		t.Fatalf("1 held, then 99, 50, 1 of 100: granted %v %v %v, want only the 99", granted(full), granted(gaveUp), granted(behind))
	}
	b.release(gaveUp)
	b.release(next)
	b.release(full)
	if !granted(behind) || granted(gaveUp) {
		t.Fatalf("after a waiter gave up and the rest were released: granted %v, gave-up granted %v; want the last granted alone", granted(behind), granted(gaveUp))
	}
	b.release(behind)
	if b.mu.used != 0 || len(b.mu.waiters) != 0 {
		t.Fatalf("everything released: %d bytes held, %d waiting, want none", b.mu.used, len(b.mu.waiters))
	}
}
