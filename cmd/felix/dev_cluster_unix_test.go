//go:build unix

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

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
	checkDevEtcdLocked(t, filepath.Join(dir, "felix-cluster"), info.Etcd)
	if want := "etcd serving on " + info.Etcd + " over mutual TLS (etcdctl --endpoints " + info.Etcd + " --cacert felix-cluster/cluster-certs/ca.pem --cert felix-cluster/cluster-certs/node-1.pem"; !strings.Contains(dev.stderr.String(), want) {
		t.Errorf("dev cluster's stderr:\n%s\nwant it to contain %q", dev.stderr, want)
	}
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
	// stream info asks node-1 who owns each shard, which waits until all
	// four are placed in node-1's mirror, the one cluster ls reads below.
	info4 := runFelix(t, opts{dir: dir}, "stream", "info", "--stream", "many", "--broker", node1.Addr, "--ca", info.CAFile, "--token", token)
	info4.wantExit(t, 0)
	if !regexp.MustCompile(`(?m)^3 +node-[12] +127\.0\.0\.1:[0-9]+$`).MatchString(info4.stdout.String()) {
		t.Errorf("stream info printed\n%s\nwant shard 3 with its owner and address", info4.stdout)
	}
	ls := runFelix(t, opts{}, append([]string{"cluster", "ls", "--json"}, admin...)...)
	ls.wantExit(t, 0)
	var st cluster.Status
	if err := json.Unmarshal(ls.stdout.Bytes(), &st); err != nil || !st.Ready || len(st.Members) != 2 {
		t.Errorf("cluster ls --json printed %s (%v), want node-1 ready with 2 members", ls.stdout, err)
	}
	owners := 0
	for _, sh := range st.Shards {
		if sh.Stream == "default/default/many" && sh.Kind == "in-memory" && strings.HasPrefix(sh.Owner, "node-") {
			owners++
		}
	}
	if owners != 4 {
		t.Errorf("cluster ls --json's shards are %+v, want the 4 shards of many, each with its owner", st.Shards)
	}
	shards := runFelix(t, opts{}, append([]string{"cluster", "ls", "--shards"}, admin...)...)
	shards.wantExit(t, 0)
	if !regexp.MustCompile(`(?m)^default/default/many +3 +in-memory +node-[12] +-$`).MatchString(shards.stdout.String()) {
		t.Errorf("cluster ls --shards printed\n%s\nwant shard 3 of many with its owner", shards.stdout)
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

// TestDevClusterRestart is the README's restart sequence: kill a member,
// start it again with the command felix dev cluster printed, and it
// serves; with every member dead etcd stays up, a member started by hand
// from the printed broker line joins, and once felix dev cluster has
// stopped (etcd with it) that member still stops within its shutdown
// timeout.
func TestDevClusterRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	base, adminBase := freePortRange(t, 2), freePortRange(t, 2)
	// It lives through the whole sequence: more than procTimeout on a busy machine.
	dev := start(t, opts{dir: dir, timeout: 3 * time.Minute}, "dev", "cluster", "--nodes", "2", "--json",
		"--base-port", fmt.Sprint(base), "--admin-base-port", fmt.Sprint(adminBase), "--", "--cluster-lease-ttl-ms", "2000")
	dev.waitStdout(t, "the members as JSON", func(out string) bool { return strings.HasSuffix(out, "}\n") })
	var info devInfo
	if err := json.Unmarshal(dev.stdout.Bytes(), &info); err != nil {
		t.Fatalf("dev cluster --json printed %q: %v", dev.stdout, err)
	}
	token := readToken(t, filepath.Join(dir, "felix-cluster"))
	serves := func(m *devMember) {
		t.Helper()
		runFelix(t, opts{dir: dir}, "stream", "ls", "--broker", m.Addr, "--ca", info.CAFile, "--token", token).wantExit(t, 0)
	}
	node1, node2 := info.Members[0], info.Members[1]

	// printed waits for the report of pid's death and returns the two
	// commands printed with it: the restart command and the broker line.
	printed := func(node string, pid int) (restart, byHand []string) {
		t.Helper()
		report := fmt.Sprintf("%s (pid %d) signal: killed;", node, pid)
		dev.waitStderr(t, node+"'s death reported", func(line string) bool { return strings.HasPrefix(line, report) })
		after := dev.stderr.String()[strings.Index(dev.stderr.String(), report):]
		for _, line := range lines(after) {
			if cmd, ok := strings.CutPrefix(line, "To start it again: "); ok && restart == nil {
				restart = strings.Fields(cmd)
			}
			if cmd, ok := strings.CutPrefix(strings.TrimSpace(line), "(or by hand, where Ctrl-C here does not stop it: "); ok && byHand == nil {
				byHand = strings.Fields(strings.TrimSuffix(cmd, ")"))
			}
		}
		if len(restart) < 2 || restart[0] != felixBin || len(byHand) < 2 || byHand[0] != felixBin {
			t.Fatalf("the report of %s's death gives the commands %q and %q, want both to run %s\nstderr:\n%s", node, restart, byHand, felixBin, after)
		}
		return restart, byHand
	}

	if err := syscall.Kill(node2.PID, syscall.SIGKILL); err != nil {
		t.Fatalf("kill node-2 (pid %d): %v", node2.PID, err)
	}
	restart, _ := printed("node-2", node2.PID)
	if want := []string{felixBin, "dev", "cluster", "restart", "node-2"}; fmt.Sprint(restart) != fmt.Sprint(want) {
		t.Errorf("the printed restart command is %q, want %q", restart, want)
	}
	again := runFelix(t, opts{dir: dir}, restart[1:]...)
	again.wantExit(t, 0)
	var pid2 int
	if _, err := fmt.Sscanf(again.stdout.String(), "node-2 serving again (pid %d)", &pid2); err != nil || pid2 == node2.PID {
		t.Fatalf("dev cluster restart node-2 printed %q (%v), want node-2 serving again with a new pid", again.stdout, err)
	}
	serves(node2)
	unknown := runFelix(t, opts{dir: dir}, "dev", "cluster", "restart", "node-9")
	unknown.wantExit(t, 1)
	if want := `this cluster has no member "node-9"; it has node-1, node-2`; !strings.Contains(unknown.stderr.String(), want) {
		t.Errorf("dev cluster restart node-9: stderr %q, want %q", unknown.stderr, want)
	}
	ls := runFelix(t, opts{}, "cluster", "ls", "--json", "--admin", node2.Admin, "--token", token)
	ls.wantExit(t, 0)
	var st cluster.Status
	if err := json.Unmarshal(ls.stdout.Bytes(), &st); err != nil || !st.Ready || len(st.Members) != 2 {
		t.Errorf("node-2's cluster ls --json after its restart printed %s (%v), want it ready with 2 members", ls.stdout, err)
	}

	// Every member dead: felix dev cluster goes on, and so does etcd.
	for _, pid := range []int{node1.PID, pid2} {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("kill pid %d: %v", pid, err)
		}
	}
	_, byHand := printed("node-1", node1.PID)
	dev.waitStderr(t, "the report that no member runs", func(line string) bool {
		return strings.Contains(line, "still running: none; etcd stays up")
	})
	hand := start(t, opts{dir: dir}, byHand[1:]...)
	hand.waitStderr(t, "node-1 joined", func(line string) bool { return strings.Contains(line, `"joined the cluster"`) })
	serves(node1)

	dev.signal(t, syscall.SIGTERM)
	dev.wantExitWithin(t, 0, 2*stopWithin)
	// etcd is gone under node-1; its shutdown is bounded all the same
	// (the broker gives itself 10 s).
	hand.signal(t, syscall.SIGTERM)
	hand.wantExitWithin(t, 0, 10*time.Second+stopWithin)
}
