package quota

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/getfelix/felix-go/wire"
)

const (
	// defaultIdleAfter is how long a tenant goes unused before a sweep may
	// forget it. Ours: forgetting is lossless (see Tenants), so this only
	// saves re-creating the entry of a tenant that publishes now and then.
	defaultIdleAfter = time.Minute
	// defaultSoftMaxTenants is the table size at which a new tenant forces a
	// sweep that ignores idleness. Ours: 65536 entries are a few MiB.
	defaultSoftMaxTenants = 1 << 16
)

// Tenants holds each tenant to its publish rates and counts its open
// subscriptions. It is safe for concurrent use; calls for different
// tenants contend only on a map lookup, and on a sweep of the table (under
// its lock, once per idle period or forced; O(tenants)).
//
// Rates are token buckets (golang.org/x/time/rate), one for records and one
// for payload bytes, each refilling at its rate and holding one second's
// worth, so a tenant idle for a second may publish a second's worth at once.
//
// Memory: the table holds a tenant only while forgetting it would lose
// something: an open subscription, or a bucket that is not full (a new
// entry starts full, so dropping a full one changes nothing). A sweep, run
// from the calls at most once per idle period, forgets tenants unused for
// WithIdleAfter (a minute) that lose nothing. When the table reaches 65536
// entries, and again each time it has doubled since, a new tenant forces a
// sweep that drops every such entry regardless of idleness. So the table is
// bounded by the tenants that published within about the last second (a
// bucket refills in one; longer after an oversize batch) or hold a
// subscription, plus the soft cap: a client inventing tenant names costs
// one entry (a few hundred bytes) per name for about a second, paid for
// with a publish. A verified connection's tenant comes from its
// token, so a client cannot invent tenants at all, and tenants holding
// subscriptions are bounded by the connections (max_client_connections)
// times what one may hold.
type Tenants struct {
	cfg       Config
	idleAfter time.Duration
	softMax   int
	onRefused func(tenant, reason string)
	// afterLookup, when set (by tests only), runs in lock between the table
	// lookup and locking the entry: where a sweep may forget the entry.
	afterLookup func()

	mu struct {
		sync.Mutex
		tenants   map[string]*tenant
		lastSweep time.Time
		sweepAt   int // the table size at which a new tenant forces a sweep
	}
}

// tenant is one tenant's state. Its fields are guarded by mu; evicted is
// set, under both locks, when a sweep removes the entry from the table, and
// a caller that finds it set looks the tenant up again.
type tenant struct {
	mu       sync.Mutex
	msgs     *rate.Limiter // nil when tenant_publish_msgs_per_sec is off
	bytes    *rate.Limiter // nil when tenant_publish_bytes_per_sec is off
	subs     int
	lastUsed time.Time // the latest use, of any kind, for idleness
	last     time.Time // the latest now given to the buckets; never goes back
	evicted  bool
}

// NewTenants returns the per-tenant limits of cfg (its PublishBytesPerSec,
// PublishMsgsPerSec, MaxStreams and MaxSubscriptions; 0 turns each off).
func NewTenants(cfg Config, opts ...Option) *Tenants {
	o := buildOptions(opts)
	t := &Tenants{cfg: cfg, idleAfter: o.idleAfter, softMax: defaultSoftMaxTenants, onRefused: o.onRefused}
	t.mu.tenants = make(map[string]*tenant)
	t.mu.sweepAt = t.softMax
	return t
}

// AllowPublish admits a publish of msgs records and bytes payload bytes by
// tenant at now, taking them from the tenant's buckets, or refuses it
// without taking anything. It never waits: a refusal is a *wire.Error of
// code overloaded (retry class RetryAfter) whose message starts
// "tenant_quota:" and says when to retry, as "retry_after_ms=N". wire.Error
// has no retry-after field, so the hint travels in the message; the Cause,
// a *Refusal, carries it as a Duration for the broker.
//
// A batch larger than one second's worth (the bucket's size) could never
// fit, so it is admitted when the bucket is full, and the bucket goes into
// debt by the excess: the tenant then waits out the whole batch before its
// next publish, so its long-run rate still holds. max_frame_bytes bounds
// how large that debt can get.
//
// now is the caller's time.Now(): Tenants reads time.Now itself for
// subscriptions and sweeps, so a now from another clock mixes badly. A now
// earlier than one already given for the tenant counts as that one.
func (t *Tenants) AllowPublish(tenant string, msgs int, bytes int64, now time.Time) error {
	if t.cfg.PublishMsgsPerSec <= 0 && t.cfg.PublishBytesPerSec <= 0 {
		return nil
	}
	e := t.lock(tenant, now)
	now = e.clamp(now)
	e.touch(now)
	waitMsgs, okMsgs := shortfall(e.msgs, int64(msgs), now)
	waitBytes, okBytes := shortfall(e.bytes, bytes, now)
	if okMsgs && okBytes {
		take(e.msgs, int64(msgs), now)
		take(e.bytes, bytes, now)
		e.mu.Unlock()
		return nil
	}
	e.mu.Unlock()

	reason, limit, wait := ReasonPublishMsgs, t.cfg.PublishMsgsPerSec, waitMsgs
	if !okBytes && waitBytes > waitMsgs {
		reason, limit, wait = ReasonPublishBytes, t.cfg.PublishBytesPerSec, waitBytes
	}
	ms := (wait + time.Millisecond - 1) / time.Millisecond
	return t.refuse(wire.CodeOverloaded, &Refusal{Tenant: tenant, Reason: reason, Limit: limit, RetryAfter: wait},
		"%stenant %q is over %s %d; retry after %dms (retry_after_ms=%d)", tenantQuotaPrefix, tenant, reason, limit, ms, ms)
}

// tenantQuotaPrefix starts the message of a rate refusal, an overloaded
// error whose reason is tenant_quota, so clients tell it from a full queue.
const tenantQuotaPrefix = "tenant_quota: "

// AcquireSubscription admits one more open subscription of tenant, or
// refuses it with a *wire.Error of code limit_exceeded. On success the
// caller must call release when the subscription ends, on every end path;
// release is safe to call more than once, and only the first call counts.
// With tenant_max_subscriptions off it tracks nothing.
func (t *Tenants) AcquireSubscription(tenant string) (release func(), err error) {
	if t.cfg.MaxSubscriptions <= 0 {
		return func() {}, nil
	}
	e := t.lock(tenant, time.Now())
	if e.subs >= t.cfg.MaxSubscriptions {
		e.mu.Unlock()
		return nil, t.refuse(wire.CodeLimitExceeded, &Refusal{Tenant: tenant, Reason: ReasonSubscriptions, Limit: int64(t.cfg.MaxSubscriptions)},
			"tenant %q has tenant_max_subscriptions %d open; end one first", tenant, t.cfg.MaxSubscriptions)
	}
	e.subs++
	e.touch(time.Now())
	e.mu.Unlock()

	var released atomic.Bool
	return func() {
		if released.Swap(true) {
			return
		}
		// A sweep never evicts a tenant with subscriptions, so e is still
		// the table's entry.
		e.mu.Lock()
		e.subs--
		e.touch(time.Now())
		e.mu.Unlock()
	}, nil
}

// CheckStreams admits creating one more stream for tenant, which has
// current streams now, explicit (created by admin) and implicit (created by
// a first publish or subscribe) together; it refuses with a *wire.Error of
// code limit_exceeded when current has reached tenant_max_streams.
//
// It holds no count of its own: stream definitions have one owner, the
// registry, which knows how many a tenant has (including those loaded from
// metadata.db at start, and minus deleted ones) and creates them one at a
// time. A counter here would be a second copy of that number, to be kept
// right on every create, delete and restart; so the registry passes its
// count and calls this where it creates a definition.
func (t *Tenants) CheckStreams(tenant string, current int) error {
	if t.cfg.MaxStreams <= 0 || current < t.cfg.MaxStreams {
		return nil
	}
	return t.refuse(wire.CodeLimitExceeded, &Refusal{Tenant: tenant, Reason: ReasonStreams, Limit: int64(t.cfg.MaxStreams)},
		"tenant %q has tenant_max_streams %d (explicit and implicit streams); delete one first", tenant, t.cfg.MaxStreams)
}

// Tracked returns how many tenants the table holds, for a gauge.
func (t *Tenants) Tracked() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.mu.tenants)
}

// lock returns tenant's entry, created if needed, with its mu held.
func (t *Tenants) lock(name string, now time.Time) *tenant {
	for {
		t.mu.Lock()
		if now.Sub(t.mu.lastSweep) >= t.idleAfter {
			t.sweepLocked(now, false)
		}
		e := t.mu.tenants[name]
		if e == nil {
			if len(t.mu.tenants) >= t.mu.sweepAt {
				t.sweepLocked(now, true)
			}
			e = t.newTenant(now)
			t.mu.tenants[name] = e
		}
		t.mu.Unlock()
		if t.afterLookup != nil {
			t.afterLookup()
		}
		e.mu.Lock()
		if !e.evicted {
			return e
		}
		e.mu.Unlock() // a sweep removed it between the two locks: look again
	}
}

func (t *Tenants) newTenant(now time.Time) *tenant {
	e := &tenant{lastUsed: now, last: now}
	if r := t.cfg.PublishMsgsPerSec; r > 0 {
		e.msgs = rate.NewLimiter(rate.Limit(r), int(min(r, math.MaxInt)))
	}
	if r := t.cfg.PublishBytesPerSec; r > 0 {
		e.bytes = rate.NewLimiter(rate.Limit(r), int(min(r, math.MaxInt)))
	}
	return e
}

// sweepLocked forgets the tenants that lose nothing by it (no open
// subscription, full buckets) and, unless force, have been unused for
// idleAfter. It then lets the table double before a new tenant forces the
// next one, so forced sweeps cost O(1) per new tenant, amortized.
//
// REQUIRES: t.mu is held.
func (t *Tenants) sweepLocked(now time.Time, force bool) {
	for name, e := range t.mu.tenants {
		e.mu.Lock()
		if e.subs == 0 && (force || now.Sub(e.lastUsed) >= t.idleAfter) && full(e.msgs, now) && full(e.bytes, now) {
			e.evicted = true
			delete(t.mu.tenants, name)
		}
		e.mu.Unlock()
	}
	t.mu.lastSweep = now
	t.mu.sweepAt = max(t.softMax, 2*len(t.mu.tenants))
}

// clamp returns the time to give the buckets: now, or the latest time
// given before if now is earlier (callers race between reading the clock and
// taking the lock), so the buckets never see time go back: rate.Limiter
// would credit the same interval twice.
//
// REQUIRES: e.mu is held.
func (e *tenant) clamp(now time.Time) time.Time {
	if now.Before(e.last) {
		return e.last
	}
	e.last = now
	return now
}

// touch records a use at now.
//
// REQUIRES: e.mu is held.
func (e *tenant) touch(now time.Time) {
	if now.After(e.lastUsed) {
		e.lastUsed = now
	}
}

func (t *Tenants) refuse(code wire.Code, r *Refusal, format string, args ...any) error {
	t.onRefused(r.Tenant, r.Reason)
	e := wire.NewError(code, format, args...)
	e.Cause = r
	return e
}

// shortfall reports whether lim has room for n at now and, if not, how long
// until it would. A bucket never holds more than its burst, so n larger
// than that needs only a full bucket (AllowPublish explains). A nil lim (a
// rate that is off) always has room.
func shortfall(lim *rate.Limiter, n int64, now time.Time) (wait time.Duration, ok bool) {
	if lim == nil || n <= 0 {
		return 0, true
	}
	need := float64(min(n, int64(lim.Burst())))
	missing := need - lim.TokensAt(now)
	if missing <= 0 {
		return 0, true
	}
	// Truncated, as rate.Limiter does; the message rounds up to a millisecond.
	return max(time.Duration(missing/float64(lim.Limit())*float64(time.Second)), time.Nanosecond), false
}

// take removes n tokens from lim at now, after shortfall said it has room.
// Past the burst the bucket goes into debt by the excess: rate.Limiter
// refuses a reservation larger than its burst, so for that one reservation
// the burst is raised to n and put back; the caller's lock on the tenant
// keeps anyone from seeing it.
func take(lim *rate.Limiter, n int64, now time.Time) {
	if lim == nil || n <= 0 {
		return
	}
	burst := lim.Burst()
	if n <= int64(burst) {
		lim.ReserveN(now, int(n))
		return
	}
	lim.SetBurstAt(now, int(min(n, math.MaxInt)))
	lim.ReserveN(now, int(min(n, math.MaxInt)))
	lim.SetBurstAt(now, burst) // keeps the negative balance: advance only caps at the burst from above
}

// full reports whether lim's bucket is full at now (a nil lim is).
func full(lim *rate.Limiter, now time.Time) bool {
	return lim == nil || lim.TokensAt(now) >= float64(lim.Burst())
}
