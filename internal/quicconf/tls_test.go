package quicconf

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/getfelix/felix-go/wire"
)

// TestSelfSignedOnceAndTrusted: with no certificate configured the server
// generates one in the data directory on first use and reuses it after, and
// a client config built from that file trusts it.
func TestSelfSignedOnceAndTrusted(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	srv, err := ServerTLS("", "", dir)
	if err != nil {
		t.Fatalf("ServerTLS in an empty %s: %v", dir, err)
	}
	if srv.MinVersion != tls.VersionTLS13 || len(srv.NextProtos) != 1 || srv.NextProtos[0] != wire.ALPN {
		t.Errorf("server config: MinVersion %#x, NextProtos %q; want TLS 1.3 and [%q]", srv.MinVersion, srv.NextProtos, wire.ALPN)
	}
	first, err := os.ReadFile(filepath.Join(dir, CertFile))
	if err != nil {
		t.Fatalf("the self-signed certificate was not written: %v", err)
	}
	if _, err := ServerTLS("", "", dir); err != nil {
		t.Fatalf("ServerTLS again: %v", err)
	}
	again, err := os.ReadFile(filepath.Join(dir, CertFile))
	if err != nil || !bytes.Equal(first, again) {
		t.Errorf("second ServerTLS rewrote %s (err %v); want the first certificate kept", CertFile, err)
	}

	cli, err := ClientTLS(filepath.Join(dir, CertFile), false)
	if err != nil {
		t.Fatalf("ClientTLS: %v", err)
	}
	if cli.RootCAs == nil || cli.InsecureSkipVerify {
		t.Errorf("client config: RootCAs %v, InsecureSkipVerify %v; want the certificate as root, verifying", cli.RootCAs, cli.InsecureSkipVerify)
	}
	if _, err := ClientTLS(filepath.Join(dir, KeyFile), false); err == nil {
		t.Errorf("ClientTLS accepted %s, which holds no certificate", KeyFile)
	}
}

// TestCertificatesReload swaps the certificate files under a live QUIC
// listener's TLS config: a handshake before Reload gets the old
// certificate, one after it the new; a pair that does not load is refused
// and the certificate in force stays.
func TestCertificatesReload(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	writePair := func(cert, key []byte) {
		t.Helper()
		if err := os.WriteFile(certFile, cert, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(keyFile, key, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	oldCert, oldKey, err := selfSigned()
	if err != nil {
		t.Fatal(err)
	}
	writePair(oldCert, oldKey)
	srv, certs, err := ReloadableServerTLS(certFile, keyFile, dir)
	if err != nil {
		t.Fatal(err)
	}
	if srv.GetCertificate == nil || len(srv.Certificates) != 0 {
		t.Fatal("ReloadableServerTLS: want the certificate from GetCertificate only")
	}
	ln, err := quic.ListenAddr("127.0.0.1:0", srv, ServerQUICConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept(context.Background())
			if err != nil {
				return
			}
			_ = c.CloseWithError(0, "")
		}
	}()
	served := func() []byte {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cli := &tls.Config{InsecureSkipVerify: true, NextProtos: []string{wire.ALPN}, MinVersion: tls.VersionTLS13}
		c, err := quic.DialAddr(ctx, ln.Addr().String(), cli, QUICConfig())
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		defer c.CloseWithError(0, "")
		return c.ConnectionState().TLS.PeerCertificates[0].Raw
	}
	derOf := func(certPEM []byte) []byte {
		b, _ := pem.Decode(certPEM)
		return b.Bytes
	}
	if got := served(); !bytes.Equal(got, derOf(oldCert)) {
		t.Fatal("the listener served another certificate than the one loaded")
	}

	newCert, newKey, err := selfSigned()
	if err != nil {
		t.Fatal(err)
	}
	writePair(newCert, newKey)
	if got := served(); !bytes.Equal(got, derOf(oldCert)) {
		t.Fatal("the new files were served before Reload")
	}
	if err := certs.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := served(); !bytes.Equal(got, derOf(newCert)) {
		t.Fatal("after Reload a new connection did not get the new certificate")
	}

	writePair(oldCert, newKey) // a key that does not match
	if err := certs.Reload(); err == nil {
		t.Fatal("Reload accepted a certificate with another's key")
	}
	if got := served(); !bytes.Equal(got, derOf(newCert)) {
		t.Fatal("a refused Reload changed the certificate in force")
	}
}
