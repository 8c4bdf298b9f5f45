package admin

import (
	"fmt"
	"testing"
	"time"

	"github.com/getfelix/felix-go/wire"
)

// TestFanoutRates: nothing is counted before a page watches a stream; a
// watched stream counts its fan-out, others do not; a stream not read for
// rateWatchFor is forgotten; counting stops once every watch lapsed; at
// most maxRateWatches streams are watched at once.
func TestFanoutRates(t *testing.T) {
	var r FanoutRates
	a, b := wire.Scope{Tenant: "t", Namespace: "n", Stream: "a"}, wire.Scope{Tenant: "t", Namespace: "n", Stream: "b"}
	now := time.Now() // Count compares with the clock
	r.Count(a, 5)
	if n, ok := r.read(a, now); !ok || n != 0 {
		t.Fatalf("first read %d %t; want 0, watched from now", n, ok)
	}
	r.Count(a, 3)
	r.Count(b, 7)
	r.Count(a, 4)
	if n, _ := r.read(a, now.Add(time.Second)); n != 7 {
		t.Errorf("a counted %d, want 7", n)
	}
	if n, _ := r.read(a, now.Add(time.Second+rateWatchFor)); n != 7 {
		t.Errorf("a read within rateWatchFor of the last read: %d, want 7 kept", n)
	}
	// b's first read, long after a's last: a is forgotten.
	if n, _ := r.read(b, now.Add(3*time.Second+2*rateWatchFor)); n != 0 {
		t.Errorf("b's first read %d, want 0", n)
	}
	if _, watched := r.m[a]; watched || len(r.m) != 1 {
		t.Errorf("watched %v; want only b", r.m)
	}
	later := now.Add(time.Hour)
	for i := range maxRateWatches {
		if _, ok := r.read(wire.Scope{Tenant: "t", Namespace: "n", Stream: fmt.Sprint(i)}, later); !ok {
			t.Fatalf("watch %d refused below the bound", i)
		}
	}
	if _, ok := r.read(a, later); ok {
		t.Errorf("watch %d accepted past maxRateWatches", maxRateWatches+1)
	}
	// Past rateWatchFor every watch lapses: the next read clears them
	// and starts a's.
	if _, ok := r.read(a, later.Add(2*rateWatchFor)); !ok || len(r.m) != 1 {
		t.Errorf("after every watch lapsed: ok %t, %d watched; want a alone", ok, len(r.m))
	}
	// A page that stops reading: once its watch lapsed, Count turns
	// itself off.
	r.read(b, time.Now().Add(-2*rateWatchFor))
	r.Count(b, 1)
	if u := r.until.Load(); u != 0 {
		t.Errorf("counting still on (until %d) after every watch lapsed", u)
	}
	if n := r.m[b].records.Load(); n != 0 {
		t.Errorf("b counted %d after its watch lapsed", n)
	}
}
