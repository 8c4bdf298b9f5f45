// Package authgate is the service boundary's authentication and its checks
// of a principal, once per call, for every front end: a client's token
// verified into an auth.Principal (or, under auth none, every right on
// the tenant it names), any credential a front end carries checked under
// the failed-authentication limiter (quota.AuthFailures), a bearer token
// checked for a node action (the admin endpoint's routes), and a
// principal checked for an action on a stream before a call touches
// anything: the broker's own streams (names starting __felix.) refused
// first, then an expired principal, then the grant, so a refusal is the
// same whether the stream exists or not. Each refusal is counted through
// the Config's hooks, by reason.
//
// It holds the verifier (the data directory's own key, made with
// admin.token on first start, plus auth_keys) and reloads its keys; it
// knows no actor, stream or front end.
package authgate

import (
	"errors"
	"net"
	"time"

	"github.com/rs/zerolog"

	"github.com/getfelix/felix-go/auth"
	"github.com/getfelix/felix-go/quota"
	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/wire"
)

// NoExpiry is when a principal that does not expire expires (auth none, a
// Kafka SCRAM user, the admin routes' sessions): never, in practice.
var NoExpiry = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// ErrNoKeys is ReloadKeys' answer under auth none.
var ErrNoKeys = errors.New("authgate: auth is none: there are no keys to reload")

// Config is what a Gate needs of the broker that assembles it.
type Config struct {
	// None is auth none: no credential is checked and every client gets
	// every right on the tenant it names.
	None bool
	// DataDir holds the local signing key and admin.token
	// (auth.EnsureLocal); KeyFile is auth_keys ("" for none); Audience
	// the tokens' (auth_audience; "" for auth.DefaultAudience).
	DataDir, KeyFile, Audience string
	// Failures limits an address's failed authentications.
	Failures *quota.AuthFailures
	// Refused counts a refused credential or operation by reason
	// (felix_auth_refused_total); Failed a credential checked and failed,
	// Throttled one refused unchecked, each by front end
	// (service.Client.Frontend).
	Refused, Failed, Throttled func(string)
	Log                        zerolog.Logger
}

// Gate checks credentials and principals; one per broker.
type Gate struct {
	cfg Config
	// verifier checks tokens; nil under auth none.
	verifier *auth.Verifier
}

// New makes the gate over cfg: under auth jwt, the data directory's own
// key (created with admin.token on first start) and cfg.KeyFile's verify
// tokens.
func New(cfg Config, now time.Time) (*Gate, error) {
	g := &Gate{cfg: cfg}
	if cfg.None {
		return g, nil
	}
	local, err := auth.EnsureLocal(cfg.DataDir, now)
	if err != nil {
		return nil, err
	}
	if local.Minted {
		cfg.Log.Info().Str("path", local.AdminTokenPath).Msg("wrote admin.token: full rights on tenant default; clients started in this folder use it")
	}
	g.verifier, err = auth.NewVerifier(auth.Config{KeyFile: cfg.KeyFile, Trusted: []auth.Key{local.Key}, Audience: cfg.Audience})
	if err != nil {
		return nil, err
	}
	return g, nil
}

// Tokens reports whether clients present tokens: false under auth none.
func (g *Gate) Tokens() bool { return g.verifier != nil }

// ReloadKeys reads auth_keys again. A bad file keeps the keys in force
// and returns the error.
func (g *Gate) ReloadKeys() error {
	if g.verifier == nil {
		return ErrNoKeys
	}
	if err := g.verifier.Reload(); err != nil {
		g.cfg.Log.Error().Err(err).Msg("reload auth keys; keeping the keys in force")
		return err
	}
	g.cfg.Log.Info().Int("keys", g.verifier.KeySet().Len()).Msg("reloaded auth keys")
	return nil
}

// Authenticate turns a client's credentials (its tenant, and token for the
// handshake or a re-authentication) into its principal. An address whose
// authentications keep failing is refused before its token is checked
// (CheckCredential): a guesser costs the broker no signature check then.
func (g *Gate) Authenticate(client service.Client, token string, now time.Time) (*auth.Principal, error) {
	if g.verifier == nil {
		return &auth.Principal{Tenant: client.Tenant, Grants: auth.AdminGrants(), Expires: NoExpiry}, nil
	}
	var p *auth.Principal
	err := g.CheckCredential(client, now, func() (err error) {
		p, err = g.verify(client.Tenant, token, now)
		return err
	})
	return p, err
}

// CheckCredential runs check, one check of a credential client presented
// (a token; any other mechanism a front end carries, such as a Kafka
// SCRAM step, goes through it the same way), under the failed-
// authentication limiter, and counts the outcome by client.Frontend: a
// throttled address is refused before check runs, and a failed check
// counts against the address.
func (g *Gate) CheckCredential(client service.Client, now time.Time, check func() error) error {
	ip := quota.RemoteIP(client.Remote)
	if err := g.cfg.Failures.Allow(ip, now); err != nil {
		g.cfg.Throttled(client.Frontend)
		return err
	}
	err := check()
	if err != nil {
		g.cfg.Failures.Failed(ip, now)
		g.cfg.Failed(client.Frontend)
	}
	return err
}

// verify checks token for tenant.
func (g *Gate) verify(tenant, token string, now time.Time) (*auth.Principal, error) {
	if token == "" {
		g.cfg.Refused("no_token")
		return nil, wire.NewError(wire.CodeUnauthenticated, "no token: pass one (felix --token, FELIX_TOKEN, client.Options.Token); on the broker's machine `felix token create` mints one, and a client started in the broker's folder uses its felix-data/admin.token")
	}
	p, err := g.verifier.Verify(token, now)
	if err != nil {
		g.cfg.Refused("invalid_token")
		return nil, err
	}
	if p.Tenant != tenant {
		g.cfg.Refused("wrong_tenant")
		return nil, wire.NewError(wire.CodeUnauthenticated, "the token is for tenant %q, the connection named tenant %q: connect as %q", p.Tenant, tenant, p.Tenant)
	}
	return p, nil
}

// AuthorizeNode checks a bearer token for a node action (the admin
// endpoint's debug and chaos routes): on the node as a whole, or with
// tenant not "" on that tenant's streams only (auth.Principal.CheckNodeTenant).
// Under auth none everything is allowed.
func (g *Gate) AuthorizeNode(token string, action auth.Action, tenant string, now time.Time) error {
	if g.verifier == nil {
		return nil
	}
	if token == "" {
		return wire.NewError(wire.CodeUnauthenticated, "this route needs a bearer token with %s (Authorization: Bearer TOKEN; felix tree and felix chaos send felix-data/admin.token or --token)", action)
	}
	p, err := g.verifier.Verify(token, now)
	if err != nil {
		return err
	}
	if tenant != "" {
		return p.CheckNodeTenant(action, tenant)
	}
	return p.CheckNode(action)
}

// Authorize checks p for a call on scope at now: the broker's own streams
// are refused (they are reached only through what they serve: a durable
// stream's groups' state), then an expired principal, then what check
// says of p (p.Check of an action; a cache's checks name keys).
func (g *Gate) Authorize(p *auth.Principal, scope wire.Scope, now time.Time, check func(*auth.Principal) error) error {
	if wire.IsReservedStream(scope.Stream) {
		return wire.NewError(wire.CodeInvalidRequest, "stream name %q is reserved for the broker (names starting %q)", scope.Stream, "__felix.")
	}
	if err := g.Live(p, now); err != nil {
		return err
	}
	if err := check(p); err != nil {
		g.cfg.Refused("forbidden")
		return err
	}
	return nil
}

// Live refuses p once it expired, as a call of any kind is refused then.
func (g *Gate) Live(p *auth.Principal, now time.Time) error {
	if p.Expired(now) {
		g.cfg.Refused("expired")
		return wire.NewError(wire.CodeUnauthenticated, "the connection's token expired at %s; re-authenticate with a fresh token", p.Expires.UTC().Format(time.RFC3339))
	}
	return nil
}

// MayList reports whether p may see scope in a listing: any stream action
// on it.
func MayList(p *auth.Principal, scope wire.Scope) bool {
	for _, a := range []auth.Action{auth.ActionStreamManage, auth.ActionStreamPublish, auth.ActionStreamSubscribe} {
		if p.Check(a, scope) == nil {
			return true
		}
	}
	return false
}

// IsLoopback reports whether addr's host is a loopback address or
// localhost; an empty host (every interface) is not.
func IsLoopback(addr string) bool {
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
