package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// felixPkg is built when --felix is not given. The module path, not
// ./cmd/felix, so the build works from any folder of the module (go test
// runs in bench/soak).
const felixPkg = "github.com/getfelix/felix-go/cmd/felix"

// Timing of the broker's start and stop.
const (
	startTimeout = 30 * time.Second
	// stopWait is how long SIGTERM gets before SIGKILL: the broker's own
	// stop timeout is 10 s.
	stopWait = 15 * time.Second
)

// buildFelix builds the broker into dir and returns the binary's path.
func buildFelix(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "felix")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, felixPkg)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", felixPkg, err, out)
	}
	return bin, nil
}

// brokerProc is the broker child process.
type brokerProc struct {
	cmd     *exec.Cmd
	pid     int
	dataDir string
	logPath string
	addr    string // QUIC, host:port
	admin   string // HTTP, host:port
	http    *http.Client

	exited  chan struct{} // closed when the process has been waited for
	waitErr error         // why it exited; read after exited closes
	killed  sync.Once
}

// startBroker runs `felix broker` on loopback with its data directory and
// log under dir, and waits for it to write its address.
func startBroker(ctx context.Context, felix, dir string, extra []string) (*brokerProc, error) {
	b := &brokerProc{
		dataDir: filepath.Join(dir, "data"),
		logPath: filepath.Join(dir, "broker.log"),
		exited:  make(chan struct{}),
		// No keep-alive: a scrape every few seconds is cheap to dial, and
		// the admin server closes idle connections after 10 s anyway.
		http: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}},
	}
	addrFile := filepath.Join(dir, "addr")
	logFile, err := os.Create(b.logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child holds its own descriptor
	args := append([]string{"broker", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0",
		"--data-dir", b.dataDir, "--addr-file", addrFile, "--log-format", "json"}, extra...)
	b.cmd = exec.Command(felix, args...)
	b.cmd.Stdout, b.cmd.Stderr = logFile, logFile
	// Pdeathsig: if this process dies without stopping the broker (a test
	// binary killed at its timeout), the kernel kills the broker too
	// instead of leaving it running.
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := b.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", felix, err)
	}
	b.pid = b.cmd.Process.Pid
	go func() {
		b.waitErr = b.cmd.Wait()
		close(b.exited)
	}()

	deadline := time.NewTimer(startTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for b.addr == "" || b.admin == "" {
		select {
		case <-b.exited:
			return nil, fmt.Errorf("the broker exited while starting (%v); its log:\n%s", b.waitErr, tail(b.logPath, 20))
		case <-deadline.C:
			b.kill()
			return nil, fmt.Errorf("the broker did not write its address within %s; its log:\n%s", startTimeout, tail(b.logPath, 20))
		case <-ctx.Done():
			b.kill()
			return nil, ctx.Err()
		case <-tick.C:
		}
		if data, err := os.ReadFile(addrFile); err == nil {
			b.addr = strings.TrimSpace(string(data))
		}
		if b.addr != "" {
			// The admin endpoint starts before the address file is written,
			// so its log line is out by now.
			b.admin = adminFromLog(b.logPath)
		}
	}
	return b, nil
}

var adminRE = regexp.MustCompile(`"admin":"([^"]+)"`)

// adminFromLog finds the admin endpoint's address in the broker's JSON log.
func adminFromLog(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if m := adminRE.FindSubmatch(data); m != nil {
		return string(m[1])
	}
	return ""
}

func (b *brokerProc) certFile() string  { return filepath.Join(b.dataDir, "cert.pem") }
func (b *brokerProc) tokenFile() string { return filepath.Join(b.dataDir, "admin.token") }

func (b *brokerProc) token() (string, error) {
	data, err := os.ReadFile(b.tokenFile())
	if err != nil {
		return "", fmt.Errorf("the broker's admin token: %w", err)
	}
	return strings.TrimSpace(string(data)), nil
}

// alive says whether the process is still running.
func (b *brokerProc) alive() bool {
	select {
	case <-b.exited:
		return false
	default:
		return true
	}
}

// stop sends SIGTERM, waits up to stopWait, then kills. It returns how the
// process ended.
func (b *brokerProc) stop() (exit string, clean bool) {
	if b.alive() {
		_ = b.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-b.exited:
		case <-time.After(stopWait):
			b.kill()
			<-b.exited
			return fmt.Sprintf("did not stop within %s of SIGTERM; killed", stopWait), false
		}
	} else {
		return "had already exited: " + exitString(b.waitErr), false
	}
	return exitString(b.waitErr), b.waitErr == nil
}

// kill ends the broker at once (the hard deadline, a failed start).
func (b *brokerProc) kill() {
	b.killed.Do(func() { _ = b.cmd.Process.Kill() })
}

func exitString(err error) string {
	if err == nil {
		return "exit 0"
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "killed by " + ws.Signal().String()
		}
		return fmt.Sprintf("exit %d", ee.ExitCode())
	}
	return err.Error()
}

// procStats are the broker process's memory and descriptors.
type procStats struct {
	RSS int64 // VmRSS, bytes
	HWM int64 // VmHWM: the peak RSS the kernel saw, bytes
	FDs int
}

// readProc reads /proc/PID/status and counts /proc/PID/fd.
func readProc(pid int) (procStats, error) {
	var s procStats
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		switch k {
		case "VmRSS":
			s.RSS = kib(v)
		case "VmHWM":
			s.HWM = kib(v)
		}
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return s, err
	}
	s.FDs = len(fds)
	return s, nil
}

// kib parses "  123456 kB" into bytes.
func kib(v string) int64 {
	n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
	return n << 10
}

// brokerMetrics are the /metrics values the soak follows.
type brokerMetrics struct {
	Subscriptions   float64            `json:"subscriptions"`        // felix_subscriptions
	ConnectionsOpen float64            `json:"connections_open"`     // felix_connections_open
	Delivered       float64            `json:"delivered_messages"`   // felix_delivered_messages_total
	Published       float64            `json:"published_messages"`   // felix_tenant_published_messages_total
	Dropped         float64            `json:"dropped_batches"`      // subscriber queue drops and drop_old evictions
	Lagged          float64            `json:"subscriptions_lagged"` // felix_subscriptions_lagged_total
	ConnEvents      map[string]float64 `json:"connection_events"`    // felix_connections_total by event
	QuotaRefused    map[string]float64 `json:"quota_refused"`        // felix_quota_refused_total by limit
	Restarts        float64            `json:"actor_restarts"`       // felix_actor_restarts_total
	// The Go runtime's view, to tell live heap from RSS the runtime has
	// not returned: go_memstats_heap_inuse_bytes and go_goroutines.
	HeapInuse  float64 `json:"heap_inuse_bytes"`
	Goroutines float64 `json:"goroutines"`
	// NextGC is go_memstats_next_gc_bytes: under GOGC=100 the heap goal
	// is twice what the last collection found live, so half of it is the
	// live heap as of LastGC (go_memstats_last_gc_time_seconds, Unix).
	NextGC float64 `json:"next_gc_bytes"`
	LastGC float64 `json:"last_gc_unix_s"`
}

const scrapeTimeout = 5 * time.Second

// scrape reads /metrics.
func (b *brokerProc) scrape(ctx context.Context) (brokerMetrics, error) {
	m := brokerMetrics{ConnEvents: map[string]float64{}, QuotaRefused: map[string]float64{}}
	ctx, cancel := context.WithTimeout(ctx, scrapeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+b.admin+"/metrics", nil)
	if err != nil {
		return m, err
	}
	// Ask for the text format, which is what the parser reads.
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	res, err := b.http.Do(req)
	if err != nil {
		return m, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return m, fmt.Errorf("/metrics: %s", res.Status)
	}
	// UTF-8 names are what client_golang may expose; the legacy scheme
	// would refuse a page the broker considers valid.
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(res.Body)
	if err != nil {
		return m, fmt.Errorf("parse /metrics: %w", err)
	}
	for name, mf := range fams {
		for _, s := range mf.GetMetric() {
			v := s.GetGauge().GetValue() + s.GetCounter().GetValue() + s.GetUntyped().GetValue()
			label := ""
			if len(s.GetLabel()) > 0 {
				label = s.GetLabel()[0].GetValue()
			}
			switch name {
			case "felix_subscriptions":
				m.Subscriptions += v
			case "felix_connections_open":
				m.ConnectionsOpen += v
			case "felix_delivered_messages_total":
				m.Delivered += v
			case "felix_tenant_published_messages_total":
				m.Published += v
			case "felix_sub_queue_dropped_total", "felix_sub_queue_drop_old_total":
				m.Dropped += v
			case "felix_subscriptions_lagged_total":
				m.Lagged += v
			case "felix_connections_total":
				m.ConnEvents[label] += v
			case "felix_quota_refused_total":
				m.QuotaRefused[label] += v
			case "felix_actor_restarts_total":
				m.Restarts += v
			case "go_memstats_heap_inuse_bytes":
				m.HeapInuse += v
			case "go_goroutines":
				m.Goroutines += v
			case "go_memstats_next_gc_bytes":
				m.NextGC += v
			case "go_memstats_last_gc_time_seconds":
				m.LastGC += v
			}
		}
	}
	return m, nil
}

// live asks /live, with a short timeout: a liveness probe's view.
func (b *brokerProc) live(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+b.admin+"/live", nil)
	if err != nil {
		return err
	}
	res, err := b.http.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, res.Body)
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("/live: %s", res.Status)
	}
	return nil
}

// logCount is one kind of broker log line and how often it appeared.
type logCount struct {
	Level   string `json:"level"`
	Message string `json:"message"`
	Count   int    `json:"count"`
}

// logSummary counts the broker log's lines by level, and its warn and
// error lines by message (the most frequent first, at most top).
func logSummary(path string, top int) (levels map[string]int, worst []logCount) {
	levels = map[string]int{}
	f, err := os.Open(path)
	if err != nil {
		return levels, nil
	}
	defer f.Close()
	counts := map[[2]string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var line struct {
			Level   string `json:"level"`
			Message string `json:"message"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil {
			levels["unparsed"]++
			continue
		}
		levels[line.Level]++
		if line.Level == "warn" || line.Level == "error" || line.Level == "fatal" || line.Level == "panic" {
			counts[[2]string{line.Level, line.Message}]++
		}
	}
	for k, n := range counts {
		worst = append(worst, logCount{Level: k[0], Message: k[1], Count: n})
	}
	sort.Slice(worst, func(i, j int) bool {
		if worst[i].Count != worst[j].Count {
			return worst[i].Count > worst[j].Count
		}
		return worst[i].Message < worst[j].Message
	})
	if len(worst) > top {
		worst = worst[:top]
	}
	return levels, worst
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	data, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
