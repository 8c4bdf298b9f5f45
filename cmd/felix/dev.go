package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/getfelix/felix-go/auth"
	"github.com/getfelix/felix-go/cluster"
	"github.com/getfelix/felix-go/internal/clustercerts"
	"github.com/getfelix/felix-go/internal/quicconf"
)

const (
	// devMaxNodes keeps a typo from starting hundreds of brokers on one
	// machine; a dev cluster is for trying things.
	devMaxNodes = 16
	// devServingTimeout bounds a member's start, process to address file.
	devServingTimeout = 30 * time.Second
	// devFormTimeout bounds the wait for the members to see each other;
	// past it the cluster keeps running, with a warning.
	devFormTimeout = 30 * time.Second
	// devStopTimeout bounds the members' clean stop (the broker gives its
	// own 10 s) before they are killed.
	devStopTimeout = 15 * time.Second
	// devPoll is how often the address files and the cluster status are
	// looked at while starting.
	devPoll = 100 * time.Millisecond
)

// devDefaultDir is --dir's default.
const devDefaultDir = "felix-cluster"

type devOpts struct {
	nodes         int
	dir           string
	basePort      int
	adminBasePort int
	json          bool
}

func newDevCmd() *command {
	o := &devOpts{}
	fs := newFlagSet("dev")
	fs.IntVar(&o.nodes, "nodes", 3, "how many brokers")
	fs.StringVar(&o.dir, "dir", devDefaultDir, "folder for the shared token and certificate, etcd's data, each member's data dir and the logs; reused by the next run")
	fs.IntVar(&o.basePort, "base-port", 7001, "felix/1 (UDP) port of node-1; node-2 gets the next, and so on")
	fs.IntVar(&o.adminBasePort, "admin-base-port", 7101, "admin endpoint (TCP) port of node-1; node-2 gets the next, and so on")
	fs.BoolVar(&o.json, "json", false, "print the members as JSON instead of a table")
	c := &command{
		name:  "dev",
		args:  "cluster [-- BROKER FLAGS] | cluster restart NODE",
		short: "run a cluster of brokers on this machine, for trying things",
		long: `felix dev cluster starts an etcd inside this process and --nodes brokers
(this felix binary, each a child process) on 127.0.0.1, joined as one cluster.
It prints the members, the token and certificate clients need, and commands
to try, then runs until Ctrl-C or SIGTERM, when it stops the brokers and then
etcd. A member that dies (you may kill one to watch failover) is reported,
with the commands that start it again, and the others keep running; etcd
stays up even when no member is left, for the members started again.

felix dev cluster restart NODE (in another terminal, with the same --dir)
asks the running felix dev cluster to start NODE again (stopping it first
if it runs) and waits until it has joined the cluster. It is then a child
like the others: Ctrl-C stops it. The broker command line printed with it
starts the member by hand instead, out of felix dev cluster's care.
A felix that go run built is copied to --dir/bin/felix first, so that the
printed commands name a binary the Go build cache cannot take away.

Everything lives under --dir: admin.token (accepted by every member),
cert.pem (served by every member), cluster-certs/ (the peer link's CA and
each member's certificate), etcd/, node-N/ (data dirs), logs/node-N.log and
dev.sock (the restart command's socket, while it runs). A second run on the
same --dir reuses them: etcd's keys and each member's data.

Flags after -- go to every broker, e.g.
  felix dev cluster --nodes 3 -- --cluster-lease-ttl-ms 2000 --log-level debug`,
		flags: fs,
	}
	c.run = o.run
	return c
}

func (o *devOpts) run(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] != "cluster" {
		return usagef("dev needs cluster: felix dev cluster [--nodes 3]")
	}
	if len(args) > 1 && args[1] == "restart" {
		if len(args) != 3 {
			return usagef("restart needs one member: felix dev cluster restart node-N, got %q", args[2:])
		}
		return o.restart(ctx, args[2])
	}
	brokerArgs := args[1:]
	if len(brokerArgs) > 0 && !strings.HasPrefix(brokerArgs[0], "-") {
		return usagef("after cluster only broker flags are taken (after --), got %q", brokerArgs)
	}
	if err := o.check(); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this felix binary to run the brokers: %w", err)
	}
	d := &devCluster{o: o, exe: exe, brokerArgs: brokerArgs, out: os.Stdout, progress: os.Stderr,
		exited: make(chan *devProc), stopping: make(chan struct{})}
	return d.run(ctx)
}

func (o *devOpts) check() error {
	switch {
	case o.nodes < 1 || o.nodes > devMaxNodes:
		return usagef("--nodes must be 1 to %d, got %d", devMaxNodes, o.nodes)
	case o.basePort < 1 || o.basePort+o.nodes-1 > 65535:
		return usagef("--base-port %d with %d nodes leaves the port range; pick one from 1024 to %d", o.basePort, o.nodes, 65536-o.nodes)
	case o.adminBasePort < 1 || o.adminBasePort+o.nodes-1 > 65535:
		return usagef("--admin-base-port %d with %d nodes leaves the port range; pick one from 1024 to %d", o.adminBasePort, o.nodes, 65536-o.nodes)
	case o.dir == "":
		return usagef("--dir must not be empty")
	}
	return nil
}

// devCluster is one run of felix dev cluster: etcd, the members, and the
// files under --dir.
type devCluster struct {
	o          *devOpts
	exe        string // the felix binary the members run (devBinary)
	brokerArgs []string
	out        io.Writer // the member table
	progress   io.Writer // what is happening, and what went wrong

	etcd    *cluster.Etcd
	members []*devMember
	// peerCerts are each member's peer link certificate files; each
	// member presents its own to etcd too, which serves etcdCert and
	// refuses a client without a certificate of the same CA.
	peerCerts map[string]clustercerts.Files
	etcdCert  clustercerts.Files
	// exited receives each member process once it has exited, until
	// stopping closes.
	exited   chan *devProc
	stopping chan struct{}
	stopOnce sync.Once
	// control serves felix dev cluster restart (devcontrol.go);
	// controlStop ends its requests' context.
	control     *http.Server
	controlStop context.CancelFunc

	// mu guards each member's proc and PID: the control server restarts
	// members while supervise and shutdown watch them.
	mu sync.Mutex
}

// devMember is one broker child, as --json prints it.
type devMember struct {
	NodeID  string `json:"node_id"`
	Addr    string `json:"addr"`
	Admin   string `json:"admin"`
	PID     int    `json:"pid"`
	DataDir string `json:"data_dir"`
	LogFile string `json:"log_file"`

	args     []string
	addrFile string
	proc     *devProc // the current process; nil before the first start
}

// devProc is one run of a member's process.
type devProc struct {
	m    *devMember
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // Wait's result, set before done closes
	// restarting is set (under devCluster.mu) when felix dev cluster
	// restart stops it: its exit is not news.
	restarting bool
}

func (d *devCluster) run(ctx context.Context) error {
	if err := d.checkPorts(); err != nil {
		return err
	}
	if err := d.prepareDir(); err != nil {
		return err
	}
	var err error
	if d.exe, err = devBinary(d.exe, d.o.dir); err != nil {
		return err
	}
	etcdDir := filepath.Join(d.o.dir, "etcd")
	if d.etcd, err = cluster.StartEtcd(etcdDir, cluster.WithEtcdTLS(cluster.EtcdTLS(d.etcdCert))); err != nil {
		return err
	}
	defer d.shutdown()
	node1 := d.peerCerts[devNodeIDs(1)[0]]
	fmt.Fprintf(d.progress, "etcd serving on %s over mutual TLS (etcdctl --endpoints %s --cacert %s --cert %s --key %s; its data and errors in %s)\n",
		d.etcd.Endpoint(), d.etcd.Endpoint(), node1.CA, node1.Cert, node1.Key, etcdDir)
	for i := range d.o.nodes {
		m := d.newMember(i)
		d.members = append(d.members, m)
		if err := d.start(m); err != nil {
			return err
		}
	}
	if err := d.waitServing(ctx); err != nil {
		return err
	}
	d.waitFormed(ctx)
	if ctx.Err() != nil {
		return nil
	}
	if err := d.serveControl(); err != nil {
		return err
	}
	if err := d.printMembers(); err != nil {
		return err
	}
	return d.supervise(ctx)
}

// checkPorts fails before anything starts when a port cannot be bound,
// naming the flag that moves it.
func (d *devCluster) checkPorts() error {
	for i := range d.o.nodes {
		node := fmt.Sprintf("node-%d", i+1)
		if err := checkPort("udp", d.o.basePort+i, "felix/1 of "+node, "--base-port"); err != nil {
			return err
		}
		if err := checkPort("tcp", d.o.adminBasePort+i, "admin endpoint of "+node, "--admin-base-port"); err != nil {
			return err
		}
	}
	return nil
}

// checkPort binds 127.0.0.1:port and lets it go.
func checkPort(network string, port int, what, flag string) error {
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	var (
		c   io.Closer
		err error
	)
	if network == "udp" {
		c, err = net.ListenPacket(network, addr)
	} else {
		c, err = net.Listen(network, addr)
	}
	switch {
	case err == nil:
		c.Close()
		return nil
	case errors.Is(err, syscall.EADDRINUSE):
		return fmt.Errorf("%s (%s, %s) is in use: is another dev cluster or broker running? "+
			"Stop it, or pick other ports with %s (%w)", addr, what, strings.ToUpper(network), flag, err)
	}
	return fmt.Errorf("cannot bind %s (%s): pick other ports with %s (%w)", addr, what, flag, err)
}

// prepareDir makes --dir and the signing key, admin.token and certificate
// every member shares (kept from an earlier run).
func (d *devCluster) prepareDir() error {
	if err := os.MkdirAll(filepath.Join(d.o.dir, "logs"), 0o700); err != nil {
		return fmt.Errorf("make %s: %w (choose a writable --dir)", d.o.dir, err)
	}
	if _, err := auth.EnsureLocal(d.o.dir, time.Now()); err != nil {
		return err
	}
	// ServerTLS with no certificate writes a self-signed one into the dir
	// (or loads the one there), as a broker does into its data dir.
	if _, err := quicconf.ServerTLS("", "", d.o.dir); err != nil {
		return err
	}
	// The peer link's CA and member certificates, kept across runs (a
	// run with more --nodes mints the new members' with the same CA).
	var err error
	certs := filepath.Join(d.o.dir, devPeerCertsDir)
	if d.peerCerts, err = clustercerts.Ensure(certs, devNodeIDs(d.o.nodes)); err != nil {
		return err
	}
	d.etcdCert, err = clustercerts.EnsureEtcd(certs, []string{"127.0.0.1"})
	return err
}

// devPeerCertsDir is where under --dir the peer link's certificates live.
const devPeerCertsDir = "cluster-certs"

func devNodeIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("node-%d", i+1)
	}
	return ids
}

func (d *devCluster) newMember(i int) *devMember {
	id := fmt.Sprintf("node-%d", i+1)
	m := &devMember{
		NodeID:   id,
		Addr:     fmt.Sprintf("127.0.0.1:%d", d.o.basePort+i),
		Admin:    fmt.Sprintf("127.0.0.1:%d", d.o.adminBasePort+i),
		DataDir:  filepath.Join(d.o.dir, id),
		LogFile:  filepath.Join(d.o.dir, "logs", id+".log"),
		addrFile: filepath.Join(d.o.dir, id+".addr"),
	}
	m.args = append([]string{"broker",
		"--listen", m.Addr,
		"--admin", m.Admin,
		"--data-dir", m.DataDir,
		"--addr-file", m.addrFile,
		"--log-format", "json",
		"--tls-cert", filepath.Join(d.o.dir, quicconf.CertFile),
		"--tls-key", filepath.Join(d.o.dir, quicconf.KeyFile),
		"--auth-keys", filepath.Join(d.o.dir, auth.PublicKeyFile),
		"--cluster-etcd", d.etcd.Endpoint(),
		"--cluster-node-id", id,
		"--cluster-tls-ca", d.peerCerts[id].CA,
		"--cluster-tls-cert", d.peerCerts[id].Cert,
		"--cluster-tls-key", d.peerCerts[id].Key,
		"--cluster-etcd-tls-ca", d.peerCerts[id].CA,
		"--cluster-etcd-tls-cert", d.peerCerts[id].Cert,
		"--cluster-etcd-tls-key", d.peerCerts[id].Key,
	}, d.brokerArgs...)
	return m
}

// start runs m with its output appended to its log file.
func (d *devCluster) start(m *devMember) error {
	// The last run's address file would pass for this one's.
	if err := os.Remove(m.addrFile); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	log, err := os.OpenFile(m.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("log of %s: %w", m.NodeID, err)
	}
	defer log.Close() // the child has its own descriptor
	fmt.Fprintf(log, "felix dev cluster: %s starting %s: %s %s\n", time.Now().Format(time.RFC3339), m.NodeID, d.exe, strings.Join(m.args, " "))
	p := &devProc{m: m, cmd: exec.Command(d.exe, m.args...), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = log, log
	p.cmd.SysProcAttr = devSysProcAttr()
	if err := p.cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", m.NodeID, err)
	}
	d.mu.Lock()
	m.proc, m.PID = p, p.cmd.Process.Pid
	d.mu.Unlock()
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
		select {
		case d.exited <- p:
		case <-d.stopping:
		}
	}()
	return nil
}

// current is m's process (nil before its first start).
func (d *devCluster) current(m *devMember) *devProc {
	d.mu.Lock()
	defer d.mu.Unlock()
	return m.proc
}

func (p *devProc) running() bool {
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

// waitServing waits for every member's address file, which the broker
// writes once it accepts felix/1 connections, printing each as it comes.
func (d *devCluster) waitServing(ctx context.Context) error {
	start := time.Now()
	deadline := time.NewTimer(devServingTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(devPoll)
	defer tick.Stop()
	for _, m := range d.members {
		if err := d.waitAddrFile(ctx, m, deadline.C, tick.C); err != nil {
			return err
		}
		fmt.Fprintf(d.progress, "%s serving felix/1 on %s, admin on %s (%.1f s)\n", m.NodeID, m.Addr, m.Admin, time.Since(start).Seconds())
	}
	return nil
}

// waitAddrFile waits for m's address file: m serves.
func (d *devCluster) waitAddrFile(ctx context.Context, m *devMember, deadline, tick <-chan time.Time) error {
	p := d.current(m)
	for !fileExists(m.addrFile) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("interrupted while %s was starting", m.NodeID)
		case <-p.done:
			return d.startFailed(p)
		case <-deadline:
			return fmt.Errorf("%s is not serving after %s; its log %s ends:\n%s", m.NodeID, devServingTimeout, m.LogFile, logTail(m.LogFile, 5))
		case <-tick:
		}
	}
	return nil
}

func (d *devCluster) startFailed(p *devProc) error {
	m := p.m
	tail := logTail(m.LogFile, 5)
	if strings.Contains(tail, "address already in use") {
		return fmt.Errorf("%s could not bind its ports (%s, admin %s): they are in use; pick others with --base-port and --admin-base-port.\nIts log %s ends:\n%s",
			m.NodeID, m.Addr, m.Admin, m.LogFile, tail)
	}
	return fmt.Errorf("%s exited before serving (%v); its log %s ends:\n%s", m.NodeID, p.err, m.LogFile, tail)
}

// waitFormed waits until every member says it has joined and sees them
// all. It only warns when they do not: the brokers serve either way, and
// the logs say why.
func (d *devCluster) waitFormed(ctx context.Context) {
	token, err := auth.ReadToken(filepath.Join(d.o.dir, auth.AdminTokenFile))
	if err != nil {
		fmt.Fprintf(d.progress, "warning: cannot check the cluster formed: %v\n", err)
		return
	}
	start := time.Now()
	deadline := time.NewTimer(devFormTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(devPoll)
	defer tick.Stop()
	fmt.Fprintf(d.progress, "waiting for the %d members to see each other\n", d.o.nodes)
	for {
		waiting, err := d.notFormed(ctx, token)
		var refusal *adminRefusal
		switch {
		case errors.As(err, &refusal) && refusal.status == http.StatusNotFound:
			fmt.Fprintf(d.progress, "warning: the members answer 404 on /debug/cluster: this felix has no cluster support, so they run as separate brokers\n")
			return
		case err == nil && waiting == "":
			fmt.Fprintf(d.progress, "cluster formed: %d members (%.1f s)\n", d.o.nodes, time.Since(start).Seconds())
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-deadline.C:
			if err != nil {
				waiting = err.Error()
			}
			fmt.Fprintf(d.progress, "warning: the cluster has not formed after %s: %s; the logs in %s say why\n",
				devFormTimeout, waiting, filepath.Join(d.o.dir, "logs"))
			return
		case <-tick.C:
		}
	}
}

// notFormed asks every running member for its status and says which one
// is not ready with every member ("" when all are).
func (d *devCluster) notFormed(ctx context.Context, token string) (string, error) {
	for _, m := range d.members {
		if !d.current(m).running() {
			continue
		}
		var st cluster.Status
		a := adminOpts{addr: m.Admin, token: token, timeout: 2 * time.Second}
		if err := a.call(ctx, http.MethodGet, "/debug/cluster", nil, &st); err != nil {
			return "", fmt.Errorf("%s: %w", m.NodeID, err)
		}
		if !st.Ready || len(st.Live()) != d.o.nodes {
			return fmt.Sprintf("%s is ready: %t, and sees %d of %d members", m.NodeID, st.Ready, len(st.Live()), d.o.nodes), nil
		}
	}
	return "", nil
}

// devInfo is what --json prints.
type devInfo struct {
	Etcd      string       `json:"etcd"`
	Dir       string       `json:"dir"`
	TokenFile string       `json:"token_file"`
	CAFile    string       `json:"ca_file"`
	Members   []*devMember `json:"members"`
}

func (d *devCluster) printMembers() error {
	d.mu.Lock() // a restart may change a PID meanwhile
	defer d.mu.Unlock()
	info := devInfo{
		Etcd:      d.etcd.Endpoint(),
		Dir:       d.o.dir,
		TokenFile: filepath.Join(d.o.dir, auth.AdminTokenFile),
		CAFile:    filepath.Join(d.o.dir, quicconf.CertFile),
		Members:   d.members,
	}
	if d.o.json {
		return json.NewEncoder(d.out).Encode(info)
	}
	printDevInfo(d.out, info, selfName())
	return nil
}

// printDevInfo prints the member table and what to try next, with felix
// invoked as self.
func printDevInfo(w io.Writer, info devInfo, self string) {
	fmt.Fprintf(w, "\nfelix dev cluster: %d members, etcd at %s, files in %s\n\n", len(info.Members), info.Etcd, info.Dir)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tFELIX/1\tADMIN\tPID\tLOG")
	addrs := make([]string, len(info.Members))
	for i, m := range info.Members {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", m.NodeID, m.Addr, m.Admin, m.PID, m.LogFile)
		addrs[i] = m.Addr
	}
	tw.Flush()
	seeds, first := strings.Join(addrs, ","), info.Members[0]
	fmt.Fprintf(w, `
Every member accepts the token in %[1]s and serves the certificate %[2]s.
In another terminal:

  export FELIX_TOKEN=$(cat %[1]s)   # or pass --token to each command
  %[3]s sub --broker %[4]s --ca %[2]s --stream demo
  %[3]s pub --broker %[4]s --ca %[2]s --stream demo hello
  %[3]s cluster ls --admin %[5]s
  %[3]s tree --cluster --admin %[5]s

Or save the flags once, as the current felix context:

  %[3]s context add dev --broker %[4]s --admin %[5]s --ca %[2]s --token-file %[1]s

Then kill a member with kill -9 PID (cluster ls --shards shows which owns
which shard) and watch the clients carry on once its lease has run out;
  %[3]s dev cluster restart NODE%[7]s
starts it again. etcd stays up until Ctrl-C, which stops the cluster; its
data stays in %[6]s for the next run.
`, info.TokenFile, info.CAFile, self, seeds, first.Admin, info.Dir, dirFlag(info.Dir))
}

// dirFlag is the --dir a command must repeat, "" for the default.
func dirFlag(dir string) string {
	if dir == devDefaultDir {
		return ""
	}
	return " --dir " + shellQuote(dir)
}

// selfName is felix as the user ran it, for commands to copy: "go run
// ./cmd/felix" when go run built this binary, else the name it was run by.
func selfName() string {
	if exe, err := os.Executable(); err == nil && strings.Contains(exe, string(filepath.Separator)+"go-build") {
		return "go run ./cmd/felix"
	}
	return os.Args[0]
}

// supervise runs until ctx ends, reporting members that exit, or until
// etcd fails. It does not end when every member it started has exited:
// etcd stays up for the members started again, by felix dev cluster
// restart or by hand, which it cannot see.
func (d *devCluster) supervise(ctx context.Context) error {
	errc := d.etcd.Err()
	for {
		select {
		case <-ctx.Done():
			return nil
		case p := <-d.exited:
			d.reportExit(p)
		case err, ok := <-errc:
			if !ok {
				errc = nil
				continue
			}
			return fmt.Errorf("etcd stopped (%v): the cluster cannot go on; see %s", err, filepath.Join(d.o.dir, "etcd", cluster.EtcdLogFile))
		}
	}
}

func (d *devCluster) reportExit(p *devProc) {
	m := p.m
	d.mu.Lock()
	restarting := p.restarting
	d.mu.Unlock()
	if restarting {
		fmt.Fprintf(d.progress, "%s (pid %d) stopped for its restart\n", m.NodeID, p.cmd.Process.Pid)
		return
	}
	how := "exited"
	if p.err != nil {
		how = p.err.Error() // "signal: killed", "exit status 1"
	}
	left := "none; etcd stays up for members started again, until Ctrl-C"
	if ids := d.running(); len(ids) > 0 {
		left = strings.Join(ids, ", ")
	}
	fmt.Fprintf(d.progress, "%s (pid %d) %s; still running: %s. Its log: %s\n"+
		"To start it again: %s\n"+
		"  (or by hand, where Ctrl-C here does not stop it: %s)\n",
		m.NodeID, p.cmd.Process.Pid, how, left, m.LogFile, d.restartCommand(m), d.brokerCommand(m))
}

// restartCommand is the command that has this felix dev cluster start m
// again.
func (d *devCluster) restartCommand(m *devMember) string {
	return shellQuote(d.exe) + " dev cluster restart " + m.NodeID + dirFlag(d.o.dir)
}

// brokerCommand is m's broker command line, for a shell.
func (d *devCluster) brokerCommand(m *devMember) string {
	words := []string{shellQuote(d.exe)}
	for _, a := range m.args {
		words = append(words, shellQuote(a))
	}
	return strings.Join(words, " ")
}

// running names the members whose process has not exited.
func (d *devCluster) running() []string {
	var ids []string
	for _, m := range d.members {
		if d.current(m).running() {
			ids = append(ids, m.NodeID)
		}
	}
	return ids
}

// shutdown stops the control server, then the members with SIGTERM,
// kills those still running after devStopTimeout, then closes etcd: the
// members leave while etcd can still hear them go.
func (d *devCluster) shutdown() {
	d.stopOnce.Do(func() {
		stopOnSignal() // a second Ctrl-C ends felix dev at once
		d.stopControl()
		close(d.stopping)
		var running []*devProc
		for _, m := range d.members {
			if p := d.current(m); p.running() {
				running = append(running, p)
			}
		}
		if ids := d.running(); len(ids) > 0 {
			fmt.Fprintf(d.progress, "stopping %s\n", strings.Join(ids, ", "))
		}
		for _, p := range running {
			if err := terminate(p.cmd.Process); err != nil {
				_ = p.cmd.Process.Kill()
			}
		}
		d.waitStopped(running)
		d.etcd.Close()
		fmt.Fprintf(d.progress, "stopped; the cluster's data stays in %s (remove it to start afresh)\n", d.o.dir)
	})
}

// waitStopped waits devStopTimeout for the processes to exit, then kills
// the rest.
func (d *devCluster) waitStopped(running []*devProc) {
	timer := time.NewTimer(devStopTimeout)
	defer timer.Stop()
	for _, p := range running {
		select {
		case <-p.done:
			if p.err != nil {
				fmt.Fprintf(d.progress, "%s stopped with %v; see %s\n", p.m.NodeID, p.err, p.m.LogFile)
			}
			continue
		case <-timer.C:
		}
		for _, r := range running {
			if r.running() {
				_ = r.cmd.Process.Kill()
				fmt.Fprintf(d.progress, "%s did not stop within %s: killed; see %s\n", r.m.NodeID, devStopTimeout, r.m.LogFile)
			}
		}
		for _, r := range running {
			<-r.done
		}
		return
	}
}

// stop stops one member's process: SIGTERM, and SIGKILL after
// devStopTimeout.
func (d *devCluster) stop(p *devProc) {
	if err := terminate(p.cmd.Process); err != nil {
		_ = p.cmd.Process.Kill()
	}
	timer := time.NewTimer(devStopTimeout)
	defer timer.Stop()
	select {
	case <-p.done:
	case <-timer.C:
		_ = p.cmd.Process.Kill()
		fmt.Fprintf(d.progress, "%s did not stop within %s: killed; see %s\n", p.m.NodeID, devStopTimeout, p.m.LogFile)
		<-p.done
	}
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=,@+") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// logTail is the last n lines of the file at path.
func logTail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return "(unreadable: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// terminate asks p to stop cleanly.
func terminate(p *os.Process) error { return p.Signal(syscall.SIGTERM) }
