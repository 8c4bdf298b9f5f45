package quota

import (
	"container/list"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/getfelix/felix-go/wire"
)

// Connections bounds open client connections in two pools, so that
// connections which never authenticate cannot keep out one that does:
//
//   - Pre-auth: a connection the front end has accepted and that has not
//     authenticated yet (AcquirePreAuth), at most MaxPreAuthConnections in
//     all and MaxPreAuthConnectionsPerIP from one address. At the total
//     bound the oldest pre-auth connection is displaced (closed) to make
//     room for the new one, rather than the new one refused: a client
//     authenticates within a round trip of its handshake, so a flood must
//     open MaxPreAuthConnections connections in that round trip to push it
//     out, where refusing would let a slow flood hold every slot for the
//     auth timeout. At the per-address bound the new one is refused.
//   - Authenticated: a connection whose credential the broker accepted
//     (Acquire), at most MaxConnections in all, MaxConnectionsPerIP from
//     one address and MaxTenantConnections of one tenant; past them it is
//     refused. The tenant bound keeps one tenant from taking every place
//     of MaxConnections from the others, as the address bound keeps one
//     host from it.
//
// A connection holds a pre-auth slot from its accept until it
// authenticates (or ends), and an authenticated slot from then until it
// ends, so at most MaxConnections + MaxPreAuthConnections are open. Each
// per-address (and the per-tenant) table holds only keys with a
// connection in its pool, so it is bounded by the connections.
type Connections struct {
	max, maxPerIP, maxPerTenant int
	maxPreAuth, maxPreAuthPerIP int
	onRefused                   func(tenant, reason string)

	mu struct {
		sync.Mutex
		total     int
		perIP     map[netip.Addr]int // addresses with at least one authenticated connection; never a 0
		perTenant map[string]int     // tenants with at least one authenticated connection; never a 0
		// preAuth holds the pre-auth connections, oldest first: the
		// front is the one a new connection displaces at the bound.
		preAuth      list.List // of *preAuthConn
		preAuthPerIP map[netip.Addr]int
	}
}

// preAuthConn is one pre-auth connection in Connections.mu.preAuth.
type preAuthConn struct {
	ip       netip.Addr
	displace func()
	elem     *list.Element // nil once it left the pool (released or displaced)
}

// NewConnections returns the connection limits of cfg (its MaxConnections,
// MaxConnectionsPerIP, MaxTenantConnections, MaxPreAuthConnections and
// MaxPreAuthConnectionsPerIP; 0 turns each off).
func NewConnections(cfg Config, opts ...Option) *Connections {
	o := buildOptions(opts)
	c := &Connections{
		max: cfg.MaxConnections, maxPerIP: cfg.MaxConnectionsPerIP, maxPerTenant: cfg.MaxTenantConnections,
		maxPreAuth: cfg.MaxPreAuthConnections, maxPreAuthPerIP: cfg.MaxPreAuthConnectionsPerIP,
		onRefused: o.onRefused,
	}
	c.mu.perIP = make(map[netip.Addr]int)
	c.mu.perTenant = make(map[string]int)
	c.mu.preAuthPerIP = make(map[netip.Addr]int)
	return c
}

// AcquirePreAuth admits a connection from ip that has not authenticated
// yet, or refuses it with a *wire.Error of code limit_exceeded when ip has
// MaxPreAuthConnectionsPerIP pre-auth connections already. When the pool
// holds MaxPreAuthConnections, the oldest pre-auth connection leaves it
// and its displace is called (after the lock is released; it should close
// that connection, and must not call back into Connections). The
// displacement is reported to WithOnRefused under ReasonPreAuthConnections.
//
// The caller calls release once the connection has authenticated (and
// holds a slot from Acquire) or has ended, whichever comes first; it is
// safe to call more than once, from any goroutine, and after a
// displacement, which has released the slot already.
func (c *Connections) AcquirePreAuth(ip netip.Addr, displace func()) (release func(), err error) {
	ip = addrKey(ip)
	c.mu.Lock()
	if c.maxPreAuthPerIP > 0 && c.mu.preAuthPerIP[ip] >= c.maxPreAuthPerIP {
		c.mu.Unlock()
		return nil, c.refuse("", ReasonPreAuthConnectionsPerIP, c.maxPreAuthPerIP, "max_preauth_connections_per_ip %d reached for %s: that many connections from this address have not authenticated yet", c.maxPreAuthPerIP, ip)
	}
	var oldest *preAuthConn
	if c.maxPreAuth > 0 && c.mu.preAuth.Len() >= c.maxPreAuth {
		oldest = c.mu.preAuth.Front().Value.(*preAuthConn)
		c.leavePreAuthLocked(oldest)
	}
	pc := &preAuthConn{ip: ip, displace: displace}
	pc.elem = c.mu.preAuth.PushBack(pc)
	c.mu.preAuthPerIP[ip]++
	c.mu.Unlock()
	if oldest != nil {
		c.onRefused("", ReasonPreAuthConnections)
		if oldest.displace != nil {
			oldest.displace()
		}
	}
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if pc.elem != nil {
			c.leavePreAuthLocked(pc)
		}
	}, nil
}

// leavePreAuthLocked takes pc out of the pre-auth pool.
// REQUIRES: c.mu is held and pc is in the pool.
func (c *Connections) leavePreAuthLocked(pc *preAuthConn) {
	c.mu.preAuth.Remove(pc.elem)
	pc.elem = nil
	if n := c.mu.preAuthPerIP[pc.ip] - 1; n > 0 {
		c.mu.preAuthPerIP[pc.ip] = n
	} else {
		delete(c.mu.preAuthPerIP, pc.ip)
	}
}

// addrKey is the key of ip in the per-address tables: an IPv4-mapped IPv6
// address counts as its IPv4 address, and zones are dropped, so one client
// is one key however the listener reports it. An invalid ip (the front end
// could not tell) is one shared key.
func addrKey(ip netip.Addr) netip.Addr { return ip.Unmap().WithZone("") }

// Acquire admits one authenticated connection of tenant from ip, or
// refuses it with a *wire.Error of code limit_exceeded naming the limit and
// its value (and a *Refusal as its Cause). On success the caller must call
// release when the connection ends; release is safe to call more than once
// and from any goroutine, and only the first call counts.
// Addresses are keyed as for AcquirePreAuth.
func (c *Connections) Acquire(ip netip.Addr, tenant string) (release func(), err error) {
	ip = addrKey(ip)
	c.mu.Lock()
	switch {
	case c.max > 0 && c.mu.total >= c.max:
		c.mu.Unlock()
		return nil, c.refuse("", ReasonConnections, c.max, "max_client_connections %d reached; the broker accepts no more connections until one closes", c.max)
	case c.maxPerIP > 0 && c.mu.perIP[ip] >= c.maxPerIP:
		c.mu.Unlock()
		return nil, c.refuse("", ReasonConnectionsPerIP, c.maxPerIP, "max_connections_per_ip %d reached for %s; close a connection from this address first", c.maxPerIP, ip)
	case c.maxPerTenant > 0 && c.mu.perTenant[tenant] >= c.maxPerTenant:
		c.mu.Unlock()
		return nil, c.refuse(tenant, ReasonTenantConnections, c.maxPerTenant, "tenant_max_connections %d reached for tenant %q; close one of its connections first", c.maxPerTenant, tenant)
	}
	c.mu.total++
	c.mu.perIP[ip]++
	c.mu.perTenant[tenant]++
	c.mu.Unlock()

	var released atomic.Bool
	return func() {
		if released.Swap(true) {
			return
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		c.mu.total--
		// At zero a key leaves its table: the tables hold only open ones.
		if n := c.mu.perIP[ip] - 1; n > 0 {
			c.mu.perIP[ip] = n
		} else {
			delete(c.mu.perIP, ip)
		}
		if n := c.mu.perTenant[tenant] - 1; n > 0 {
			c.mu.perTenant[tenant] = n
		} else {
			delete(c.mu.perTenant, tenant)
		}
	}, nil
}

// Open returns the authenticated connections, the addresses they come
// from and the tenants they serve, for a gauge.
func (c *Connections) Open() (conns, addrs, tenants int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.total, len(c.mu.perIP), len(c.mu.perTenant)
}

// PreAuth returns the pre-auth connections and the addresses they come
// from, for a gauge.
func (c *Connections) PreAuth() (conns, addrs int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.preAuth.Len(), len(c.mu.preAuthPerIP)
}

func (c *Connections) refuse(tenant, reason string, limit int, format string, args ...any) error {
	c.onRefused(tenant, reason)
	e := wire.NewError(wire.CodeLimitExceeded, format, args...)
	e.Cause = &Refusal{Tenant: tenant, Reason: reason, Limit: int64(limit)}
	return e
}
