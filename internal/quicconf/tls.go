package quicconf

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/getfelix/felix-go/wire"
)

// Names of the self-signed certificate files in the data directory. Clients
// look for CertFile there, so a client started in the same folder as a
// default broker trusts it without flags.
const (
	CertFile = "cert.pem"
	KeyFile  = "key.pem"
)

// ServerTLS returns the broker's TLS config: TLS 1.3 only, felix/1 ALPN. With
// no certificate configured it loads, or generates once, a self-signed one in
// dataDir, valid for localhost and the loopback addresses.
func ServerTLS(certFile, keyFile, dataDir string) (*tls.Config, error) {
	cfg, _, err := ReloadableServerTLS(certFile, keyFile, dataDir)
	return cfg, err
}

// ReloadableServerTLS is ServerTLS whose certificate comes from the
// returned Certificates on every handshake (tls.Config.GetCertificate), so
// Certificates.Reload swaps it for new connections without a restart.
func ReloadableServerTLS(certFile, keyFile, dataDir string) (*tls.Config, *Certificates, error) {
	if certFile == "" && keyFile == "" {
		var err error
		if certFile, keyFile, err = ensureSelfSigned(dataDir); err != nil {
			return nil, nil, err
		}
	}
	certs, err := LoadCertificates(certFile, keyFile)
	if err != nil {
		return nil, nil, err
	}
	return certs.ServerConfig(), certs, nil
}

// ServerConfig is a new ServerTLS config taking its certificate from c:
// listeners that share c share its reloads.
func (c *Certificates) ServerConfig() *tls.Config {
	return &tls.Config{
		GetCertificate: c.GetCertificate,
		NextProtos:     []string{wire.ALPN},
		MinVersion:     tls.VersionTLS13,
	}
}

// Certificates holds a certificate and key loaded from two files, read
// again by Reload. Handshakes read it through GetCertificate; a connection
// keeps the certificate it was made with. It is safe for concurrent use.
type Certificates struct {
	certFile, keyFile string
	cert              atomic.Pointer[tls.Certificate]
}

// LoadCertificates loads the PEM pair in certFile and keyFile.
func LoadCertificates(certFile, keyFile string) (*Certificates, error) {
	c := &Certificates{certFile: certFile, keyFile: keyFile}
	if err := c.Reload(); err != nil {
		return nil, err
	}
	return c, nil
}

// Reload reads the files again. A pair that does not load (a half-written
// file, a key that does not match) returns the error and keeps the
// certificate in force, so a bad deploy never leaves the listener without
// one.
func (c *Certificates) Reload() error {
	cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return fmt.Errorf("quicconf: load certificate %s and key %s: %w", c.certFile, c.keyFile, err)
	}
	if cert.Leaf == nil && len(cert.Certificate) > 0 {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return fmt.Errorf("quicconf: parse certificate %s: %w", c.certFile, err)
		}
	}
	c.cert.Store(&cert)
	return nil
}

// GetCertificate is tls.Config.GetCertificate: the certificate in force.
func (c *Certificates) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return c.cert.Load(), nil
}

// Leaf is the certificate in force, parsed: for logging what a reload
// loaded (its subject, serial and expiry).
func (c *Certificates) Leaf() *x509.Certificate { return c.cert.Load().Leaf }

// CertFile is the certificate's file.
func (c *Certificates) CertFile() string { return c.certFile }

// RequireClientCerts makes cfg demand a client certificate signed by one of
// the CA certificates in caFile (mutual TLS).
func RequireClientCerts(cfg *tls.Config, caFile string) error {
	pemBytes, err := os.ReadFile(caFile)
	if err != nil {
		return fmt.Errorf("quicconf: read client CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemBytes) {
		return errors.New("quicconf: client CA file " + caFile + " holds no PEM certificate")
	}
	cfg.ClientCAs = pool
	cfg.ClientAuth = tls.RequireAndVerifyClientCert
	return nil
}

func ensureSelfSigned(dataDir string) (certFile, keyFile string, err error) {
	certFile, keyFile = filepath.Join(dataDir, CertFile), filepath.Join(dataDir, KeyFile)
	if _, err := os.Stat(certFile); err == nil {
		return certFile, keyFile, nil
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return "", "", fmt.Errorf("quicconf: data dir %s: %w (choose a writable --data-dir)", dataDir, err)
	}
	certPEM, keyPEM, err := selfSigned()
	if err != nil {
		return "", "", err
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		return "", "", fmt.Errorf("quicconf: write %s: %w", keyFile, err)
	}
	if err := os.WriteFile(certFile, certPEM, 0o644); err != nil {
		// cert.pem's presence is what says "generated" above: a partial
		// one (a full disk) would make every later start fail to load it.
		_ = os.Remove(certFile)
		return "", "", fmt.Errorf("quicconf: write %s: %w", certFile, err)
	}
	return certFile, keyFile, nil
}

func selfSigned() (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("quicconf: generate key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, fmt.Errorf("quicconf: serial: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "felix broker (self-signed)"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().AddDate(5, 0, 0),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("quicconf: create certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("quicconf: marshal key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

// ClientTLS returns a client TLS config trusting the PEM certificates in
// caFile, or skipping verification when insecure.
func ClientTLS(caFile string, insecure bool) (*tls.Config, error) {
	cfg := &tls.Config{NextProtos: []string{wire.ALPN}, MinVersion: tls.VersionTLS13}
	if insecure {
		cfg.InsecureSkipVerify = true
		return cfg, nil
	}
	if caFile == "" {
		return cfg, nil // the system roots
	}
	pemBytes, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("quicconf: read CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemBytes) {
		return nil, errors.New("quicconf: CA file " + caFile + " holds no PEM certificate")
	}
	cfg.RootCAs = pool
	return cfg, nil
}
