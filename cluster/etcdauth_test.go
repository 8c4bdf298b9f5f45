package cluster_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/getfelix/felix-go/broker"
	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/cluster"
	"github.com/getfelix/felix-go/internal/clustercerts"
	"github.com/getfelix/felix-go/wire"
)

// TestMemberWithPrefixRestrictedUser sets etcd up as docs/OPERATIONS.md
// says (mutual TLS; auth enabled; a role granted read and write on the
// cluster's prefix and nothing else; a user with that role) and runs a
// member logged in as that user: it joins, places a stream's shard and
// takes a publish. The same user is refused a key outside the prefix, so
// the role, not a wider grant, is what let the member in.
func TestMemberWithPrefixRestrictedUser(t *testing.T) {
	dir := t.TempDir()
	members, err := clustercerts.Ensure(dir, []string{"a"})
	if err != nil {
		t.Fatal(err)
	}
	etcdFiles, err := clustercerts.EnsureEtcd(dir, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	e, err := cluster.StartEtcd(filepath.Join(dir, "etcd"), cluster.WithEtcdTLS(cluster.EtcdTLS(etcdFiles)), cluster.WithEtcdFastPasswords)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)

	cfg := brokertest.Config(t)
	cfg.Auth = "none"
	cfg.ClusterEtcd, cfg.ClusterNodeID, cfg.ClusterLeaseTTL = e.Endpoint(), "a", 2*time.Second
	cfg.ClusterEtcdTLSCA, cfg.ClusterEtcdTLSCert, cfg.ClusterEtcdTLSKey = members["a"].CA, members["a"].Cert, members["a"].Key
	etcdTLS, err := cfg.EtcdTLS()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	setUpPrefixRole(ctx, t, clientv3.Config{Endpoints: []string{e.Endpoint()}, TLS: etcdTLS}, cfg.ClusterEtcdPrefix+"/")

	cfg.ClusterEtcdUser, cfg.ClusterEtcdPasswordFile = "felix", filepath.Join(dir, "etcd-password")
	if err := os.WriteFile(cfg.ClusterEtcdPasswordFile, []byte("felix-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b := brokertest.Start(t, cfg, broker.WithoutActorCluster())
	c := dialInsecure(t, b.Addr().String())
	st := client.Stream{Tenant: "t", Namespace: "ns", Name: "s"}
	for {
		// Until the member has joined it refuses, shard_unavailable not_ready.
		if _, err = c.CreateStream(ctx, st, client.StreamConfig{Shards: 1}); err == nil || !errors.Is(err, wire.ErrUnavailable) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("create a stream on the member logged in as felix: %v", err)
	}
	if err := c.Publish(ctx, st, []byte("x"), client.PublishOptions{}); err != nil {
		t.Fatalf("publish on the member logged in as felix: %v", err)
	}

	// Setting felix's password (to the same one) ends its tokens, as an
	// etcd restart or a token's time to live does: the member logs in
	// again and goes on.
	root, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Endpoint()}, TLS: etcdTLS, Username: "root", Password: "root-secret",
		DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if _, err := root.UserChangePassword(ctx, "felix", "felix-secret"); err != nil {
		t.Fatal(err)
	}
	later := client.Stream{Tenant: "t", Namespace: "ns", Name: "later"}
	if _, err := c.CreateStream(ctx, later, client.StreamConfig{Shards: 1}); err != nil {
		t.Fatalf("create a stream after felix's tokens ended: %v", err)
	}
	if err := c.Publish(ctx, later, []byte("y"), client.PublishOptions{}); err != nil {
		t.Fatalf("publish after felix's tokens ended: %v", err)
	}

	// A member with a wrong password says so, and does not join.
	refused := &lineSeen{want: []byte("etcd refused user felix's password"), seen: make(chan struct{})}
	wrong, err := cluster.New(cluster.Config{
		Name: cfg.ClusterName, Prefix: cfg.ClusterEtcdPrefix, Endpoints: []string{e.Endpoint()}, EtcdTLS: etcdTLS,
		EtcdUser: "felix", EtcdPassword: "not-the-password", NodeID: "b", Addr: "127.0.0.1:7002", LeaseTTL: 2 * time.Second,
		Log: zerolog.New(refused),
	})
	if err != nil {
		t.Fatal(err)
	}
	wrong.Start()
	defer wrong.Stop(context.Background())
	select {
	case <-refused.seen:
	case <-ctx.Done():
		t.Fatal("a member with a wrong etcd password did not log that etcd refused it")
	}
	if wrong.Ready() {
		t.Error("a member with a wrong etcd password is ready")
	}

	felix, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Endpoint()}, TLS: etcdTLS, Username: "felix", Password: "felix-secret",
		DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer felix.Close()
	if _, err := felix.Get(ctx, "/other/", clientv3.WithPrefix()); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("user felix reading /other/: err = %v, want permission denied", err)
	}
}

// setUpPrefixRole is OPERATIONS.md's etcdctl sequence through the client
// API: a root user (etcd enables auth only with one), role felix with
// readwrite on prefix, user felix with that role, auth enable.
func setUpPrefixRole(ctx context.Context, t *testing.T, conf clientv3.Config, prefix string) {
	t.Helper()
	conf.DialTimeout, conf.Logger = 5*time.Second, zap.NewNop()
	admin, err := clientv3.New(conf)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	steps := []struct {
		what string
		do   func() error
	}{
		{"user add root", func() error { _, err := admin.UserAdd(ctx, "root", "root-secret"); return err }},
		{"user grant-role root root", func() error { _, err := admin.UserGrantRole(ctx, "root", "root"); return err }},
		{"role add felix", func() error { _, err := admin.RoleAdd(ctx, "felix"); return err }},
		{"role grant-permission felix --prefix readwrite " + prefix, func() error {
			_, err := admin.RoleGrantPermission(ctx, "felix", prefix, clientv3.GetPrefixRangeEnd(prefix), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		}},
		{"user add felix", func() error { _, err := admin.UserAdd(ctx, "felix", "felix-secret"); return err }},
		{"user grant-role felix felix", func() error { _, err := admin.UserGrantRole(ctx, "felix", "felix"); return err }},
		{"auth enable", func() error { _, err := admin.AuthEnable(ctx); return err }},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("etcd %s: %v", s.what, err)
		}
	}
}

// lineSeen is a log writer that closes seen once a line containing want
// is written.
type lineSeen struct {
	want []byte
	once sync.Once
	seen chan struct{}
}

func (w *lineSeen) Write(p []byte) (int, error) {
	if bytes.Contains(p, w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}
