package quicconf

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"sync"
	"time"
)

// A browser accepts a WebTransport server's self-signed certificate only
// by its hash (serverCertificateHashes), and only an ECDSA one valid for at
// most 14 days: W3C WebTransport, "compute a certificate hash". The
// certificate is made valid for shortLivedValidity and replaced once
// shortLivedRenewAfter of it has passed, so the one served always has days
// left; sessions made with the old one keep it (TLS does not look at a
// certificate again after the handshake).
const (
	shortLivedValidity   = 10 * 24 * time.Hour
	shortLivedRenewAfter = 5 * 24 * time.Hour
	// shortLivedBackdate covers a browser's clock a little behind ours.
	// It counts in the validity: NotAfter-NotBefore stays under 14 days.
	shortLivedBackdate = time.Hour
)

// ShortLived is a self-signed ECDSA P-256 certificate for WebTransport
// that renews itself: GetCertificate and Hash replace it once it is due.
// It is safe for concurrent use.
type ShortLived struct {
	now func() time.Time

	mu      sync.Mutex
	cert    *tls.Certificate
	hash    [sha256.Size]byte
	renewAt time.Time
}

// NewShortLived makes the first certificate. now is the clock (nil:
// time.Now).
func NewShortLived(now func() time.Time) (*ShortLived, error) {
	if now == nil {
		now = time.Now
	}
	s := &ShortLived{now: now}
	if _, err := s.current(); err != nil {
		return nil, err
	}
	return s, nil
}

// ServerConfig is a TLS 1.3 config serving s's certificate in force (the
// caller sets the ALPN).
func (s *ShortLived) ServerConfig() *tls.Config {
	return &tls.Config{GetCertificate: s.GetCertificate, MinVersion: tls.VersionTLS13}
}

// GetCertificate is tls.Config.GetCertificate.
func (s *ShortLived) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return s.current()
}

// Hash is the SHA-256 of the certificate in force (of its DER), as a
// page passes it in serverCertificateHashes.
func (s *ShortLived) Hash() ([sha256.Size]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.renewLocked(); err != nil {
		return [sha256.Size]byte{}, err
	}
	return s.hash, nil
}

func (s *ShortLived) current() (*tls.Certificate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.renewLocked(); err != nil {
		return nil, err
	}
	return s.cert, nil
}

// renewLocked makes a new certificate when there is none or it is due; a
// failure keeps the one in force (still valid for days).
// REQUIRES: s.mu is held.
func (s *ShortLived) renewLocked() error {
	now := s.now()
	if s.cert != nil && now.Before(s.renewAt) {
		return nil
	}
	cert, err := shortLivedCert(now)
	if err != nil {
		if s.cert != nil && now.Before(s.cert.Leaf.NotAfter) {
			return nil
		}
		return err
	}
	s.cert, s.hash, s.renewAt = cert, sha256.Sum256(cert.Leaf.Raw), now.Add(shortLivedRenewAfter)
	return nil
}

func shortLivedCert(now time.Time) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("quicconf: generate key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, fmt.Errorf("quicconf: serial: %w", err)
	}
	notBefore := now.Add(-shortLivedBackdate)
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "felix broker (WebTransport, short-lived)"},
		NotBefore:             notBefore,
		NotAfter:              notBefore.Add(shortLivedValidity),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("quicconf: create certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("quicconf: parse certificate: %w", err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}
