package broker

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/getfelix/felix-go/auth"
	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/wire"
)

// Authentication and permission checks happen here, once, at the service
// boundary: Open verifies the client's token into an auth.Principal, and
// every operation of the session checks it (tenant, action, resource,
// expiry) before it touches anything, so a refusal never reveals whether
// another tenant's stream exists.

// noAuthExpiry is when an auth-none principal expires: never, in practice.
var noAuthExpiry = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// setupAuth prepares the verifier (auth jwt: the data directory's own key,
// created with admin.token on first start, plus --auth-keys) or checks that
// an open broker is meant (auth none).
func (b *Broker) setupAuth() error {
	if b.cfg.Auth == "none" {
		if !isLoopback(b.cfg.Listen) && !b.cfg.AuthNoneAnywhere {
			return fmt.Errorf("broker: auth none on %s, which is not a loopback address: anyone who reaches it would get every right; listen on 127.0.0.1, use tokens, or set auth_none_anywhere (--auth-none-anywhere) to mean it", b.cfg.Listen)
		}
		b.log.Warn().Str("listen", b.cfg.Listen).Msg("auth none: every client gets every right on the tenant it names")
		return nil
	}
	local, err := auth.EnsureLocal(b.cfg.DataDir, time.Now())
	if err != nil {
		return err
	}
	if local.Minted {
		b.log.Info().Str("path", local.AdminTokenPath).Msg("wrote admin.token: full rights on tenant default; clients started in this folder use it")
	}
	b.verifier, err = auth.NewVerifier(auth.Config{KeyFile: b.cfg.AuthKeys, Trusted: []auth.Key{local.Key}, Audience: b.cfg.AuthAudience})
	return err
}

// ReloadKeys reads --auth-keys again (the broker does it on SIGHUP). A bad
// file keeps the keys in force and returns the error.
func (b *Broker) ReloadKeys() error {
	if b.verifier == nil {
		return errors.New("broker: auth is none: there are no keys to reload")
	}
	if err := b.verifier.Reload(); err != nil {
		b.log.Error().Err(err).Msg("reload auth keys; keeping the keys in force")
		return err
	}
	b.log.Info().Int("keys", b.verifier.KeySet().Len()).Msg("reloaded auth keys")
	return nil
}

// authenticate turns a client's credentials (its tenant, and token for the
// handshake or a re-authentication) into its principal. An address whose
// authentications keep failing is refused before its token is checked
// (quota.AuthFailures): a guesser costs the broker no signature check then.
func (b *Broker) authenticate(client service.Client, token string, now time.Time) (*auth.Principal, error) {
	if b.verifier == nil {
		return &auth.Principal{Tenant: client.Tenant, Grants: auth.AdminGrants(), Expires: noAuthExpiry}, nil
	}
	var p *auth.Principal
	err := b.checkCredential(client, now, func() (err error) {
		p, err = b.verify(client.Tenant, token, now)
		return err
	})
	return p, err
}

// checkCredential runs check, one check of a credential client presented
// (a token here; any other mechanism a front end carries goes through it
// the same way), under the failed-authentication limiter, and counts the
// outcome by client.Frontend: a throttled address is refused before check
// runs, and a failed check counts against the address.
func (b *Broker) checkCredential(client service.Client, now time.Time, check func() error) error {
	ip := remoteIP(client.Remote)
	if err := b.authFailures.Allow(ip, now); err != nil {
		b.metrics.AuthThrottled.WithLabelValues(client.Frontend).Inc()
		return err
	}
	err := check()
	if err != nil {
		b.authFailures.Failed(ip, now)
		b.metrics.AuthFailures.WithLabelValues(client.Frontend).Inc()
	}
	return err
}

// verify checks token for tenant.
func (b *Broker) verify(tenant, token string, now time.Time) (*auth.Principal, error) {
	if token == "" {
		b.metrics.AuthRefused.WithLabelValues("no_token").Inc()
		return nil, wire.NewError(wire.CodeUnauthenticated, "no token: pass one (felix --token, FELIX_TOKEN, client.Options.Token); on the broker's machine `felix token create` mints one, and a client started in the broker's folder uses its felix-data/admin.token")
	}
	p, err := b.verifier.Verify(token, now)
	if err != nil {
		b.metrics.AuthRefused.WithLabelValues("invalid_token").Inc()
		return nil, err
	}
	if p.Tenant != tenant {
		b.metrics.AuthRefused.WithLabelValues("wrong_tenant").Inc()
		return nil, wire.NewError(wire.CodeUnauthenticated, "the token is for tenant %q, the connection named tenant %q: connect as %q", p.Tenant, tenant, p.Tenant)
	}
	return p, nil
}

// AuthorizeNode checks a bearer token for a node action (the admin
// endpoint's debug and chaos routes): on the node as a whole, or with
// tenant not "" on that tenant's streams only (auth.Principal.CheckNodeTenant).
// With auth none everything is allowed.
func (b *Broker) AuthorizeNode(token string, action auth.Action, tenant string) error {
	if b.verifier == nil {
		return nil
	}
	if token == "" {
		return wire.NewError(wire.CodeUnauthenticated, "this route needs a bearer token with %s (Authorization: Bearer TOKEN; felix tree and felix chaos send felix-data/admin.token or --token)", action)
	}
	p, err := b.verifier.Verify(token, time.Now())
	if err != nil {
		return err
	}
	if tenant != "" {
		return p.CheckNodeTenant(action, tenant)
	}
	return p.CheckNode(action)
}

// authorize checks the session's principal for action on scope.
func (c *conn) authorize(action auth.Action, scope wire.Scope) error {
	return c.authorizeBy(scope, func(p *auth.Principal) error { return p.Check(action, scope) })
}

// authorizeBy is authorize with the principal's check given (a cache's
// checks name keys).
func (c *conn) authorizeBy(scope wire.Scope, check func(*auth.Principal) error) error {
	if wire.IsReservedStream(scope.Stream) {
		// The broker's own streams (a durable stream's groups' state) are
		// reached only through what they serve.
		return wire.NewError(wire.CodeInvalidRequest, "stream name %q is reserved for the broker (names starting %q)", scope.Stream, "__felix.")
	}
	p := c.principal.Load()
	if p.Expired(time.Now()) {
		c.b.metrics.AuthRefused.WithLabelValues("expired").Inc()
		return wire.NewError(wire.CodeUnauthenticated, "the connection's token expired at %s; re-authenticate with a fresh token", p.Expires.UTC().Format(time.RFC3339))
	}
	if err := check(p); err != nil {
		c.b.metrics.AuthRefused.WithLabelValues("forbidden").Inc()
		return err
	}
	return nil
}

// mayList reports whether the principal may see scope in a listing: any
// stream action on it.
func mayList(p *auth.Principal, scope wire.Scope) bool {
	for _, a := range []auth.Action{auth.ActionStreamManage, auth.ActionStreamPublish, auth.ActionStreamSubscribe} {
		if p.Check(a, scope) == nil {
			return true
		}
	}
	return false
}

// warnExposed logs each listener bound to an address other than loopback:
// reachable from the network is fine when meant, and worth a line when not.
func (b *Broker) warnExposed() {
	if !isLoopback(b.cfg.Listen) {
		msg := "listening on a non-loopback address: clients on the network can connect (each needs a token)"
		if b.verifier == nil {
			msg = "listening on a non-loopback address with auth none: anyone who reaches it gets every right"
		}
		b.log.Warn().Str("listen", b.Addr().String()).Msg(msg)
	}
	if b.admin != nil && !isLoopback(b.cfg.Admin) {
		b.log.Warn().Str("admin", b.admin.Addr().String()).
			Msg("admin endpoint on a non-loopback address: /metrics, /live and /ready are open to whoever reaches it; /debug needs a token with node.view, chaos node.manage")
	}
}

// isLoopback reports whether addr's host is a loopback address or
// localhost; an empty host (every interface) is not.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
