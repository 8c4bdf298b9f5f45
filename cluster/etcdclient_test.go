package cluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// etcdRefusalTimeout bounds how long a test waits for a member to log
// that it could not join.
const etcdRefusalTimeout = 20 * time.Second

// lineWatch is a log writer that closes seen once a line containing want
// is written.
type lineWatch struct {
	want []byte
	once sync.Once
	seen chan struct{}
}

func newLineWatch(want string) *lineWatch {
	return &lineWatch{want: []byte(want), seen: make(chan struct{})}
}

func (w *lineWatch) Write(p []byte) (int, error) {
	if bytes.Contains(p, w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

func tlsNodeConfig(endpoint string, conf *tls.Config, log zerolog.Logger) Config {
	return Config{
		Name: "felix", Prefix: "/felix", Endpoints: []string{endpoint}, EtcdTLS: conf, NodeID: "a",
		Addr: "127.0.0.1:7001", LeaseTTL: 2 * time.Second, Log: log,
	}
}

// TestTLSMemberRefusesPlaintextEtcd: a member configured for TLS to etcd
// never talks to a plaintext etcd. Named http://, etcd's client would
// drop the TLS and connect, so New refuses it; named https://, the TLS
// handshake fails, the member logs that it is not in the cluster and
// writes nothing.
func TestTLSMemberRefusesPlaintextEtcd(t *testing.T) {
	member, _ := testCerts(t)
	e := mustStartEtcd(t, t.TempDir())
	defer e.Close()
	conf := clientTLS(t, member, true)

	if n, err := New(tlsNodeConfig(e.Endpoint(), conf, zerolog.Nop())); !errors.Is(err, ErrEtcdPlaintext) {
		if n != nil {
			n.Stop(context.Background())
		}
		t.Fatalf("New with TLS and %s: err = %v, want ErrEtcdPlaintext", e.Endpoint(), err)
	}

	watch := newLineWatch("not in the cluster yet")
	https := "https://" + strings.TrimPrefix(e.Endpoint(), "http://")
	n, err := New(tlsNodeConfig(https, conf, zerolog.New(watch)))
	if err != nil {
		t.Fatal(err)
	}
	n.Start()
	defer n.Stop(context.Background())
	select {
	case <-watch.seen:
	case <-time.After(etcdRefusalTimeout):
		t.Fatalf("a TLS member on plaintext %s did not log that it is not in the cluster within %s", https, etcdRefusalTimeout)
	}
	if n.Ready() {
		t.Error("the TLS member is ready on a plaintext etcd")
	}
	if keys, err := countKeys(t, e.Endpoint(), nil, "/felix/"); err != nil || keys != 0 {
		t.Errorf("the plaintext etcd holds %d keys under /felix/ (%v), want none written by the TLS member", keys, err)
	}
}

// TestTLSMemberJoinsTLSEtcd: over mutual TLS, the member joins.
func TestTLSMemberJoinsTLSEtcd(t *testing.T) {
	member, etcdFiles := testCerts(t)
	e, err := StartEtcd(t.TempDir(), WithEtcdTLS(EtcdTLS(etcdFiles)))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	n, err := New(tlsNodeConfig(e.Endpoint(), clientTLS(t, member, true), zerolog.Nop()))
	if err != nil {
		t.Fatal(err)
	}
	n.Start()
	defer n.Stop(context.Background())
	eventually(t, "the member ready over TLS", n.Ready)
}

// TestMemberWithUserStartsWithoutEtcd: a member with an etcd user is made
// at once while no etcd answers (it logs in when a request needs it, as
// etcd's own client would inside New, failing it), and logs that it is
// not in the cluster yet.
func TestMemberWithUserStartsWithoutEtcd(t *testing.T) {
	e := mustStartEtcd(t, t.TempDir())
	gone := e.Endpoint()
	e.Close()
	watch := newLineWatch("not in the cluster yet")
	cfg := tlsNodeConfig(gone, nil, zerolog.New(watch))
	cfg.EtcdUser, cfg.EtcdPassword = "felix", "felix-secret"
	start := time.Now()
	n, err := New(cfg)
	if err != nil {
		t.Fatalf("New with a user and etcd down: %v, want the member made", err)
	}
	if took := time.Since(start); took >= etcdDialTimeout {
		t.Errorf("New with a user and etcd down took %s, want it not to wait for etcd", took)
	}
	n.Start()
	defer n.Stop(context.Background())
	select {
	case <-watch.seen:
	case <-time.After(etcdRefusalTimeout):
		t.Fatalf("the member did not log that it is not in the cluster within %s", etcdRefusalTimeout)
	}
}
