package lanes

import "sync/atomic"

// ConnBudget is one connection's subscriber_egress_max_bytes: a byte bound on
// everything the connection's subscriptions have in the lanes and the
// connection writer. Each subscription gets an equal share, so a stalled
// stream fills its own share and stops there while the others keep moving.
// It is shared by the feeders (which take bytes) and the connection writer
// (which returns them), so it is atomics, not actor state.
type ConnBudget struct {
	limit int64
	subs  atomic.Int64
}

// NewConnBudget returns a budget of limit bytes (<= 0 means no bound).
func NewConnBudget(limit int64) *ConnBudget { return &ConnBudget{limit: limit} }

// Subscriptions is how many subscriptions share the budget now.
func (b *ConnBudget) Subscriptions() int64 { return b.subs.Load() }

// Share is the bytes one subscription may have in flight now.
func (b *ConnBudget) Share() int64 {
	if b.limit <= 0 {
		return 1 << 62
	}
	return b.limit / max(1, b.subs.Load())
}

// NewEgress adds a subscription to the connection. notify is called (from
// the connection writer) when bytes come back to a subscription that found
// its share full; it must not block.
func (b *ConnBudget) NewEgress(notify func()) *Egress {
	b.subs.Add(1)
	return &Egress{conn: b, notify: notify}
}

// Egress is one subscription's share of its connection's budget.
type Egress struct {
	conn     *ConnBudget
	notify   func()
	inflight atomic.Int64
	waiting  atomic.Bool
	closed   atomic.Bool
}

// TryTake takes n bytes if they fit in the share, or if nothing is in flight:
// a frame larger than the share still goes once the subscription has nothing
// else waiting. When it fails, the caller is notified once bytes come back.
func (e *Egress) TryTake(n int64) bool {
	if e.take(n) {
		return true
	}
	// Announce the wait, then look again: a return that raced with the
	// announcement would otherwise be missed and the feeder would sleep forever.
	e.waiting.Store(true)
	if e.take(n) {
		e.waiting.Store(false)
		return true
	}
	return false
}

func (e *Egress) take(n int64) bool {
	for {
		cur := e.inflight.Load()
		if cur != 0 && cur+n > e.conn.Share() {
			return false
		}
		if e.inflight.CompareAndSwap(cur, cur+n) {
			return true
		}
	}
}

// Return gives n bytes back after they were written or dropped.
func (e *Egress) Return(n int64) {
	e.inflight.Add(-n)
	if e.waiting.CompareAndSwap(true, false) && e.notify != nil {
		e.notify()
	}
}

// InFlight is the bytes taken and not yet returned.
func (e *Egress) InFlight() int64 { return e.inflight.Load() }

// Close removes the subscription from its connection's share count.
func (e *Egress) Close() {
	if e.closed.CompareAndSwap(false, true) {
		e.conn.subs.Add(-1)
	}
}
