package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/getfelix/felix-go/internal/clustercerts"
)

// TestStartEtcd: the embedded etcd serves a put and a get on its loopback
// endpoint, and Close leaves no goroutine behind.
func TestStartEtcd(t *testing.T) {
	defer goleak.VerifyNone(t)
	e := mustStartEtcd(t, t.TempDir())
	defer e.Close()
	c := etcdClient(t, e)
	defer c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, "/felix/k", "v"); err != nil {
		t.Fatalf("put on %s: %v", e.Endpoint(), err)
	}
	res, err := c.Get(ctx, "/felix/k")
	if err != nil {
		t.Fatalf("get on %s: %v", e.Endpoint(), err)
	}
	if len(res.Kvs) != 1 || string(res.Kvs[0].Value) != "v" {
		t.Fatalf("get /felix/k = %v, want one key with value v", res.Kvs)
	}
}

// TestStartEtcdReopens: a second StartEtcd on the same dir keeps the keys
// (felix dev cluster restarts on its folder), on a new port.
func TestStartEtcdReopens(t *testing.T) {
	defer goleak.VerifyNone(t)
	dir := t.TempDir()
	put := func(e *Etcd) {
		c := etcdClient(t, e)
		defer c.Close()
		if _, err := c.Put(t.Context(), "/felix/kept", "yes"); err != nil {
			t.Fatalf("put on %s: %v", e.Endpoint(), err)
		}
	}
	e := mustStartEtcd(t, dir)
	put(e)
	e.Close()
	e.Close() // a second Close does nothing

	e = mustStartEtcd(t, dir)
	defer e.Close()
	c := etcdClient(t, e)
	defer c.Close()
	res, err := c.Get(t.Context(), "/felix/kept")
	if err != nil {
		t.Fatalf("get on %s: %v", e.Endpoint(), err)
	}
	if len(res.Kvs) != 1 || string(res.Kvs[0].Value) != "yes" {
		t.Fatalf("after reopening %s, get /felix/kept = %v, want the value yes put before", dir, res.Kvs)
	}
}

// TestStartEtcdBadDir: a dir that cannot be made fails naming it.
func TestStartEtcdBadDir(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := StartEtcd(filepath.Join(file, "etcd"))
	if err == nil || !strings.Contains(err.Error(), "choose a writable folder") {
		t.Fatalf("StartEtcd under a file: err = %v, want one saying to choose a writable folder", err)
	}
}

func mustStartEtcd(t *testing.T, dir string) *Etcd {
	t.Helper()
	e, err := StartEtcd(dir)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func etcdClient(t *testing.T, e *Etcd) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Endpoint()}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("etcd client for %s: %v", e.Endpoint(), err)
	}
	return c
}

// TestStartEtcdQuiet: a start and a close log nothing to etcd.log, so
// what is there is worth reading.
func TestStartEtcdQuiet(t *testing.T) {
	defer goleak.VerifyNone(t)
	dir := t.TempDir()
	mustStartEtcd(t, dir).Close()
	logged, err := os.ReadFile(filepath.Join(dir, EtcdLogFile))
	if err != nil || len(logged) != 0 {
		t.Errorf("after a start and a close, %s holds (%v):\n%s\nwant it empty", EtcdLogFile, err, logged)
	}
}

// testCerts mints a CA, member a's certificate and etcd's for 127.0.0.1.
func testCerts(t *testing.T) (member, etcd clustercerts.Files) {
	t.Helper()
	dir := t.TempDir()
	members, err := clustercerts.Ensure(dir, []string{"a"})
	if err != nil {
		t.Fatal(err)
	}
	etcd, err = clustercerts.EnsureEtcd(dir, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	return members["a"], etcd
}

// clientTLS trusts f's CA and, with cert, presents f's certificate.
func clientTLS(t *testing.T, f clustercerts.Files, cert bool) *tls.Config {
	t.Helper()
	pem, err := os.ReadFile(f.CA)
	if err != nil {
		t.Fatal(err)
	}
	conf := &tls.Config{RootCAs: x509.NewCertPool()}
	conf.RootCAs.AppendCertsFromPEM(pem)
	if cert {
		pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			t.Fatal(err)
		}
		conf.Certificates = []tls.Certificate{pair}
	}
	return conf
}

// countKeys counts the keys under prefix that a client with conf reads.
func countKeys(t *testing.T, endpoint string, conf *tls.Config, prefix string) (int64, error) {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, TLS: conf, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return 0, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	res, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return res.Count, nil
}

// TestEtcdTLSRefusesClientWithoutCertificate: the embedded etcd under
// WithEtcdTLS gives no key to a client without a certificate of its CA,
// over TLS or in plaintext, and serves one with such a certificate.
func TestEtcdTLSRefusesClientWithoutCertificate(t *testing.T) {
	member, etcdFiles := testCerts(t)
	e, err := StartEtcd(t.TempDir(), WithEtcdTLS(EtcdTLS(etcdFiles)))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if !strings.HasPrefix(e.Endpoint(), "https://127.0.0.1:") {
		t.Fatalf("Endpoint = %s, want https://127.0.0.1:PORT", e.Endpoint())
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Endpoint()}, TLS: clientTLS(t, member, true), DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "/felix/name", "felix"); err != nil {
		t.Fatalf("put with a certificate: %v", err)
	}
	if keys, err := countKeys(t, e.Endpoint(), clientTLS(t, member, true), ""); err != nil || keys != 1 {
		t.Fatalf("a client with a certificate read %d keys (%v), want the one put", keys, err)
	}
	if keys, err := countKeys(t, e.Endpoint(), clientTLS(t, member, false), ""); err == nil {
		t.Errorf("a client without a certificate read %d keys, want it refused", keys)
	}
	plain := "http://" + strings.TrimPrefix(e.Endpoint(), "https://")
	if keys, err := countKeys(t, plain, nil, ""); err == nil {
		t.Errorf("a plaintext client read %d keys, want it refused", keys)
	}
}
