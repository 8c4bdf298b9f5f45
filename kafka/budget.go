package kafka

import (
	"context"
	"slices"
	"sync"
)

// budget is a connection's byte budget for one kind of in-flight work
// (request bytes read and not answered; Fetch answers built and not
// written). Reservations are granted in the order they were asked for:
// answers leave in request order, so an earlier request must never wait
// for bytes a later one holds, which is what first come, first served
// guarantees. A reservation larger than the whole budget is granted when
// nothing else is held, so every request makes progress.
type budget struct {
	limit int
	mu    struct {
		sync.Mutex
		used    int
		waiters []*reservation // in asking order
	}
}

// reservation is one ask: ready closes when it is granted.
type reservation struct {
	n     int
	ready chan struct{}
}

func newBudget(limit int) *budget { return &budget{limit: limit} }

// reserve asks for n bytes; the caller waits on the reservation's ready
// (wait) before using them. Asking is separate from waiting so the read
// loop fixes the order while another goroutine waits.
func (b *budget) reserve(n int) *reservation {
	r := &reservation{n: n, ready: make(chan struct{})}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.mu.waiters = append(b.mu.waiters, r)
	b.grantLocked()
	return r
}

// wait blocks until r is granted or ctx ends.
func (b *budget) wait(ctx context.Context, r *reservation) error {
	select {
	case <-r.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// adjust changes a granted reservation's size to n (an answer's real
// size once built): giving back wakes waiters, taking more may overdraw
// the budget, which then grants nothing until enough is released.
func (b *budget) adjust(r *reservation, n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.mu.used += n - r.n
	r.n = n
	b.grantLocked()
}

// release gives back a reservation's bytes, or its place in the queue
// when it was never granted (its request gave up waiting).
func (b *budget) release(r *reservation) {
	if r == nil {
		return
	}
	select {
	case <-r.ready:
		b.adjust(r, 0)
		return
	default:
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-r.ready: // granted meanwhile
		b.mu.used -= r.n
		r.n = 0
	default:
		b.mu.waiters = slices.DeleteFunc(b.mu.waiters, func(w *reservation) bool { return w == r })
	}
	b.grantLocked()
}

// grantLocked grants waiters from the front while they fit.
// REQUIRES: b.mu is held.
func (b *budget) grantLocked() {
	for len(b.mu.waiters) > 0 {
		r := b.mu.waiters[0]
		if b.mu.used > 0 && b.mu.used+r.n > b.limit {
			return
		}
		b.mu.used += r.n
		close(r.ready)
		b.mu.waiters[0] = nil
		b.mu.waiters = b.mu.waiters[1:]
	}
}
