package auth

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/getfelix/felix-go/wire"
)

var testNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// claimsAt is a complete, valid claim set at testNow; tests change one thing.
func claimsAt(now time.Time) map[string]any {
	return map[string]any{
		"tenant": "acme",
		"grants": []string{"stream.publish:orders/*"},
		"sub":    "alice",
		"aud":    "felix",
		"iat":    now.Unix(),
		"exp":    now.Add(time.Hour).Unix(),
	}
}

func with(change func(map[string]any)) map[string]any {
	c := claimsAt(testNow)
	change(c)
	return c
}

// TestVerifyAlgorithms: a token minted by Signer for each accepted
// algorithm verifies, with the tenant, subject, grants and expiry it was
// minted with.
func TestVerifyAlgorithms(t *testing.T) {
	for _, name := range []string{"ed", "ec", "rsa"} {
		t.Run(name, func(t *testing.T) {
			s := newSigner(t, name)
			v, err := NewVerifier(Config{Trusted: []Key{newSigner(t, "ed-other").Key(), s.Key()}})
			if err != nil {
				t.Fatal(err)
			}
			grants := []Grant{MustParseGrant("stream.publish:orders/eu"), MustParseGrant("stream.subscribe:orders/*"), MustParseGrant("node.view:*")}
			token, exp, err := s.Mint(Claims{Tenant: "acme", Subject: "alice", Grants: grants, IssuedAt: testNow}, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			if !exp.Equal(testNow.Add(time.Hour)) {
				t.Errorf("Mint expiry = %s, want %s", exp, testNow.Add(time.Hour))
			}
			p, err := v.Verify(token, testNow.Add(time.Minute))
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if p.Tenant != "acme" || p.Subject != "alice" || !slices.Equal(p.Grants, grants) || !p.Expires.Equal(exp) {
				t.Errorf("Verify = %+v, want tenant acme, subject alice, grants %v, expires %s", p, grants, exp)
			}
		})
	}
}

// TestVerifyRefusals: every way a token is refused, each with its sentinel
// inside an unauthenticated wire error.
func TestVerifyRefusals(t *testing.T) {
	ed, ec, rs := testKey("ed"), testKey("ec"), testKey("rsa")
	restricted := Key{Public: testKey("ec").Public(), Tenants: []string{"globex", "initech"}}
	v, err := NewVerifier(Config{Trusted: []Key{{Public: ed.Public()}, {Public: rs.Public()}, restricted}})
	if err != nil {
		t.Fatal(err)
	}
	pubPEM := publicPEM(t, ed)
	b64 := base64.RawURLEncoding.EncodeToString
	payload := b64([]byte(`{"tenant":"acme","aud":"felix","exp":9999999999}`))
	good := signRaw(t, ed, jose.EdDSA, claimsAt(testNow), nil)
	goodParts := strings.Split(good, ".")
	other := signRaw(t, testKey("ed-other"), jose.EdDSA, with(func(c map[string]any) { c["tenant"] = "evil" }), nil)
	otherParts := strings.Split(other, ".")

	tests := []struct {
		name  string
		token string
		want  error
	}{
		{"empty", "", ErrTokenMissing},
		{"oversize", strings.Repeat("a", MaxTokenLen+1), ErrTooLarge},
		{"garbage", "not a token", ErrTokenMalformed},
		{"two parts", "a.b", ErrTokenMalformed},
		{"bad base64", "!!!.###.$$$", ErrTokenMalformed},
		{"header not JSON", b64([]byte("{")) + "." + payload + ".sig", ErrTokenMalformed},
		{"JSON serialization", `{"payload":"` + payload + `","signatures":[]}`, ErrTokenMalformed},
		{"claims not JSON", signRaw(t, ed, jose.EdDSA, []byte("not json"), nil), ErrTokenMalformed},
		{"exp as string", signRaw(t, ed, jose.EdDSA, with(func(c map[string]any) { c["exp"] = "tomorrow" }), nil), ErrTokenMalformed},

		{"alg none", b64([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + payload + ".", ErrAlgorithm},
		{"alg None", b64([]byte(`{"alg":"None"}`)) + "." + payload + ".", ErrAlgorithm},
		{"no alg", b64([]byte(`{"typ":"JWT"}`)) + "." + payload + ".", ErrAlgorithm},
		// The confusion attack: HMAC keyed with the public key, which a
		// verifier that let the token choose the algorithm would accept.
		{"HS256 keyed with public PEM", signRaw(t, pubPEM, jose.HS256, claimsAt(testNow), nil), ErrAlgorithm},
		{"HS256 keyed with raw public key", signRaw(t, []byte(ed.Public().(ed25519.PublicKey)), jose.HS256, claimsAt(testNow), nil), ErrAlgorithm},
		{"HS512", signRaw(t, []byte("a secret of at least sixty-four bytes, which HS512 insists on....."), jose.HS512, claimsAt(testNow), nil), ErrAlgorithm},
		{"ES384", signRaw(t, testKey("ec384"), jose.ES384, claimsAt(testNow), nil), ErrAlgorithm},
		{"PS256", signRaw(t, rs, jose.PS256, claimsAt(testNow), nil), ErrAlgorithm},
		{"RS512", signRaw(t, rs, jose.RS512, claimsAt(testNow), nil), ErrAlgorithm},

		{"unknown key", other, ErrBadSignature},
		{"payload swapped", goodParts[0] + "." + otherParts[1] + "." + goodParts[2], ErrBadSignature},
		{"signature cut", goodParts[0] + "." + goodParts[1] + "." + goodParts[2][:20], ErrBadSignature},
		{"no signature", goodParts[0] + "." + goodParts[1] + ".", ErrBadSignature},
		{"kid of a loaded key, signed by another", signRaw(t, testKey("ed-other"), jose.EdDSA, claimsAt(testNow),
			(&jose.SignerOptions{}).WithHeader("kid", v.KeySet().Keys()[0].ID)), ErrBadSignature},
		{"embedded jwk of the signer", signRaw(t, testKey("ed-other"), jose.EdDSA, claimsAt(testNow),
			&jose.SignerOptions{EmbedJWK: true}), ErrBadSignature},
		{"P-256 key signs for a tenant it may not", signRaw(t, ec, jose.ES256, claimsAt(testNow), nil), ErrTenantNotAllowed},

		{"no exp", signRaw(t, ed, jose.EdDSA, with(func(c map[string]any) { delete(c, "exp") }), nil), ErrClaimInvalid},
		{"no tenant", signRaw(t, ed, jose.EdDSA, with(func(c map[string]any) { delete(c, "tenant") }), nil), ErrClaimInvalid},
		{"tenant not a name", signRaw(t, ed, jose.EdDSA, with(func(c map[string]any) { c["tenant"] = "a/b" }), nil), ErrClaimInvalid},
		{"tenant too long", signRaw(t, ed, jose.EdDSA, with(func(c map[string]any) { c["tenant"] = strings.Repeat("t", wire.MaxNameLen+1) }), nil), ErrClaimInvalid},
		{"bad grant", signRaw(t, ed, jose.EdDSA, with(func(c map[string]any) { c["grants"] = []string{"stream.publish:a/b", "stream.publish:a/"} }), nil), ErrClaimInvalid},
		{"grants not strings", signRaw(t, ed, jose.EdDSA, with(func(c map[string]any) { c["grants"] = []int{1} }), nil), ErrTokenMalformed},

		{"no aud", signRaw(t, ed, jose.EdDSA, with(func(c map[string]any) { delete(c, "aud") }), nil), ErrAudience},
		{"other aud", signRaw(t, ed, jose.EdDSA, with(func(c map[string]any) { c["aud"] = []string{"kafka", "felix-prod"} }), nil), ErrAudience},
		{"expired", signRaw(t, ed, jose.EdDSA, with(func(c map[string]any) { c["exp"] = testNow.Add(-DefaultLeeway - time.Second).Unix() }), nil), ErrTokenExpired},
		{"not yet valid", signRaw(t, ed, jose.EdDSA, with(func(c map[string]any) { c["nbf"] = testNow.Add(DefaultLeeway + time.Second).Unix() }), nil), ErrTokenNotYetValid},
		{"issued in the future", signRaw(t, ed, jose.EdDSA, with(func(c map[string]any) { c["iat"] = testNow.Add(time.Hour).Unix() }), nil), ErrTokenNotYetValid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := v.Verify(tt.token, testNow)
			if !errors.Is(err, tt.want) || !errors.Is(err, wire.ErrUnauthenticated) {
				t.Fatalf("Verify = %+v, %v; want unauthenticated wrapping %v", p, err, tt.want)
			}
			if p != nil {
				t.Errorf("Verify returned a principal with its error: %+v", p)
			}
			if want := tt.want.Error(); !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		})
	}
}

// TestVerifyAccepts: the edges of the refusals above, on the accepting side.
func TestVerifyAccepts(t *testing.T) {
	ed, ec := testKey("ed"), testKey("ec")
	restricted := Key{Public: ec.Public(), Tenants: []string{"globex", "acme"}}
	v, err := NewVerifier(Config{Trusted: []Key{{Public: ed.Public()}, restricted}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		token  string
		tenant string
	}{
		{"expired within the leeway", signRaw(t, ed, jose.EdDSA, with(func(c map[string]any) { c["exp"] = testNow.Add(-DefaultLeeway + time.Second).Unix() }), nil), "acme"},
		{"nbf within the leeway", signRaw(t, ed, jose.EdDSA, with(func(c map[string]any) { c["nbf"] = testNow.Add(DefaultLeeway - time.Second).Unix() }), nil), "acme"},
		{"nbf passed", signRaw(t, ed, jose.EdDSA, with(func(c map[string]any) { c["nbf"] = testNow.Add(-time.Minute).Unix() }), nil), "acme"},
		{"aud among several", signRaw(t, ed, jose.EdDSA, with(func(c map[string]any) { c["aud"] = []string{"kafka", "felix"} }), nil), "acme"},
		{"no iat, no grants", signRaw(t, ed, jose.EdDSA, with(func(c map[string]any) { delete(c, "iat"); delete(c, "grants") }), nil), "acme"},
		{"restricted key, its tenant", signRaw(t, ec, jose.ES256, claimsAt(testNow), nil), "acme"},
		{"unknown kid, right key", signRaw(t, ed, jose.EdDSA, claimsAt(testNow), (&jose.SignerOptions{}).WithHeader("kid", "rotated-away")), "acme"},
	}
	for _, tt := range tests {
		p, err := v.Verify(tt.token, testNow)
		if err != nil || p.Tenant != tt.tenant {
			t.Errorf("%s: Verify = %+v, %v; want tenant %s", tt.name, p, err, tt.tenant)
		}
	}
}

// TestVerifyAudienceConfig: a verifier with its own audience wants that one.
func TestVerifyAudienceConfig(t *testing.T) {
	s := newSigner(t, "ed")
	v, err := NewVerifier(Config{Trusted: []Key{s.Key()}, Audience: "felix-prod"})
	if err != nil {
		t.Fatal(err)
	}
	def, _, _ := s.Mint(Claims{Tenant: "acme", IssuedAt: testNow}, time.Hour)
	if _, err := v.Verify(def, testNow); !errors.Is(err, ErrAudience) {
		t.Errorf("token for %q at a felix-prod verifier: %v, want ErrAudience", DefaultAudience, err)
	}
	prod, _, _ := s.Mint(Claims{Tenant: "acme", Audience: []string{"felix-prod"}, IssuedAt: testNow}, time.Hour)
	if _, err := v.Verify(prod, testNow); err != nil {
		t.Errorf("token for felix-prod: %v", err)
	}
}

// TestVerifySameKeyTwoRestrictions: the same public key listed twice with
// different tenants verifies tokens for either list.
func TestVerifySameKeyTwoRestrictions(t *testing.T) {
	ed := testKey("ed")
	v, err := NewVerifier(Config{Trusted: []Key{{Public: ed.Public(), Tenants: []string{"a"}}, {Public: ed.Public(), Tenants: []string{"b"}}}})
	if err != nil {
		t.Fatal(err)
	}
	for tenant, want := range map[string]error{"a": nil, "b": nil, "c": ErrTenantNotAllowed} {
		_, err := v.Verify(signRaw(t, ed, jose.EdDSA, with(func(c map[string]any) { c["tenant"] = tenant }), nil), testNow)
		if !errors.Is(err, want) {
			t.Errorf("tenant %s: Verify error %v, want %v", tenant, err, want)
		}
	}
}

func TestMintRefuses(t *testing.T) {
	s := newSigner(t, "ed")
	tests := []struct {
		name string
		c    Claims
		ttl  time.Duration
	}{
		{"no tenant", Claims{}, time.Hour},
		{"bad tenant", Claims{Tenant: "a b"}, time.Hour},
		{"bad grant", Claims{Tenant: "a", Grants: []Grant{{Action: ActionStreamPublish, Resource: "x"}}}, time.Hour},
		{"zero grant", Claims{Tenant: "a", Grants: []Grant{{}}}, time.Hour},
		{"no ttl", Claims{Tenant: "a"}, 0},
		{"negative ttl", Claims{Tenant: "a"}, -time.Hour},
	}
	for _, tt := range tests {
		if tok, _, err := s.Mint(tt.c, tt.ttl); err == nil {
			t.Errorf("%s: Mint(%+v, %s) = %.20q, want an error", tt.name, tt.c, tt.ttl, tok)
		}
	}
	if _, err := NewSigner(testKey("rsa1024")); err == nil {
		t.Error("NewSigner took a 1024-bit RSA key")
	}
	if _, err := NewSigner(testKey("ec384")); err == nil {
		t.Error("NewSigner took a P-384 key")
	}
}

// TestVerifyTenantKeyNodeGrants: node grants in a token whose key is
// restricted to tenants hold for nothing of the node as a whole, and
// node.view only on the token's own tenant's streams; the same grants from
// an unrestricted key hold everywhere, and an unrestricted listing of a
// key restricted elsewhere wins.
func TestVerifyTenantKeyNodeGrants(t *testing.T) {
	ed, ec := testKey("ed"), testKey("ec")
	v, err := NewVerifier(Config{Trusted: []Key{{Public: ed.Public()}, {Public: ec.Public(), Tenants: []string{"acme"}}}})
	if err != nil {
		t.Fatal(err)
	}
	grants := with(func(c map[string]any) { c["grants"] = []string{"node.view:*", "node.manage:*", "stream.publish:*/*"} })
	tenantTok, err := v.Verify(signRaw(t, ec, jose.ES256, grants, nil), testNow)
	if err != nil || !tenantTok.TenantKey {
		t.Fatalf("restricted key's token: %+v, %v; want verified with TenantKey", tenantTok, err)
	}
	if err := tenantTok.Check(ActionStreamPublish, wire.Scope{Tenant: "acme", Namespace: "n", Stream: "s"}); err != nil {
		t.Errorf("restricted key's stream grant: %v, want it to hold", err)
	}
	for _, a := range []Action{ActionNodeView, ActionNodeManage} {
		if err := tenantTok.CheckNode(a); !errors.Is(err, ErrNodeTenantKey) || !errors.Is(err, ErrNotPermitted) {
			t.Errorf("restricted key: CheckNode(%s) = %v, want ErrNodeTenantKey", a, err)
		}
		if err := tenantTok.CheckNodeTenant(a, "globex"); !errors.Is(err, ErrNodeOtherTenant) {
			t.Errorf("restricted key: CheckNodeTenant(%s, globex) = %v, want ErrNodeOtherTenant", a, err)
		}
	}
	if err := tenantTok.CheckNodeTenant(ActionNodeView, "acme"); err != nil {
		t.Errorf("restricted key: CheckNodeTenant(node.view, its own tenant) = %v, want nil", err)
	}
	if err := tenantTok.CheckNodeTenant(ActionNodeManage, "acme"); !errors.Is(err, ErrNodeTenantKey) {
		t.Errorf("restricted key: CheckNodeTenant(node.manage, its own tenant) = %v, want ErrNodeTenantKey", err)
	}

	opTok, err := v.Verify(signRaw(t, ed, jose.EdDSA, grants, nil), testNow)
	if err != nil || opTok.TenantKey {
		t.Fatalf("unrestricted key's token: %+v, %v; want verified without TenantKey", opTok, err)
	}
	for _, a := range []Action{ActionNodeView, ActionNodeManage} {
		if err := opTok.CheckNode(a); err != nil {
			t.Errorf("unrestricted key: CheckNode(%s) = %v", a, err)
		}
		if err := opTok.CheckNodeTenant(a, "globex"); err != nil {
			t.Errorf("unrestricted key: CheckNodeTenant(%s, another tenant) = %v, want nil: its node grants are cluster-wide", a, err)
		}
	}

	both, err := NewVerifier(Config{Trusted: []Key{{Public: ec.Public(), Tenants: []string{"acme"}}, {Public: ec.Public()}}})
	if err != nil {
		t.Fatal(err)
	}
	if p, err := both.Verify(signRaw(t, ec, jose.ES256, grants, nil), testNow); err != nil || p.TenantKey {
		t.Errorf("a key listed restricted and unrestricted: %+v, %v; want the unrestricted listing", p, err)
	}
}
