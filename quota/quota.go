// Package quota holds the broker's admission limits, which the broker
// checks once, at its service boundary:
//
//   - Connections bounds open client connections, in total, per IP and (once
//     authenticated) per tenant, in two pools: those still authenticating and those authenticated, so a
//     flood of the first cannot keep out the second.
//   - AuthFailures throttles an address whose authentications keep failing,
//     before its credentials are checked.
//   - Tenants holds each tenant to its publish rates (records and payload
//     bytes per second) and counts its open subscriptions; it also checks a
//     tenant's stream count, which the broker's registry owns.
//
// Every refusal is a *wire.Error, so the broker sends it as it is:
// limit_exceeded for a bound on things held open (connections, streams,
// subscriptions), overloaded with a message starting "tenant_quota:" for a
// rate, or "auth_throttled:" for failed authentications. The error's
// Cause is a *Refusal, which says which limit, its value and, for a rate,
// when to retry; errors.As reaches it through the wire.Error.
//
// Nothing here blocks, waits or starts a goroutine: a refusal is immediate
// and the client retries. The package imports only wire from this module,
// and knows no metrics: the broker passes WithOnRefused to count refusals.
//
// Lock order: Tenants.mu -> tenant.mu (the sweep holds both; everything
// else takes one at a time). Connections and AuthFailures have one lock
// each.
package quota

import (
	"fmt"
	"net"
	"net/netip"
	"time"
)

// Config is the limits, as the broker's config knobs of the same names set
// them. Zero turns each limit off, so the zero Config limits nothing.
type Config struct {
	// MaxConnections bounds authenticated connections
	// (max_client_connections).
	MaxConnections int
	// MaxConnectionsPerIP bounds authenticated connections from one
	// address (max_connections_per_ip).
	MaxConnectionsPerIP int
	// MaxTenantConnections bounds one tenant's authenticated connections,
	// from every address (tenant_max_connections).
	MaxTenantConnections int
	// MaxPreAuthConnections bounds connections that have not authenticated
	// yet (max_preauth_connections); at the bound the oldest is displaced.
	MaxPreAuthConnections int
	// MaxPreAuthConnectionsPerIP bounds those from one address
	// (max_preauth_connections_per_ip).
	MaxPreAuthConnectionsPerIP int
	// PublishBytesPerSec is each tenant's rate in payload bytes
	// (tenant_publish_bytes_per_sec), with a burst of one second's worth.
	PublishBytesPerSec int64
	// PublishMsgsPerSec is each tenant's rate in records
	// (tenant_publish_msgs_per_sec), with a burst of one second's worth.
	PublishMsgsPerSec int64
	// MaxStreams bounds a tenant's streams, explicit and implicit together
	// (tenant_max_streams).
	MaxStreams int
	// MaxSubscriptions bounds a tenant's open subscriptions over all its
	// connections (tenant_max_subscriptions).
	MaxSubscriptions int
	// AuthFailureBurst is how many failed authentications one address may
	// have checked before AuthFailures throttles it (auth_failure_burst);
	// AuthFailureInterval gives one back (auth_failure_interval_ms, 1 s
	// when zero); AuthFailureMaxAddresses bounds the addresses it
	// remembers (auth_failure_max_addresses, 16384 when zero).
	AuthFailureBurst        int
	AuthFailureInterval     time.Duration
	AuthFailureMaxAddresses int
}

// Reasons name the limit a refusal hit. They are the knob names, so a
// metric labelled with one tells the operator which knob to look at.
const (
	ReasonConnections       = "max_client_connections"
	ReasonConnectionsPerIP  = "max_connections_per_ip"
	ReasonTenantConnections = "tenant_max_connections"
	// ReasonPreAuthConnections is a pre-auth connection displaced by a
	// newer one, not a refusal of the newcomer.
	ReasonPreAuthConnections      = "max_preauth_connections"
	ReasonPreAuthConnectionsPerIP = "max_preauth_connections_per_ip"
	ReasonPublishBytes            = "tenant_publish_bytes_per_sec"
	ReasonPublishMsgs             = "tenant_publish_msgs_per_sec"
	ReasonStreams                 = "tenant_max_streams"
	ReasonSubscriptions           = "tenant_max_subscriptions"
	ReasonAuthFailures            = "auth_failure_burst"
)

// Refusal is the broker-side detail of a refused admission: the Cause of the
// *wire.Error this package returns. It never travels; its facts are in the
// wire error's message.
type Refusal struct {
	Tenant string // empty for the limits that do not count by tenant
	Reason string // one of the Reason* constants
	Limit  int64  // the limit's configured value
	// RetryAfter is when the refused publish would pass if nothing else
	// were published meanwhile; zero for limits on things held open, which
	// pass only once one of them is released.
	RetryAfter time.Duration
}

func (r *Refusal) Error() string {
	if r.Tenant == "" {
		return fmt.Sprintf("%s %d reached", r.Reason, r.Limit)
	}
	return fmt.Sprintf("tenant %q: %s %d reached", r.Tenant, r.Reason, r.Limit)
}

// Option configures Connections or Tenants.
type Option func(*options)

type options struct {
	onRefused func(tenant, reason string)
	idleAfter time.Duration
}

// WithOnRefused calls fn once for every refusal, with the tenant (empty for
// connection limits) and the Reason* constant, so the broker can count
// refusals in its metrics. fn runs on the refused caller's goroutine, after
// this package has released its locks; it should be quick.
func WithOnRefused(fn func(tenant, reason string)) Option {
	return func(o *options) { o.onRefused = fn }
}

// WithIdleAfter sets how long a tenant goes unused before Tenants may forget
// it, overriding the default of one minute (defaultIdleAfter). Connections
// ignores it.
func WithIdleAfter(d time.Duration) Option {
	return func(o *options) { o.idleAfter = d }
}

func buildOptions(opts []Option) options {
	o := options{onRefused: func(string, string) {}, idleAfter: defaultIdleAfter}
	for _, opt := range opts {
		opt(&o)
	}
	if o.onRefused == nil {
		o.onRefused = func(string, string) {}
	}
	if o.idleAfter <= 0 {
		o.idleAfter = defaultIdleAfter
	}
	return o
}

// RemoteIP is a front end's remote address as the limits key it (the
// connection and failed-authentication limits): the zero Addr, one shared
// key, when it is neither felix/1's UDP nor Kafka's and the browsers' TCP.
func RemoteIP(remote net.Addr) netip.Addr {
	switch a := remote.(type) {
	case *net.UDPAddr:
		return a.AddrPort().Addr()
	case *net.TCPAddr:
		return a.AddrPort().Addr()
	}
	return netip.Addr{}
}
