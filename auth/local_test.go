package auth

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func mode(t *testing.T, path string) fs.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestEnsureLocalCreatesOnceAndReuses: the first call makes the key, its
// public key and admin.token (0600 for the secrets); the next reuses all of
// them; the admin token verifies with full rights on the default tenant.
func TestEnsureLocalCreatesOnceAndReuses(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "felix-data")
	first, err := EnsureLocal(dir, testNow)
	if err != nil {
		t.Fatal(err)
	}
	if !first.Generated || !first.Minted {
		t.Errorf("first EnsureLocal: Generated %v, Minted %v; want both", first.Generated, first.Minted)
	}
	keyPath, pubPath := filepath.Join(dir, SigningKeyFile), filepath.Join(dir, PublicKeyFile)
	for path, want := range map[string]fs.FileMode{keyPath: 0o600, first.AdminTokenPath: 0o600, pubPath: 0o644, dir: 0o700} {
		if got := mode(t, path); got != want {
			t.Errorf("%s: mode %v, want %v", filepath.Base(path), got, want)
		}
	}
	key, token := readFile(t, keyPath), readFile(t, first.AdminTokenPath)

	// The public key file is one a broker's --auth-keys takes.
	v, err := NewVerifier(Config{KeyFile: pubPath})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := ReadToken(first.AdminTokenPath)
	if err != nil {
		t.Fatal(err)
	}
	p, err := v.Verify(tok, testNow.Add(364*24*time.Hour))
	if err != nil {
		t.Fatalf("admin.token a day before its year is up: %v", err)
	}
	if p.Tenant != DefaultTenant || len(p.Grants) != len(Actions()) || !p.AllowsNode(ActionNodeManage) || !p.Allows(ActionStreamManage, "any", "stream") {
		t.Errorf("admin principal = %+v, want every action on tenant %s", p, DefaultTenant)
	}
	if _, err := v.Verify(tok, testNow.Add(AdminTokenTTL+time.Minute)); !errors.Is(err, ErrTokenExpired) {
		t.Errorf("admin.token after its TTL: %v, want expired", err)
	}

	again, err := EnsureLocal(dir, testNow.Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if again.Generated || again.Minted {
		t.Errorf("second EnsureLocal: Generated %v, Minted %v; want neither", again.Generated, again.Minted)
	}
	if readFile(t, keyPath) != key || readFile(t, again.AdminTokenPath) != token || again.Key.ID != first.Key.ID {
		t.Error("second EnsureLocal changed the key or the token")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 3 {
		t.Errorf("data dir holds %d files, want 3 (no temporary files left)", len(entries))
	}
}

// TestEnsureLocalRemints: admin.token is re-minted, with the same key, when
// it is missing, expiring or not the local key's.
func TestEnsureLocalRemints(t *testing.T) {
	dir := t.TempDir()
	first, err := EnsureLocal(dir, testNow)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		setup func()
		at    time.Time
	}{
		{"missing", func() { os.Remove(first.AdminTokenPath) }, testNow},
		{"within a week of expiry", func() {}, testNow.Add(AdminTokenTTL - 3*24*time.Hour)},
		{"garbage", func() { writeFile(t, dir, AdminTokenFile, []byte("garbage")) }, testNow},
		{"another key's", func() {
			tok, _, _ := newSigner(t, "ed").Mint(Claims{Tenant: DefaultTenant, Grants: AdminGrants(), IssuedAt: testNow}, AdminTokenTTL)
			writeFile(t, dir, AdminTokenFile, []byte(tok))
		}, testNow},
	}
	for _, tt := range tests {
		tt.setup()
		l, err := EnsureLocal(dir, tt.at)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if !l.Minted || l.Generated || l.Key.ID != first.Key.ID {
			t.Errorf("%s: Minted %v, Generated %v, key %s; want a new token with key %s", tt.name, l.Minted, l.Generated, l.Key.ID, first.Key.ID)
		}
		v, _ := NewVerifier(Config{Trusted: []Key{l.Key}})
		tok, _ := ReadToken(l.AdminTokenPath)
		if _, err := v.Verify(tok, tt.at); err != nil {
			t.Errorf("%s: the new admin.token: %v", tt.name, err)
		}
		if got := mode(t, l.AdminTokenPath); got != 0o600 {
			t.Errorf("%s: admin.token mode %v, want 0600", tt.name, got)
		}
	}
}

// TestEnsureLocalKeepsABadKey: a signing key that does not load is an
// error, never replaced; a missing one is regenerated (voiding the old
// admin token).
func TestEnsureLocalKeepsABadKey(t *testing.T) {
	dir := t.TempDir()
	first, err := EnsureLocal(dir, testNow)
	if err != nil {
		t.Fatal(err)
	}
	keyPath := writeFile(t, dir, SigningKeyFile, []byte("not a key"))
	if _, err := EnsureLocal(dir, testNow); err == nil || !strings.Contains(err.Error(), "move it away") {
		t.Errorf("EnsureLocal with a bad key = %v, want an error", err)
	}
	if readFile(t, keyPath) != "not a key" {
		t.Error("EnsureLocal overwrote a key it could not read")
	}
	os.Remove(keyPath)
	l, err := EnsureLocal(dir, testNow)
	if err != nil {
		t.Fatal(err)
	}
	if !l.Generated || !l.Minted || l.Key.ID == first.Key.ID {
		t.Errorf("after removing the key: Generated %v, Minted %v, same key %v; want a new key and token", l.Generated, l.Minted, l.Key.ID == first.Key.ID)
	}
}

func TestLocalSigner(t *testing.T) {
	dir := t.TempDir()
	if _, err := LocalSigner(dir); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "start `felix broker --data-dir") {
		t.Errorf("LocalSigner of an empty dir = %v, want ErrNotExist saying to start the broker", err)
	}
	l, err := EnsureLocal(dir, testNow)
	if err != nil {
		t.Fatal(err)
	}
	s, err := LocalSigner(dir)
	if err != nil || s.Key().ID != l.Key.ID {
		t.Errorf("LocalSigner = %v, %v; want the local key %s", s, err, l.Key.ID)
	}
}
