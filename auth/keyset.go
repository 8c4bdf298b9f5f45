package auth

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/go-jose/go-jose/v4"

	"github.com/getfelix/felix-go/wire"
)

// minRSABits is the smallest RSA key accepted (NIST SP 800-57: 2048 bits
// is the floor for new signatures).
const minRSABits = 2048

// maxKeyFileSize bounds a key file; a JWKS of a few dozen keys is a few KiB.
const maxKeyFileSize = 1 << 20

// tenantsMember is the JWKS key member that restricts a key to tenants.
const tenantsMember = "felix_tenants"

// Key is one public key that tokens may be signed with. The zero Key is not
// usable: NewKeySet refuses it.
type Key struct {
	// ID is the key id ("kid"). A token naming a kid is checked against the
	// keys with that id first. NewKeySet fills an empty ID with the key's
	// RFC 7638 thumbprint (SHA-256, base64url), the kid Signer puts in the
	// tokens it mints.
	ID string
	// Public is an ed25519.PublicKey (EdDSA), an *ecdsa.PublicKey on P-256
	// (ES256) or an *rsa.PublicKey of at least 2048 bits (RS256).
	Public crypto.PublicKey
	// Tenants, when not nil, are the only tenants this key may sign tokens
	// for. Nil means any tenant.
	Tenants []string
}

// algorithm returns the one signature algorithm k verifies, or an error
// saying why k cannot be used.
func (k Key) algorithm() (jose.SignatureAlgorithm, error) {
	switch pub := k.Public.(type) {
	case ed25519.PublicKey:
		if len(pub) != ed25519.PublicKeySize {
			return "", fmt.Errorf("Ed25519 key of %d bytes, want %d", len(pub), ed25519.PublicKeySize)
		}
		return jose.EdDSA, nil
	case *ecdsa.PublicKey:
		if pub == nil || pub.Curve != elliptic.P256() {
			return "", errors.New("ECDSA key not on P-256 (only ES256 is accepted)")
		}
		return jose.ES256, nil
	case *rsa.PublicKey:
		if pub == nil || pub.N == nil || pub.N.BitLen() < minRSABits {
			bits := 0
			if pub != nil && pub.N != nil {
				bits = pub.N.BitLen()
			}
			return "", fmt.Errorf("RSA key of %d bits, want at least %d", bits, minRSABits)
		}
		return jose.RS256, nil
	case nil:
		return "", errors.New("no key")
	default:
		return "", fmt.Errorf("key type %T not accepted (want Ed25519, ECDSA P-256 or RSA public keys)", pub)
	}
}

// allowsTenant reports whether k may sign for tenant.
func (k Key) allowsTenant(tenant string) bool {
	return k.Tenants == nil || slices.Contains(k.Tenants, tenant)
}

// KeySet is an immutable set of public keys. The zero KeySet (and a nil
// one) holds no key and verifies nothing.
type KeySet struct {
	keys []verifyKey
}

// verifyKey is a checked Key with its algorithm.
type verifyKey struct {
	Key
	alg jose.SignatureAlgorithm
}

// NewKeySet checks keys (type, curve, size, tenant names) and returns them
// as a set, filling empty IDs with thumbprints. The error names the first
// bad key by index.
func NewKeySet(keys ...Key) (*KeySet, error) {
	s := &KeySet{keys: make([]verifyKey, 0, len(keys))}
	for i, k := range keys {
		alg, err := k.algorithm()
		if err != nil {
			return nil, fmt.Errorf("auth: key %d: %w", i, err)
		}
		if k.Tenants != nil {
			if len(k.Tenants) == 0 {
				return nil, fmt.Errorf("auth: key %d: empty tenant list (omit it to allow any tenant)", i)
			}
			for _, t := range k.Tenants {
				if err := wire.ValidateName("tenant", t); err != nil {
					return nil, fmt.Errorf("auth: key %d: %w", i, err)
				}
			}
			k.Tenants = slices.Clone(k.Tenants)
		}
		if k.ID == "" {
			if k.ID, err = thumbprint(k.Public); err != nil {
				return nil, fmt.Errorf("auth: key %d: %w", i, err)
			}
		}
		s.keys = append(s.keys, verifyKey{Key: k, alg: alg})
	}
	return s, nil
}

// thumbprint is pub's RFC 7638 JWK thumbprint, base64url without padding.
func thumbprint(pub crypto.PublicKey) (string, error) {
	tp, err := (&jose.JSONWebKey{Key: pub}).Thumbprint(crypto.SHA256)
	if err != nil {
		return "", fmt.Errorf("thumbprint: %w", err)
	}
	return base64URL(tp), nil
}

// Keys returns a copy of the set's keys, IDs filled in.
func (s *KeySet) Keys() []Key {
	if s == nil {
		return nil
	}
	out := make([]Key, len(s.keys))
	for i, k := range s.keys {
		out[i] = k.Key
		out[i].Tenants = slices.Clone(k.Tenants)
	}
	return out
}

// Len returns the number of keys.
func (s *KeySet) Len() int {
	if s == nil {
		return 0
	}
	return len(s.keys)
}

// LoadKeySet reads a key file, as ParseKeySet; errors name the file.
func LoadKeySet(path string) (*KeySet, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("auth: key file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxKeyFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("auth: key file %s: %w", path, err)
	}
	if len(data) > maxKeyFileSize {
		return nil, fmt.Errorf("auth: key file %s: larger than %d bytes", path, maxKeyFileSize)
	}
	s, err := ParseKeySet(data)
	if err != nil {
		return nil, fmt.Errorf("auth: key file %s: %w", path, err)
	}
	return s, nil
}

// ParseKeySet reads public keys in one of two forms, told apart by the
// first non-space byte:
//
//   - '{': a JWKS document, {"keys": [JWK, ...]}. Each key may carry
//     "felix_tenants": ["a", "b"] to restrict it to those tenants; a key's
//     "alg", when present, must be the one its type implies (EdDSA, ES256,
//     RS256). Keys with "use": "enc" are skipped (a provider's JWKS often
//     lists encryption keys beside its signing keys); every other key must
//     be usable, so a private or symmetric key, another curve or a short RSA
//     key refuses the whole document.
//   - anything else: PEM, one or more "PUBLIC KEY" blocks (PKIX), each
//     unrestricted. Any other block type (a private key, a certificate) or
//     trailing text refuses the file.
//
// A document with no usable key is an error: a verifier must trust
// something.
func ParseKeySet(data []byte) (*KeySet, error) {
	var (
		keys []Key
		err  error
	)
	if trimmed := bytes.TrimLeft(data, " \t\r\n"); len(trimmed) > 0 && trimmed[0] == '{' {
		keys, err = parseJWKS(trimmed)
	} else {
		keys, err = parsePEMKeys(data)
	}
	if err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, errors.New("no usable public key")
	}
	return NewKeySet(keys...)
}

func parsePEMKeys(data []byte) ([]Key, error) {
	var keys []Key
	rest := data
	for n := 1; ; n++ {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "PUBLIC KEY" {
			return nil, fmt.Errorf("PEM block %d is %q, want \"PUBLIC KEY\" (give public keys only)", n, block.Type)
		}
		pub, err := x509.ParsePKIXPublicKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("PEM block %d: %w", n, err)
		}
		keys = append(keys, Key{Public: pub})
	}
	if len(bytes.TrimSpace(rest)) > 0 {
		if len(keys) == 0 {
			return nil, errors.New("neither PEM public keys nor a JWKS document")
		}
		return nil, fmt.Errorf("text after PEM block %d is not a PEM block", len(keys))
	}
	return keys, nil
}

func parseJWKS(data []byte) ([]Key, error) {
	var doc struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("JWKS: %w", err)
	}
	if doc.Keys == nil {
		return nil, errors.New(`JWKS: no "keys" array`)
	}
	var keys []Key
	for i, raw := range doc.Keys {
		var jwk jose.JSONWebKey
		if err := jwk.UnmarshalJSON(raw); err != nil {
			return nil, fmt.Errorf("JWKS key %d: %w", i, err)
		}
		var extra struct {
			Tenants json.RawMessage `json:"felix_tenants"`
		}
		if err := json.Unmarshal(raw, &extra); err != nil {
			return nil, fmt.Errorf("JWKS key %d: %w", i, err)
		}
		name := fmt.Sprintf("JWKS key %d", i)
		if jwk.KeyID != "" {
			name += fmt.Sprintf(" (kid %q)", jwk.KeyID)
		}
		if jwk.Use == "enc" {
			continue
		}
		if _, symmetric := jwk.Key.([]byte); symmetric {
			return nil, fmt.Errorf("%s is a symmetric key; HMAC is not accepted", name)
		}
		if !jwk.IsPublic() {
			return nil, fmt.Errorf("%s holds a private key; publish only public keys", name)
		}
		k := Key{ID: jwk.KeyID, Public: jwk.Key}
		if extra.Tenants != nil {
			if string(extra.Tenants) == "null" {
				return nil, fmt.Errorf("%s: %s is null; omit it to allow any tenant", name, tenantsMember)
			}
			if err := json.Unmarshal(extra.Tenants, &k.Tenants); err != nil {
				return nil, fmt.Errorf("%s: %s: %w", name, tenantsMember, err)
			}
			if k.Tenants == nil {
				k.Tenants = []string{}
			}
		}
		alg, err := k.algorithm()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if jwk.Algorithm != "" && jwk.Algorithm != string(alg) {
			return nil, fmt.Errorf("%s: alg %q, but the key is for %s", name, jwk.Algorithm, alg)
		}
		keys = append(keys, k)
	}
	return keys, nil
}
