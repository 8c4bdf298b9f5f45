package quicconf

import (
	"bytes"
	"crypto/tls"
	"os"
	"path/filepath"
	"testing"

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
