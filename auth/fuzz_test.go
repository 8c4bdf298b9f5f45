package auth

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/go-jose/go-jose/v4"

	"github.com/getfelix/felix-go/wire"
)

// FuzzParseGrant: ParseGrant never panics; a grant it accepts prints back
// to the same text and parses to the same Grant; a refusal is a
// *GrantError; and matching a parsed grant against arbitrary names never
// panics, allows only its own action, and allows only valid names.
func FuzzParseGrant(f *testing.F) {
	for _, s := range []string{
		"stream.publish:orders/eu", "stream.subscribe:orders/*", "stream.manage:*/*", "group.consume:a*b*c/*x",
		"node.view:*", "node.manage:*/*", "stream.publish:orders/", "stream.publish:a/b/c", "stream.push:a/b",
		"stream.publish:ord ers/x", ":", "", "stream.publish:./..",
	} {
		f.Add(s, "orders", "eu-west")
	}
	f.Fuzz(func(t *testing.T, text, ns, stream string) {
		g, err := ParseGrant(text)
		if err != nil {
			var ge *GrantError
			if !errors.As(err, &ge) {
				t.Fatalf("ParseGrant(%q) error %T %v, want a *GrantError", text, err, err)
			}
			if g != (Grant{}) {
				t.Fatalf("ParseGrant(%q) returned %+v with its error", text, g)
			}
			return
		}
		if g.String() != text {
			t.Fatalf("ParseGrant(%q).String() = %q", text, g)
		}
		if again, err := ParseGrant(g.String()); err != nil || again != g {
			t.Fatalf("ParseGrant(%q) = %+v, %v; want %+v again", g.String(), again, err, g)
		}
		for _, a := range append(Actions(), 0, 200) {
			allowed := g.Allows(a, ns, stream)
			if allowed && (a != g.Action || !nameChars(ns) || !nameChars(stream)) {
				t.Fatalf("%s.Allows(%s, %q, %q) = true", g, a, ns, stream)
			}
			if g.AllowsNode(a) && (a != g.Action || !a.IsNode()) {
				t.Fatalf("%s.AllowsNode(%s) = true", g, a)
			}
		}
		// A pattern without '*' matches exactly its own names.
		if nsPat, sPat, ok := strings.Cut(g.Resource, "/"); ok && !strings.Contains(g.Resource, "*") {
			if !g.Allows(g.Action, nsPat, sPat) {
				t.Fatalf("%s does not allow its own literal names", g)
			}
		}
	})
}

// nameChars reports whether s is 1 to wire.MaxNameLen bytes of name
// characters: what a '*' may match (ValidateName also refuses "." and "..",
// which no valid request carries, so matching need not).
func nameChars(s string) bool {
	return s != "" && len(s) <= wire.MaxNameLen && wire.ValidateName("name", strings.ReplaceAll(s, ".", "x")) == nil
}

// FuzzVerify: Verify never panics, and never accepts a token not signed by
// the one loaded key. The check is independent of go-jose: an accepted
// token's third part must be an Ed25519 signature, by the loaded key, of its
// first two parts.
func FuzzVerify(f *testing.F) {
	ed := testKey("ed")
	pub := ed.Public().(ed25519.PublicKey)
	v, err := NewVerifier(Config{Trusted: []Key{{Public: pub}}})
	if err != nil {
		f.Fatal(err)
	}
	s := newSigner(f, "ed")
	good, _, err := s.Mint(Claims{Tenant: "acme", Grants: []Grant{MustParseGrant("stream.publish:orders/*")}, IssuedAt: testNow}, 1<<40)
	if err != nil {
		f.Fatal(err)
	}
	b64 := base64.RawURLEncoding.EncodeToString
	f.Add(good)
	f.Add(signRaw(f, testKey("ed-other"), jose.EdDSA, claimsAt(testNow), nil))
	f.Add(signRaw(f, publicPEM(f, ed), jose.HS256, claimsAt(testNow), nil))
	f.Add(signRaw(f, ed, jose.EdDSA, []byte(`{"tenant":"acme","exp":1e400,"aud":["felix"],"grants":["x"]}`), nil))
	f.Add(b64([]byte(`{"alg":"none"}`)) + "." + b64([]byte(`{"tenant":"acme","aud":"felix","exp":99999999999}`)) + ".")
	f.Add(b64([]byte(`{"alg":"EdDSA","crit":["exp"]}`)) + ".e30.")
	f.Add("")
	f.Add("..")
	f.Fuzz(func(t *testing.T, token string) {
		p, err := v.Verify(token, testNow)
		if err != nil {
			if p != nil {
				t.Fatalf("Verify returned %+v with error %v", p, err)
			}
			if !errors.Is(err, wire.ErrUnauthenticated) {
				t.Fatalf("Verify error %v is not unauthenticated", err)
			}
			return
		}
		parts := strings.Split(token, ".")
		if len(parts) != 3 {
			t.Fatalf("Verify accepted %q of %d parts", token, len(parts))
		}
		sig, err := base64.RawURLEncoding.DecodeString(parts[2])
		if err != nil || !ed25519.Verify(pub, []byte(parts[0]+"."+parts[1]), sig) {
			t.Fatalf("Verify accepted %q, which the loaded key did not sign", token)
		}
		if p.Tenant == "" || p.Expires.IsZero() {
			t.Fatalf("Verify accepted %q as %+v", token, p)
		}
	})
}
