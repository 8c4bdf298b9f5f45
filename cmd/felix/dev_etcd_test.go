package main

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
	"go.uber.org/zap"
)

// devEtcdProbeTimeout bounds one read of the dev cluster's etcd: a client
// etcd refuses waits for its connection until then.
const devEtcdProbeTimeout = 3 * time.Second

// checkDevEtcdLocked asserts that the dev cluster's etcd gives no key to
// a client without a certificate signed by the cluster CA, over TLS (the
// CA trusted, no certificate) or in plaintext, and gives them to a client
// presenting a member's certificate.
func checkDevEtcdLocked(t *testing.T, devDir, endpoint string) {
	t.Helper()
	certs := filepath.Join(devDir, devPeerCertsDir)
	pem, err := os.ReadFile(filepath.Join(certs, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	hostPort := endpoint[strings.Index(endpoint, "://")+3:]
	if n, err := devEtcdKeys(t, endpoint, &tls.Config{RootCAs: roots}); err == nil {
		t.Errorf("a client trusting the CA but without a certificate read %d keys of %s, want it refused", n, endpoint)
	}
	if n, err := devEtcdKeys(t, "http://"+hostPort, nil); err == nil {
		t.Errorf("a plaintext client read %d keys of http://%s, want it refused", n, hostPort)
	}
	member, err := tls.LoadX509KeyPair(filepath.Join(certs, "node-1.pem"), filepath.Join(certs, "node-1-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := devEtcdKeys(t, endpoint, &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{member}}); err != nil || n == 0 {
		t.Errorf("a client with node-1's certificate read %d keys of %s (%v), want the cluster's", n, endpoint, err)
	}
}

// devEtcdKeys counts the keys under /felix/ a client with tlsConf reads.
func devEtcdKeys(t *testing.T, endpoint string, tlsConf *tls.Config) (int, error) {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, TLS: tlsConf, DialTimeout: devEtcdProbeTimeout, Logger: zap.NewNop()})
	if err != nil {
		return 0, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), devEtcdProbeTimeout)
	defer cancel()
	res, err := cli.Get(ctx, "/felix/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return int(res.Count), nil
}
