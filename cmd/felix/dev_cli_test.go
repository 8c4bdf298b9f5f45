package main

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDevClusterErrors: mistakes exit 2; a port in use exits 1 naming the
// flag that moves it, before anything starts.
func TestDevClusterErrors(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"dev"}, "dev needs cluster"},
		{[]string{"dev", "clusters"}, "dev needs cluster"},
		{[]string{"dev", "cluster", "--nodes", "0"}, "--nodes must be 1 to 16, got 0"},
		{[]string{"dev", "cluster", "--base-port", "65535"}, "--base-port 65535 with 3 nodes leaves the port range"},
		{[]string{"dev", "cluster", "extra"}, "after cluster only broker flags are taken"},
		{[]string{"dev", "cluster", "restart"}, "restart needs one member: felix dev cluster restart node-N"},
	} {
		r := runFelix(t, opts{dir: t.TempDir()}, tt.args...)
		r.wantExit(t, 2)
		if !strings.Contains(r.stderr.String(), tt.want) {
			t.Errorf("felix %q: stderr %q, want it to contain %q", tt.args, r.stderr, tt.want)
		}
	}

	noDev := runFelix(t, opts{dir: t.TempDir()}, "dev", "cluster", "restart", "node-1")
	noDev.wantExit(t, 1)
	if want := "no felix dev cluster is running on --dir felix-cluster"; !strings.Contains(noDev.stderr.String(), want) {
		t.Errorf("dev cluster restart with none running: stderr %q, want %q", noDev.stderr, want)
	}

	taken, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := taken.LocalAddr().(*net.UDPAddr).Port
	dir := t.TempDir()
	r := runFelix(t, opts{dir: dir}, "dev", "cluster", "--nodes", "1", "--base-port", fmt.Sprint(port), "--admin-base-port", fmt.Sprint(freePortRange(t, 1)))
	r.wantExit(t, 1)
	if want := fmt.Sprintf("127.0.0.1:%d (felix/1 of node-1, UDP) is in use", port); !strings.Contains(r.stderr.String(), want) ||
		!strings.Contains(r.stderr.String(), "--base-port") {
		t.Errorf("dev cluster on a taken port: stderr %q, want %q and the flag to change", r.stderr, want)
	}
	if fileExists(filepath.Join(dir, "felix-cluster")) {
		t.Error("dev cluster on a taken port made felix-cluster; it should stop before anything")
	}
}

// TestPrintDevInfo pins what a user is told to try.
func TestPrintDevInfo(t *testing.T) {
	info := devInfo{Etcd: "http://127.0.0.1:2379", Dir: "felix-cluster", TokenFile: "felix-cluster/admin.token", CAFile: "felix-cluster/cert.pem",
		Members: []*devMember{
			{NodeID: "node-1", Addr: "127.0.0.1:7001", Admin: "127.0.0.1:7101", PID: 101, LogFile: "felix-cluster/logs/node-1.log"},
			{NodeID: "node-2", Addr: "127.0.0.1:7002", Admin: "127.0.0.1:7102", PID: 102, LogFile: "felix-cluster/logs/node-2.log"},
		}}
	var b bytes.Buffer
	printDevInfo(&b, info, "felix")
	want := `
felix dev cluster: 2 members, etcd at http://127.0.0.1:2379, files in felix-cluster

NODE    FELIX/1         ADMIN           PID  LOG
node-1  127.0.0.1:7001  127.0.0.1:7101  101  felix-cluster/logs/node-1.log
node-2  127.0.0.1:7002  127.0.0.1:7102  102  felix-cluster/logs/node-2.log

Every member accepts the token in felix-cluster/admin.token and serves the certificate felix-cluster/cert.pem.
In another terminal:

  export FELIX_TOKEN=$(cat felix-cluster/admin.token)   # or pass --token to each command
  felix sub --broker 127.0.0.1:7001,127.0.0.1:7002 --ca felix-cluster/cert.pem --stream demo
  felix pub --broker 127.0.0.1:7001,127.0.0.1:7002 --ca felix-cluster/cert.pem --stream demo hello
  felix cluster ls --admin 127.0.0.1:7101
  felix tree --cluster --admin 127.0.0.1:7101

Or save the flags once, as the current felix context:

  felix context add dev --broker 127.0.0.1:7001,127.0.0.1:7002 --admin 127.0.0.1:7101 --ca felix-cluster/cert.pem --token-file felix-cluster/admin.token

Then kill a member with kill -9 PID (cluster ls --shards shows which owns
which shard) and watch the clients carry on once its lease has run out;
  felix dev cluster restart NODE
starts it again. etcd stays up until Ctrl-C, which stops the cluster; its
data stays in felix-cluster for the next run.
`
	if b.String() != want {
		t.Errorf("printDevInfo printed\n%s\nwant\n%s", b.String(), want)
	}
}

// freePortRange returns the first of n consecutive ports free on 127.0.0.1
// for both UDP and TCP a moment ago, for commands that take a base port.
func freePortRange(t *testing.T, n int) int {
	t.Helper()
	for range 100 {
		base := 20000 + rand.IntN(30000)
		if portsFree(base, n) {
			return base
		}
	}
	t.Fatalf("no %d consecutive free ports found on 127.0.0.1", n)
	return 0
}

func portsFree(base, n int) bool {
	for p := base; p < base+n; p++ {
		addr := fmt.Sprintf("127.0.0.1:%d", p)
		u, err := net.ListenPacket("udp", addr)
		if err != nil {
			return false
		}
		u.Close()
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return false
		}
		l.Close()
	}
	return true
}

// TestDevBinary: a felix that go run built (in the Go build cache) is
// copied into the cluster's folder, over an earlier copy; any other runs
// where it is.
func TestDevBinary(t *testing.T) {
	tmp := t.TempDir()
	cached := filepath.Join(tmp, "go-build1234", "b001", "exe", "felix")
	if err := os.MkdirAll(filepath.Dir(cached), 0o700); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(tmp, "felix-cluster")
	for _, content := range []string{"first build", "second build"} {
		if err := os.WriteFile(cached, []byte(content), 0o700); err != nil {
			t.Fatal(err)
		}
		got, err := devBinary(cached, dir)
		if want := filepath.Join(dir, "bin", "felix"); err != nil || got != want {
			t.Fatalf("devBinary(%s) = %q, %v; want %q", cached, got, err, want)
		}
		data, err := os.ReadFile(got)
		fi, _ := os.Stat(got)
		if err != nil || string(data) != content || fi.Mode()&0o100 == 0 {
			t.Errorf("the copy holds %q (%v) with mode %v, want %q, executable", data, err, fi.Mode(), content)
		}
	}
	if got, err := devBinary("/usr/local/bin/felix", dir); err != nil || got != "/usr/local/bin/felix" {
		t.Errorf("devBinary of an installed felix = %q, %v; want it unchanged", got, err)
	}
}
