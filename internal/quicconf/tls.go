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
	if certFile == "" && keyFile == "" {
		var err error
		if certFile, keyFile, err = ensureSelfSigned(dataDir); err != nil {
			return nil, err
		}
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("quicconf: load certificate %s: %w", certFile, err)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		NextProtos:   []string{wire.ALPN},
		MinVersion:   tls.VersionTLS13,
	}, nil
}

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
