package quota

import (
	"container/list"
	"net/netip"
	"sync"
	"time"

	"github.com/getfelix/felix-go/wire"
)

// AuthFailures limits failed authentications per source address, so that
// a client guessing credentials costs the broker at most
// AuthFailureBurst credential checks, then one per AuthFailureInterval,
// and nothing at all while it is throttled. Every front end's credential
// check (a felix/1 auth or re-authentication, a Kafka SASL mechanism) goes
// through it in the same two calls:
//
//	if err := failures.Allow(ip, now); err != nil {
//		return err // throttled: check nothing
//	}
//	if err := check(credential); err != nil {
//		failures.Failed(ip, now)
//		return err
//	}
//
// A throttled Allow is a *wire.Error of code overloaded (retry after)
// whose message starts "auth_throttled:" and says how long to wait; its
// Cause is a *Refusal with the wait in RetryAfter.
//
// Each address has a bucket of AuthFailureBurst failures, given back one
// every AuthFailureInterval. Allow refuses while less than one is left.
// Failed takes one even below zero, down to -AuthFailureBurst: guesses
// checked at once from one address all count, and are paid back with a
// longer wait. A success gives nothing back: otherwise a client holding one
// valid credential could interleave it with guesses and never be throttled.
//
// An IPv4 address is its own key; an IPv6 address is keyed by its /64, the
// block one host is usually given, so stepping through it buys no fresh
// allowance.
//
// Only a failure adds an address to the table, and an address whose bucket
// has refilled is dropped (absent, it gets the same answer). The table
// holds at most AuthFailureMaxAddresses: when full, the address whose last
// failure is the oldest is forgotten to make room, and starts again with a
// full bucket, as it would have after waiting. An attacker with more
// addresses than that gets AuthFailureBurst checks per address and no
// more memory.
//
// Nothing here blocks or starts a goroutine; one lock guards the table.
type AuthFailures struct {
	burst    float64
	interval time.Duration
	maxAddrs int

	mu struct {
		sync.Mutex
		addrs  map[netip.Addr]*list.Element // of *failedAddr
		recent list.List                    // least recently failed first
	}
}

// failedAddr is one address's bucket: tokens failures left at time at.
type failedAddr struct {
	key    netip.Addr
	tokens float64
	at     time.Time
}

// Defaults of AuthFailures when its Config fields are zero or negative:
// the interval, and the table's bound (about 150 bytes an address).
const (
	defaultAuthFailureInterval   = time.Second
	defaultAuthFailureMaxAddress = 16384
)

// NewAuthFailures returns the limiter of cfg's AuthFailureBurst (0 turns it
// off: every attempt is checked), AuthFailureInterval and
// AuthFailureMaxAddresses.
func NewAuthFailures(cfg Config) *AuthFailures {
	a := &AuthFailures{burst: float64(cfg.AuthFailureBurst), interval: cfg.AuthFailureInterval, maxAddrs: cfg.AuthFailureMaxAddresses}
	if a.interval <= 0 {
		a.interval = defaultAuthFailureInterval
	}
	if a.maxAddrs <= 0 {
		a.maxAddrs = defaultAuthFailureMaxAddress
	}
	a.mu.addrs = make(map[netip.Addr]*list.Element)
	return a
}

// Allow reports whether a credential from ip may be checked at now: nil, or
// the throttled error (see AuthFailures).
func (a *AuthFailures) Allow(ip netip.Addr, now time.Time) error {
	if a.burst <= 0 {
		return nil
	}
	key := failureKey(ip)
	a.mu.Lock()
	el, ok := a.mu.addrs[key]
	if !ok {
		a.mu.Unlock()
		return nil
	}
	f := el.Value.(*failedAddr)
	a.refill(f, now)
	tokens := f.tokens
	if tokens >= a.burst {
		a.forgetLocked(el)
	}
	a.mu.Unlock()
	if tokens >= 1 {
		return nil
	}
	wait := time.Duration((1 - tokens) * float64(a.interval))
	e := wire.NewError(wire.CodeOverloaded, "auth_throttled: more than auth_failure_burst %d failed authentications from %s; retry after %s", int(a.burst), key, wait.Round(time.Millisecond))
	e.Cause = &Refusal{Reason: ReasonAuthFailures, Limit: int64(a.burst), RetryAfter: wait}
	return e
}

// Failed records a failed authentication from ip at now.
func (a *AuthFailures) Failed(ip netip.Addr, now time.Time) {
	if a.burst <= 0 {
		return
	}
	key := failureKey(ip)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sweepLocked(now)
	if el, ok := a.mu.addrs[key]; ok {
		f := el.Value.(*failedAddr)
		a.refill(f, now)
		f.tokens = max(f.tokens-1, -a.burst)
		a.mu.recent.MoveToBack(el)
		return
	}
	if len(a.mu.addrs) >= a.maxAddrs {
		a.forgetLocked(a.mu.recent.Front())
	}
	a.mu.addrs[key] = a.mu.recent.PushBack(&failedAddr{key: key, tokens: a.burst - 1, at: now})
}

// Addresses returns how many addresses the table holds, for a gauge.
func (a *AuthFailures) Addresses() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.mu.addrs)
}

// refill gives f the failures its interval has given back since f.at.
func (a *AuthFailures) refill(f *failedAddr, now time.Time) {
	if elapsed := now.Sub(f.at); elapsed > 0 {
		f.tokens = min(a.burst, f.tokens+float64(elapsed)/float64(a.interval))
		f.at = now
	}
}

// sweepLocked drops the least recently failed addresses while their
// buckets have refilled: a couple at most per call, so the table sheds
// addresses that went quiet without a timer.
// REQUIRES: a.mu is held.
func (a *AuthFailures) sweepLocked(now time.Time) {
	for range 2 {
		el := a.mu.recent.Front()
		if el == nil {
			return
		}
		f := el.Value.(*failedAddr)
		a.refill(f, now)
		if f.tokens < a.burst {
			return
		}
		a.forgetLocked(el)
	}
}

// forgetLocked drops one address.
// REQUIRES: a.mu is held.
func (a *AuthFailures) forgetLocked(el *list.Element) {
	delete(a.mu.addrs, el.Value.(*failedAddr).key)
	a.mu.recent.Remove(el)
}

// failureKey is the key of ip: its IPv4 address, or its IPv6 /64.
func failureKey(ip netip.Addr) netip.Addr {
	ip = addrKey(ip)
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.Addr()
	}
	return ip
}
