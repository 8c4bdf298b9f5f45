package broker_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/internal/quicconf"
	"github.com/getfelix/felix-go/wire"
)

// testCA is a certificate authority made for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key}
}

func (ca *testCA) writePEM(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "client-ca.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// issue makes a client certificate with subject common name cn.
func (ca *testCA) issue(t *testing.T, cn string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestMutualTLS: with tls_client_ca a client needs a certificate the CA
// signed, and with tls_client_cert_bind_subject its subject must be the
// tenant it connects as; the token is still required.
func TestMutualTLS(t *testing.T) {
	ca := newTestCA(t)
	cfg := brokertest.Config(t)
	cfg.TLSClientCA = ca.writePEM(t)
	cfg.TLSClientCertBindSubject = true
	b := brokertest.Start(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dial := func(tenant string, cert *tls.Certificate) error {
		tlsConf, err := quicconf.ClientTLS(filepath.Join(cfg.DataDir, quicconf.CertFile), false)
		if err != nil {
			t.Fatal(err)
		}
		if cert != nil {
			tlsConf.Certificates = []tls.Certificate{*cert}
		}
		c, err := client.Dial(ctx, b.Addr().String(), client.Options{TLS: tlsConf, Tenant: tenant, Token: brokertest.Token(t, cfg, tenant)})
		if err == nil {
			_ = c.Close(ctx)
		}
		return err
	}
	if err := dial("default", nil); err == nil {
		t.Fatal("a client without a certificate was served")
	}
	if err := dial("default", ptr(newTestCA(t).issue(t, "default"))); err == nil {
		t.Fatal("a client with a certificate from another CA was served")
	}
	if err := dial("default", ptr(ca.issue(t, "other"))); !errors.Is(err, wire.ErrUnauthenticated) {
		t.Fatalf("certificate subject other, tenant default: %v, want unauthenticated", err)
	}
	if err := dial("default", ptr(ca.issue(t, "default"))); err != nil {
		t.Fatalf("certificate subject default, tenant default: %v", err)
	}
}

func ptr[T any](v T) *T { return &v }
