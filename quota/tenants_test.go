package quota

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/getfelix/felix-go/wire"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// TestAllowPublishLimits runs publishes at one instant, so no bucket refills
// between them: each step is admitted or refused as the buckets stand.
func TestAllowPublishLimits(t *testing.T) {
	type step struct {
		msgs       int
		bytes      int64
		at         time.Duration // after t0
		wantReason string        // "" = admitted
		wantRetry  string        // in the message, for a refusal
	}
	tests := []struct {
		name  string
		give  Config
		steps []step
	}{
		{"msgs: a second's worth, then refused", Config{PublishMsgsPerSec: 10}, []step{
			{msgs: 10}, {msgs: 1, wantReason: ReasonPublishMsgs, wantRetry: "retry_after_ms=100"},
		}},
		{"msgs: refills at the rate", Config{PublishMsgsPerSec: 10}, []step{
			{msgs: 10}, {msgs: 1, at: 99 * time.Millisecond, wantReason: ReasonPublishMsgs, wantRetry: "retry_after_ms=1"},
			{msgs: 1, at: 100 * time.Millisecond}, {msgs: 1, at: 100 * time.Millisecond, wantReason: ReasonPublishMsgs},
		}},
		{"bytes", Config{PublishBytesPerSec: 1000}, []step{
			{msgs: 1, bytes: 600}, {msgs: 1, bytes: 600, wantReason: ReasonPublishBytes, wantRetry: "retry_after_ms=200"},
			{msgs: 1, bytes: 400},
		}},
		{"a refusal takes nothing from the other bucket", Config{PublishMsgsPerSec: 10, PublishBytesPerSec: 1000}, []step{
			{msgs: 1, bytes: 1000}, {msgs: 9, bytes: 1, wantReason: ReasonPublishBytes},
			{msgs: 9}, {msgs: 1, wantReason: ReasonPublishMsgs}, // the refused 9 msgs were not taken
		}},
		{"both short: the longer wait is named", Config{PublishMsgsPerSec: 10, PublishBytesPerSec: 1000}, []step{
			{msgs: 10, bytes: 1000}, {msgs: 1, bytes: 500, wantReason: ReasonPublishBytes, wantRetry: "retry_after_ms=500"},
			{msgs: 5, bytes: 1, wantReason: ReasonPublishMsgs, wantRetry: "retry_after_ms=500"},
		}},
		{"oversize batch admitted on a full bucket, then paid for", Config{PublishBytesPerSec: 1000}, []step{
			{msgs: 1, bytes: 5000}, {msgs: 1, bytes: 1, wantReason: ReasonPublishBytes, wantRetry: "retry_after_ms=4001"},
			{msgs: 1, bytes: 1, at: 3900 * time.Millisecond, wantReason: ReasonPublishBytes},
			{msgs: 1, bytes: 1, at: 4001 * time.Millisecond},
		}},
		{"oversize batch waits for a full bucket", Config{PublishBytesPerSec: 1000}, []step{
			{msgs: 1, bytes: 1}, {msgs: 1, bytes: 5000, wantReason: ReasonPublishBytes, wantRetry: "retry_after_ms=1"},
			{msgs: 1, bytes: 5000, at: time.Millisecond},
		}},
		{"empty publish always passes", Config{PublishMsgsPerSec: 1, PublishBytesPerSec: 1}, []step{
			{msgs: 1, bytes: 1}, {msgs: 0, bytes: 0},
		}},
		{"zero is off", Config{}, []step{{msgs: 1 << 30, bytes: 1 << 40}, {msgs: 1 << 30, bytes: 1 << 40}}},
		{"msgs off, bytes on", Config{PublishBytesPerSec: 100}, []step{{msgs: 1 << 30, bytes: 100}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var refused []string
			q := NewTenants(tt.give, WithOnRefused(func(tenant, reason string) { refused = append(refused, tenant+"/"+reason) }))
			var wantRefused []string
			for i, s := range tt.steps {
				err := q.AllowPublish("acme", s.msgs, s.bytes, t0.Add(s.at))
				if s.wantReason == "" {
					if err != nil {
						t.Fatalf("step %d (%d msgs, %d bytes at +%s): %v, want admitted", i, s.msgs, s.bytes, s.at, err)
					}
					continue
				}
				wantRefused = append(wantRefused, "acme/"+s.wantReason)
				r := wantRefusal(t, err, wire.CodeOverloaded, s.wantReason, s.wantRetry, s.wantReason, `tenant "acme"`)
				if we := wire.AsError(err); !strings.HasPrefix(we.Message, "tenant_quota: ") || we.Retry != wire.RetryAfter {
					t.Errorf("step %d: message %q, retry class %d; want it to start tenant_quota: with RetryAfter", i, we.Message, we.Retry)
				}
				if !errors.Is(err, wire.ErrOverloaded) {
					t.Errorf("step %d: errors.Is(%v, wire.ErrOverloaded) is false", i, err)
				}
				if r.RetryAfter <= 0 || r.Tenant != "acme" {
					t.Errorf("step %d: Refusal %+v, want a positive RetryAfter and tenant acme", i, r)
				}
			}
			if fmt.Sprint(refused) != fmt.Sprint(wantRefused) {
				t.Errorf("OnRefused calls = %q, want %q", refused, wantRefused)
			}
			if tt.give.PublishMsgsPerSec == 0 && tt.give.PublishBytesPerSec == 0 && q.Tracked() != 0 {
				t.Errorf("with every rate off the table holds %d tenants, want none", q.Tracked())
			}
		})
	}
}

// TestAllowPublishRates measures, in fake time, what a tenant publishing
// ten times its limit gets, and that another tenant publishing under the
// same limit at the same time gets everything it sends.
func TestAllowPublishRates(t *testing.T) {
	tests := []struct {
		name      string
		give      Config
		msgs      int   // per attempt, every millisecond
		bytes     int64 // per attempt
		rate      int64 // the limited quantity's rate
		countMsgs bool  // count msgs (else bytes) against rate
	}{
		{"msgs", Config{PublishMsgsPerSec: 1000}, 10, 100, 1000, true},
		{"bytes", Config{PublishBytesPerSec: 100_000}, 1, 1000, 100_000, false},
		{"both, bytes binding", Config{PublishMsgsPerSec: 1_000_000, PublishBytesPerSec: 50_000}, 2, 500, 50_000, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const seconds = 5
				q := NewTenants(tt.give)
				count := func(msgs int, bytes int64) int64 {
					if tt.countMsgs {
						return int64(msgs)
					}
					return bytes
				}
				// run publishes every interval for the test's duration and
				// returns what was admitted after the first second (which
				// spends the initial burst) and how many were refused.
				run := func(tenant string, msgs int, bytes int64, interval time.Duration) (admitted, refused int64) {
					start := time.Now()
					for time.Since(start) < (seconds+1)*time.Second {
						err := q.AllowPublish(tenant, msgs, bytes, time.Now())
						switch {
						case err != nil:
							refused++
						case time.Since(start) >= time.Second:
							admitted += count(msgs, bytes)
						}
						time.Sleep(interval)
					}
					return admitted, refused
				}
				var hot, quiet, quietRefused int64
				var wg sync.WaitGroup
				wg.Go(func() { hot, _ = run("hot", tt.msgs, tt.bytes, time.Millisecond) })
				// The quiet tenant sends half its rate in the same units.
				wg.Go(func() {
					quiet, quietRefused = run("quiet", tt.msgs, tt.bytes, 2*time.Duration(count(tt.msgs, tt.bytes))*time.Second/time.Duration(tt.rate))
				})
				wg.Wait()

				got, want := float64(hot)/seconds, float64(tt.rate)
				t.Logf("hot tenant: %.0f/s (limit %d/s); quiet tenant: %.0f/s, %d refused", got, tt.rate, float64(quiet)/seconds, quietRefused)
				if got < want*0.9 || got > want*1.1 {
					t.Errorf("tenant at 10x its limit got %.0f/s, want %.0f/s within 10%%", got, want)
				}
				if gotQuiet, wantQuiet := float64(quiet)/seconds, want/2; quietRefused != 0 || gotQuiet < wantQuiet*0.98 {
					t.Errorf("tenant at half its limit beside a hot one: got %.0f/s with %d refusals, want %.0f/s and none", gotQuiet, quietRefused, wantQuiet)
				}
			})
		})
	}
}

func TestSubscriptions(t *testing.T) {
	var refused []string
	q := NewTenants(Config{MaxSubscriptions: 2}, WithOnRefused(func(tenant, reason string) { refused = append(refused, tenant+"/"+reason) }))
	r1, err := q.AcquireSubscription("acme")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.AcquireSubscription("acme"); err != nil {
		t.Fatal(err)
	}
	_, err = q.AcquireSubscription("acme")
	wantRefusal(t, err, wire.CodeLimitExceeded, ReasonSubscriptions, `tenant "acme"`, "tenant_max_subscriptions 2")
	if _, err := q.AcquireSubscription("other"); err != nil {
		t.Fatalf("another tenant's subscription: %v, want admitted", err)
	}
	r1()
	r1() // idempotent: frees one slot, not two
	if _, err := q.AcquireSubscription("acme"); err != nil {
		t.Fatalf("after a release: %v", err)
	}
	if _, err := q.AcquireSubscription("acme"); err == nil {
		t.Fatal("a repeated release freed a second slot")
	}
	if want := []string{"acme/" + ReasonSubscriptions, "acme/" + ReasonSubscriptions}; fmt.Sprint(refused) != fmt.Sprint(want) {
		t.Errorf("OnRefused calls = %q, want %q", refused, want)
	}

	off := NewTenants(Config{})
	for range 100 {
		release, err := off.AcquireSubscription("acme")
		if err != nil {
			t.Fatalf("tenant_max_subscriptions off: %v", err)
		}
		release()
	}
	if off.Tracked() != 0 {
		t.Errorf("tenant_max_subscriptions off: the table holds %d tenants, want none", off.Tracked())
	}
}

func TestCheckStreams(t *testing.T) {
	tests := []struct {
		max, current int
		wantRefused  bool
	}{
		{max: 0, current: 0}, {max: 0, current: 1 << 20},
		{max: 3, current: 0}, {max: 3, current: 2},
		{max: 3, current: 3, wantRefused: true}, {max: 3, current: 4, wantRefused: true},
	}
	for _, tt := range tests {
		var refused []string
		q := NewTenants(Config{MaxStreams: tt.max}, WithOnRefused(func(tenant, reason string) { refused = append(refused, tenant+"/"+reason) }))
		err := q.CheckStreams("acme", tt.current)
		if !tt.wantRefused {
			if err != nil {
				t.Errorf("CheckStreams with max %d, current %d: %v, want nil", tt.max, tt.current, err)
			}
			continue
		}
		wantRefusal(t, err, wire.CodeLimitExceeded, ReasonStreams, fmt.Sprintf("tenant_max_streams %d", tt.max), "explicit and implicit")
		if len(refused) != 1 || refused[0] != "acme/"+ReasonStreams {
			t.Errorf("OnRefused calls = %q, want one for acme", refused)
		}
	}
}

// TestIdleTenantsForgotten: a sweep forgets tenants unused for the idle
// period, but never one with an open subscription or a bucket in debt.
func TestIdleTenantsForgotten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := NewTenants(Config{PublishBytesPerSec: 1000, MaxSubscriptions: 10}, WithIdleAfter(10*time.Second))
		for _, name := range []string{"a", "b", "c"} {
			if err := q.AllowPublish(name, 1, 10, time.Now()); err != nil {
				t.Fatal(err)
			}
		}
		release, err := q.AcquireSubscription("subscribed")
		if err != nil {
			t.Fatal(err)
		}
		if err := q.AllowPublish("in-debt", 1, 60_000, time.Now()); err != nil { // a minute's worth
			t.Fatal(err)
		}
		if q.Tracked() != 5 {
			t.Fatalf("Tracked() = %d, want 5", q.Tracked())
		}

		time.Sleep(11 * time.Second)
		if err := q.AllowPublish("new", 1, 10, time.Now()); err != nil {
			t.Fatal(err)
		}
		if got := tenantNames(q); got != "[in-debt new subscribed]" {
			t.Fatalf("after 11 idle seconds the table holds %s, want [in-debt new subscribed]", got)
		}

		release()
		time.Sleep(60 * time.Second)
		if err := q.AllowPublish("new", 1, 10, time.Now()); err != nil {
			t.Fatal(err)
		}
		if got := tenantNames(q); got != "[new]" {
			t.Fatalf("after the subscription ended and the debt was paid, the table holds %s, want [new]", got)
		}
		// A forgotten tenant comes back with a full bucket, as it would have
		// been: nothing was lost.
		if err := q.AllowPublish("a", 1, 1000, time.Now()); err != nil {
			t.Fatalf("a forgotten tenant's first second's worth: %v", err)
		}
	})
}

// TestInventedTenantsBounded: a client naming a new tenant on every publish
// grows the table only to the soft cap, then forced sweeps drop the entries
// whose buckets refilled, however recent.
func TestInventedTenantsBounded(t *testing.T) {
	q := NewTenants(Config{PublishMsgsPerSec: 100}, WithIdleAfter(time.Hour))
	q.softMax, q.mu.sweepAt = 64, 64
	now := t0
	for i := range 10_000 {
		now = now.Add(20 * time.Millisecond) // a bucket of 1 msg refills in 10ms
		if err := q.AllowPublish(fmt.Sprintf("tenant-%d", i), 1, 0, now); err != nil {
			t.Fatal(err)
		}
		if n := q.Tracked(); n > q.softMax+1 {
			t.Fatalf("after %d invented tenants the table holds %d, want at most %d", i+1, n, q.softMax+1)
		}
	}

	// Entries that cannot go (open subscriptions) let the table grow, with
	// a forced sweep each time it doubles rather than on every new tenant.
	q = NewTenants(Config{MaxSubscriptions: 1}, WithIdleAfter(time.Hour))
	q.softMax, q.mu.sweepAt = 64, 64
	for i := range 1000 {
		if _, err := q.AcquireSubscription(fmt.Sprintf("tenant-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if q.Tracked() != 1000 || q.mu.sweepAt != 1024 {
		t.Fatalf("1000 tenants with a subscription each: Tracked() = %d, next forced sweep at %d; want 1000, 1024", q.Tracked(), q.mu.sweepAt)
	}
}

// TestTenantsConcurrent: under -race, goroutines publish to shared tenants
// at one instant (synctest's clock stands still while they run) while
// another sweeps without pause, forgetting every tenant whose bucket is
// full, often between a caller's lookup and its lock. Each tenant is still
// admitted exactly one second's worth: no publish lands on a forgotten
// entry and none is counted twice. Subscriptions, acquired and released
// (twice, concurrently) alongside, never exceed their limit, which they
// would if a sweep forgot a tenant holding one.
func TestTenantsConcurrent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			// Many tenants with small bursts: a tenant's entry can be forgotten
			// only until its first publish (its bucket is full until then),
			// so the race this test is after needs many first publishes.
			tenants, workers, burst, maxSubs = 256, 8, 2, 3
			iters                            = 4 * tenants // 8*4 = 32 attempts per tenant
		)
		q := NewTenants(Config{PublishMsgsPerSec: burst, MaxSubscriptions: maxSubs})
		now := time.Now()
		var admitted, subs [tenants]atomic.Int64
		stop := make(chan struct{})
		sweeps := 0
		var sweeper sync.WaitGroup
		sweeper.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				q.mu.Lock()
				q.sweepLocked(now, true)
				q.mu.Unlock()
				sweeps++
				runtime.Gosched()
			}
		})
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for i := range iters {
					n := (w + i) % tenants
					name := fmt.Sprintf("tenant-%d", n)
					if release, err := q.AcquireSubscription(name); err == nil {
						if got := subs[n].Add(1); got > maxSubs {
							t.Errorf("%s has %d subscriptions open, tenant_max_subscriptions is %d", name, got, maxSubs)
						}
						subs[n].Add(-1)
						var both sync.WaitGroup
						both.Go(release)
						both.Go(release)
						both.Wait()
					}
					if q.AllowPublish(name, 1, 0, now) == nil {
						admitted[n].Add(1)
					}
				}
			})
		}
		wg.Wait()
		close(stop)
		sweeper.Wait()
		for n := range admitted {
			if got := admitted[n].Load(); got != burst {
				t.Errorf("tenant-%d was admitted %d msgs at one instant, want its burst %d", n, got, burst)
			}
		}
		t.Logf("%d sweeps ran alongside", sweeps)
	})
}

// TestForgottenBetweenLookupAndLock: a sweep that forgets a tenant after a
// caller found it and before the caller locked it makes the caller look it
// up again, so its publish is taken from the table's entry, not a lost one.
func TestForgottenBetweenLookupAndLock(t *testing.T) {
	q := NewTenants(Config{PublishMsgsPerSec: 1})
	sweeps := 0
	q.afterLookup = func() {
		if sweeps++; sweeps == 1 {
			q.mu.Lock()
			q.sweepLocked(t0, true) // the new entry's bucket is full: it goes
			q.mu.Unlock()
		}
	}
	if err := q.AllowPublish("acme", 1, 0, t0); err != nil {
		t.Fatal(err)
	}
	if sweeps != 2 {
		t.Fatalf("lock looked the tenant up %d times, want 2 (found, forgotten, found again)", sweeps)
	}
	if err := q.AllowPublish("acme", 1, 0, t0); err == nil {
		t.Fatal("a second publish at the same instant was admitted with a burst of 1: the first went to the forgotten entry")
	}
}

// tenantNames lists the table's tenants, sorted.
func tenantNames(q *Tenants) string {
	q.mu.Lock()
	defer q.mu.Unlock()
	var names []string
	for name := range q.mu.tenants {
		names = append(names, name)
	}
	slices.Sort(names)
	return fmt.Sprint(names)
}
