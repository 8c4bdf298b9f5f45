package config

import (
	"crypto/x509"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/getfelix/felix-go/internal/clustercerts"
)

// TestEtcdPlaintextOffLoopbackRefused: a cluster_etcd endpoint that is
// plain http:// to a host other than loopback is refused at validation,
// naming the knobs that fix it, unless the operator accepts it.
func TestEtcdPlaintextOffLoopbackRefused(t *testing.T) {
	for _, endpoints := range []string{"http://10.0.0.5:2379", "http://127.0.0.1:2379,http://etcd2:2379", "http://[2001:db8::1]:2379"} {
		c := clustered()
		c.ClusterEtcd = endpoints
		wantErrContains(t, c.Validate(), "config: cluster_etcd: ", "plaintext", "cluster_etcd_tls_ca", "cluster_etcd_allow_plaintext")
	}
	for _, endpoints := range []string{"http://127.0.0.1:2379", "http://localhost:2379", "http://[::1]:2379,http://127.0.0.2:2379"} {
		c := clustered()
		c.ClusterEtcd = endpoints
		if err := c.Validate(); err != nil {
			t.Errorf("cluster_etcd %s (loopback): %v, want it accepted", endpoints, err)
		}
	}
}

func TestValidateEtcdKnobs(t *testing.T) {
	tests := []struct {
		name    string
		give    func(*Config)
		wantKey string
		want    string
	}{
		{"tls with an http endpoint", func(c *Config) { c.ClusterEtcdTLSCA = "ca.pem" }, "cluster_etcd", "would drop TLS"},
		{"client certificate with an http endpoint", func(c *Config) {
			c.ClusterEtcdTLSCert, c.ClusterEtcdTLSKey = "a.pem", "a-key.pem"
		}, "cluster_etcd", "would drop TLS"},
		{"mixed schemes", func(c *Config) { c.ClusterEtcd = "https://10.0.0.5:2379,http://127.0.0.1:2379" }, "cluster_etcd", "mixes http:// and https://"},
		{"only commas", func(c *Config) { c.ClusterEtcd = " , " }, "cluster_etcd", "names no endpoint"},
		{"no scheme", func(c *Config) { c.ClusterEtcd = "127.0.0.1:2379" }, "cluster_etcd", "not an etcd client URL"},
		{"unix socket", func(c *Config) { c.ClusterEtcd = "unix:///run/etcd.sock" }, "cluster_etcd", "not an etcd client URL"},
		{"no port", func(c *Config) { c.ClusterEtcd = "https://etcd1" }, "cluster_etcd", "no host:port"},
		{"a path", func(c *Config) { c.ClusterEtcd = "https://etcd1:2379/v3" }, "cluster_etcd", "not an etcd client URL"},
		{"certificate without key", func(c *Config) { c.ClusterEtcd = "https://etcd1:2379"; c.ClusterEtcdTLSCert = "a.pem" }, "cluster_etcd_tls_cert", "go together"},
		{"user without password", func(c *Config) { c.ClusterEtcdUser = "felix" }, "cluster_etcd_user", "go together"},
		{"password without user", func(c *Config) { c.ClusterEtcdPasswordFile = "pw" }, "cluster_etcd_user", "go together"},
		{"tls without a cluster", func(c *Config) { c.ClusterEtcd = ""; c.ClusterEtcdTLSCA = "ca.pem" }, "cluster_etcd_tls_ca", "cluster_etcd is not"},
		{"plaintext knob without a cluster", func(c *Config) { c.ClusterEtcd = ""; c.ClusterEtcdAllowPlaintext = true }, "cluster_etcd_allow_plaintext", "cluster_etcd is not"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, ok := knobByKey[tt.wantKey]; !ok {
				t.Fatalf("test names %q, which is not a knob", tt.wantKey)
			}
			c := clustered()
			tt.give(&c)
			wantErrContains(t, c.Validate(), "config: "+tt.wantKey+": ", tt.want)
		})
	}
	for name, give := range map[string]func(*Config){
		"plaintext accepted by the knob": func(c *Config) { c.ClusterEtcd = "http://10.0.0.5:2379"; c.ClusterEtcdAllowPlaintext = true },
		"https with every knob": func(c *Config) {
			c.ClusterEtcd = "https://10.0.0.5:2379, https://etcd2:2379,"
			c.ClusterEtcdTLSCA, c.ClusterEtcdTLSCert, c.ClusterEtcdTLSKey = "ca.pem", "a.pem", "a-key.pem"
			c.ClusterEtcdUser, c.ClusterEtcdPasswordFile = "felix", "pw"
		},
		"https with the system's roots": func(c *Config) { c.ClusterEtcd = "https://etcd.example:2379" },
	} {
		c := clustered()
		give(&c)
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v, want it accepted", name, err)
		}
	}
}

// TestEtcdTLS: the files load into a client configuration that trusts the
// CA and presents the certificate; a certificate without clientAuth, a CA
// file without a certificate and a missing file are refused naming the
// knob.
func TestEtcdTLS(t *testing.T) {
	dir := t.TempDir()
	files, err := clustercerts.Ensure(dir, []string{"a"})
	if err != nil {
		t.Fatal(err)
	}
	c := clustered()
	c.ClusterEtcd = "https://10.0.0.5:2379"
	c.ClusterEtcdTLSCA, c.ClusterEtcdTLSCert, c.ClusterEtcdTLSKey = files["a"].CA, files["a"].Cert, files["a"].Key
	conf, err := c.EtcdTLS()
	if err != nil {
		t.Fatal(err)
	}
	if conf.RootCAs == nil || len(conf.Certificates) != 1 || conf.Certificates[0].Leaf.Subject.CommonName != "a" {
		t.Errorf("EtcdTLS = %+v, want the CA trusted and a's certificate presented", conf)
	}
	if plain, err := clustered().EtcdTLS(); plain != nil || err != nil {
		t.Errorf("EtcdTLS with http:// = %v, %v; want no TLS", plain, err)
	}

	ca, err := clustercerts.LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	serverOnly, err := ca.Leaf("s", clustercerts.WithUsages(x509.ExtKeyUsageServerAuth))
	if err != nil {
		t.Fatal(err)
	}
	serverCert, serverKey := filepath.Join(dir, "s.pem"), filepath.Join(dir, "s-key.pem")
	if err := clustercerts.WritePair(serverCert, serverKey, serverOnly); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		give  func(*Config)
		wants []string
	}{
		{"no clientAuth", func(c *Config) { c.ClusterEtcdTLSCert, c.ClusterEtcdTLSKey = serverCert, serverKey }, []string{"cluster_etcd_tls_cert", "clientAuth"}},
		{"key of another certificate", func(c *Config) { c.ClusterEtcdTLSKey = serverKey }, []string{"cluster_etcd_tls_cert", "cluster_etcd_tls_key"}},
		{"CA without a certificate", func(c *Config) { c.ClusterEtcdTLSCA = files["a"].Key }, []string{"cluster_etcd_tls_ca", "no PEM certificate"}},
		{"missing CA", func(c *Config) { c.ClusterEtcdTLSCA += ".gone" }, []string{"cluster_etcd_tls_ca", "no such file"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bad := c
			tt.give(&bad)
			_, err := bad.EtcdTLS()
			if !errors.Is(err, ErrEtcdClient) {
				t.Errorf("err = %v, want ErrEtcdClient", err)
			}
			wantErrContains(t, err, tt.wants...)
		})
	}
}

// TestEtcdPassword: the password is the file's first line without its
// line end; an empty first line, an overlong one and a missing file are
// refused naming the knob, and no password is read when the knob is unset.
func TestEtcdPassword(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for give, want := range map[string]string{"s3cret\n": "s3cret", "s3cret\r\nignored\n": "s3cret", "s3cret": "s3cret", " spaced ": " spaced "} {
		c := clustered()
		c.ClusterEtcdPasswordFile = write("pw", give)
		if got, err := c.EtcdPassword(); err != nil || got != want {
			t.Errorf("password file %q: got %q, %v; want %q", give, got, err, want)
		}
	}
	if got, err := clustered().EtcdPassword(); got != "" || err != nil {
		t.Errorf("no password file: got %q, %v; want none", got, err)
	}
	for give, want := range map[string]string{
		write("empty", "\nsecond"):                                 "first line is empty",
		write("long", strings.Repeat("x", maxEtcdPasswordBytes+1)): "longer than",
		filepath.Join(dir, "gone"):                                 "no such file",
	} {
		c := clustered()
		c.ClusterEtcdPasswordFile = give
		_, err := c.EtcdPassword()
		if !errors.Is(err, ErrEtcdClient) {
			t.Errorf("%s: err = %v, want ErrEtcdClient", give, err)
		}
		wantErrContains(t, err, "cluster_etcd_password_file", want)
	}
}

// FuzzEtcdEndpoints feeds cluster_etcd any string, with and without TLS
// knobs and the plaintext knob. Invariants: validation never panics; an
// accepted list has one scheme; with TLS knobs it is all https://; without
// cluster_etcd_allow_plaintext an http:// endpoint names a loopback host;
// EtcdTLSSet agrees with the scheme.
func FuzzEtcdEndpoints(f *testing.F) {
	for _, seed := range []string{
		"http://127.0.0.1:2379", "https://10.0.0.5:2379,https://etcd2:2379", "http://10.0.0.5:2379",
		"http://[::1]:2379", "https://etcd1", "unix:///run/etcd.sock", "127.0.0.1:2379", "http://127.0.0.1:2379,https://e:1",
		" , http://localhost:2379 ,", "http://%zz:1", "https://user:pw@etcd:2379/", "http://127.0.0.1.nip.io:2379",
	} {
		f.Add(seed, false, false)
	}
	f.Add("https://10.0.0.5:2379", true, false)
	f.Add("http://10.0.0.5:2379", false, true)
	f.Fuzz(func(t *testing.T, endpoints string, tlsKnob, allowPlaintext bool) {
		c := clustered()
		c.ClusterEtcd, c.ClusterEtcdAllowPlaintext = endpoints, allowPlaintext
		if tlsKnob {
			c.ClusterEtcdTLSCA = "ca.pem"
		}
		if err := c.Validate(); err != nil || strings.TrimSpace(endpoints) == "" {
			return
		}
		schemes := map[string]bool{}
		for _, ep := range strings.Split(endpoints, ",") {
			if ep = strings.TrimSpace(ep); ep == "" {
				continue
			}
			u, err := url.Parse(ep)
			if err != nil {
				t.Fatalf("accepted %q, whose endpoint %q does not parse: %v", endpoints, ep, err)
			}
			schemes[u.Scheme] = true
			if u.Scheme == "http" && tlsKnob {
				t.Fatalf("accepted http:// endpoint %q with cluster_etcd_tls_ca set", ep)
			}
			if u.Scheme == "http" && !allowPlaintext && !loopbackHost(u.Hostname()) {
				t.Fatalf("accepted plaintext endpoint %q off loopback without cluster_etcd_allow_plaintext", ep)
			}
		}
		if len(schemes) != 1 {
			t.Fatalf("accepted %q with schemes %v, want exactly one", endpoints, schemes)
		}
		if c.EtcdTLSSet() != schemes["https"] {
			t.Fatalf("accepted %q: EtcdTLSSet = %v, want %v", endpoints, c.EtcdTLSSet(), schemes["https"])
		}
	})
}
