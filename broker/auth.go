package broker

import (
	"fmt"
	"time"

	"github.com/getfelix/felix-go/auth"
	"github.com/getfelix/felix-go/authgate"
	"github.com/getfelix/felix-go/wire"
)

// Authentication and permission checks happen once, at the service
// boundary, in the authgate package: Open verifies the client's token into
// an auth.Principal, and every operation of the session checks it (tenant,
// action, resource, expiry) before it touches anything, so a refusal never
// reveals whether another tenant's stream exists.

// setupAuth makes the gate, after checking that an open broker (auth none)
// is meant.
func (b *Broker) setupAuth() (err error) {
	none := b.cfg.Auth == "none"
	if none {
		if !authgate.IsLoopback(b.cfg.Listen) && !b.cfg.AuthNoneAnywhere {
			return fmt.Errorf("broker: auth none on %s, which is not a loopback address: anyone who reaches it would get every right; listen on 127.0.0.1, use tokens, or set auth_none_anywhere (--auth-none-anywhere) to mean it", b.cfg.Listen)
		}
		b.log.Warn().Str("listen", b.cfg.Listen).Msg("auth none: every client gets every right on the tenant it names")
	}
	m := b.metrics
	b.gate, err = authgate.New(authgate.Config{
		None: none, DataDir: b.cfg.DataDir, KeyFile: b.cfg.AuthKeys, Audience: b.cfg.AuthAudience,
		Failures:  b.authFailures,
		Refused:   func(reason string) { m.AuthRefused.WithLabelValues(reason).Inc() },
		Failed:    func(frontend string) { m.AuthFailures.WithLabelValues(frontend).Inc() },
		Throttled: func(frontend string) { m.AuthThrottled.WithLabelValues(frontend).Inc() },
		Log:       b.log,
	}, time.Now())
	return err
}

// ReloadKeys reads --auth-keys again (the broker does it on SIGHUP). A bad
// file keeps the keys in force and returns the error.
func (b *Broker) ReloadKeys() error { return b.gate.ReloadKeys() }

// AuthorizeNode checks a bearer token for a node action (the admin
// endpoint's debug and chaos routes): authgate.Gate.AuthorizeNode.
func (b *Broker) AuthorizeNode(token string, action auth.Action, tenant string) error {
	return b.gate.AuthorizeNode(token, action, tenant, time.Now())
}

// authorize checks the session's principal for action on scope.
func (c *conn) authorize(action auth.Action, scope wire.Scope) error {
	return c.authorizeBy(scope, func(p *auth.Principal) error { return p.Check(action, scope) })
}

// authorizeBy is authorize with the principal's check given (a cache's
// checks name keys).
func (c *conn) authorizeBy(scope wire.Scope, check func(*auth.Principal) error) error {
	return c.b.gate.Authorize(c.principal.Load(), scope, time.Now(), check)
}

// warnExposed logs each listener bound to an address other than loopback:
// reachable from the network is fine when meant, and worth a line when not.
func (b *Broker) warnExposed() {
	if !authgate.IsLoopback(b.cfg.Listen) {
		msg := "listening on a non-loopback address: clients on the network can connect (each needs a token)"
		if !b.gate.Tokens() {
			msg = "listening on a non-loopback address with auth none: anyone who reaches it gets every right"
		}
		b.log.Warn().Str("listen", b.Addr().String()).Msg(msg)
	}
	if b.admin != nil && !authgate.IsLoopback(b.cfg.Admin) {
		b.log.Warn().Str("admin", b.admin.Addr().String()).
			Msg("admin endpoint on a non-loopback address: /metrics, /live and /ready are open to whoever reaches it; /debug needs a token with node.view, chaos node.manage")
	}
}
