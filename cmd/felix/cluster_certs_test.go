package main

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/getfelix/felix-go/config"
)

// TestClusterCerts: felix cluster certs writes a CA and each member's
// files, prints the knobs each member sets, and those knobs pass the
// broker's own check (config.PeerTLS); a second run keeps the CA.
func TestClusterCerts(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "certs")
	r := runFelix(t, opts{}, "cluster", "certs", "--dir", dir, "--nodes", "node-1, node-2")
	r.wantExit(t, 0)
	out := r.stdout.String()
	for _, want := range []string{
		"cluster_tls_ca: " + filepath.Join(dir, "ca.pem"),
		"cluster_node_id: node-2\ncluster_tls_ca: " + filepath.Join(dir, "ca.pem") + "\ncluster_tls_cert: " + filepath.Join(dir, "node-2.pem") + "\ncluster_tls_key: " + filepath.Join(dir, "node-2-key.pem"),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("cluster certs printed\n%s\nwant it to contain %q", out, want)
		}
	}
	for _, node := range []string{"node-1", "node-2"} {
		c := config.Default()
		c.ClusterEtcd = "http://127.0.0.1:2379"
		c.ClusterTLSCA, c.ClusterTLSCert, c.ClusterTLSKey = filepath.Join(dir, "ca.pem"), filepath.Join(dir, node+".pem"), filepath.Join(dir, node+"-key.pem")
		if _, _, err := c.PeerTLS(); err != nil {
			t.Errorf("%s's printed knobs: %v", node, err)
		}
	}
	ca, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	runFelix(t, opts{}, "cluster", "certs", "--dir", dir, "--nodes", "node-3").wantExit(t, 0)
	if again, _ := os.ReadFile(filepath.Join(dir, "ca.pem")); string(again) != string(ca) {
		t.Error("a second cluster certs replaced the CA")
	}
}

// TestClusterCertsArgs: mistakes exit 2 before any file is written.
func TestClusterCertsArgs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"cluster", "certs"}, "certs needs --nodes"},
		{[]string{"cluster", "certs", "--nodes", "a,b/c"}, `node id "b/c"`},
		{[]string{"cluster", "certs", "--nodes", "a,a"}, `node id "a" twice`},
		{[]string{"cluster", "certs", "--nodes", "a", "x"}, "certs takes no arguments"},
		{[]string{"cluster", "certs", "--nodes", "a", "--json"}, "--json is ls's"},
		{[]string{"cluster", "certs", "--nodes", "a,etcd", "--etcd-hosts", "10.0.0.5"}, `node id "etcd" is the name of etcd's certificate`},
	} {
		r := runFelix(t, opts{dir: dir}, tt.args...)
		r.wantExit(t, 2)
		if !strings.Contains(r.stderr.String(), tt.want) {
			t.Errorf("felix %q: stderr %q, want it to contain %q", tt.args, r.stderr, tt.want)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("refused commands wrote %d files", len(entries))
	}
}

// TestClusterCertsEtcd: with --etcd-hosts, felix cluster certs also makes
// etcd's server certificate for those hosts, signed by the cluster CA,
// prints etcd's flags, and gives each member its certificate as etcd
// client certificate in knobs the broker's own check (config.EtcdTLS)
// takes.
func TestClusterCertsEtcd(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "certs")
	r := runFelix(t, opts{}, "cluster", "certs", "--dir", dir, "--nodes", "node-1", "--etcd-hosts", "10.0.0.5, etcd.example")
	r.wantExit(t, 0)
	out := r.stdout.String()
	ca, cert, key := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "node-1.pem"), filepath.Join(dir, "node-1-key.pem")
	for _, want := range []string{
		"cluster_etcd_tls_ca: " + ca + "\ncluster_etcd_tls_cert: " + cert + "\ncluster_etcd_tls_key: " + key,
		"etcd --cert-file " + filepath.Join(dir, "etcd.pem") + " --key-file " + filepath.Join(dir, "etcd-key.pem") + " --trusted-ca-file " + ca + " --client-cert-auth",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("cluster certs --etcd-hosts printed\n%s\nwant it to contain %q", out, want)
		}
	}
	c := config.Default()
	c.ClusterEtcd = "https://10.0.0.5:2379"
	c.ClusterEtcdTLSCA, c.ClusterEtcdTLSCert, c.ClusterEtcdTLSKey = ca, cert, key
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	conf, err := c.EtcdTLS()
	if err != nil {
		t.Fatalf("node-1's printed etcd knobs: %v", err)
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "etcd.pem"), filepath.Join(dir, "etcd-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(pair.Certificate[0])
	for _, host := range []string{"10.0.0.5", "etcd.example"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: conf.RootCAs, DNSName: host}); err != nil {
			t.Errorf("etcd.pem as %s, against the members' etcd CA: %v", host, err)
		}
	}
}
