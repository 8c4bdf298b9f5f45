package quota

import (
	"errors"
	"net/netip"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestAuthFailuresRetryAfter: on the limiter's own clock, a throttled
// address is allowed again exactly when its refusal said.
func TestAuthFailuresRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := NewAuthFailures(Config{AuthFailureBurst: 2, AuthFailureInterval: time.Second})
		ip := netip.MustParseAddr("192.0.2.1")
		a.Failed(ip, time.Now())
		time.Sleep(250 * time.Millisecond)
		a.Failed(ip, time.Now())
		err := a.Allow(ip, time.Now())
		var r *Refusal
		if !errors.As(err, &r) || r.RetryAfter != 750*time.Millisecond {
			t.Fatalf("after 2 failures 250 ms apart with burst 2: %v (refusal %+v), want throttled with retry after 750ms", err, r)
		}
		time.Sleep(r.RetryAfter - time.Millisecond)
		if a.Allow(ip, time.Now()) == nil {
			t.Fatal("allowed 1 ms before the retry-after it was given")
		}
		time.Sleep(time.Millisecond)
		if err := a.Allow(ip, time.Now()); err != nil {
			t.Fatalf("at the retry-after it was given: %v", err)
		}
	})
}

// TestAuthFailuresBounded: failures from many more addresses than the
// table holds, from many goroutines, never grow it past its bound, and
// the addresses that failed most recently are the ones it remembers.
func TestAuthFailuresBounded(t *testing.T) {
	const max, addrs, workers = 64, 4096, 8
	a := NewAuthFailures(Config{AuthFailureBurst: 1, AuthFailureInterval: time.Hour, AuthFailureMaxAddresses: max})
	now := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < addrs; i += workers {
				ip := netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})
				_ = a.Allow(ip, now)
				a.Failed(ip, now)
				if n := a.Addresses(); n > max {
					t.Errorf("table holds %d addresses, bound %d", n, max)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := a.Addresses(); n != max {
		t.Fatalf("table holds %d addresses after %d failed, want its bound %d", n, addrs, max)
	}
	// The newest max failures push every earlier address out, and are
	// all still throttled.
	for i := range max {
		a.Failed(netip.AddrFrom4([4]byte{11, 0, 0, byte(i)}), now)
	}
	for i := range max {
		if ip := netip.AddrFrom4([4]byte{11, 0, 0, byte(i)}); a.Allow(ip, now) == nil {
			t.Fatalf("%s, among the last %d to fail, is not throttled", ip, max)
		}
	}
	if ip := netip.AddrFrom4([4]byte{10, 0, 0, 1}); a.Allow(ip, now) != nil {
		t.Fatalf("%s, pushed out of the table, is still throttled", ip)
	}
}
