package auth

import (
	"crypto"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/getfelix/felix-go/wire"
)

// Claims are what Mint puts in a token. The zero Claims is refused: a
// token needs a tenant.
type Claims struct {
	Tenant  string  // required; a valid Felix name
	Subject string  // "sub"; "" leaves it out
	Grants  []Grant // what the holder may do inside Tenant; each must be one ParseGrant accepts
	// Audience is "aud". Nil means []string{DefaultAudience}.
	Audience []string
	Issuer   string // "iss"; "" leaves it out
	// IssuedAt is "iat", and the start of the TTL. Zero means time.Now().
	IssuedAt time.Time
	// NotBefore is "nbf". Zero leaves it out.
	NotBefore time.Time
}

// Signer mints tokens with one private key. It is safe for concurrent use.
type Signer struct {
	key    Key
	signer jose.Signer
}

// NewSigner returns a Signer for an ed25519.PrivateKey (EdDSA), an
// *ecdsa.PrivateKey on P-256 (ES256) or an *rsa.PrivateKey of at least 2048
// bits (RS256). Its tokens carry the public key's thumbprint as "kid".
func NewSigner(priv crypto.Signer) (*Signer, error) {
	if priv == nil {
		return nil, errors.New("auth: signer: no key")
	}
	set, err := NewKeySet(Key{Public: priv.Public()})
	if err != nil {
		return nil, fmt.Errorf("auth: signer: %w", err)
	}
	k := set.keys[0]
	js, err := jose.NewSigner(
		jose.SigningKey{Algorithm: k.alg, Key: jose.JSONWebKey{Key: priv, KeyID: k.ID}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		return nil, fmt.Errorf("auth: signer: %w", err)
	}
	return &Signer{key: k.Key, signer: js}, nil
}

// LoadSigner reads a PEM "PRIVATE KEY" (PKCS#8) file, as EnsureLocal
// writes it. A missing file's error matches fs.ErrNotExist.
func LoadSigner(path string) (*Signer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("auth: signing key: %w", err)
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("auth: signing key %s: no PEM \"PRIVATE KEY\" block", path)
	}
	priv, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("auth: signing key %s: %w", path, err)
	}
	cs, ok := priv.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("auth: signing key %s: %T cannot sign", path, priv)
	}
	s, err := NewSigner(cs)
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", err, path)
	}
	return s, nil
}

// Key returns the public half, unrestricted, with the kid the Signer's
// tokens carry: give it to Config.Trusted.
func (s *Signer) Key() Key { return s.key }

// Mint signs a token for c that expires ttl after c.IssuedAt, and returns
// it with its expiry (whole seconds, as the token holds it).
func (s *Signer) Mint(c Claims, ttl time.Duration) (token string, expires time.Time, err error) {
	if err := wire.ValidateName("tenant", c.Tenant); err != nil {
		return "", time.Time{}, fmt.Errorf("auth: mint: %w", err)
	}
	if ttl < time.Second {
		return "", time.Time{}, fmt.Errorf("auth: mint: ttl %s, want at least 1s", ttl)
	}
	grants := make([]string, len(c.Grants))
	for i, g := range c.Grants {
		if err := g.validate(); err != nil {
			return "", time.Time{}, fmt.Errorf("auth: mint: %w", err)
		}
		grants[i] = g.String()
	}
	iat := c.IssuedAt
	if iat.IsZero() {
		iat = time.Now()
	}
	aud := c.Audience
	if aud == nil {
		aud = []string{DefaultAudience}
	}
	exp := jwt.NewNumericDate(iat.Add(ttl))
	std := jwt.Claims{
		Issuer:   c.Issuer,
		Subject:  c.Subject,
		Audience: jwt.Audience(aud),
		IssuedAt: jwt.NewNumericDate(iat),
		Expiry:   exp,
	}
	if !c.NotBefore.IsZero() {
		std.NotBefore = jwt.NewNumericDate(c.NotBefore)
	}
	token, err = jwt.Signed(s.signer).Claims(std).Claims(felixClaims{Tenant: c.Tenant, Grants: grants}).Serialize()
	if err != nil {
		return "", time.Time{}, fmt.Errorf("auth: mint: %w", err)
	}
	return token, exp.Time(), nil
}

func base64URL(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }
