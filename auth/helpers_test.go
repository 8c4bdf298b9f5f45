package auth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/go-jose/go-jose/v4"
)

// testKeys are generated once: RSA generation is slow under -race.
var testKeys = sync.OnceValue(func() map[string]crypto.Signer {
	keys := map[string]crypto.Signer{}
	_, ed, err := ed25519.GenerateKey(rand.Reader)
	must(err)
	keys["ed"] = ed
	_, ed2, err := ed25519.GenerateKey(rand.Reader)
	must(err)
	keys["ed-other"] = ed2
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(err)
	keys["ec"] = ec
	ec384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	must(err)
	keys["ec384"] = ec384
	rs, err := rsa.GenerateKey(rand.Reader, 2048)
	must(err)
	keys["rsa"] = rs
	rs1024, err := rsa.GenerateKey(rand.Reader, 1024)
	must(err)
	keys["rsa1024"] = rs1024
	return keys
})

func must(err error) {
	if err != nil {
		panic(err)
	}
}

func testKey(name string) crypto.Signer { return testKeys()[name] }

// signRaw signs claims (any JSON value, or raw bytes) with priv under alg,
// going around Signer's checks, to build the tokens Verify must refuse.
func signRaw(t testing.TB, priv any, alg jose.SignatureAlgorithm, claims any, opts *jose.SignerOptions) string {
	t.Helper()
	payload, ok := claims.([]byte)
	if !ok {
		var err error
		if payload, err = json.Marshal(claims); err != nil {
			t.Fatal(err)
		}
	}
	if opts == nil {
		opts = &jose.SignerOptions{}
	}
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: priv}, opts.WithType("JWT"))
	if err != nil {
		t.Fatalf("signer %s: %v", alg, err)
	}
	jws, err := s.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	out, err := jws.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// publicPEM is the PKIX PEM of keys' public halves.
func publicPEM(t testing.TB, keys ...crypto.Signer) []byte {
	t.Helper()
	var out []byte
	for _, k := range keys {
		der, err := x509.MarshalPKIXPublicKey(k.Public())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})...)
	}
	return out
}

// writeFile writes data into a file of t's temporary directory.
func writeFile(t testing.TB, dir, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func newSigner(t testing.TB, name string) *Signer {
	t.Helper()
	s, err := NewSigner(testKey(name))
	if err != nil {
		t.Fatalf("NewSigner(%s): %v", name, err)
	}
	return s
}
