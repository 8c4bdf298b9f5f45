package config

import (
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/getfelix/felix-go/internal/clustercerts"
)

// clustered is Default as a cluster member.
func clustered() Config {
	c := Default()
	c.ClusterEtcd = "http://127.0.0.1:2379"
	return c
}

// withCerts sets the three files of node a, minted into a fresh directory.
func withCerts(t *testing.T) (Config, clustercerts.Files) {
	t.Helper()
	files, err := clustercerts.Ensure(t.TempDir(), []string{"a"})
	if err != nil {
		t.Fatal(err)
	}
	c := clustered()
	c.ClusterTLSCA, c.ClusterTLSCert, c.ClusterTLSKey = files["a"].CA, files["a"].Cert, files["a"].Key
	return c, files["a"]
}

func TestValidatePeerKnobs(t *testing.T) {
	tests := []struct {
		name    string
		give    func(*Config)
		wantKey string
	}{
		{"tls without a cluster", func(c *Config) { c.ClusterEtcd = ""; c.ClusterTLSCA = "ca.pem" }, "cluster_tls_ca"},
		{"peer listen without a cluster", func(c *Config) { c.ClusterEtcd = ""; c.ClusterPeerListen = "127.0.0.1:0" }, "cluster_peer_listen"},
		{"two of three files", func(c *Config) { c.ClusterTLSKey = "" }, "cluster_tls_ca"},
		{"peer listen without certificates", func(c *Config) {
			c.ClusterTLSCA, c.ClusterTLSCert, c.ClusterTLSKey = "", "", ""
			c.ClusterPeerListen = "127.0.0.1:7201"
		}, "cluster_peer_listen"},
		{"peer listen not host:port", func(c *Config) { c.ClusterPeerListen = "7201" }, "cluster_peer_listen"},
		{"advertise port 0", func(c *Config) { c.ClusterPeerAdvertise = "10.0.0.1:0" }, "cluster_peer_advertise"},
		{"advertise without host", func(c *Config) { c.ClusterPeerAdvertise = ":7201" }, "cluster_peer_advertise"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, ok := knobByKey[tt.wantKey]; !ok {
				t.Fatalf("test names %q, which is not a knob", tt.wantKey)
			}
			c := clustered()
			c.ClusterTLSCA, c.ClusterTLSCert, c.ClusterTLSKey = "ca.pem", "a.pem", "a-key.pem"
			tt.give(&c)
			wantErrContains(t, c.Validate(), "config: "+tt.wantKey+": ")
		})
	}
	ok := clustered()
	ok.ClusterTLSCA, ok.ClusterTLSCert, ok.ClusterTLSKey = "ca.pem", "a.pem", "a-key.pem"
	ok.ClusterPeerListen, ok.ClusterPeerAdvertise = "0.0.0.0:7201", "10.0.0.1:7201"
	if err := ok.Validate(); err != nil {
		t.Fatalf("a complete peer configuration is refused: %v", err)
	}
	if err := clustered().Validate(); err != nil {
		t.Fatalf("a member without a peer link is refused: %v", err)
	}
}

func TestPeerListenDefault(t *testing.T) {
	c := clustered()
	c.Listen = "10.1.2.3:5000"
	if got := c.PeerListen(); got != "10.1.2.3:0" {
		t.Errorf("PeerListen() with listen %s = %q, want 10.1.2.3:0", c.Listen, got)
	}
	c.Listen = ":5000"
	if got := c.PeerListen(); got != ":0" {
		t.Errorf("PeerListen() with listen :5000 = %q, want :0", got)
	}
	c.ClusterPeerListen = "127.0.0.1:7201"
	if got := c.PeerListen(); got != "127.0.0.1:7201" {
		t.Errorf("PeerListen() = %q, want cluster_peer_listen", got)
	}
}

func TestPeerTLSLoads(t *testing.T) {
	c, _ := withCerts(t)
	cert, pool, err := c.PeerTLS()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cert.Leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("the loaded certificate does not verify against the loaded pool: %v", err)
	}
}

// TestPeerTLSRefuses: each way a member's peer certificate can be unusable
// is a startup error naming the knob to fix and why.
func TestPeerTLSRefuses(t *testing.T) {
	other, err := clustercerts.Ensure(t.TempDir(), []string{"a"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		give  func(t *testing.T, c *Config, f clustercerts.Files)
		wants []string
	}{
		{"missing cert", func(_ *testing.T, c *Config, f clustercerts.Files) { c.ClusterTLSCert = f.Cert + ".gone" }, []string{"cluster_tls_cert", "no such file"}},
		{"missing CA", func(_ *testing.T, c *Config, f clustercerts.Files) { c.ClusterTLSCA = f.CA + ".gone" }, []string{"cluster_tls_ca", "no such file"}},
		{"CA not PEM", func(t *testing.T, c *Config, f clustercerts.Files) { c.ClusterTLSCA = garbage(t) }, []string{"cluster_tls_ca", "no PEM certificate"}},
		{"cert not PEM", func(t *testing.T, c *Config, f clustercerts.Files) { c.ClusterTLSCert = garbage(t) }, []string{"cluster_tls_cert", "cluster_tls_key"}},
		{"key of another cert", func(_ *testing.T, c *Config, f clustercerts.Files) { c.ClusterTLSKey = other["a"].Key }, []string{"cluster_tls_cert", "cluster_tls_key"}},
		{"wrong CA", func(_ *testing.T, c *Config, f clustercerts.Files) { c.ClusterTLSCA = other["a"].CA }, []string{"does not chain to cluster_tls_ca"}},
		{"no clientAuth", func(t *testing.T, c *Config, f clustercerts.Files) {
			c.ClusterTLSCert, c.ClusterTLSKey = leafWith(t, f, x509.ExtKeyUsageServerAuth)
		}, []string{"lacks the clientAuth extended key usage"}},
		{"no serverAuth", func(t *testing.T, c *Config, f clustercerts.Files) {
			c.ClusterTLSCert, c.ClusterTLSKey = leafWith(t, f, x509.ExtKeyUsageClientAuth)
		}, []string{"lacks the serverAuth extended key usage"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, f := withCerts(t)
			tt.give(t, &c, f)
			_, _, err := c.PeerTLS()
			if !errors.Is(err, ErrPeerTLS) {
				t.Fatalf("PeerTLS() = %v, want ErrPeerTLS", err)
			}
			wantErrContains(t, err, tt.wants...)
		})
	}
}

func garbage(t *testing.T) string {
	path := filepath.Join(t.TempDir(), "garbage.pem")
	if err := os.WriteFile(path, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// leafWith mints, with f's CA, a leaf having only the given usages, and
// returns its certificate and key files.
func leafWith(t *testing.T, f clustercerts.Files, usages ...x509.ExtKeyUsage) (cert, key string) {
	t.Helper()
	ca, err := clustercerts.LoadCA(filepath.Dir(f.CA))
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Leaf("narrow", clustercerts.WithUsages(usages...))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cert, key = filepath.Join(dir, "narrow.pem"), filepath.Join(dir, "narrow-key.pem")
	if err := clustercerts.WritePair(cert, key, leaf); err != nil {
		t.Fatal(err)
	}
	return cert, key
}
