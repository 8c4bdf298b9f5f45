package clustertest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getfelix/felix-go/auth"
)

const (
	// servingTimeout bounds a member's start: process start to address
	// file. A broker alone takes well under a second.
	servingTimeout = 30 * time.Second
	// stopTimeout bounds Stop. The broker gives its own shutdown 10 s;
	// the rest is for the process to exit on a loaded machine.
	stopTimeout = 15 * time.Second
	// addrPoll is how often a start looks for the address file, which
	// another process writes and so cannot announce.
	addrPoll = 20 * time.Millisecond
	// adminPortTries: the admin port is picked free, then bound by the
	// child a moment later, so another process may take it in between;
	// a start that lost it is retried on another port.
	adminPortTries = 3
)

// Member is one `felix broker` child process and what stays of it across
// restarts: its node id, data dir, addresses and log file.
type Member struct {
	NodeID string
	// Addr is its felix/1 address and Admin its admin endpoint, both on
	// 127.0.0.1; both stay the same across Restart.
	Addr, Admin string
	DataDir     string
	// LogFile receives the process's stdout and stderr (JSON logs),
	// appended across restarts.
	LogFile string

	c        *Cluster
	addrFile string
	index    int // in the cluster's members, and its namespace's number

	mu struct {
		sync.Mutex
		proc   *process // the current or last process; nil before the first start
		frozen bool
	}
}

// process is one run of a member.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited and been reaped
	err  error         // Wait's result, set before done closes
}

func (c *Cluster) newMember(index int) (*Member, error) {
	id := nodeID(index)
	admin, err := c.adminAddr(index)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(c.dir, id)
	return &Member{
		NodeID:   id,
		Admin:    admin,
		DataDir:  filepath.Join(dir, "data"),
		LogFile:  filepath.Join(c.logDir, id+".log"),
		c:        c,
		addrFile: filepath.Join(dir, "addr"),
		index:    index,
	}, nil
}

// adminAddr picks member index's admin address: a free loopback port, or
// in its own namespace (where every port is free) a fixed one.
func (c *Cluster) adminAddr(index int) (string, error) {
	if c.lab != nil {
		return net.JoinHostPort(c.lab.memberIP(index), "9100"), nil
	}
	return freeTCPAddr()
}

// host is the address the member listens on.
func (m *Member) host() string {
	if m.c.lab != nil {
		return m.c.lab.memberIP(m.index)
	}
	return "127.0.0.1"
}

// args is the member's command line: felix/1 on any free port the first
// time, then on the port it had, so clients' seed lists stay good.
func (m *Member) args() []string {
	listen := m.Addr
	if listen == "" {
		listen = net.JoinHostPort(m.host(), "0")
	}
	args := []string{"broker",
		"--listen", listen,
		"--admin", m.Admin,
		"--data-dir", m.DataDir,
		"--addr-file", m.addrFile,
		"--log-format", "json",
		"--tls-cert", filepath.Join(m.c.keysDir, "cert.pem"),
		"--tls-key", filepath.Join(m.c.keysDir, "key.pem"),
		"--auth-keys", filepath.Join(m.c.keysDir, auth.PublicKeyFile),
		"--cluster-etcd", m.c.etcd.Endpoint(),
		"--cluster-node-id", m.NodeID,
		"--cluster-tls-ca", m.c.peerCerts[m.NodeID].CA,
		"--cluster-tls-cert", m.c.peerCerts[m.NodeID].Cert,
		"--cluster-tls-key", m.c.peerCerts[m.NodeID].Key,
		"--cluster-etcd-tls-ca", m.c.peerCerts[m.NodeID].CA,
		"--cluster-etcd-tls-cert", m.c.peerCerts[m.NodeID].Cert,
		"--cluster-etcd-tls-key", m.c.peerCerts[m.NodeID].Key,
	}
	if m.index < len(m.c.opts.Zones) && m.c.opts.Zones[m.index] != "" {
		args = append(args, "--cluster-zone", m.c.opts.Zones[m.index])
	}
	if ttl := m.c.opts.LeaseTTL; ttl != 0 {
		args = append(args, "--cluster-lease-ttl-ms", strconv.FormatInt(ttl.Milliseconds(), 10))
	}
	return append(args, m.c.opts.ExtraArgs...)
}

// launch starts the process; waitServing waits for its address file.
func (m *Member) launch() error {
	if err := os.Remove(m.addrFile); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err // a stale file would pass for the new process's
	}
	if err := os.MkdirAll(filepath.Dir(m.addrFile), 0o700); err != nil {
		return err
	}
	log, err := os.OpenFile(m.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("clustertest: %s log: %w", m.NodeID, err)
	}
	// The child has its own descriptor once started; ours is not needed.
	defer log.Close()
	args := m.args()
	fmt.Fprintf(log, "clustertest: %s starting: felix %s\n", time.Now().Format(time.RFC3339Nano), strings.Join(args, " "))
	cmd := exec.Command(felixBin, args...)
	if m.c.lab != nil {
		// ip execs felix in the namespace: the process is felix's.
		cmd = exec.Command("ip", append([]string{"netns", "exec", m.c.lab.ns(m.index), felixBin}, args...)...)
	}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = childEnv()
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("clustertest: start %s: %w", m.NodeID, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	m.mu.Lock()
	m.mu.proc, m.mu.frozen = p, false
	m.mu.Unlock()
	return nil
}

// waitServing waits for the address file the broker writes once it
// accepts felix/1 connections and has joined the cluster. A first
// start that lost its admin port to another process is retried on a new
// one.
func (m *Member) waitServing() error {
	for try := 1; ; try++ {
		err := m.waitAddrFile()
		if err == nil || try == adminPortTries || m.Addr != "" || !m.lostAdminPort() {
			return err
		}
		if m.Admin, err = m.c.adminAddr(m.index); err != nil {
			return err
		}
		if err := m.launch(); err != nil {
			return err
		}
	}
}

func (m *Member) waitAddrFile() error {
	p := m.process()
	deadline := time.NewTimer(servingTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(addrPoll)
	defer tick.Stop()
	for {
		if data, err := os.ReadFile(m.addrFile); err == nil {
			// The broker writes it by rename: once there, it is whole.
			m.Addr = strings.TrimSpace(string(data))
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("clustertest: %s exited (%v) before serving; its log %s ends:\n%s", m.NodeID, p.err, m.LogFile, tail(m.LogFile, 15))
		case <-deadline.C:
			return fmt.Errorf("clustertest: %s wrote no %s in %s; its log %s ends:\n%s", m.NodeID, m.addrFile, servingTimeout, m.LogFile, tail(m.LogFile, 15))
		case <-tick.C:
		}
	}
}

// lostAdminPort says the last run's log ends in the admin endpoint's
// bind failing because the port was taken.
func (m *Member) lostAdminPort() bool {
	last := tail(m.LogFile, 3)
	return strings.Contains(last, "admin endpoint") && strings.Contains(last, "address already in use")
}

func (m *Member) process() *process {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mu.proc
}

// Pid is the process id of the member launched last, for a benchmark
// that reads its CPU time from /proc.
func (m *Member) Pid() int {
	return m.process().cmd.Process.Pid
}

// Running says the member's process has not exited (it may be frozen).
func (m *Member) Running() bool {
	p := m.process()
	if p == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Frozen says Freeze stopped the process and Thaw has not resumed it.
func (m *Member) Frozen() bool {
	m.mu.Lock()
	frozen := m.mu.frozen
	m.mu.Unlock()
	return frozen && m.Running()
}

// live says the member can answer: running and not frozen.
func (m *Member) live() bool { return m.Running() && !m.Frozen() }

// Kill ends the process with SIGKILL, as a crash would, and waits until it
// has exited. A member already exited is left as it is.
func (m *Member) Kill() {
	p := m.process()
	if p == nil {
		return
	}
	_ = p.cmd.Process.Kill() // fails only when it has already exited
	<-p.done
}

// Freeze stops the process with SIGSTOP: it holds its sockets and its
// state but does nothing, as a stalled machine or a long GC pause would;
// its lease stops being renewed. Thaw resumes it.
func (m *Member) Freeze(t testing.TB) {
	t.Helper()
	m.signal(t, "Freeze", freeze, true)
}

// Thaw resumes a frozen process with SIGCONT.
func (m *Member) Thaw(t testing.TB) {
	t.Helper()
	m.signal(t, "Thaw", thaw, false)
}

func (m *Member) signal(t testing.TB, what string, send func(*os.Process) error, frozen bool) {
	t.Helper()
	if !m.Running() {
		t.Fatalf("clustertest: %s %s: the process is not running (Restart it first)", what, m.NodeID)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := send(m.mu.proc.cmd.Process); err != nil {
		t.Fatalf("clustertest: %s %s: %v", what, m.NodeID, err)
	}
	m.mu.frozen = frozen
}

// Stop asks the member to stop with SIGTERM, as an operator would, and
// waits for it: the test fails if it has not exited within 15 s (it is
// then killed) or exits with an error. A frozen member is thawed to act
// on the signal.
func (m *Member) Stop(t testing.TB) {
	t.Helper()
	p := m.process()
	if p == nil || !m.Running() {
		t.Fatalf("clustertest: Stop %s: the process is not running", m.NodeID)
	}
	if err := stop(p.cmd.Process); err != nil {
		t.Fatalf("clustertest: Stop %s: %v", m.NodeID, err)
	}
	if m.Frozen() {
		_ = thaw(p.cmd.Process)
	}
	timer := time.NewTimer(stopTimeout)
	defer timer.Stop()
	select {
	case <-p.done:
	case <-timer.C:
		m.Kill()
		t.Fatalf("clustertest: %s did not stop within %s of SIGTERM (killed); its log %s ends:\n%s", m.NodeID, stopTimeout, m.LogFile, tail(m.LogFile, 15))
	}
	if p.err != nil {
		t.Fatalf("clustertest: %s stopped with %v, want a clean exit; its log %s ends:\n%s", m.NodeID, p.err, m.LogFile, tail(m.LogFile, 15))
	}
}

// WaitExit waits until the member's current process exits by itself (a
// member that stops itself) and returns Wait's error, nil for status 0;
// exited is false when ctx ended first or there is no process.
func (m *Member) WaitExit(ctx context.Context) (exited bool, err error) {
	p := m.process()
	if p == nil {
		return false, nil
	}
	select {
	case <-p.done:
		return true, p.err
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// Restart starts the member again after Kill or Stop, with the same node
// id, data dir and addresses, and returns once it serves: it has joined
// the cluster and written its address file (so with etcd frozen it waits
// until etcd is back, at most 30 s).
func (m *Member) Restart(t testing.TB) {
	t.Helper()
	m.Launch(t)
	m.WaitServing(t)
}

// Launch starts the member again after Kill or Stop, as Restart does, but
// returns at once: WaitServing waits for it to serve.
func (m *Member) Launch(t testing.TB) {
	t.Helper()
	if m.Running() {
		t.Fatalf("clustertest: Restart %s: it is still running; Kill or Stop it first", m.NodeID)
	}
	if err := m.launch(); err != nil {
		t.Fatal(err)
	}
}

// WaitServing waits, up to 30 s, until the member launched last serves.
func (m *Member) WaitServing(t testing.TB) {
	t.Helper()
	if err := m.waitServing(); err != nil {
		t.Fatal(err)
	}
}

// Serving says the member's address file is there: the broker writes it
// once it has joined the cluster.
func (m *Member) Serving() bool {
	_, err := os.Stat(m.addrFile)
	return err == nil
}

// freeTCPAddr returns a 127.0.0.1 address nothing listened on a moment
// ago. The broker's admin endpoint writes no address file, so its port is
// chosen here.
func freeTCPAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("clustertest: find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// childEnv is this process's environment without FELIX_ variables, which
// the broker reads as configuration: the developer's own settings must
// not change the cluster under test.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FELIX_") {
			env = append(env, kv)
		}
	}
	return env
}
