package clustertest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/getfelix/felix-go/cluster"
	"github.com/getfelix/felix-go/internal/clustercerts"
)

// The cluster's etcd runs in a child process of its own, the test binary
// run again by Main with etcdDirEnv set: a process can be frozen with
// SIGSTOP, as a stalled etcd machine would be, while an etcd embedded in
// the test process could only be closed. The child is cluster.StartEtcd
// serving mutual TLS, the same single-member etcd `felix dev cluster` runs.
const (
	// etcdDirEnv and etcdHostEnv tell the test binary to serve etcd in
	// that dir on that host instead of running tests. FELIX_-prefixed, so
	// childEnv keeps them from the brokers.
	etcdDirEnv  = "FELIX_CLUSTERTEST_ETCD_DIR"
	etcdHostEnv = "FELIX_CLUSTERTEST_ETCD_HOST"
	// etcdCertsEnv is the dir of the cluster CA and etcd's certificate.
	etcdCertsEnv = "FELIX_CLUSTERTEST_ETCD_CERTS"
	// etcdEndpointFile, in the etcd dir, receives the child's client URL
	// once it serves (written by rename, so it is whole when seen).
	etcdEndpointFile = "endpoint"
	// etcdStartTimeout bounds the child's start: cluster.StartEtcd gives
	// itself 30 s; the rest is for the process on a loaded machine.
	etcdStartTimeout = 40 * time.Second
)

// Etcd is the cluster's etcd process.
type Etcd struct {
	endpoint string
	dir      string

	proc      *process
	closeOnce sync.Once
}

// serveEtcdChild is Main's path when the binary was started as the
// cluster's etcd: it serves until SIGTERM or until etcd stops on its own,
// and returns the exit code.
func serveEtcdChild(dir string) int {
	host := os.Getenv(etcdHostEnv)
	// Mutual TLS, as a production etcd should serve, with etcd's
	// certificate of the cluster CA (startEtcd minted it for host); each
	// member presents its peer link certificate.
	files, err := clustercerts.EnsureEtcd(os.Getenv(etcdCertsEnv), []string{host})
	if err != nil {
		fmt.Fprintln(os.Stderr, "clustertest etcd:", err)
		return 1
	}
	e, err := cluster.StartEtcd(dir, cluster.WithEtcdHost(host), cluster.WithEtcdTLS(cluster.EtcdTLS(files)))
	if err != nil {
		fmt.Fprintln(os.Stderr, "clustertest etcd:", err)
		return 1
	}
	defer e.Close()
	tmp := filepath.Join(dir, etcdEndpointFile+".tmp")
	if err := os.WriteFile(tmp, []byte(e.Endpoint()), 0o600); err == nil {
		err = os.Rename(tmp, filepath.Join(dir, etcdEndpointFile))
	} else {
		fmt.Fprintln(os.Stderr, "clustertest etcd:", err)
		return 1
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM, os.Interrupt)
	select {
	case <-term:
		return 0
	case err := <-e.Err():
		fmt.Fprintln(os.Stderr, "clustertest etcd stopped:", err)
		return 1
	}
}

// startEtcd starts the etcd child serving in dir on host and waits until
// it serves.
func startEtcd(dir, host, certs, logFile string) (*Etcd, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if _, err := clustercerts.EnsureEtcd(certs, []string{host}); err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("clustertest: find the test binary to run etcd: %w", err)
	}
	log, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("clustertest: etcd log: %w", err)
	}
	defer log.Close()
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), etcdDirEnv+"="+dir, etcdHostEnv+"="+host, etcdCertsEnv+"="+certs)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("clustertest: start etcd: %w", err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	e := &Etcd{dir: dir, proc: p}
	if e.endpoint, err = waitEndpoint(dir, p, logFile); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

func waitEndpoint(dir string, p *process, logFile string) (string, error) {
	deadline := time.NewTimer(etcdStartTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(addrPoll)
	defer tick.Stop()
	for {
		if data, err := os.ReadFile(filepath.Join(dir, etcdEndpointFile)); err == nil {
			return strings.TrimSpace(string(data)), nil
		}
		select {
		case <-p.done:
			return "", fmt.Errorf("clustertest: etcd exited (%v) before serving; its output %s ends:\n%s", p.err, logFile, tail(logFile, 15))
		case <-deadline.C:
			return "", fmt.Errorf("clustertest: etcd did not serve within %s; its output %s ends:\n%s", etcdStartTimeout, logFile, tail(logFile, 15))
		case <-tick.C:
		}
	}
}

// Endpoint is etcd's client URL, each member's --cluster-etcd.
func (e *Etcd) Endpoint() string { return e.endpoint }

// Dir holds etcd's data and its own error log (cluster.EtcdLogFile).
func (e *Etcd) Dir() string { return e.dir }

// Freeze stops etcd with SIGSTOP: members' requests and lease renewals go
// unanswered, and when it resumes every lease whose TTL passed meanwhile
// expires at once, as after a stalled etcd machine. Thaw resumes it.
func (e *Etcd) Freeze(t testing.TB) {
	t.Helper()
	e.signal(t, "Freeze", freeze)
	if err := waitStopped(e.proc.cmd.Process.Pid); err != nil {
		t.Fatalf("clustertest: Freeze etcd: %v", err)
	}
}

// Thaw resumes a frozen etcd with SIGCONT.
func (e *Etcd) Thaw(t testing.TB) {
	t.Helper()
	e.signal(t, "Thaw", thaw)
}

func (e *Etcd) signal(t testing.TB, what string, send func(*os.Process) error) {
	t.Helper()
	select {
	case <-e.proc.done:
		t.Fatalf("clustertest: %s etcd: it has exited", what)
	default:
	}
	if err := send(e.proc.cmd.Process); err != nil {
		t.Fatalf("clustertest: %s etcd: %v", what, err)
	}
}

// Close kills etcd (a frozen one too) and waits for it to exit; members
// still running then find no etcd. Closing again does nothing, so a test
// may close it early and leave the second Close to the harness.
func (e *Etcd) Close() {
	e.closeOnce.Do(func() {
		if err := e.proc.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
			return
		}
		<-e.proc.done
	})
}
