package cluster

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
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
