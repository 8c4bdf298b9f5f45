package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/getfelix/felix-go/internal/clustercerts"
	"github.com/getfelix/felix-go/internal/testcerts"
)

// TestReloadTLSOnSIGHUP starts a broker on certificate files signed by CA
// A, swaps them for a pair signed by CA B and sends SIGHUP: a new felix/1
// connection then trusts only B, and the Kafka listener's TLS serves the
// new certificate too. A broken pair after that keeps B's in force.
func TestReloadTLSOnSIGHUP(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.pem"), filepath.Join(dir, "tls-key.pem")
	writeCA := func(name string, ca *testcerts.CA) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw}), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	caA, caB := testcerts.NewCA(t), testcerts.NewCA(t)
	caAFile, caBFile := writeCA("ca-a.pem", caA), writeCA("ca-b.pem", caB)
	leafA, leafB := caA.Leaf(t, "localhost"), caB.Leaf(t, "localhost")
	if err := clustercerts.WritePair(certFile, keyFile, leafA); err != nil {
		t.Fatal(err)
	}

	addrFile := filepath.Join(dir, "addr")
	p := start(t, opts{}, "broker", "--listen", "127.0.0.1:0", "--admin", "", "--data-dir", filepath.Join(dir, "data"),
		"--addr-file", addrFile, "--auth", "none", "--tls-cert", certFile, "--tls-key", keyFile,
		"--kafka-listen", "127.0.0.1:0", "--kafka-tls", "--log-format", "json")
	addr := waitForFile(t, p, addrFile)
	kafkaAddr := kafkaListenAddr(t, p)
	pub := func(ca string) *proc {
		return runFelix(t, opts{}, "pub", "--broker", addr, "--ca", ca, "--stream", "s", "x")
	}
	pub(caAFile).wantExit(t, 0)
	if got := kafkaServed(t, kafkaAddr); !bytes.Equal(got, leafA.Certificate[0]) {
		t.Fatal("the Kafka listener served another certificate than --tls-cert's")
	}

	hangup := func(wantMsg string) {
		t.Helper()
		before := countLogMessages(p.stderr.String(), wantMsg)
		p.signal(t, syscall.SIGHUP)
		p.wait(t, p.stderr, "stderr", "another "+wantMsg, func(s string) bool { return countLogMessages(s, wantMsg) > before })
	}
	if err := clustercerts.WritePair(certFile, keyFile, leafB); err != nil {
		t.Fatal(err)
	}
	hangup("reloaded TLS certificate")
	pub(caBFile).wantExit(t, 0)
	pub(caAFile).wantExit(t, 1)
	if got := kafkaServed(t, kafkaAddr); !bytes.Equal(got, leafB.Certificate[0]) {
		t.Fatal("after SIGHUP the Kafka listener did not serve the new certificate")
	}

	if err := os.WriteFile(certFile, []byte("not a certificate"), 0o644); err != nil {
		t.Fatal(err)
	}
	hangup("reload TLS certificate; keeping the certificate in force")
	pub(caBFile).wantExit(t, 0)

	p.signal(t, syscall.SIGTERM)
	p.wantExitWithin(t, 0, stopWithin)
}

// kafkaListenAddr waits for the broker's "kafka listener started" log line
// and returns its address.
func kafkaListenAddr(t *testing.T, p *proc) string {
	t.Helper()
	var addr string
	p.waitStderr(t, "the kafka listener's address", func(line string) bool {
		var entry struct {
			Message string
			Kafka   string
		}
		if json.Unmarshal([]byte(line), &entry) == nil && entry.Message == "kafka listener started" {
			addr = entry.Kafka
			return true
		}
		return false
	})
	return addr
}

// kafkaServed is the certificate a new TLS connection to addr gets.
func kafkaServed(t *testing.T, addr string) []byte {
	t.Helper()
	d := tls.Dialer{NetDialer: &net.Dialer{}, Config: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Fatalf("TLS dial of the Kafka listener %s: %v", addr, err)
	}
	defer c.Close()
	return c.(*tls.Conn).ConnectionState().PeerCertificates[0].Raw
}
