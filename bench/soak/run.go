package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/getfelix/felix-go/client"
)

// Bounds of the shutdown: each step that waits has one.
const (
	stopLoadWait = 30 * time.Second // publishers, readers and hostile clients ending
	releaseWait  = 15 * time.Second // the broker's gauges back to zero after the clients closed
	// connsHeadroom is added to --conns for max_connections_per_ip: every
	// client of the run comes from 127.0.0.1, and the default (512) would
	// refuse half of a thousand connections. The hostile clients and slack
	// for connections still closing fit in it.
	connsHeadroom = 64
)

// run is one soak run: the broker, the load and the samples.
type run struct {
	cfg   config
	out   io.Writer // progress lines
	start time.Time

	mu      sync.Mutex
	broker  *brokerProc
	tmp     string
	phase   string
	l       *load
	h       *hostile
	peaks   peaks
	phases  []Phase
	lastErr string // the last sampling failure, printed once
}

type peaks struct {
	RSS, HWM     int64
	FDs          int
	HeapInuse    float64
	Goroutines   float64
	Conns, Subs  float64
	HostileConns int64
	Samples      int
	LiveFailures int
	LiveFailedAt []string
}

// sample is one look at the broker.
type sample struct {
	At      time.Duration
	Phase   string
	Proc    procStats
	ProcErr error
	M       brokerMetrics
	MErr    error
	LiveErr error
}

func newRun(cfg config, out io.Writer) *run {
	// The sampler and the driver both print progress.
	return &run{cfg: cfg, out: &lockedWriter{w: out}, phase: "starting"}
}

// lockedWriter serialises writes to w from several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// abort is the hard deadline: kill the broker, say so, exit.
func (r *run) abort(why string) {
	r.mu.Lock()
	b, phase := r.broker, r.phase
	r.mu.Unlock()
	if b != nil {
		b.kill()
	}
	fmt.Fprintf(r.out, "soak: %s reached during %s after %s; broker killed\n", why, phase, time.Since(r.start).Round(time.Second))
	os.Exit(3)
}

func (r *run) setPhase(p string) {
	r.mu.Lock()
	r.phase = p
	r.mu.Unlock()
}

func (r *run) run(ctx context.Context) (*Summary, error) {
	r.start = time.Now()
	cfg := r.cfg
	tmp, err := os.MkdirTemp("", "felix-soak-")
	if err != nil {
		return nil, err
	}
	r.tmp = tmp
	keep := false
	defer func() {
		if keep {
			_ = os.RemoveAll(filepath.Join(tmp, "data"))
			fmt.Fprintf(r.out, "soak: the run was not clean; broker log kept at %s\n", filepath.Join(tmp, "broker.log"))
			return
		}
		_ = os.RemoveAll(tmp)
	}()

	felix := cfg.Felix
	if felix == "" {
		r.setPhase("build")
		fmt.Fprintf(r.out, "soak: go build %s\n", felixPkg)
		if felix, err = buildFelix(ctx, tmp); err != nil {
			return nil, err
		}
	}
	brokerArgs := append([]string{"--max-connections-per-ip", strconv.Itoa(cfg.Conns + connsHeadroom)}, cfg.BrokerArgs...)
	b, err := startBroker(ctx, felix, tmp, brokerArgs)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.broker = b
	r.mu.Unlock()
	defer b.kill() // a no-op after a clean stop; covers every early return
	fmt.Fprintf(r.out, "soak: broker pid %d at %s, admin %s, data %s\n", b.pid, b.addr, b.admin, b.dataDir)

	samplerDone := make(chan struct{})
	stopSampler := make(chan struct{})
	go r.sampler(ctx, stopSampler, samplerDone)
	stopSampling := sync.OnceFunc(func() { close(stopSampler); <-samplerDone })
	defer stopSampling()

	sum, err := r.drive(ctx, b)
	if err != nil {
		return nil, err
	}
	stopSampling()
	r.finish(sum, b)
	keep = !sum.Clean
	return sum, nil
}

// drive runs the phases, from the first connection to the last close.
func (r *run) drive(ctx context.Context, b *brokerProc) (*Summary, error) {
	cfg := r.cfg
	time.Sleep(500 * time.Millisecond) // let the idle broker settle before its baseline
	r.snapshot(ctx, "idle")

	token, err := b.token()
	if err != nil {
		return nil, err
	}
	l := newLoad(cfg, b.addr, token, b.certFile())
	r.mu.Lock()
	r.l = l
	r.mu.Unlock()
	r.setPhase("streams")
	first, err := l.dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("the first connection: %w", err)
	}
	l.clients[0] = first
	if err := l.createStreams(ctx); err != nil {
		return nil, err
	}
	if cfg.Hostile {
		if err := fillHostileReadStream(ctx, first); err != nil {
			return nil, err
		}
	}
	r.snapshot(ctx, "streams")

	sum := &Summary{Config: cfg, Started: r.start.UTC(), ConnsTarget: cfg.Conns, SubsTarget: cfg.Subs}
	r.connectAll(ctx, l, sum)
	if err := r.runLoad(ctx, b, l, token, sum); err != nil {
		return nil, err
	}
	r.closeDown(b, l, sum)
	return sum, nil
}

// connectAll opens the well-behaved clients' connections and
// subscriptions, within --setup-timeout.
func (r *run) connectAll(ctx context.Context, l *load, sum *Summary) {
	cfg := r.cfg
	setupCtx, cancelSetup := context.WithTimeout(ctx, cfg.Setup)
	defer cancelSetup()
	r.setPhase("connect")
	t0 := time.Now()
	sum.ConnsReached = l.dialAll(setupCtx, 1)
	sum.ConnectSeconds = time.Since(t0).Seconds()
	r.snapshot(ctx, "connected")
	r.setPhase("subscribe")
	t0 = time.Now()
	sum.SubsReached = l.subscribeAll(setupCtx)
	sum.SubscribeSeconds = time.Since(t0).Seconds()
	if setupCtx.Err() != nil && ctx.Err() == nil {
		sum.Problems = append(sum.Problems, fmt.Sprintf("setup cut by --setup-timeout %s: %d of %d connections and %d of %d subscriptions",
			cfg.Setup, sum.ConnsReached, cfg.Conns, sum.SubsReached, cfg.Subs))
	}
	r.snapshot(ctx, "subscribed")
}

// runLoad runs the publishers, readers and hostile clients for --duration,
// then waits for them to stop.
func (r *run) runLoad(ctx context.Context, b *brokerProc, l *load, token string, sum *Summary) error {
	cfg := r.cfg
	// The load.
	r.setPhase("load")
	loadCtx, cancelLoad := context.WithTimeout(ctx, cfg.Duration)
	defer cancelLoad()
	var wg sync.WaitGroup
	for p := range cfg.Publishers {
		wg.Go(func() { l.publish(loadCtx, p) })
	}
	for i := range cfg.Readers {
		wg.Go(func() { l.read(loadCtx, i) })
	}
	if cfg.Hostile {
		h, err := newHostile(b.addr, b.certFile(), token)
		if err != nil {
			return err
		}
		r.mu.Lock()
		r.h = h
		r.mu.Unlock()
		wg.Go(func() { h.run(loadCtx) })
	}
	t0 := time.Now()
	<-loadCtx.Done()
	sum.LoadSeconds = time.Since(t0).Seconds()
	if ctx.Err() != nil {
		sum.Problems = append(sum.Problems, fmt.Sprintf("interrupted after %.0f s of load", sum.LoadSeconds))
	}
	r.setPhase("stopping")
	if !waitTimeout(&wg, stopLoadWait) {
		sum.Problems = append(sum.Problems, fmt.Sprintf("publishers, readers or hostile clients still running %s after the load ended", stopLoadWait))
	}
	// Snapshots from here on use a fresh context: the run's may be
	// cancelled (Ctrl-C), and the shutdown is still measured.
	end := r.snapshot(context.Background(), "load end")
	sum.FinalRSS, sum.FinalFDs = end.Proc.RSS, end.Proc.FDs
	return nil
}

// closeDown closes every client and records what the broker kept: after
// the close, and (with --settle) after the next garbage collection.
func (r *run) closeDown(b *brokerProc, l *load, sum *Summary) {
	r.setPhase("close")
	l.closeAll()
	released := r.awaitReleased(b)
	closed := r.snapshot(context.Background(), "closed")
	sum.ClosedRSS, sum.ClosedFDs = closed.Proc.RSS, closed.Proc.FDs
	sum.ClosedConns, sum.ClosedSubs = closed.M.ConnectionsOpen, closed.M.Subscriptions
	if !released {
		sum.Problems = append(sum.Problems, fmt.Sprintf("%s after every client closed the broker still counts %.0f connections and %.0f subscriptions",
			releaseWait, closed.M.ConnectionsOpen, closed.M.Subscriptions))
	}
	if r.cfg.Settle > 0 {
		// The runtime collects at least every 2 minutes: wait for one
		// collection after the close, so the live heap it finds says what
		// the broker kept of the run, garbage aside.
		r.setPhase("settle")
		closedAt := float64(time.Now().UnixNano()) / 1e9
		for deadline := time.Now().Add(r.cfg.Settle); time.Now().Before(deadline); time.Sleep(time.Second) {
			if m, err := b.scrape(context.Background()); err == nil && m.LastGC > closedAt {
				break
			}
		}
		r.snapshot(context.Background(), "settled")
	}
	if err := b.live(context.Background()); err != nil {
		sum.LiveError = err.Error()
	} else {
		sum.LiveAtEnd = true
	}
	sum.BrokerMetrics = closed.M
}

// fillHostileReadStream makes the durable stream the unread-answers attack
// reads and puts 1 MiB in it, so one page answers 1 MiB.
func fillHostileReadStream(ctx context.Context, c *client.Client) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	st := client.Stream{Name: hostileReadStream}
	if _, err := c.CreateStream(ctx, st, client.StreamConfig{Durable: true}); err != nil {
		return fmt.Errorf("create %s: %w", hostileReadStream, err)
	}
	payloads := make([][]byte, 16)
	for i := range payloads {
		payloads[i] = bytes.Repeat([]byte{byte(i)}, 64<<10)
	}
	if err := c.PublishBatch(ctx, st, payloads, client.PublishOptions{}); err != nil {
		return fmt.Errorf("fill %s: %w", hostileReadStream, err)
	}
	return nil
}

// awaitReleased waits until the broker counts no connection and no
// subscription (the hostile ones are closed too), or releaseWait.
func (r *run) awaitReleased(b *brokerProc) bool {
	deadline := time.Now().Add(releaseWait)
	for time.Now().Before(deadline) {
		m, err := b.scrape(context.Background())
		if err == nil && m.ConnectionsOpen == 0 && m.Subscriptions == 0 {
			return true
		}
		time.Sleep(250 * time.Millisecond)
	}
	return false
}

func waitTimeout(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// sampler samples every cfg.Sample until stop.
func (r *run) sampler(ctx context.Context, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	tick := time.NewTicker(r.cfg.Sample)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
			r.mu.Lock()
			phase := r.phase
			r.mu.Unlock()
			r.take(context.WithoutCancel(ctx), phase)
		}
	}
}

// snapshot takes a sample and records it as the named phase's.
func (r *run) snapshot(ctx context.Context, phase string) sample {
	s := r.take(ctx, phase)
	p := Phase{Name: phase, AtSeconds: s.At.Seconds(), RSS: s.Proc.RSS, FDs: s.Proc.FDs,
		Conns: s.M.ConnectionsOpen, Subs: s.M.Subscriptions, HeapInuse: int64(s.M.HeapInuse), Goroutines: int(s.M.Goroutines),
		LiveAtGC: int64(s.M.NextGC / 2)}
	r.mu.Lock()
	r.phases = append(r.phases, p)
	r.mu.Unlock()
	return s
}

// take samples the broker, keeps the peaks and prints a progress line.
func (r *run) take(ctx context.Context, phase string) sample {
	r.mu.Lock()
	b, l, h := r.broker, r.l, r.h
	r.mu.Unlock()
	s := sample{At: time.Since(r.start), Phase: phase}
	s.Proc, s.ProcErr = readProc(b.pid)
	s.M, s.MErr = b.scrape(ctx)
	s.LiveErr = b.live(ctx)
	var hostileConns int64
	if h != nil {
		hostileConns = h.conns.Load()
	}

	r.mu.Lock()
	pk := &r.peaks
	pk.Samples++
	if s.ProcErr == nil {
		pk.RSS, pk.HWM, pk.FDs = max(pk.RSS, s.Proc.RSS), max(pk.HWM, s.Proc.HWM), max(pk.FDs, s.Proc.FDs)
	}
	if s.MErr == nil {
		pk.Conns, pk.Subs = max(pk.Conns, s.M.ConnectionsOpen), max(pk.Subs, s.M.Subscriptions)
		pk.HeapInuse, pk.Goroutines = max(pk.HeapInuse, s.M.HeapInuse), max(pk.Goroutines, s.M.Goroutines)
	}
	pk.HostileConns = max(pk.HostileConns, hostileConns)
	if s.LiveErr != nil {
		pk.LiveFailures++
		if len(pk.LiveFailedAt) < 10 {
			pk.LiveFailedAt = append(pk.LiveFailedAt, fmt.Sprintf("%.0fs (%s): %v", s.At.Seconds(), phase, s.LiveErr))
		}
	}
	var problems []string
	for _, e := range []error{s.ProcErr, s.MErr} {
		if e != nil && e.Error() != r.lastErr {
			problems = append(problems, e.Error())
			r.lastErr = e.Error()
		}
	}
	r.mu.Unlock()

	var line strings.Builder
	fmt.Fprintf(&line, "soak %5.0fs %-10s rss %7.1f MiB  heap %7.1f MiB  gor %6.0f  fds %5d  conns %5.0f  subs %6.0f", s.At.Seconds(), phase,
		mib(s.Proc.RSS), s.M.HeapInuse/(1<<20), s.M.Goroutines, s.Proc.FDs, s.M.ConnectionsOpen, s.M.Subscriptions)
	if l != nil {
		fmt.Fprintf(&line, "  pub %9d  deliv %11d  missed %d  errs %d", l.published.Load(), l.delivered.Load(), l.missed.Load(), l.errs.total.Load())
	}
	if h != nil {
		fmt.Fprintf(&line, "  hostile %d", hostileConns)
	}
	live := "ok"
	if s.LiveErr != nil {
		live = "FAILED"
	}
	if !b.alive() {
		live = "BROKER EXITED"
	}
	fmt.Fprintf(&line, "  live %s\n", live)
	_, _ = io.WriteString(r.out, line.String())
	for _, p := range problems {
		fmt.Fprintf(r.out, "soak: sampling: %s\n", p)
	}
	return s
}

// finish stops the broker and fills in the rest of the summary.
func (r *run) finish(sum *Summary, b *brokerProc) {
	cfg := r.cfg
	// VmHWM is read before the broker stops: it is the kernel's peak.
	if p, err := readProc(b.pid); err == nil {
		r.mu.Lock()
		r.peaks.HWM = max(r.peaks.HWM, p.HWM)
		r.mu.Unlock()
	}
	died := !b.alive()
	sum.BrokerExit, sum.BrokerStoppedCleanly = b.stop()
	if died {
		sum.BrokerDied = true
		sum.Problems = append(sum.Problems, "the broker exited during the run: "+sum.BrokerExit)
	}
	sum.LogLevels, sum.LogWorst = logSummary(b.logPath, 8)

	r.mu.Lock()
	pk := r.peaks
	sum.Phases = r.phases
	l, h := r.l, r.h
	r.mu.Unlock()
	sum.PeakRSS, sum.PeakHWM, sum.PeakFDs = pk.RSS, pk.HWM, pk.FDs
	sum.PeakConns, sum.PeakSubs, sum.PeakHostileConns = pk.Conns, pk.Subs, pk.HostileConns
	sum.PeakHeapInuse, sum.PeakGoroutines = int64(pk.HeapInuse), int(pk.Goroutines)
	sum.Samples, sum.LiveFailures, sum.LiveFailedAt = pk.Samples, pk.LiveFailures, pk.LiveFailedAt
	sum.Machine = fmt.Sprintf("%d CPUs (GOMAXPROCS %d), %s/%s, %s", runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH, runtime.Version())
	sum.Command = strings.Join(os.Args, " ")

	phase := func(name string) (Phase, bool) {
		for _, p := range sum.Phases {
			if p.Name == name {
				return p, true
			}
		}
		return Phase{}, false
	}
	if s, ok1 := phase("streams"); ok1 {
		if c, ok2 := phase("connected"); ok2 && sum.ConnsReached > 1 {
			sum.PerConnKiB = float64(c.RSS-s.RSS) / 1024 / float64(sum.ConnsReached-1)
			if sub, ok3 := phase("subscribed"); ok3 && sum.SubsReached > 0 {
				sum.PerSubKiB = float64(sub.RSS-c.RSS) / 1024 / float64(sum.SubsReached)
			}
		}
	}

	sum.Published, sum.Delivered = l.published.Load(), l.delivered.Load()
	if sum.LoadSeconds > 0 {
		sum.PublishedPerSec = float64(sum.Published) / sum.LoadSeconds
		sum.DeliveredPerSec = float64(sum.Delivered) / sum.LoadSeconds
	}
	sum.Missed, sum.Reordered, sum.Lagged = l.missed.Load(), l.reordered.Load(), l.lagged.Load()
	sum.Reads, sum.RecordsRead = l.reads.Load(), l.records.Load()
	sum.Errors, sum.ErrorKinds = l.errs.total.Load(), l.errs.counts()
	if h != nil {
		sum.Hostile = h.report()
	}

	if sum.ConnsReached < cfg.Conns {
		sum.Problems = append(sum.Problems, fmt.Sprintf("%d of %d connections reached", sum.ConnsReached, cfg.Conns))
	}
	if sum.SubsReached < cfg.Subs {
		sum.Problems = append(sum.Problems, fmt.Sprintf("%d of %d subscriptions reached", sum.SubsReached, cfg.Subs))
	}
	if sum.Errors > 0 {
		sum.Problems = append(sum.Problems, fmt.Sprintf("%d errors at well-behaved clients", sum.Errors))
	}
	if sum.Missed > 0 || sum.Reordered > 0 {
		sum.Problems = append(sum.Problems, fmt.Sprintf("subscriptions missed %d messages and saw %d out of order (the broker counted %.0f dropped batches)",
			sum.Missed, sum.Reordered, sum.BrokerMetrics.Dropped))
	}
	if pk.LiveFailures > 0 {
		sum.Problems = append(sum.Problems, fmt.Sprintf("/live failed %d of %d samples", pk.LiveFailures, pk.Samples))
	}
	if !sum.LiveAtEnd {
		sum.Problems = append(sum.Problems, "/live did not answer at the end: "+sum.LiveError)
	}
	if !died && !sum.BrokerStoppedCleanly {
		sum.Problems = append(sum.Problems, "the broker did not stop cleanly: "+sum.BrokerExit)
	}
	sum.Clean = len(sum.Problems) == 0
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
