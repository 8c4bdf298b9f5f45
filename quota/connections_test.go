package quota

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/getfelix/felix-go/wire"
)

// wantRefusal checks that err is a *wire.Error of code whose message
// contains each of wants, with a *Refusal of reason as its Cause.
func wantRefusal(t *testing.T, err error, code wire.Code, reason string, wants ...string) *Refusal {
	t.Helper()
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != code {
		t.Fatalf("got error %v, want a *wire.Error of code %s", err, code)
	}
	for _, w := range wants {
		if !strings.Contains(we.Message, w) {
			t.Errorf("message %q does not contain %q", we.Message, w)
		}
	}
	var r *Refusal
	if !errors.As(err, &r) || r.Reason != reason {
		t.Fatalf("error %v: Cause is %#v, want a *Refusal of reason %s", err, r, reason)
	}
	return r
}

func TestConnectionsLimits(t *testing.T) {
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	mappedA := netip.MustParseAddr("::ffff:10.0.0.1")
	v6, v6zone := netip.MustParseAddr("fe80::1"), netip.MustParseAddr("fe80::1%eth0")
	tests := []struct {
		name       string
		give       Config
		ips        []netip.Addr // acquired in order, none released
		wantReason string       // of the last acquire; "" = all admitted
		wantMsg    string
	}{
		{"total", Config{MaxConnections: 2}, []netip.Addr{a, b, b}, ReasonConnections, "max_client_connections 2 reached"},
		{"per ip", Config{MaxConnectionsPerIP: 2}, []netip.Addr{a, a, b, a}, ReasonConnectionsPerIP, "max_connections_per_ip 2 reached for 10.0.0.1"},
		{"per ip admits another ip", Config{MaxConnectionsPerIP: 1}, []netip.Addr{a, b}, "", ""},
		{"total before per ip", Config{MaxConnections: 1, MaxConnectionsPerIP: 1}, []netip.Addr{a, a}, ReasonConnections, "max_client_connections 1"},
		{"mapped v4 is v4", Config{MaxConnectionsPerIP: 1}, []netip.Addr{a, mappedA}, ReasonConnectionsPerIP, "for 10.0.0.1"},
		{"zone dropped", Config{MaxConnectionsPerIP: 1}, []netip.Addr{v6, v6zone}, ReasonConnectionsPerIP, "for fe80::1;"},
		{"invalid addresses share a key", Config{MaxConnectionsPerIP: 1}, []netip.Addr{{}, {}}, ReasonConnectionsPerIP, "max_connections_per_ip 1"},
		{"zero is off", Config{}, []netip.Addr{a, a, a, a, a, b, b}, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var refused []string
			c := NewConnections(tt.give, WithOnRefused(func(tenant, reason string) { refused = append(refused, tenant+"/"+reason) }))
			var err error
			for i, ip := range tt.ips {
				if err != nil {
					t.Fatalf("acquire %d of %v refused early: %v", i-1, tt.ips, err)
				}
				_, err = c.Acquire(ip, "t")
			}
			if tt.wantReason == "" {
				if err != nil || len(refused) != 0 {
					t.Fatalf("acquire of %v: got %v (refusals %q), want all admitted", tt.ips, err, refused)
				}
				return
			}
			wantRefusal(t, err, wire.CodeLimitExceeded, tt.wantReason, tt.wantMsg)
			if want := []string{"/" + tt.wantReason}; fmt.Sprint(refused) != fmt.Sprint(want) {
				t.Errorf("OnRefused calls = %q, want %q", refused, want)
			}
		})
	}
}

// TestConnectionsReleaseIdempotent: a second release counts for nothing, and
// a released slot is admitted again.
func TestConnectionsReleaseIdempotent(t *testing.T) {
	ip := netip.MustParseAddr("192.0.2.7")
	c := NewConnections(Config{MaxConnections: 3, MaxConnectionsPerIP: 2})
	r1, err := c.Acquire(ip, "t")
	if err != nil {
		t.Fatal(err)
	}
	r2, err := c.Acquire(ip, "t")
	if err != nil {
		t.Fatal(err)
	}
	r1()
	r1()
	r1()
	if conns, addrs, tenants := c.Open(); conns != 1 || addrs != 1 || tenants != 1 {
		t.Fatalf("after releasing one of two three times: Open() = %d, %d, %d; want 1, 1, 1", conns, addrs, tenants)
	}
	if _, err := c.Acquire(ip, "t"); err != nil {
		t.Fatalf("acquire after a release: %v", err)
	}
	if _, err := c.Acquire(ip, "t"); err == nil {
		t.Fatal("third connection from one address admitted with max_connections_per_ip 2 (a repeated release counted twice?)")
	}
	r2()
	if conns, _, _ := c.Open(); conns != 1 {
		t.Fatalf("Open() = %d, want 1", conns)
	}
}

// TestConnectionsTableShrinks: the per-address table holds only addresses
// with an open connection, so a stream of clients from ever new addresses
// does not grow it.
func TestConnectionsTableShrinks(t *testing.T) {
	c := NewConnections(Config{MaxConnections: 8, MaxConnectionsPerIP: 2})
	var open []func()
	for i := range 10_000 {
		ip := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		release, err := c.Acquire(ip, "t")
		if err != nil {
			t.Fatalf("acquire %d from %s: %v", i, ip, err)
		}
		open = append(open, release)
		if len(open) == 4 {
			open[0]()
			open = open[1:]
		}
		if _, addrs, _ := c.Open(); addrs > 4 {
			t.Fatalf("after %d connections with 4 open, the table holds %d addresses", i+1, addrs)
		}
	}
	for _, release := range open {
		release()
	}
	if conns, addrs, tenants := c.Open(); conns != 0 || addrs != 0 || tenants != 0 || len(c.mu.perIP) != 0 || len(c.mu.perTenant) != 0 {
		t.Fatalf("all released: Open() = %d, %d, %d, tables %v %v; want 0, 0, 0, empty", conns, addrs, tenants, c.mu.perIP, c.mu.perTenant)
	}
}

// TestConnectionsConcurrent: under -race, many goroutines acquiring and
// releasing (each release called twice, concurrently) never exceed a limit,
// and the counts return to zero.
func TestConnectionsConcurrent(t *testing.T) {
	const (
		maxTotal, maxPerIP  = 20, 4
		ips, workers, iters = 8, 32, 500
	)
	c := NewConnections(Config{MaxConnections: maxTotal, MaxConnectionsPerIP: maxPerIP})
	var total atomic.Int64
	var perIP [ips]atomic.Int64
	var refusedTotal, refusedIP atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range iters {
				n := (w + i) % ips
				release, err := c.Acquire(netip.AddrFrom4([4]byte{192, 0, 2, byte(n)}), "t")
				if err != nil {
					var r *Refusal
					if !errors.As(err, &r) {
						t.Errorf("refusal without a *Refusal: %v", err)
						return
					}
					if r.Reason == ReasonConnections {
						refusedTotal.Add(1)
					} else {
						refusedIP.Add(1)
					}
					continue
				}
				if got := total.Add(1); got > maxTotal {
					t.Errorf("%d connections open, max_client_connections is %d", got, maxTotal)
				}
				if got := perIP[n].Add(1); got > maxPerIP {
					t.Errorf("%d connections open from one address, max_connections_per_ip is %d", got, maxPerIP)
				}
				perIP[n].Add(-1)
				total.Add(-1)
				var both sync.WaitGroup
				both.Go(release)
				both.Go(release)
				both.Wait()
			}
		})
	}
	wg.Wait()
	if conns, addrs, tenants := c.Open(); conns != 0 || addrs != 0 || tenants != 0 {
		t.Fatalf("every connection released: Open() = %d, %d, %d; want 0, 0, 0", conns, addrs, tenants)
	}
	t.Logf("refused %d on the total, %d per address", refusedTotal.Load(), refusedIP.Load())
}
