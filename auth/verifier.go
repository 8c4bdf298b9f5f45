package auth

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/getfelix/felix-go/wire"
)

const (
	// DefaultAudience is the audience a token must name ("aud") unless
	// Config.Audience says otherwise.
	DefaultAudience = "felix"
	// DefaultLeeway is how far exp, nbf and iat may be off the verifier's
	// clock: enough for hosts kept by NTP, short against a token's life
	// (felix token create mints for an hour by default).
	DefaultLeeway = 30 * time.Second
	// MaxTokenLen bounds a token; longer ones are refused before parsing.
	// A token with a few dozen grants and an RS256 signature is under 2 KiB.
	MaxTokenLen = 8 << 10
)

// allowedAlgorithms is the only list given to go-jose: everything else,
// "none" and HMAC included, fails at parse, before a key is chosen.
var allowedAlgorithms = []jose.SignatureAlgorithm{jose.EdDSA, jose.ES256, jose.RS256}

// Config configures a Verifier. The zero Config has no key, which
// NewVerifier refuses.
type Config struct {
	// KeyFile is a file of public keys (see ParseKeySet), read by
	// NewVerifier and again by each Reload. "" reads no file; Trusted must
	// then hold a key.
	KeyFile string
	// Trusted keys are trusted beside KeyFile's and kept across reloads:
	// the broker's own key (Local.Key), so the local admin.token works next
	// to --auth-keys.
	Trusted []Key
	// Audience must be among a token's "aud". "" means DefaultAudience.
	Audience string
	// Leeway is the tolerance on exp, nbf and iat. 0 means DefaultLeeway;
	// a negative value means none.
	Leeway time.Duration
}

// Verifier checks tokens against the current key set. Verify may be called
// from any goroutine, concurrently with Reload: it reads the set through an
// atomic pointer, so a reload never blocks a handshake.
type Verifier struct {
	cfg  Config
	keys atomic.Pointer[KeySet]
	// reloadMu orders reloads (two SIGHUPs in a row); Verify never takes it.
	reloadMu sync.Mutex
}

// NewVerifier loads cfg's keys and returns a Verifier. It fails when the key
// file cannot be read or when there is no key at all.
func NewVerifier(cfg Config) (*Verifier, error) {
	if cfg.Audience == "" {
		cfg.Audience = DefaultAudience
	}
	switch {
	case cfg.Leeway == 0:
		cfg.Leeway = DefaultLeeway
	case cfg.Leeway < 0:
		cfg.Leeway = 0
	}
	v := &Verifier{cfg: cfg}
	set, err := v.load()
	if err != nil {
		return nil, err
	}
	v.keys.Store(set)
	return v, nil
}

// Reload reads Config.KeyFile again and, if it is good, swaps the new set
// in; tokens verified after Reload returns use it. A bad or missing file
// keeps the current set and returns the error (for the SIGHUP handler to
// log): a typo during key rotation must not lock every client out.
func (v *Verifier) Reload() error {
	v.reloadMu.Lock()
	defer v.reloadMu.Unlock()
	set, err := v.load()
	if err != nil {
		return fmt.Errorf("%w (the previous %d keys stay in use)", err, v.keys.Load().Len())
	}
	v.keys.Store(set)
	return nil
}

// KeySet returns the set Verify uses now.
func (v *Verifier) KeySet() *KeySet { return v.keys.Load() }

// load builds the key set from the file and the trusted keys.
func (v *Verifier) load() (*KeySet, error) {
	keys := v.cfg.Trusted
	if v.cfg.KeyFile != "" {
		file, err := LoadKeySet(v.cfg.KeyFile)
		if err != nil {
			return nil, err
		}
		keys = append(file.Keys(), keys...)
	}
	if len(keys) == 0 {
		return nil, errors.New("auth: no keys: give a key file or trusted keys")
	}
	return NewKeySet(keys...)
}

// felixClaims are the claims Felix adds to the registered ones. Grants are
// strings here so that a bad one is reported with its index.
type felixClaims struct {
	Tenant string   `json:"tenant"`
	Grants []string `json:"grants"`
}

// Verify checks token at now (zero now means time.Now()) and returns who it
// speaks for; Principal.TenantKey says whether its key is restricted to
// tenants, which confines its node grants (see Principal.CheckNodeTenant).
// Such a token is not refused for holding node grants: the same token
// carries the tenant's stream rights, which hold as before. In order: the size (MaxTokenLen), the form and the algorithm
// (EdDSA, ES256, RS256 only), the signature (keys of the algorithm's type,
// those whose ID is the token's "kid" first), the claims (tenant, exp,
// grants), the key's tenant restriction, then the audience and the times,
// with the configured leeway.
//
// Every error is a *wire.Error with code unauthenticated wrapping one of
// ErrTokenMissing, ErrTooLarge, ErrTokenMalformed, ErrAlgorithm,
// ErrBadSignature, ErrClaimInvalid, ErrTenantNotAllowed, ErrAudience,
// ErrTokenNotYetValid and ErrTokenExpired; its message says which, and
// never repeats the token.
func (v *Verifier) Verify(token string, now time.Time) (*Principal, error) {
	if now.IsZero() {
		now = time.Now()
	}
	switch {
	case token == "":
		return nil, refuse(ErrTokenMissing, "")
	case len(token) > MaxTokenLen:
		return nil, refuse(ErrTooLarge, "%d bytes, at most %d", len(token), MaxTokenLen)
	}
	tok, err := jwt.ParseSigned(token, allowedAlgorithms)
	if err != nil {
		var algErr *jose.ErrUnexpectedSignatureAlgorithm
		if errors.As(err, &algErr) {
			return nil, refuse(ErrAlgorithm, "alg %q; want EdDSA, ES256 or RS256", algErr.Got)
		}
		return nil, refuse(ErrTokenMalformed, "%v", err)
	}
	if len(tok.Headers) != 1 {
		return nil, refuse(ErrTokenMalformed, "%d signatures, want 1", len(tok.Headers))
	}
	alg := jose.SignatureAlgorithm(tok.Headers[0].Algorithm)
	key, std, fc, err := v.verifySignature(tok, alg, tok.Headers[0].KeyID)
	if err != nil {
		return nil, err
	}
	p, err := principal(std, fc)
	if err != nil {
		return nil, err
	}
	if !key.allowsTenant(p.Tenant) {
		return nil, refuse(ErrTenantNotAllowed, "key %q signs for tenants %s only, not %q", key.ID, strings.Join(key.Tenants, ", "), p.Tenant)
	}
	p.TenantKey = key.Tenants != nil
	expected := jwt.Expected{AnyAudience: jwt.Audience{v.cfg.Audience}, Time: now}
	switch err := std.ValidateWithLeeway(expected, v.cfg.Leeway); {
	case err == nil:
	case errors.Is(err, jwt.ErrInvalidAudience):
		return nil, refuse(ErrAudience, "aud %q does not contain %q", []string(std.Audience), v.cfg.Audience)
	case errors.Is(err, jwt.ErrNotValidYet):
		return nil, refuse(ErrTokenNotYetValid, "nbf %s is after %s", std.NotBefore.Time().UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	case errors.Is(err, jwt.ErrIssuedInTheFuture):
		return nil, refuse(ErrTokenNotYetValid, "iat %s is after %s", std.IssuedAt.Time().UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	case errors.Is(err, jwt.ErrExpired):
		return nil, refuse(ErrTokenExpired, "exp %s is before %s", std.Expiry.Time().UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	default:
		return nil, refuse(ErrClaimInvalid, "%v", err)
	}
	return p, nil
}

// verifySignature finds the key that signed tok and decodes its claims.
// Candidates are the keys of alg's type; when the token names a kid that
// some of them have, only those. The kid is a hint that saves work, never a
// trust decision: whatever key is tried, only a verified signature counts.
// Keys whose tenant restriction excludes the token's tenant are passed over
// for another candidate (the same public key may be listed twice with
// different tenants); if only such keys verify, the first is returned and
// Verify refuses the tenant. Among the keys that allow the tenant, one that
// is not restricted wins: whoever holds its private key is trusted with
// node rights under any listing of it.
func (v *Verifier) verifySignature(tok *jwt.JSONWebToken, alg jose.SignatureAlgorithm, kid string) (verifyKey, jwt.Claims, felixClaims, error) {
	var (
		candidates []verifyKey
		byKid      []verifyKey
	)
	for _, k := range v.keys.Load().keys {
		if k.alg != alg {
			continue
		}
		candidates = append(candidates, k)
		if kid != "" && k.ID == kid {
			byKid = append(byKid, k)
		}
	}
	if len(byKid) > 0 {
		candidates = byKid
	}
	var (
		std     jwt.Claims
		fc      felixClaims
		decoded bool
		allowed *verifyKey
		refused *verifyKey
	)
	for _, k := range candidates {
		if err := tok.Claims(k.Public); err != nil {
			continue
		}
		if !decoded {
			// The signature is verified; the payload is the one it covers.
			if err := tok.UnsafeClaimsWithoutVerification(&std, &fc); err != nil {
				return verifyKey{}, std, fc, refuse(ErrTokenMalformed, "claims: %v", err)
			}
			decoded = true
		}
		switch {
		case k.allowsTenant(fc.Tenant) && k.Tenants == nil:
			return k, std, fc, nil
		case k.allowsTenant(fc.Tenant):
			if allowed == nil {
				allowed = &k
			}
		case refused == nil:
			refused = &k
		}
	}
	if allowed != nil {
		return *allowed, std, fc, nil
	}
	if refused != nil {
		return *refused, std, fc, nil
	}
	if len(candidates) == 0 {
		return verifyKey{}, std, fc, refuse(ErrBadSignature, "no %s key is loaded", alg)
	}
	return verifyKey{}, std, fc, refuse(ErrBadSignature, "no loaded key verifies it (%d %s keys tried)", len(candidates), alg)
}

// principal checks the claims Felix needs and builds the Principal.
func principal(std jwt.Claims, fc felixClaims) (*Principal, error) {
	if fc.Tenant == "" {
		return nil, refuse(ErrClaimInvalid, "no tenant claim")
	}
	if err := wire.ValidateName("tenant", fc.Tenant); err != nil {
		var we *wire.Error
		if errors.As(err, &we) {
			return nil, refuse(ErrClaimInvalid, "%s", we.Message)
		}
		return nil, refuse(ErrClaimInvalid, "%v", err)
	}
	if std.Expiry == nil {
		return nil, refuse(ErrClaimInvalid, "no exp claim; Felix tokens must expire")
	}
	p := &Principal{Tenant: fc.Tenant, Subject: std.Subject, Expires: std.Expiry.Time(), Grants: make([]Grant, 0, len(fc.Grants))}
	for i, s := range fc.Grants {
		g, err := ParseGrant(s)
		if err != nil {
			return nil, refuse(ErrClaimInvalid, "grants[%d]: %v", i, err)
		}
		p.Grants = append(p.Grants, g)
	}
	return p, nil
}
