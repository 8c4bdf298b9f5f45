package quota

import (
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/getfelix/felix-go/wire"
)

// Connections bounds open client connections: MaxConnections in total and
// MaxConnectionsPerIP from one address. The transport calls Acquire when it
// accepts a connection and the returned release when that connection ends,
// on every end path; its per-address table holds only addresses with a
// connection open, so it is bounded by the open connections.
type Connections struct {
	max, maxPerIP int
	onRefused     func(tenant, reason string)

	mu struct {
		sync.Mutex
		total int
		perIP map[netip.Addr]int // addresses with at least one open connection; never a 0
	}
}

// NewConnections returns the connection limits of cfg (its MaxConnections
// and MaxConnectionsPerIP; 0 turns either off).
func NewConnections(cfg Config, opts ...Option) *Connections {
	o := buildOptions(opts)
	c := &Connections{max: cfg.MaxConnections, maxPerIP: cfg.MaxConnectionsPerIP, onRefused: o.onRefused}
	c.mu.perIP = make(map[netip.Addr]int)
	return c
}

// Acquire admits one connection from ip, or refuses it with a *wire.Error
// of code limit_exceeded naming the limit and its value (and a *Refusal as
// its Cause). On success the caller must call release when the connection
// ends; release is safe to call more than once and from any goroutine, and
// only the first call counts.
//
// An IPv4-mapped IPv6 address counts as its IPv4 address, and zones are
// dropped, so one client is one key however the listener reports it. An
// invalid ip (the transport could not tell) counts under one shared key.
func (c *Connections) Acquire(ip netip.Addr) (release func(), err error) {
	ip = ip.Unmap().WithZone("")
	c.mu.Lock()
	switch {
	case c.max > 0 && c.mu.total >= c.max:
		c.mu.Unlock()
		return nil, c.refuse(ReasonConnections, c.max, "max_client_connections %d reached; the broker accepts no more connections until one closes", c.max)
	case c.maxPerIP > 0 && c.mu.perIP[ip] >= c.maxPerIP:
		c.mu.Unlock()
		return nil, c.refuse(ReasonConnectionsPerIP, c.maxPerIP, "max_connections_per_ip %d reached for %s; close a connection from this address first", c.maxPerIP, ip)
	}
	c.mu.total++
	c.mu.perIP[ip]++
	c.mu.Unlock()

	var released atomic.Bool
	return func() {
		if released.Swap(true) {
			return
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		c.mu.total--
		if n := c.mu.perIP[ip] - 1; n > 0 {
			c.mu.perIP[ip] = n
		} else {
			delete(c.mu.perIP, ip) // at zero: the table holds only open addresses
		}
	}, nil
}

// Open returns the open connections and the addresses they come from, for a
// gauge.
func (c *Connections) Open() (conns, addrs int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.total, len(c.mu.perIP)
}

func (c *Connections) refuse(reason string, limit int, format string, args ...any) error {
	c.onRefused("", reason)
	e := wire.NewError(wire.CodeLimitExceeded, format, args...)
	e.Cause = &Refusal{Reason: reason, Limit: int64(limit)}
	return e
}
