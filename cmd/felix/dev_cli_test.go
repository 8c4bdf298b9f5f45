package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/getfelix/felix-go/cluster"
)

// TestDevCluster runs felix dev cluster as a user would: it prints its
// members once they serve, each takes the shared token and certificate, a
// killed member is reported while the other serves on, and SIGTERM stops
// everything cleanly.
func TestDevCluster(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	base, adminBase := freePortRange(t, 2), freePortRange(t, 2)
	dev := start(t, opts{dir: dir}, "dev", "cluster", "--nodes", "2", "--json",
		"--base-port", fmt.Sprint(base), "--admin-base-port", fmt.Sprint(adminBase))
	dev.waitStdout(t, "the members as JSON", func(out string) bool { return strings.HasSuffix(out, "}\n") })
	var info devInfo
	if err := json.Unmarshal(dev.stdout.Bytes(), &info); err != nil {
		t.Fatalf("dev cluster --json printed %q: %v", dev.stdout, err)
	}
	if len(info.Members) != 2 || info.Members[0].Addr != fmt.Sprintf("127.0.0.1:%d", base) ||
		info.Members[1].Admin != fmt.Sprintf("127.0.0.1:%d", adminBase+1) || info.CAFile != "felix-cluster/cert.pem" {
		t.Fatalf("dev cluster --json printed %+v, want node-1 on %d, node-2's admin on %d, the CA in felix-cluster", info, base, adminBase+1)
	}
	token := readToken(t, filepath.Join(dir, "felix-cluster"))
	// Any member answers a listing (a publish only its shard's owner
	// takes), so it shows each trusts the token and serves the certificate.
	streamLs := func(m *devMember) *proc {
		return runFelix(t, opts{dir: dir}, "stream", "ls", "--broker", m.Addr, "--ca", info.CAFile, "--token", token)
	}
	for _, m := range info.Members {
		streamLs(m).wantExit(t, 0)
	}

	node1, node2 := info.Members[0], info.Members[1]
	admin := []string{"--admin", node1.Admin, "--token", token}
	runFelix(t, opts{dir: dir}, "stream", "create", "--stream", "many", "--shards", "4",
		"--broker", node1.Addr, "--ca", info.CAFile, "--token", token).wantExit(t, 0)
	ls := runFelix(t, opts{}, append([]string{"cluster", "ls", "--json"}, admin...)...)
	ls.wantExit(t, 0)
	var st cluster.Status
	if err := json.Unmarshal(ls.stdout.Bytes(), &st); err != nil || !st.Ready || len(st.Members) != 2 {
		t.Errorf("cluster ls --json printed %s (%v), want node-1 ready with 2 members", ls.stdout, err)
	}
	drain := runFelix(t, opts{}, append([]string{"cluster", "drain", "node-1"}, admin...)...)
	drain.wantExit(t, 0)
	if !strings.HasPrefix(drain.stdout.String(), "node-1 drained: no in-memory shard left") {
		t.Errorf("cluster drain node-1 printed %q, want it drained", drain.stdout)
	}
	tree := runFelix(t, opts{}, append([]string{"tree", "--cluster"}, admin...)...)
	tree.wantExit(t, 0)
	if !containsLine(tree.stdout.String(), "== node-1 ==") || !containsLine(tree.stdout.String(), "== node-2 ==") {
		t.Errorf("tree --cluster printed\n%s\nwant a heading for each member", tree.stdout)
	}

	if err := syscall.Kill(node2.PID, syscall.SIGKILL); err != nil {
		t.Fatalf("kill node-2 (pid %d): %v", node2.PID, err)
	}
	dev.waitStderr(t, "node-2's death reported", func(line string) bool {
		return strings.HasPrefix(line, fmt.Sprintf("node-2 (pid %d) signal: killed; still running: node-1.", node2.PID))
	})
	streamLs(node1).wantExit(t, 0)

	dev.signal(t, syscall.SIGTERM)
	dev.wantExitWithin(t, 0, 2*stopWithin)
	if want := "stopped; the cluster's data stays in felix-cluster"; !strings.Contains(dev.stderr.String(), want) {
		t.Errorf("dev cluster's stderr after SIGTERM:\n%s\nwant %q", dev.stderr, want)
	}
	if err := syscall.Kill(node1.PID, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("node-1 (pid %d) after dev cluster stopped: kill 0 gave %v, want no such process", node1.PID, err)
	}
	for _, f := range []string{"logs/node-1.log", "etcd/etcd.log", "node-1/metadata.db", "admin.token"} {
		if !fileExists(filepath.Join(dir, "felix-cluster", f)) {
			t.Errorf("felix-cluster/%s is missing after the run", f)
		}
	}
}

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
	} {
		r := runFelix(t, opts{dir: t.TempDir()}, tt.args...)
		r.wantExit(t, 2)
		if !strings.Contains(r.stderr.String(), tt.want) {
			t.Errorf("felix %q: stderr %q, want it to contain %q", tt.args, r.stderr, tt.want)
		}
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

Kill a member (kill -9 102 stops node-2) and watch the clients carry on.
Ctrl-C stops the cluster; its data stays in felix-cluster for the next run.
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
