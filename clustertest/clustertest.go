// Package clustertest runs a Felix cluster for tests: a single-member etcd
// and real `felix broker` processes on 127.0.0.1, each a child of the test
// process, so a test can kill, freeze and restart members, and freeze
// etcd, as a crash, a stalled machine or an operator would.
//
// A test package using it builds the felix binary once, in TestMain:
//
//	func TestMain(m *testing.M) { clustertest.Main(m) }
//
//	func TestFailover(t *testing.T) {
//		c := clustertest.Start(t, clustertest.Options{Nodes: 3, LeaseTTL: 2 * time.Second})
//		c.WaitReady(t, 3)
//		c.Members()[0].Kill()
//		c.WaitReady(t, 2)
//	}
//
// Each member's output goes to a log file; when the test fails, the paths
// and the last lines of each are logged, and the files are kept.
package clustertest

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/getfelix/felix-go/auth"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/cluster"
	"github.com/getfelix/felix-go/internal/clustercerts"
	"github.com/getfelix/felix-go/internal/quicconf"
)

const (
	buildTimeout = 5 * time.Minute // go build on a busy two-core machine, cold cache
	readyTimeout = 30 * time.Second
	pollEvery    = 100 * time.Millisecond
	// defaultNodes is what Options.Nodes zero starts: the smallest cluster
	// that keeps a majority view when one member is lost.
	defaultNodes = 3
)

// felixBin is the felix binary Main built; empty outside Main.
var felixBin string

// Main builds the felix binary, runs the package's tests and removes the
// binary, then exits. After passing tests it fails the run if goroutines
// leaked (goleak), as the CLI tests do. The binary is built without -race:
// the race detector's cost on several brokers sharing two cores would
// make them miss lease renewals; the broker's races are the in-process
// tests' to find.
func Main(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if dir := os.Getenv(etcdDirEnv); dir != "" {
		return serveEtcdChild(dir) // started by startEtcd as the cluster's etcd
	}
	dir, err := os.MkdirTemp("", "felix-clustertest-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "clustertest:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "felix")
	if err := build(bin); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	felixBin = bin
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	return code
}

func build(bin string) error {
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/getfelix/felix-go/cmd/felix").CombinedOutput()
	if err != nil {
		return fmt.Errorf("clustertest: go build felix: %w\n%s", err, out)
	}
	return nil
}

// Options shape a test cluster. The zero Options start three members with
// the broker's defaults.
type Options struct {
	// Nodes is how many members to start, named node-1 … node-N; zero
	// starts 3.
	Nodes int
	// LeaseTTL is every member's --cluster-lease-ttl-ms (whole seconds, at
	// least 2 s); zero leaves the broker's default, 5 s.
	LeaseTTL time.Duration
	// ExtraArgs are appended to every member's `felix broker` command
	// line, after the harness's own flags, so they override them.
	ExtraArgs []string
	// Zones, when set, is each member's --cluster-zone in order (node-1
	// first); a member past its end, or given "", has none.
	Zones []string
	// NetNS runs each member in a network namespace of its own, so that
	// Partition can cut it off from the others (see netns.go). Members
	// then listen on 10.x addresses, which the shared certificate does not
	// name: clients set Insecure.
	NetNS bool
}

// Cluster is an etcd and the members started on it.
type Cluster struct {
	opts    Options
	etcd    *Etcd
	dir     string // data dirs, the shared keys and certificate; removed after the test
	logDir  string // member logs; kept when the test fails
	keysDir string
	token   string
	http    *http.Client
	members []*Member

	// peerCerts are each member's peer link certificate files, minted
	// under keysDir with one cluster CA.
	peerCerts map[string]clustercerts.Files
	// lab is the members' network namespaces (Options.NetNS), or nil.
	lab *lab
}

// Start starts etcd and opts.Nodes broker processes joined to
// it, and returns once every member serves (has joined and written its
// address file); whether each sees all the others yet is WaitReady's to
// say. Everything is stopped when the test ends, pass or fail.
//
// The members share one signing key, so Token works on each, and one
// self-signed certificate, so CAFile trusts each.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if felixBin == "" {
		t.Fatal("clustertest: no felix binary: call clustertest.Main(m) from the package's TestMain")
	}
	if opts.Nodes == 0 {
		opts.Nodes = defaultNodes
	}
	c := &Cluster{
		opts: opts,
		dir:  t.TempDir(),
		// Keep-alives off: each poll is a fresh loopback connection, and
		// no idle connection outlives the test for goleak to find.
		http: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}},
	}
	logDir, err := os.MkdirTemp("", "felix-clustertest-"+safeName(t.Name())+"-")
	if err != nil {
		t.Fatal(err)
	}
	c.logDir = logDir
	// Registered before anything starts, so whatever did start is
	// stopped when Start itself fails half-way.
	t.Cleanup(func() { c.cleanup(t) })

	if err := c.makeKeys(); err != nil {
		t.Fatal(err)
	}
	if err := c.makePeerCerts(); err != nil {
		t.Fatal(err)
	}
	etcdHost := "127.0.0.1"
	if opts.NetNS {
		c.lab = startLab(t, opts.Nodes)
		etcdHost = c.lab.hostIP()
	}
	if c.etcd, err = startEtcd(c.etcdDir(), etcdHost, c.peerCertsDir(), filepath.Join(c.logDir, "etcd.out")); err != nil {
		t.Fatal(err)
	}
	for i := range opts.Nodes {
		m, err := c.newMember(i)
		if err != nil {
			t.Fatal(err)
		}
		c.members = append(c.members, m)
	}
	// Start all, then wait for all: the members start side by side, as
	// a cluster's machines would.
	for _, m := range c.members {
		if err := m.launch(); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range c.members {
		if err := m.waitServing(); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// makeKeys writes the shared signing key, its public key and admin.token
// (auth.EnsureLocal), and a self-signed certificate, into keysDir.
func (c *Cluster) makeKeys() error {
	c.keysDir = filepath.Join(c.dir, "keys")
	local, err := auth.EnsureLocal(c.keysDir, time.Now())
	if err != nil {
		return err
	}
	if c.token, err = auth.ReadToken(local.AdminTokenPath); err != nil {
		return err
	}
	// Generates keysDir/cert.pem and key.pem as a broker would into its
	// data dir; every member then serves the same certificate.
	_, err = quicconf.ServerTLS("", "", c.keysDir)
	return err
}

// makePeerCerts mints the cluster CA and each member's certificate, so
// every test cluster has a working peer link.
func (c *Cluster) makePeerCerts() error {
	ids := make([]string, c.opts.Nodes)
	for i := range ids {
		ids[i] = nodeID(i)
	}
	var err error
	c.peerCerts, err = clustercerts.Ensure(c.peerCertsDir(), ids)
	return err
}

// peerCertsDir holds the cluster CA, the members' certificates and etcd's.
func (c *Cluster) peerCertsDir() string { return filepath.Join(c.keysDir, "peer") }

func nodeID(i int) string { return fmt.Sprintf("node-%d", i+1) }

// cleanup kills every member, closes etcd, and reports the logs of a
// failed test.
func (c *Cluster) cleanup(t testing.TB) {
	for _, m := range c.members {
		m.Kill()
	}
	if c.etcd != nil {
		c.etcd.Close()
	}
	if c.lab != nil {
		c.lab.close()
	}
	c.http.CloseIdleConnections()
	if !t.Failed() {
		os.RemoveAll(c.logDir)
		return
	}
	for _, m := range c.members {
		t.Logf("clustertest: %s's log: %s; it ends:\n%s", m.NodeID, m.LogFile, tail(m.LogFile, 15))
	}
	if etcdLog := tail(filepath.Join(c.etcdDir(), cluster.EtcdLogFile), 15); etcdLog != "" {
		t.Logf("clustertest: etcd's errors end:\n%s", etcdLog)
	}
	if out := tail(filepath.Join(c.logDir, "etcd.out"), 15); out != "" {
		t.Logf("clustertest: etcd's process output ends:\n%s", out)
	}
	t.Logf("clustertest: member logs kept in %s", c.logDir)
}

// Members are the members in node id order (node-1 first).
func (c *Cluster) Members() []*Member { return c.members }

// Member returns the member with nodeID, or nil.
func (c *Cluster) Member(nodeID string) *Member {
	for _, m := range c.members {
		if m.NodeID == nodeID {
			return m
		}
	}
	return nil
}

// Addrs are every member's felix/1 address, the seed list a client is
// given; a member keeps its address across Restart.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.members))
	for i, m := range c.members {
		addrs[i] = m.Addr
	}
	return addrs
}

// Token is an admin token (full rights on tenant default, and node.view
// and node.manage on the admin endpoints) every member accepts.
func (c *Cluster) Token() string { return c.token }

// CAFile is the certificate every member serves, for a client's CAFile.
func (c *Cluster) CAFile() string { return filepath.Join(c.keysDir, quicconf.CertFile) }

// ClientOptions are client options trusting the members and carrying
// Token.
func (c *Cluster) ClientOptions() client.Options {
	return client.Options{Token: c.token, CAFile: c.CAFile()}
}

// PeerCerts are the cluster CA and nodeID's certificate and key files, as
// that member's cluster_tls_* knobs name them: a test presenting them
// speaks as that member.
func (c *Cluster) PeerCerts(nodeID string) clustercerts.Files { return c.peerCerts[nodeID] }

// Etcd is the cluster's etcd process; a test may Freeze and Thaw it, or
// Close it to see the members without it (the harness's cleanup closing
// it again does nothing).
func (c *Cluster) Etcd() *Etcd { return c.etcd }

func (c *Cluster) etcdDir() string { return filepath.Join(c.dir, "etcd") }

// tail returns the last n lines of the file at path ("" when unreadable).
func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// safeName makes a test name usable in a file name (subtests have '/'),
// short enough to leave room for the temp dir's path.
func safeName(name string) string {
	name = name[:min(len(name), 60)]
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			return r
		}
		return '_'
	}, name)
}
