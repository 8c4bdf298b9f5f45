package clustercerts

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
)

// TestEnsureMintsAndKeeps: Ensure writes a CA and one leaf per node that
// chains to it with both usages, and a second run with one more node keeps
// every file it found and signs the new leaf with the same CA.
func TestEnsureMintsAndKeeps(t *testing.T) {
	dir := t.TempDir()
	first, err := Ensure(dir, []string{"a", "b"})
	if err != nil {
		t.Fatal(err)
	}
	caBefore, _ := os.ReadFile(filepath.Join(dir, CAFile))
	aBefore, _ := os.ReadFile(first["a"].Cert)
	second, err := Ensure(dir, []string{"a", "b", "c"})
	if err != nil {
		t.Fatal(err)
	}
	caAfter, _ := os.ReadFile(filepath.Join(dir, CAFile))
	aAfter, _ := os.ReadFile(second["a"].Cert)
	if !bytes.Equal(caBefore, caAfter) || !bytes.Equal(aBefore, aAfter) {
		t.Fatal("a second Ensure rewrote the CA or a member's certificate")
	}
	if info, err := os.Stat(filepath.Join(dir, CAKeyFile)); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("CA key: %v, mode %v; want 0600", err, info)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caAfter)
	for _, node := range []string{"a", "b", "c"} {
		pair, err := tls.LoadX509KeyPair(second[node].Cert, second[node].Key)
		if err != nil {
			t.Fatalf("%s: %v", node, err)
		}
		leaf, err := x509.ParseCertificate(pair.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{u}}); err != nil {
				t.Errorf("%s does not verify for usage %v: %v", node, u, err)
			}
		}
		if len(leaf.IPAddresses) != 1 || !leaf.IPAddresses[0].Equal([]byte{127, 0, 0, 1}) || leaf.Subject.CommonName != node {
			t.Errorf("%s: IP SANs %v, CN %q", node, leaf.IPAddresses, leaf.Subject.CommonName)
		}
	}
}

// TestEnsureRefusesBrokenCA: a CA file that does not load is reported,
// not silently replaced (members signed by it would stop trusting the rest).
func TestEnsureRefusesBrokenCA(t *testing.T) {
	dir := t.TempDir()
	if _, err := Ensure(dir, []string{"a"}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, CAKeyFile), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Ensure(dir, []string{"b"}); err == nil {
		t.Fatal("Ensure accepted a CA whose key does not load")
	}
}

// TestEnsureEtcd: etcd's certificate is signed by the members' CA, valid
// for the hosts given (an address and a name) and no other, kept by a
// second run, and refused, not replaced, when a run names a host it lacks.
func TestEnsureEtcd(t *testing.T) {
	dir := t.TempDir()
	members, err := Ensure(dir, []string{"a"})
	if err != nil {
		t.Fatal(err)
	}
	f, err := EnsureEtcd(dir, []string{"10.0.0.5", "etcd.example"})
	if err != nil {
		t.Fatal(err)
	}
	if f.CA != members["a"].CA {
		t.Errorf("etcd's CA is %s, want the members' %s", f.CA, members["a"].CA)
	}
	pem, _ := os.ReadFile(f.CA)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(pair.Certificate[0])
	for _, host := range []string{"10.0.0.5", "etcd.example"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: host, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("etcd's certificate does not verify as %s: %v", host, err)
		}
	}
	if leaf.VerifyHostname("127.0.0.1") == nil {
		t.Error("etcd's certificate is valid for 127.0.0.1, which was not asked for")
	}
	before, _ := os.ReadFile(f.Cert)
	if _, err := EnsureEtcd(dir, []string{"etcd.example"}); err != nil {
		t.Errorf("a second run naming a host the certificate has: %v", err)
	}
	if _, err := EnsureEtcd(dir, []string{"10.0.0.6"}); err == nil || !bytes.Contains([]byte(err.Error()), []byte("not valid for 10.0.0.6")) {
		t.Errorf("a run naming a host the certificate lacks: err = %v, want it refused naming the host", err)
	}
	if after, _ := os.ReadFile(f.Cert); !bytes.Equal(before, after) {
		t.Error("EnsureEtcd rewrote etcd's certificate")
	}
}
