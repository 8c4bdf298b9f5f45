//go:build unix

package main

import (
	"encoding/json"
	"errors"
	"fmt"
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
	// Each member was given the peer link's certificates, so each has a
	// peer link and advertises it.
	for _, m := range st.Members {
		if !strings.HasPrefix(m.PeerAddr, "127.0.0.1:") {
			t.Errorf("%s's peer_addr is %q, want a peer link on 127.0.0.1", m.NodeID, m.PeerAddr)
		}
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
