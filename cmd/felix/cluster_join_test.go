package main

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/getfelix/felix-go/cluster"
)

// TestBrokerOfAnotherClusterExits: a broker configured with another
// cluster name than the one etcd holds under the prefix is refused at
// join, and `felix broker` exits 1 saying how to fix it.
func TestBrokerOfAnotherClusterExits(t *testing.T) {
	etcd, err := cluster.StartEtcd(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(etcd.Close)
	member := func(name string) *proc {
		dir := t.TempDir()
		return start(t, opts{}, "broker", "--listen", "127.0.0.1:0", "--admin", "", "--data-dir", filepath.Join(dir, "data"),
			"--log-format", "json", "--cluster-etcd", etcd.Endpoint(), "--cluster-name", name)
	}
	first := member("blue")
	first.waitStderr(t, "the first member joined", func(line string) bool { return strings.Contains(line, "joined the cluster") })

	other := member("green")
	other.wantExit(t, 1)
	for _, want := range []string{`holds cluster "blue"`, "--cluster-name blue"} {
		if !strings.Contains(other.stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, other.stderr)
		}
	}
	first.signal(t, syscall.SIGTERM)
	first.wantExitWithin(t, 0, stopWithin)
}
