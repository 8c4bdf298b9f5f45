package auth

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
)

// jwk is the JSON of a key's public half (or private, with private set),
// with extra members merged in.
func jwk(t *testing.T, name string, private bool, extra map[string]any) json.RawMessage {
	t.Helper()
	var key any = testKey(name).Public()
	if private {
		key = testKey(name)
	}
	b, err := json.Marshal(jose.JSONWebKey{Key: key, KeyID: name})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for k, v := range extra {
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
	}
	b, err = json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func jwks(keys ...json.RawMessage) []byte {
	b, err := json.Marshal(map[string]any{"keys": keys})
	must(err)
	return b
}

func TestParseKeySetPEM(t *testing.T) {
	set, err := ParseKeySet(publicPEM(t, testKey("ed"), testKey("ec"), testKey("rsa")))
	if err != nil {
		t.Fatal(err)
	}
	keys := set.Keys()
	if len(keys) != 3 {
		t.Fatalf("got %d keys, want 3", len(keys))
	}
	for i, k := range keys {
		want, _ := thumbprint(k.Public)
		if k.ID != want || k.Tenants != nil {
			t.Errorf("key %d: ID %q, tenants %v; want the thumbprint %q, unrestricted", i, k.ID, k.Tenants, want)
		}
	}
	if got, want := keys[0].ID, newSigner(t, "ed").Key().ID; got != want {
		t.Errorf("PEM key ID %q is not the kid Signer puts in tokens, %q", got, want)
	}
}

func TestParseKeySetJWKS(t *testing.T) {
	doc := jwks(
		jwk(t, "ed", false, map[string]any{"felix_tenants": []string{"acme", "globex"}, "alg": "EdDSA", "use": "sig"}),
		jwk(t, "ec", false, nil),
		jwk(t, "rsa", false, map[string]any{"alg": "RS256"}),
		jwk(t, "rsa", false, map[string]any{"use": "enc", "kid": "encryption", "alg": "RSA-OAEP"}), // skipped
	)
	set, err := ParseKeySet(append([]byte("\n  "), doc...))
	if err != nil {
		t.Fatal(err)
	}
	keys := set.Keys()
	if len(keys) != 3 {
		t.Fatalf("got %d keys, want 3 (the enc key skipped)", len(keys))
	}
	if keys[0].ID != "ed" || !slices.Equal(keys[0].Tenants, []string{"acme", "globex"}) {
		t.Errorf("key 0 = %q %v, want kid ed restricted to acme, globex", keys[0].ID, keys[0].Tenants)
	}
	if keys[1].ID != "ec" || keys[1].Tenants != nil {
		t.Errorf("key 1 = %q %v, want kid ec unrestricted", keys[1].ID, keys[1].Tenants)
	}
}

func TestParseKeySetRefuses(t *testing.T) {
	der, err := x509.MarshalPKCS8PrivateKey(testKey("ed"))
	if err != nil {
		t.Fatal(err)
	}
	privPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "x"}, NotAfter: time.Now().Add(time.Hour)}
	certDER, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, testKey("ec").Public(), testKey("ec"))
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: certDER})
	tests := []struct {
		name string
		give []byte
		want string
	}{
		{"empty", nil, "no usable public key"},
		{"text", []byte("hello"), "neither PEM public keys nor a JWKS document"},
		{"private key", privPEM, `"PRIVATE KEY", want "PUBLIC KEY"`},
		{"certificate", certPEM, `"CERTIFICATE"`},
		{"trailing text", append(publicPEM(t, testKey("ed")), "junk"...), "text after PEM block 1"},
		{"bad DER", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: []byte("nope")}), "PEM block 1"},
		{"RSA 1024", publicPEM(t, testKey("rsa1024")), "RSA key of 1024 bits"},
		{"P-384", publicPEM(t, testKey("ec384")), "not on P-256"},
		{"JWKS not JSON", []byte("{keys"), "JWKS"},
		{"JWKS without keys", []byte(`{"kty":"OKP"}`), `no "keys" array`},
		{"JWKS no keys", []byte(`{"keys":[]}`), "no usable public key"},
		{"JWKS only enc", jwks(jwk(t, "rsa", false, map[string]any{"use": "enc"})), "no usable public key"},
		{"JWKS symmetric", jwks(json.RawMessage(`{"kty":"oct","k":"c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0","kid":"h"}`)), "symmetric key"},
		{"JWKS private", jwks(jwk(t, "ec", true, nil)), "private key"},
		{"JWKS alg mismatch", jwks(jwk(t, "rsa", false, map[string]any{"alg": "PS256"})), `alg "PS256"`},
		{"JWKS HS256 alg on a public key", jwks(jwk(t, "ed", false, map[string]any{"alg": "HS256"})), `alg "HS256"`},
		{"JWKS P-384", jwks(jwk(t, "ec384", false, nil)), "not on P-256"},
		{"JWKS bad tenant", jwks(jwk(t, "ed", false, map[string]any{"felix_tenants": []string{"a/b"}})), "tenant name"},
		{"JWKS empty tenants", jwks(jwk(t, "ed", false, map[string]any{"felix_tenants": []string{}})), "empty tenant list"},
		{"JWKS null tenants", jwks(json.RawMessage(`{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo","felix_tenants":null}`)), "null"},
		{"JWKS tenants not strings", jwks(jwk(t, "ed", false, map[string]any{"felix_tenants": "acme"})), "felix_tenants"},
		{"JWKS bad key", jwks(json.RawMessage(`{"kty":"OKP","crv":"Ed25519","x":"short"}`)), "JWKS key 0"},
	}
	for _, tt := range tests {
		set, err := ParseKeySet(tt.give)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: ParseKeySet = %d keys, %v; want an error containing %q", tt.name, set.Len(), err, tt.want)
		}
	}
}

func TestNewKeySetRefuses(t *testing.T) {
	ec := *testKey("ec").Public().(*ecdsa.PublicKey)
	tests := []Key{
		{},
		{Public: "a string"},
		{Public: ed25519.PublicKey([]byte{1, 2, 3})},
		{Public: (*ecdsa.PublicKey)(nil)},
		{Public: testKey("ed")},    // a private key
		{Public: ec, Tenants: nil}, // not a pointer
	}
	for i, k := range tests {
		if _, err := NewKeySet(k); err == nil {
			t.Errorf("NewKeySet(key %d: %T) took it", i, k.Public)
		}
	}
}

func TestLoadKeySet(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, dir, "keys.pem", publicPEM(t, testKey("ed")))
	if set, err := LoadKeySet(path); err != nil || set.Len() != 1 {
		t.Errorf("LoadKeySet(%s) = %d keys, %v; want 1", path, set.Len(), err)
	}
	missing := filepath.Join(dir, "missing.pem")
	if _, err := LoadKeySet(missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("LoadKeySet(missing) = %v, want ErrNotExist", err)
	}
	big := writeFile(t, dir, "big.pem", make([]byte, maxKeyFileSize+1))
	if _, err := LoadKeySet(big); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("LoadKeySet(big) = %v, want too large", err)
	}
	bad := writeFile(t, dir, "bad.pem", []byte("nonsense"))
	if _, err := LoadKeySet(bad); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("LoadKeySet(bad) = %v, want an error naming the file", err)
	}
}

// TestReloadKeepsOldSetOnBadFile: Reload swaps in a good file, and keeps
// the keys it has when the new file is bad or gone.
func TestReloadKeepsOldSetOnBadFile(t *testing.T) {
	dir := t.TempDir()
	a, b := newSigner(t, "ed"), newSigner(t, "ec")
	tokA, _, _ := a.Mint(Claims{Tenant: "acme", IssuedAt: testNow}, time.Hour)
	tokB, _, _ := b.Mint(Claims{Tenant: "acme", IssuedAt: testNow}, time.Hour)
	path := writeFile(t, dir, "keys.pem", publicPEM(t, testKey("ed")))
	v, err := NewVerifier(Config{KeyFile: path})
	if err != nil {
		t.Fatal(err)
	}
	verifies := func(step, tok string, want bool) {
		t.Helper()
		if _, err := v.Verify(tok, testNow); (err == nil) != want {
			t.Errorf("%s: Verify error %v, want accepted=%v", step, err, want)
		}
	}
	verifies("start, key A", tokA, true)
	verifies("start, key B", tokB, false)

	writeFile(t, dir, "keys.pem", []byte("-----BEGIN PUBLIC KEY-----\ntruncated"))
	if err := v.Reload(); err == nil || !strings.Contains(err.Error(), "previous 1 keys stay in use") {
		t.Errorf("Reload of a bad file = %v, want an error saying the old keys stay", err)
	}
	verifies("after a bad reload, key A", tokA, true)

	os.Remove(path)
	if err := v.Reload(); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Reload of a missing file = %v, want ErrNotExist", err)
	}
	verifies("after a missing file, key A", tokA, true)

	writeFile(t, dir, "keys.pem", jwks(jwk(t, "ec", false, nil)))
	if err := v.Reload(); err != nil {
		t.Fatalf("Reload of a good file: %v", err)
	}
	verifies("after rotation, key A", tokA, false)
	verifies("after rotation, key B", tokB, true)
}

// TestReloadKeepsTrusted: Config.Trusted keys stay across reloads, and a
// Verifier with neither file nor trusted keys is refused.
func TestReloadKeepsTrusted(t *testing.T) {
	dir := t.TempDir()
	local := newSigner(t, "ed")
	tok, _, _ := local.Mint(Claims{Tenant: "default", IssuedAt: testNow}, time.Hour)
	path := writeFile(t, dir, "keys.pem", publicPEM(t, testKey("rsa")))
	v, err := NewVerifier(Config{KeyFile: path, Trusted: []Key{local.Key()}})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "keys.pem", publicPEM(t, testKey("ec")))
	if err := v.Reload(); err != nil {
		t.Fatal(err)
	}
	if v.KeySet().Len() != 2 {
		t.Errorf("after reload: %d keys, want 2 (the file's and the trusted)", v.KeySet().Len())
	}
	if _, err := v.Verify(tok, testNow); err != nil {
		t.Errorf("a trusted key's token after reload: %v", err)
	}
	if _, err := NewVerifier(Config{}); err == nil {
		t.Error("NewVerifier(Config{}) took a verifier with no keys")
	}
}

// TestReloadWhileVerifying: Verify runs on many goroutines while Reload
// swaps sets (run under -race); every token of the key present in both
// sets verifies throughout.
func TestReloadWhileVerifying(t *testing.T) {
	dir := t.TempDir()
	s := newSigner(t, "ed")
	tok, _, _ := s.Mint(Claims{Tenant: "acme", IssuedAt: testNow}, time.Hour)
	files := [][]byte{publicPEM(t, testKey("ed")), publicPEM(t, testKey("ec"), testKey("ed")), []byte("bad")}
	path := writeFile(t, dir, "keys.pem", files[0])
	v, err := NewVerifier(Config{KeyFile: path})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			for {
				select {
				case <-done:
					errs <- nil
					return
				default:
				}
				if _, err := v.Verify(tok, testNow); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for i := range 30 {
		writeFile(t, dir, "keys.pem", files[i%len(files)])
		_ = v.Reload() // the bad file's error is expected
	}
	close(done)
	for range 4 {
		if err := <-errs; err != nil {
			t.Errorf("Verify during reloads: %v", err)
		}
	}
}
