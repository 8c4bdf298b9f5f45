package auth

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The files EnsureLocal keeps in the data directory, beside the broker's
// cert.pem.
const (
	// SigningKeyFile is the local Ed25519 signing key, PKCS#8 PEM, mode 0600.
	SigningKeyFile = "auth_signing_key.pem"
	// PublicKeyFile is its public key, PKIX PEM, mode 0644: a file
	// --auth-keys of another broker can take.
	PublicKeyFile = "auth_public_key.pem"
	// AdminTokenFile holds a token with AdminGrants on DefaultTenant, mode
	// 0600, one line.
	AdminTokenFile = "admin.token"
)

const (
	// DefaultTenant is the tenant of the local admin token, and the
	// clients' default.
	DefaultTenant = "default"
	// AdminTokenTTL is the local admin token's life: a year, so the
	// two-command start keeps working on a developer's machine, while a
	// leaked file still expires. Rotate by deleting admin.token (or the
	// signing key, which voids every local token) and restarting.
	AdminTokenTTL = 365 * 24 * time.Hour
	// adminRenewBefore: EnsureLocal re-mints an admin token this close to
	// its expiry, so a broker started on day 364 does not lose it a day
	// later.
	adminRenewBefore = 7 * 24 * time.Hour
	// adminSubject is the local admin token's "sub".
	adminSubject = "admin"
)

// Local is the broker's own signing key and admin token, as EnsureLocal
// left them.
type Local struct {
	// Signer mints with the local key (felix token create uses it too).
	Signer *Signer
	// Key is the local public key, unrestricted: give it to
	// Config.Trusted so local tokens verify next to --auth-keys.
	Key Key
	// AdminTokenPath is DATA_DIR/admin.token.
	AdminTokenPath string
	// Generated says this call made a new signing key (first start, or the
	// key file had been removed): every earlier local token is void.
	Generated bool
	// Minted says this call wrote a new admin.token.
	Minted bool
}

// EnsureLocal makes sure dataDir holds a signing key, its public key and a
// valid admin.token, creating what is missing. On first start it generates
// an Ed25519 key; later starts reuse it (any key NewSigner takes works, so
// an operator may put their own there). admin.token is re-minted only when
// it is missing, not a token of the local key, or within a week of expiry
// at now; it gets AdminGrants on DefaultTenant for AdminTokenTTL.
//
// Files are replaced atomically (write to a temporary file, rename), so a
// crash never leaves half a key. A signing key that exists but does not
// load is an error, never overwritten.
func EnsureLocal(dataDir string, now time.Time) (*Local, error) {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("auth: data dir %s: %w (choose a writable --data-dir)", dataDir, err)
	}
	l := &Local{AdminTokenPath: filepath.Join(dataDir, AdminTokenFile)}
	keyPath := filepath.Join(dataDir, SigningKeyFile)
	signer, err := LoadSigner(keyPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if signer, err = generateLocalKey(keyPath); err != nil {
			return nil, err
		}
		l.Generated = true
	case err != nil:
		return nil, fmt.Errorf("%w (move it away to have a new one generated)", err)
	default:
		// A key copied in by hand may be readable by others; it is a
		// credential for every tenant.
		if err := os.Chmod(keyPath, 0o600); err != nil {
			return nil, fmt.Errorf("auth: signing key: %w", err)
		}
	}
	l.Signer, l.Key = signer, signer.Key()
	if err := writePublicKey(filepath.Join(dataDir, PublicKeyFile), l.Key); err != nil {
		return nil, err
	}
	if !l.Generated && adminTokenValid(l.AdminTokenPath, l.Key, now.Add(adminRenewBefore)) {
		return l, nil
	}
	token, _, err := signer.Mint(Claims{Tenant: DefaultTenant, Subject: adminSubject, Grants: AdminGrants(), IssuedAt: now}, AdminTokenTTL)
	if err != nil {
		return nil, err
	}
	if err := writeFileAtomic(l.AdminTokenPath, []byte(token+"\n"), 0o600); err != nil {
		return nil, err
	}
	l.Minted = true
	return l, nil
}

// LocalSigner loads the signing key EnsureLocal keeps in dataDir, for
// minting tokens outside the broker. A missing key's error says to start
// the broker once and matches fs.ErrNotExist.
func LocalSigner(dataDir string) (*Signer, error) {
	path := filepath.Join(dataDir, SigningKeyFile)
	s, err := LoadSigner(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("auth: no signing key at %s: start `felix broker --data-dir %s` once to create it, or pass the broker's --data-dir (%w)", path, dataDir, err)
	}
	return s, err
}

// ReadToken reads a token file such as admin.token: its content, spaces and
// newlines trimmed.
func ReadToken(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("auth: token file: %w", err)
	}
	return strings.TrimSpace(string(data)), nil
}

func generateLocalKey(path string) (*Signer, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("auth: generate signing key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, fmt.Errorf("auth: encode signing key: %w", err)
	}
	if err := writeFileAtomic(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return nil, err
	}
	return NewSigner(priv)
}

// writePublicKey writes k's PEM to path unless path already holds it.
func writePublicKey(path string, k Key) error {
	der, err := x509.MarshalPKIXPublicKey(k.Public)
	if err != nil {
		return fmt.Errorf("auth: encode public key: %w", err)
	}
	data := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	if old, err := os.ReadFile(path); err == nil && string(old) == string(data) {
		return nil
	}
	return writeFileAtomic(path, data, 0o644)
}

// adminTokenValid reports whether path holds a token of k valid at at.
func adminTokenValid(path string, k Key, at time.Time) bool {
	token, err := ReadToken(path)
	if err != nil {
		return false
	}
	v, err := NewVerifier(Config{Trusted: []Key{k}, Leeway: -1})
	if err != nil {
		return false
	}
	p, err := v.Verify(token, at)
	return err == nil && p.Tenant == DefaultTenant
}

// writeFileAtomic writes data to path with mode perm through a temporary
// file in the same directory and a rename.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("auth: write %s: %w", path, err)
	}
	tmp := f.Name()
	err = f.Chmod(perm)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("auth: write %s: %w", path, err)
	}
	return nil
}
