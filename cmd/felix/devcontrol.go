package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/getfelix/felix-go/auth"
	"github.com/getfelix/felix-go/cluster"
)

// felix dev cluster restart NODE asks the running felix dev cluster, over
// a Unix socket in --dir, to start a member again. The member is then its
// child like the others: its log goes to logs/NODE.log, and Ctrl-C stops
// it before etcd. A member started by hand from the printed broker
// command line is not (felix dev cluster cannot see it), which is why the
// restart command comes first.

// devControlSocket is the control socket's name under --dir.
const devControlSocket = "dev.sock"

// devRestartTimeout bounds a restart: stopping the old process, starting
// the new one and its joining the cluster (which waits for the old
// process's lease to expire when it was killed).
const devRestartTimeout = devStopTimeout + devServingTimeout + devFormTimeout

// restartAnswer is what the control socket answers a restart with.
type restartAnswer struct {
	NodeID string `json:"node_id"`
	PID    int    `json:"pid"`
	Addr   string `json:"addr"`
	Admin  string `json:"admin"`
	Error  string `json:"error,omitempty"`
}

// serveControl listens on --dir's control socket; a socket left by a
// felix dev cluster that died is replaced.
func (d *devCluster) serveControl() error {
	path := filepath.Join(d.o.dir, devControlSocket)
	l, err := net.Listen("unix", path)
	if errors.Is(err, syscall.EADDRINUSE) {
		if c, derr := net.Dial("unix", path); derr == nil {
			c.Close()
			return fmt.Errorf("another felix dev cluster runs on --dir %s (it answers on %s): stop it, or pick another --dir", d.o.dir, path)
		}
		_ = os.Remove(path)
		l, err = net.Listen("unix", path)
	}
	if err != nil {
		return fmt.Errorf("control socket %s for felix dev cluster restart: %w (a shorter --dir path helps: a socket's path has at most about 100 bytes)", path, err)
	}
	mux := http.NewServeMux()
	var restarting sync.Mutex // one restart at a time
	mux.HandleFunc("POST /restart", func(w http.ResponseWriter, r *http.Request) {
		restarting.Lock()
		defer restarting.Unlock()
		ans, status := d.restartMember(r.Context(), r.URL.Query().Get("node"))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(ans)
	})
	// A restart under way when felix dev cluster stops is abandoned: its
	// requests' context ends first thing in stopControl.
	base, cancel := context.WithCancel(context.Background())
	d.control = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, BaseContext: func(net.Listener) context.Context { return base }}
	d.controlStop = cancel
	go func() { _ = d.control.Serve(l) }() // ends at stopControl
	return nil
}

// stopControl closes the control socket, so no restart starts while the
// members stop.
func (d *devCluster) stopControl() {
	if d.control == nil {
		return
	}
	d.controlStop()
	ctx, cancel := context.WithTimeout(context.Background(), devStopTimeout)
	defer cancel()
	_ = d.control.Shutdown(ctx) // waits for a restart under way to give up
	_ = os.Remove(filepath.Join(d.o.dir, devControlSocket))
}

// restartMember stops node when it runs, starts it again and waits until
// it has joined the cluster.
func (d *devCluster) restartMember(ctx context.Context, node string) (restartAnswer, int) {
	var m *devMember
	for _, c := range d.members {
		if c.NodeID == node {
			m = c
		}
	}
	if m == nil {
		return restartAnswer{NodeID: node, Error: fmt.Sprintf("this cluster has no member %q; it has %s", node, strings.Join(devNodeIDs(len(d.members)), ", "))}, http.StatusNotFound
	}
	fail := func(err error) (restartAnswer, int) {
		fmt.Fprintf(d.progress, "restart of %s failed: %v\n", node, err)
		return restartAnswer{NodeID: node, Error: err.Error()}, http.StatusInternalServerError
	}
	if p := d.current(m); p.running() {
		fmt.Fprintf(d.progress, "restarting %s: stopping pid %d first\n", node, p.cmd.Process.Pid)
		d.mu.Lock()
		p.restarting = true
		d.mu.Unlock()
		d.stop(p)
	}
	if err := d.start(m); err != nil {
		return fail(err)
	}
	deadline := time.NewTimer(devServingTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(devPoll)
	defer tick.Stop()
	if err := d.waitAddrFile(ctx, m, deadline.C, tick.C); err != nil {
		return fail(err)
	}
	pid := d.current(m).cmd.Process.Pid
	fmt.Fprintf(d.progress, "%s started again (pid %d), serving felix/1 on %s; waiting for it to join the cluster\n", node, pid, m.Addr)
	if err := d.waitJoined(ctx, m); err != nil {
		return fail(err)
	}
	fmt.Fprintf(d.progress, "%s joined the cluster again\n", node)
	return restartAnswer{NodeID: node, PID: pid, Addr: m.Addr, Admin: m.Admin}, http.StatusOK
}

// waitJoined waits until m's admin endpoint says it has joined. A member
// killed a moment ago still holds its lease, so the new process joins
// once that expired (cluster_lease_ttl_ms).
func (d *devCluster) waitJoined(ctx context.Context, m *devMember) error {
	token, err := auth.ReadToken(filepath.Join(d.o.dir, auth.AdminTokenFile))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, devFormTimeout)
	defer cancel()
	tick := time.NewTicker(devPoll)
	defer tick.Stop()
	p := d.current(m)
	for {
		var st cluster.Status
		a := adminOpts{addr: m.Admin, token: token, timeout: 2 * time.Second}
		err := a.call(ctx, http.MethodGet, "/debug/cluster", nil, &st)
		if err == nil && st.Ready {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s serves but has not joined the cluster after %s; its log %s ends:\n%s", m.NodeID, devFormTimeout, m.LogFile, logTail(m.LogFile, 5))
		case <-p.done:
			return d.startFailed(p)
		case <-tick.C:
		}
	}
}

// restart is felix dev cluster restart NODE: it asks the felix dev
// cluster running on --dir to start NODE again, and waits until it has.
func (o *devOpts) restart(ctx context.Context, node string) error {
	path := filepath.Join(o.dir, devControlSocket)
	if !fileExists(path) {
		return fmt.Errorf("no felix dev cluster is running on --dir %s (there is no %s): start one with felix dev cluster, "+
			"or give the --dir it runs on", o.dir, path)
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dialer net.Dialer
		return dialer.DialContext(ctx, "unix", path)
	}}}
	ctx, cancel := context.WithTimeout(ctx, devRestartTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://felix-dev/restart?node="+url.QueryEscape(node), nil)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "asking the felix dev cluster on %s to restart %s; waiting until it has joined the cluster (a member killed a moment ago joins once its old lease expired)\n", o.dir, node)
	resp, err := hc.Do(req)
	if err != nil {
		if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return unfinished(ctx, fmt.Sprintf("the restart of %s goes on in the felix dev cluster; its terminal says how it ends", node))
		}
		return fmt.Errorf("the felix dev cluster on %s does not answer on %s (did it die? then start it again): %w", o.dir, path, err)
	}
	defer resp.Body.Close()
	var ans restartAnswer
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&ans); err != nil {
		return fmt.Errorf("the felix dev cluster answered %s: %w", resp.Status, err)
	}
	if ans.Error != "" {
		return errors.New(ans.Error)
	}
	fmt.Printf("%s serving again (pid %d): felix/1 on %s, admin on %s\n", ans.NodeID, ans.PID, ans.Addr, ans.Admin)
	return nil
}

// devBinary is the felix binary the members run. One that go run built
// lives in the Go build cache, which go clean or the next build may
// remove, so it is copied into --dir/bin first: the printed commands then
// name a binary that stays. Any other binary runs as it is.
func devBinary(exe, dir string) (string, error) {
	if !strings.Contains(exe, string(filepath.Separator)+"go-build") {
		return exe, nil
	}
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o700); err != nil {
		return "", fmt.Errorf("make %s for the members' binary: %w", bin, err)
	}
	src, err := os.Open(exe)
	if err != nil {
		return "", fmt.Errorf("copy this felix binary for the members: %w", err)
	}
	defer src.Close()
	// Written aside and renamed: a member of an earlier run may still run
	// the old copy, whose file cannot be written over.
	tmp, err := os.CreateTemp(bin, ".felix-*")
	if err != nil {
		return "", fmt.Errorf("copy this felix binary for the members: %w", err)
	}
	defer os.Remove(tmp.Name()) // after the rename, there is nothing to remove
	_, err = io.Copy(tmp, src)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o755)
	}
	dst := filepath.Join(bin, "felix")
	if err == nil {
		err = os.Rename(tmp.Name(), dst)
	}
	if err != nil {
		return "", fmt.Errorf("copy this felix binary to %s for the members: %w", dst, err)
	}
	return dst, nil
}
