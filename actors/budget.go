package actors

import (
	"sync"
	"sync/atomic"
)

// ByteBudget is a byte bound shared by many queues, such as the broker-wide
// subscriber_queue_max_bytes_total. A nil *ByteBudget is unlimited, so callers
// need no nil checks. It is an int64 so totals above 4 GiB work.
type ByteBudget struct {
	limit int64
	used  atomic.Int64

	// Parked Block senders wait on freed; Release closes it only when
	// someone waits, so the common path is one atomic load.
	waiters atomic.Int64
	mu      sync.Mutex
	freed   chan struct{}
}

// NewByteBudget returns a budget of limit bytes; limit <= 0 returns nil (no bound).
func NewByteBudget(limit int64) *ByteBudget {
	if limit <= 0 {
		return nil
	}
	return &ByteBudget{limit: limit}
}

// TryAcquire takes n bytes if they fit.
func (b *ByteBudget) TryAcquire(n int64) bool {
	if b == nil {
		return true
	}
	for {
		used := b.used.Load()
		if used+n > b.limit {
			return false
		}
		if b.used.CompareAndSwap(used, used+n) {
			return true
		}
	}
}

// ForceAcquire takes n bytes even past the limit (the oversize rule: an
// empty queue always takes one batch).
func (b *ByteBudget) ForceAcquire(n int64) {
	if b != nil {
		b.used.Add(n)
	}
}

// Release returns n bytes and wakes parked senders.
func (b *ByteBudget) Release(n int64) {
	if b == nil || n == 0 {
		return
	}
	b.used.Add(-n)
	if b.waiters.Load() > 0 {
		b.mu.Lock()
		if b.freed != nil {
			close(b.freed)
			b.freed = nil
		}
		b.mu.Unlock()
	}
}

// waitFreed registers a waiter and returns a channel closed by the next
// Release. Each call must be paired with stopWaiting.
func (b *ByteBudget) waitFreed() <-chan struct{} {
	b.waiters.Add(1)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.freed == nil {
		b.freed = make(chan struct{})
	}
	return b.freed
}

func (b *ByteBudget) stopWaiting() { b.waiters.Add(-1) }

// Used is the number of bytes held.
func (b *ByteBudget) Used() int64 {
	if b == nil {
		return 0
	}
	return b.used.Load()
}

// Limit is the bound in bytes; zero for a nil (unlimited) budget.
func (b *ByteBudget) Limit() int64 {
	if b == nil {
		return 0
	}
	return b.limit
}
