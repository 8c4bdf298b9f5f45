package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/spf13/pflag"

	"github.com/getfelix/felix-go/broker"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/config"
	"github.com/getfelix/felix-go/internal/quicconf"
	"github.com/getfelix/felix-go/wire"
)

// felix bench: a load generator and meter. Publishers and subscribers run
// in this process, so one monotonic clock times each message from the
// publish call to its delivery: the first 8 bytes of every payload carry
// the send time (nanoseconds since the run began; the top bit marks a
// warmup message).

const (
	// warmBit marks a warmup message's timestamp: counted for accounting,
	// left out of rates and latencies.
	warmBit = uint64(1) << 63
	// tsBytes is the timestamp's size: the smallest payload bench accepts.
	tsBytes = 8
	// finestPace is the shortest interval one publishing loop can keep:
	// a rate needing a batch more often than this from every loop is refused.
	finestPace = time.Microsecond
	// settleAfter ends the wait for deliveries once nothing arrived for this
	// long after publishing ended (a lossy run never reaches its total).
	settleAfter = 2 * time.Second
	// benchCloseTimeout bounds each client's and the broker's goodbye at the
	// end of a run, so a wedged peer cannot stretch the run past its report.
	benchCloseTimeout = 3 * time.Second
	// Latencies are recorded in nanoseconds, up to a minute, 3 significant digits.
	histMax = int64(time.Minute)
	// Floors for the default --timeout of a --count run without --rate: the
	// slowest delivery rate a run may have and still finish.
	slowestDeliveries = 25_000.0
	timeoutSlack      = 30 * time.Second
)

// The broker's drop counters summed into "dropped". Each counts batches (a
// refused publish batch, an evicted one, a refused coalesced delivery), not
// messages.
var dropCounters = []string{
	"felix_sub_queue_dropped_total",
	"felix_sub_queue_drop_old_total",
	"felix_lane_queue_dropped_total",
}

type benchProfile struct {
	name     string
	batch    int
	inflight int
	rate     float64
	warmup   int
	ack      wire.AckMode
	// the run's size when neither --count nor --duration is given
	count    int
	duration time.Duration
}

var benchProfiles = map[string]benchProfile{
	"latency":    {name: "latency", batch: 1, inflight: 1, rate: 1000, warmup: 500, ack: wire.AckPerMessage, duration: 10 * time.Second},
	"throughput": {name: "throughput", batch: 64, inflight: 4, rate: 0, warmup: 10_000, ack: wire.AckPerBatch, count: 1_000_000},
}

type benchOpts struct {
	profile    string
	payload    bytesValue
	fanout     int
	publishers int
	inflight   int
	subConns   int
	batch      int
	count      int
	duration   time.Duration
	warmup     int
	rate       float64
	timeout    time.Duration

	brokerAddr     string
	caFile         string
	insecure       bool
	admin          string
	policy         string
	stream         string
	connectTimeout time.Duration
	durable        bool
	fsync          string

	json  bool
	quiet bool

	flags *pflag.FlagSet
	prof  benchProfile
}

func newBenchCmd() *command {
	o := &benchOpts{payload: 128}
	fs := newFlagSet("bench")
	o.flags = fs
	fs.StringVar(&o.profile, "profile", "throughput", "latency (one event per batch, an ack per message, paced) or throughput (batches of 64, an ack per batch, pipelined)")
	fs.Var(&o.payload, "payload", "payload size, bytes or a size like 1KiB; at least 8 (the send timestamp)")
	fs.IntVar(&o.fanout, "fanout", 1, "subscribers on the stream; 0 measures the publishers alone (throughput profile)")
	fs.IntVar(&o.publishers, "publishers", 1, "publishing connections")
	fs.IntVar(&o.inflight, "inflight", 0, "publish loops per publishing connection, each with one publish awaiting its ack (0: the profile's, latency 1, throughput 4)")
	fs.IntVar(&o.subConns, "sub-conns", 0, "connections the subscribers share, round robin (0: one per subscriber)")
	fs.IntVar(&o.batch, "batch", 0, "messages per publish batch, throughput profile (0: 64)")
	fs.IntVar(&o.count, "count", 0, "messages to publish after the warmup (default: throughput 1000000; latency runs --duration 10s)")
	fs.DurationVar(&o.duration, "duration", 0, "publish for this long after the warmup, instead of --count")
	fs.IntVar(&o.warmup, "warmup", -1, "messages published and delivered before measuring, left out of rates and latencies (-1: latency 500, throughput 10000)")
	fs.Float64Var(&o.rate, "rate", -1, "pace all publishers together to this many msg/s; 0 publishes as fast as acks allow (-1: latency 1000, throughput 0)")
	fs.DurationVar(&o.timeout, "timeout", 0, "overall deadline; the run reports what it got when it hits (0: --duration + 30s, or an estimate from --count)")
	fs.StringVar(&o.brokerAddr, "broker", "", "measure the running broker at host:port instead of one embedded in this process")
	fs.StringVar(&o.caFile, "ca", "", "with --broker: trust the broker certificate(s) in this PEM file")
	fs.BoolVar(&o.insecure, "insecure", false, "with --broker: do not verify the broker's certificate")
	fs.StringVar(&o.admin, "admin", "", "with --broker: the broker's admin address (host:port), scraped for its drop counters; without it drops are unknown")
	fs.StringVar(&o.policy, "policy", "block", "embedded broker's subscriber queue policy: block (lossless), drop_new or drop_old")
	fs.StringVar(&o.stream, "stream", "", "stream to use (default: a fresh bench-XXXXXXXX name)")
	fs.DurationVar(&o.connectTimeout, "connect-timeout", 10*time.Second, "give up connecting after this long")
	fs.BoolVar(&o.durable, "durable", false, "publish to a durable stream (created for the run); acks come after the log write, or the fsync under --fsync on_commit")
	fs.StringVar(&o.fsync, "fsync", "periodic", "with --durable and the embedded broker: none, periodic or on_commit")
	fs.BoolVar(&o.json, "json", false, "print one JSON object with the parameters and results on stdout (the table goes to stderr)")
	fs.BoolVarP(&o.quiet, "quiet", "q", false, "print no progress or table on stderr (errors still print)")
	c := &command{
		name:  "bench",
		short: "load-test a broker and measure rates, latency and losses",
		long: `Publishes to a stream and subscribes to it in this process, then reports
what was published, delivered and dropped, the delivered rate (measured up to
the last arrival, warmup excluded), and end-to-end latency from the publish
call to the delivery (p50, p90, p99, p99.9, from an HDR histogram): the first
8 bytes of each payload carry the send time on this process's monotonic
clock. Acked runs also report the publish ack latency.

Profiles:
  latency     one event per batch, an ack per message, one publish in flight
              per loop, paced (default 1000 msg/s), default --duration 10s
  throughput  batches of 64, an ack per batch, 4 batches in flight per
              publishing connection, unpaced, default --count 1000000

By default bench starts a broker in this process (a free 127.0.0.1 port, a
temporary data dir, subscriber queues under --policy, block by default, so a
run is lossless). With --broker it measures a running broker; give --admin to
read its drop counters.

Accounting covers the whole run, warmup included: unaccounted = published x
fanout - delivered - dropped must be 0. The broker's drop counters count
batches, not messages, so a lossy run with batches over one message cannot
balance: bench says so. A run with unaccounted messages, or one cut by
--timeout or SIGINT, prints its report and exits 1.

Examples:
  felix bench --profile latency --fanout 10
  felix bench --profile throughput --payload 1KiB --count 200000 --json
  felix bench --broker 127.0.0.1:5000 --ca felix-data/cert.pem --admin 127.0.0.1:5080`,
		flags: fs,
	}
	c.run = o.run
	return c
}

// check reports flag mistakes before anything starts, and fills in the
// profile's defaults.
func (o *benchOpts) check(args []string) error {
	changed := o.flags.Changed
	if len(args) > 0 {
		return usagef("bench takes no arguments, got %q", args)
	}
	switch o.fsync {
	case "none", "periodic", "on_commit":
	default:
		return usagef("--fsync must be none, periodic or on_commit, got %q", o.fsync)
	}
	if changed("fsync") && (!o.durable || o.brokerAddr != "") {
		return usagef("--fsync applies to --durable with the embedded broker (a running broker uses its own durable_fsync)")
	}
	prof, ok := benchProfiles[o.profile]
	if !ok {
		return usagef("--profile: want latency or throughput, got %q", o.profile)
	}
	o.prof = prof
	if !changed("batch") {
		o.batch = prof.batch
	}
	if !changed("inflight") {
		o.inflight = prof.inflight
	}
	if !changed("rate") {
		o.rate = prof.rate
	}
	if !changed("warmup") {
		o.warmup = prof.warmup
	}
	if !changed("count") && !changed("duration") {
		o.count, o.duration = prof.count, prof.duration
	}
	if !changed("sub-conns") || o.subConns == 0 {
		o.subConns = o.fanout
	}
	loops := o.publishers * o.inflight
	switch {
	case o.payload < tsBytes:
		return usagef("--payload must be at least %d bytes (the first %d carry the send timestamp), got %d", tsBytes, tsBytes, o.payload)
	case o.payload > maxLineBytes:
		return usagef("--payload %d is larger than the 16 MiB frame cap", o.payload)
	case o.fanout < 0:
		return usagef("--fanout must not be negative, got %d", o.fanout)
	case o.fanout == 0 && o.profile == "latency":
		return usagef("--fanout 0 with the latency profile: nothing would be delivered to time; give --fanout 1 or more")
	case o.fanout == 0 && changed("sub-conns") && o.subConns > 0:
		return usagef("--sub-conns %d with --fanout 0: there are no subscribers to connect", o.subConns)
	case o.fanout > 1000:
		return usagef("--fanout %d: at most 1000 subscribers in one process", o.fanout)
	case o.subConns < 0:
		return usagef("--sub-conns must not be negative, got %d", o.subConns)
	case o.subConns > o.fanout:
		return usagef("--sub-conns %d is more connections than --fanout %d subscribers", o.subConns, o.fanout)
	case o.publishers < 1 || o.publishers > 1000:
		return usagef("--publishers must be 1 to 1000, got %d", o.publishers)
	case o.inflight < 1 || o.inflight > 1024:
		return usagef("--inflight must be 1 to 1024, got %d", o.inflight)
	case o.batch < 1:
		return usagef("--batch must be at least 1, got %d", o.batch)
	case o.profile == "latency" && o.batch != 1:
		return usagef("--batch %d with the latency profile, which publishes one event per batch", o.batch)
	case int64(o.payload)*int64(o.batch) > maxLineBytes-(1<<10):
		return usagef("--payload %d x --batch %d does not fit in one 16 MiB frame", o.payload, o.batch)
	case o.count < 0:
		return usagef("--count must not be negative, got %d", o.count)
	case o.duration < 0:
		return usagef("--duration must not be negative, got %s", o.duration)
	case o.count == 0 && o.duration == 0:
		return usagef("--count and --duration are both zero: give one, so the run has an end")
	case o.count > 0 && o.duration > 0:
		return usagef("give --count or --duration, not both")
	case o.warmup < 0:
		return usagef("--warmup must not be negative, got %d", o.warmup)
	case math.IsNaN(o.rate) || math.IsInf(o.rate, 0) || o.rate < 0:
		return usagef("--rate must be a finite number of msg/s, 0 or more, got %v", o.rate)
	case o.rate > 0 && o.paceInterval() < finestPace:
		return usagef("--rate %.0f msg/s cannot be paced: each of the %d publishing loops would send a batch of %d every %s, "+
			"finer than %s; at most %.0f msg/s here (raise --batch, --publishers or --inflight, or give --rate 0 for unpaced)",
			o.rate, loops, o.batch, o.paceInterval(), finestPace, float64(o.batch*loops)/finestPace.Seconds())
	case o.timeout < 0:
		return usagef("--timeout must not be negative, got %s", o.timeout)
	case o.timeout > 0 && o.duration > 0 && o.timeout <= o.duration:
		return usagef("--timeout %s leaves no time past --duration %s to deliver and report", o.timeout, o.duration)
	case o.connectTimeout <= 0:
		return usagef("--connect-timeout must be positive, got %s", o.connectTimeout)
	}
	if o.stream != "" {
		if err := wire.ValidateName("stream", o.stream); err != nil {
			return usagef("--stream: %s", err.(*wire.Error).Message)
		}
	}
	if o.brokerAddr == "" {
		for _, f := range []string{"ca", "insecure", "admin"} {
			if changed(f) {
				return usagef("--%s applies to --broker only (the embedded broker needs none)", f)
			}
		}
		switch o.policy {
		case "block", "drop_new", "drop_old":
		default:
			return usagef("--policy: want block, drop_new or drop_old, got %q", o.policy)
		}
	} else {
		if _, _, err := net.SplitHostPort(o.brokerAddr); err != nil {
			return usagef("--broker: want host:port, got %q", o.brokerAddr)
		}
		if changed("policy") {
			return usagef("--policy sets the embedded broker's queues; a running broker (--broker) uses its own subscriber_queue_policy")
		}
		if o.caFile != "" && o.insecure {
			return usagef("--ca and --insecure contradict each other: give one")
		}
		if o.admin != "" {
			if _, _, err := net.SplitHostPort(o.admin); err != nil {
				return usagef("--admin: want host:port, got %q", o.admin)
			}
		}
	}
	if o.timeout == 0 {
		o.timeout = o.defaultTimeout()
	}
	return nil
}

// paceInterval is how often each publishing loop sends a batch under --rate.
func (o *benchOpts) paceInterval() time.Duration {
	return time.Duration(float64(o.batch*o.publishers*o.inflight) / o.rate * float64(time.Second))
}

// defaultTimeout is --duration (or the time --count takes at --rate, or at
// a slow floor of deliveries per second), plus the warmup's and 30 s.
func (o *benchOpts) defaultTimeout() time.Duration {
	perMsg := func(n int) time.Duration {
		deliveries := float64(n) * float64(max(o.fanout, 1))
		t := deliveries / slowestDeliveries
		if o.rate > 0 {
			t = max(t, 1.5*float64(n)/o.rate)
		}
		return time.Duration(t * float64(time.Second))
	}
	d := o.duration
	if o.count > 0 {
		d = perMsg(o.count)
	}
	return d + perMsg(o.warmup) + timeoutSlack
}

// target is the broker under test: embedded, or reached at an address.
type target struct {
	addr  string
	opts  client.Options
	drops func(context.Context) (int64, error) // nil: unknown
	stop  func()
}

func (o *benchOpts) startTarget() (*target, error) {
	if o.brokerAddr != "" {
		t := &target{addr: o.brokerAddr, opts: client.Options{CAFile: o.caFile, Insecure: o.insecure}, stop: func() {}}
		if o.admin != "" {
			t.drops = func(ctx context.Context) (int64, error) { return scrapeDrops(ctx, o.admin) }
		}
		return t, nil
	}
	dir, err := os.MkdirTemp("", "felix-bench-")
	if err != nil {
		return nil, err
	}
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.Admin = ""
	cfg.DataDir = dir
	cfg.SubscriberQueuePolicy = o.policy
	cfg.DurableFsync = o.fsync
	if o.policy == "block" {
		cfg.SubscriberLaneQueuePolicy = "block" // lossless end to end, as the reference harness runs
	}
	b, err := broker.New(cfg)
	if err == nil {
		err = b.Start()
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start the embedded broker: %w", err)
	}
	return &target{
		addr: b.Addr().String(),
		opts: client.Options{CAFile: filepath.Join(dir, quicconf.CertFile)},
		drops: func(context.Context) (int64, error) {
			mfs, err := b.Metrics().Registry.Gather()
			if err != nil {
				return 0, err
			}
			var sum float64
			for _, mf := range mfs {
				for _, name := range dropCounters {
					if mf.GetName() == name {
						for _, m := range mf.GetMetric() {
							sum += m.GetCounter().GetValue()
						}
					}
				}
			}
			return int64(sum), nil
		},
		stop: func() {
			ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
			defer cancel()
			_ = b.Stop(ctx)
			os.RemoveAll(dir)
		},
	}, nil
}

// scrapeDrops sums the drop counters on a broker's /metrics page.
func scrapeDrops(ctx context.Context, admin string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+admin+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("scrape %s/metrics: %w", admin, err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("scrape %s/metrics: %s", admin, res.Status)
	}
	return sumCounters(res.Body, dropCounters)
}

// sumCounters adds up the samples of the named metrics in Prometheus text
// format, over all their label sets.
func sumCounters(r io.Reader, names []string) (int64, error) {
	var sum float64
	found := 0
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest, _ := strings.Cut(line, " ")
		if i := strings.IndexByte(line, '{'); i >= 0 && i < len(name) {
			name = line[:i]
			j := strings.LastIndexByte(line, '}')
			if j < 0 {
				continue
			}
			rest = line[j+1:]
		}
		for _, n := range names {
			if name == n {
				fields := strings.Fields(rest)
				if len(fields) == 0 {
					return 0, fmt.Errorf("metrics line %q has no value", line)
				}
				v, err := strconv.ParseFloat(fields[0], 64)
				if err != nil {
					return 0, fmt.Errorf("metrics line %q: %w", line, err)
				}
				sum += v
				found++
			}
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	if found == 0 {
		return 0, fmt.Errorf("no %s on the metrics page: is it a felix broker's admin address?", strings.Join(names, ", "))
	}
	return int64(sum), nil
}

// benchSub is one subscription and the goroutine reading it.
type benchSub struct {
	sub  *client.Subscription
	hist *hdrhistogram.Histogram // measured latencies (ns); read after the reader exits

	warm, measured atomic.Int64
	last           atomic.Int64 // ns since base of the latest measured arrival
	foreign        atomic.Int64 // payloads too short to be bench's
	err            error
}

// benchLoop is one publishing loop: one publish awaiting its ack at a time.
type benchLoop struct {
	hist *hdrhistogram.Histogram // ack latencies (ns) of measured publishes
}

type benchRun struct {
	o      *benchOpts
	t      *target
	base   time.Time
	stream client.Stream

	pubs     []*client.Client
	subConns []*client.Client
	subs     []*benchSub
	// subsView is subs for the progress goroutine, republished on each append.
	subsView atomic.Pointer[[]*benchSub]
	loops    []*benchLoop
	subWG    sync.WaitGroup
	stopSubs chan struct{}

	phase                       atomic.Value // string, for the progress line
	published, measuredPub      atomic.Int64
	warmPublished               atomic.Int64
	refused, inDoubt            atomic.Int64
	t0, pubEnd                  time.Duration // since base
	drops0                      int64
	dropsKnown                  bool
	dropsErr                    error
	timedOut, interrupted, lost bool
}

func (o *benchOpts) run(parent context.Context, args []string) error {
	if err := o.check(args); err != nil {
		return err
	}
	errDeadline := fmt.Errorf("the run hit its --timeout of %s", o.timeout)
	ctx, cancel := context.WithTimeoutCause(parent, o.timeout, errDeadline)
	defer cancel()

	t, err := o.startTarget()
	if err != nil {
		return err
	}
	defer t.stop()

	r := &benchRun{o: o, t: t, base: time.Now(), stopSubs: make(chan struct{})}
	r.phase.Store("connecting")
	name := o.stream
	if name == "" {
		var b [4]byte
		_, _ = rand.Read(b[:])
		name = "bench-" + hex.EncodeToString(b[:])
	}
	r.stream = client.Stream{Name: name}
	stopProgress := r.progress()
	runErr := r.execute(ctx)
	stopProgress()
	r.close()
	if runErr != nil && ctx.Err() == nil && r.published.Load() == 0 {
		return runErr // failed while setting up: there is nothing to report
	}
	r.timedOut = errors.Is(context.Cause(ctx), errDeadline)
	r.interrupted = parent.Err() != nil

	res := r.result()
	if !o.quiet || !o.json {
		w := io.Writer(os.Stdout)
		if o.json {
			w = os.Stderr
		}
		res.printTable(w)
	}
	if o.json {
		out, err := json.Marshal(res)
		if err != nil {
			return err
		}
		if _, err := fmt.Printf("%s\n", out); err != nil {
			return err
		}
	}
	return res.verdict(runErr)
}

// execute connects, subscribes, warms up, measures and waits for the
// deliveries. It returns early, with what it has, when ctx ends.
func (r *benchRun) execute(ctx context.Context) error {
	o := r.o
	dial := func() (*client.Client, error) {
		dctx, cancel := context.WithTimeout(ctx, o.connectTimeout)
		defer cancel()
		c, err := client.Dial(dctx, r.t.addr, r.t.opts)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			co := connOpts{broker: r.t.addr, caFile: o.caFile, insecure: o.insecure}
			return nil, co.explainDialError(err)
		}
		return c, nil
	}
	for range o.subConns {
		c, err := dial()
		if err != nil {
			return err
		}
		r.subConns = append(r.subConns, c)
	}
	if o.durable {
		creator := r.subConns
		if len(creator) == 0 {
			c, err := dial()
			if err != nil {
				return err
			}
			r.subConns = append(r.subConns, c)
			creator = r.subConns
		}
		if _, err := creator[0].CreateStream(ctx, r.stream, client.StreamConfig{Durable: true}); err != nil {
			return fmt.Errorf("create durable stream %s: %w", r.stream.Name, err)
		}
	}
	for i := range o.fanout {
		sub, err := r.subConns[i%len(r.subConns)].Subscribe(ctx, r.stream, client.SubscribeOptions{})
		if err != nil {
			return fmt.Errorf("subscribe %d to %s: %w", i, r.stream.Name, err)
		}
		bs := &benchSub{sub: sub, hist: hdrhistogram.New(1, histMax, 3)}
		r.subs = append(r.subs, bs)
		view := r.subs
		r.subsView.Store(&view)
		r.subWG.Add(1)
		go r.read(bs)
	}
	for range o.publishers {
		c, err := dial()
		if err != nil {
			return err
		}
		r.pubs = append(r.pubs, c)
	}
	for range o.publishers * o.inflight {
		r.loops = append(r.loops, &benchLoop{hist: hdrhistogram.New(1, histMax, 3)})
	}
	if r.t.drops != nil {
		n, err := r.t.drops(ctx)
		if err != nil {
			r.dropsErr = err
		} else {
			r.drops0, r.dropsKnown = n, true
		}
	}

	if o.warmup > 0 {
		r.phase.Store("warmup")
		if err := r.publishPhase(ctx, int64(o.warmup), 0, true); err != nil {
			return err
		}
		r.waitDeliveries(ctx, r.warmPublished.Load(), func() int64 {
			var n int64
			for _, s := range r.subs {
				n += s.warm.Load()
			}
			return n
		})
		if ctx.Err() != nil {
			return nil
		}
	}

	r.phase.Store("measuring")
	r.t0 = time.Since(r.base)
	err := r.publishPhase(ctx, int64(o.count), o.duration, false)
	r.pubEnd = time.Since(r.base)
	if err != nil {
		return err
	}
	r.phase.Store("draining")
	r.waitDeliveries(ctx, r.published.Load(), r.deliveredTotal)
	return nil
}

// read counts and times one subscription's deliveries until stopSubs.
func (r *benchRun) read(s *benchSub) {
	defer r.subWG.Done()
	events := s.sub.Events()
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				s.err = s.sub.Err()
				return
			}
			now := int64(time.Since(r.base))
			if len(ev.Payload) < tsBytes {
				s.foreign.Add(1)
				continue
			}
			ts := binary.LittleEndian.Uint64(ev.Payload)
			if ts&warmBit != 0 {
				s.warm.Add(1)
				continue
			}
			_ = s.hist.RecordValue(min(max(now-int64(ts), 1), histMax))
			s.last.Store(now)
			s.measured.Add(1)
		case <-r.stopSubs:
			return
		}
	}
}

func (r *benchRun) deliveredTotal() int64 {
	view := r.subsView.Load()
	if view == nil {
		return 0
	}
	var n int64
	for _, s := range *view {
		n += s.warm.Load() + s.measured.Load()
	}
	return n
}

// waitDeliveries waits until got() reaches published x fanout, nothing
// arrives for settleAfter, or ctx ends.
func (r *benchRun) waitDeliveries(ctx context.Context, published int64, got func() int64) {
	want := published * int64(r.o.fanout)
	last, lastChange := got(), time.Now()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		n := got()
		if n >= want {
			return
		}
		if n != last {
			last, lastChange = n, time.Now()
		} else if time.Since(lastChange) >= settleAfter {
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
	}
}

// publishPhase runs every publishing loop until total messages are
// published (count > 0) or for d. It returns the first error that is not
// the broker refusing a publish as overloaded (counted, and the loop goes
// on) or ctx's end (nil: the caller reports what it has).
func (r *benchRun) publishPhase(ctx context.Context, total int64, d time.Duration, warm bool) error {
	o := r.o
	var remaining atomic.Int64
	remaining.Store(total)
	start := time.Now()
	until := start.Add(d)
	claim := func() int {
		if d > 0 {
			if time.Now().Before(until) {
				return o.batch
			}
			return 0
		}
		for {
			left := remaining.Load()
			if left <= 0 {
				return 0
			}
			n := min(int64(o.batch), left)
			if remaining.CompareAndSwap(left, left-n) {
				return int(n)
			}
		}
	}
	interval := time.Duration(0)
	if o.rate > 0 {
		interval = o.paceInterval()
	}
	pctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for i, loop := range r.loops {
		c := r.pubs[i%len(r.pubs)]
		// Stagger the loops' schedules so together they send evenly.
		next := start.Add(interval * time.Duration(i) / time.Duration(len(r.loops)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.publishLoop(pctx, c, loop, claim, next, interval, warm); err != nil {
				cancel(err)
			}
		}()
	}
	wg.Wait()
	if err := context.Cause(pctx); err != nil && ctx.Err() == nil {
		return err
	}
	return nil
}

func (r *benchRun) publishLoop(ctx context.Context, c *client.Client, loop *benchLoop, claim func() int,
	next time.Time, interval time.Duration, warm bool) error {
	o := r.o
	bufs := make([][]byte, o.batch)
	for i := range bufs {
		bufs[i] = make([]byte, o.payload)
		for j := tsBytes; j < len(bufs[i]); j++ {
			bufs[i][j] = 'a' + byte(j%26)
		}
	}
	opts := client.PublishOptions{Ack: o.prof.ack}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		if interval > 0 {
			// Absolute schedule: a loop that fell behind catches up at once.
			if wait := time.Until(next); wait > 0 {
				timer.Reset(wait)
				select {
				case <-timer.C:
				case <-ctx.Done():
					return nil
				}
			}
			next = next.Add(interval)
		}
		n := claim()
		if n == 0 || ctx.Err() != nil {
			return nil
		}
		batch := bufs[:n]
		sent := time.Since(r.base)
		ts := uint64(sent)
		if warm {
			ts |= warmBit
		}
		for _, b := range batch {
			binary.LittleEndian.PutUint64(b, ts)
		}
		var err error
		if o.batch == 1 {
			err = c.Publish(ctx, r.stream, batch[0], opts)
		} else {
			err = c.PublishBatch(ctx, r.stream, batch, opts)
		}
		acked := time.Since(r.base)
		switch {
		case err == nil:
			r.published.Add(int64(n))
			if warm {
				r.warmPublished.Add(int64(n))
			} else {
				r.measuredPub.Add(int64(n))
				_ = loop.hist.RecordValue(min(max(int64(acked-sent), 1), histMax))
			}
		case errors.Is(err, wire.ErrOverloaded):
			r.refused.Add(int64(n)) // not published: the broker said so
		case ctx.Err() != nil:
			r.inDoubt.Add(int64(n)) // sent or not: the ack never came
			return nil
		default:
			return fmt.Errorf("publish to %s after %d messages: %w", r.stream.Name, r.published.Load(), err)
		}
	}
}

// progress prints a line on stderr every second until the returned func is called.
func (r *benchRun) progress() (stop func()) {
	if r.o.quiet {
		return func() {}
	}
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		tick := time.NewTicker(progressEvery)
		defer tick.Stop()
		var lastPub, lastDel int64
		last := time.Now()
		for {
			select {
			case <-tick.C:
			case <-done:
				return
			}
			now := time.Now()
			secs := now.Sub(last).Seconds()
			pub, del := r.published.Load(), r.deliveredTotal()
			fmt.Fprintf(os.Stderr, "bench %5.1fs %-10s published %s (%s/s)  delivered %s (%s/s)\n",
				time.Since(r.base).Seconds(), r.phase.Load(), groupDigits(pub), siRate(float64(pub-lastPub)/secs),
				groupDigits(del), siRate(float64(del-lastDel)/secs))
			lastPub, lastDel, last = pub, del, now
		}
	}()
	return func() { close(done); <-exited }
}

// close says goodbye to every connection, each within benchCloseTimeout,
// and stops the subscription readers.
func (r *benchRun) close() {
	var wg sync.WaitGroup
	closeAll := func(cs []*client.Client) {
		for _, c := range cs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), benchCloseTimeout)
				defer cancel()
				_ = c.Close(ctx)
			}()
		}
		wg.Wait()
	}
	closeAll(r.pubs)
	close(r.stopSubs)
	r.subWG.Wait()
	closeAll(r.subConns)
}

// benchResult is the report: parameters, accounting, rates, latencies.
type benchResult struct {
	Profile    string  `json:"profile"`
	Broker     string  `json:"broker"`
	Policy     string  `json:"policy"`
	Stream     string  `json:"stream"`
	Payload    int64   `json:"payload"`
	Batch      int     `json:"batch"`
	Ack        string  `json:"ack"`
	Fanout     int     `json:"fanout"`
	Publishers int     `json:"publishers"`
	Inflight   int     `json:"inflight"`
	SubConns   int     `json:"sub_conns"`
	Count      int     `json:"count"`
	DurationS  float64 `json:"duration_s"`
	Warmup     int     `json:"warmup"`
	Rate       float64 `json:"rate"`
	TimeoutS   float64 `json:"timeout_s"`

	// Accounting over the whole run, warmup included. Dropped and
	// Unaccounted are null when unknown.
	Published   int64  `json:"published"`
	Delivered   int64  `json:"delivered"`
	Expected    int64  `json:"expected"`
	Dropped     *int64 `json:"dropped"`
	DroppedUnit string `json:"dropped_unit"`
	Unaccounted *int64 `json:"unaccounted"`
	Refused     int64  `json:"refused"`
	InDoubt     int64  `json:"in_doubt"`
	Foreign     int64  `json:"foreign"`
	TimedOut    bool   `json:"timed_out"`
	Interrupted bool   `json:"interrupted"`

	// The measured part, after the warmup.
	MeasuredPublished int64   `json:"measured_published"`
	MeasuredDelivered int64   `json:"measured_delivered"`
	ElapsedS          float64 `json:"elapsed_s"`
	PublishS          float64 `json:"publish_s"`
	MsgsPerS          float64 `json:"msgs_per_s"`
	PubMsgsPerS       float64 `json:"pub_msgs_per_s"`
	DeliveriesPerS    float64 `json:"deliveries_per_s"`
	MBPerS            float64 `json:"mb_per_s"`

	LatencySamples int64   `json:"latency_samples"`
	MinUS          float64 `json:"min_us"`
	P50US          float64 `json:"p50_us"`
	P90US          float64 `json:"p90_us"`
	P99US          float64 `json:"p99_us"`
	P999US         float64 `json:"p999_us"`
	MaxUS          float64 `json:"max_us"`

	AckSamples int64   `json:"ack_samples"`
	AckP50US   float64 `json:"ack_p50_us"`
	AckP90US   float64 `json:"ack_p90_us"`
	AckP99US   float64 `json:"ack_p99_us"`
	AckP999US  float64 `json:"ack_p999_us"`
	AckMaxUS   float64 `json:"ack_max_us"`

	dropsErr error
	subErrs  []error
}

func (r *benchRun) result() *benchResult {
	o := r.o
	res := &benchResult{
		Profile: o.profile, Broker: "embedded", Policy: o.policy, Stream: r.stream.Name,
		Payload: int64(o.payload), Batch: o.batch, Ack: o.prof.ack.String(), Fanout: o.fanout,
		Publishers: o.publishers, Inflight: o.inflight, SubConns: o.subConns,
		Count: o.count, DurationS: o.duration.Seconds(), Warmup: o.warmup, Rate: o.rate, TimeoutS: o.timeout.Seconds(),
		Published: r.published.Load(), Refused: r.refused.Load(), InDoubt: r.inDoubt.Load(),
		TimedOut: r.timedOut, Interrupted: r.interrupted && !r.timedOut,
		MeasuredPublished: r.measuredPub.Load(), DroppedUnit: "batches",
		dropsErr: r.dropsErr,
	}
	if o.brokerAddr != "" {
		res.Broker, res.Policy = o.brokerAddr, "broker's own"
	}
	lat := hdrhistogram.New(1, histMax, 3)
	var last int64
	for _, s := range r.subs {
		res.Delivered += s.warm.Load() + s.measured.Load()
		res.MeasuredDelivered += s.measured.Load()
		res.Foreign += s.foreign.Load()
		last = max(last, s.last.Load())
		lat.Merge(s.hist)
		if s.err != nil && !errors.Is(s.err, client.ErrClosed) {
			res.subErrs = append(res.subErrs, s.err)
		}
	}
	ack := hdrhistogram.New(1, histMax, 3)
	for _, l := range r.loops {
		ack.Merge(l.hist)
	}
	res.Expected = res.Published * int64(o.fanout)

	// Drops: read now, after the deliveries settled, as the change since the
	// run connected.
	if r.t.drops != nil && r.dropsKnown {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		n, err := r.t.drops(ctx)
		cancel()
		if err != nil {
			res.dropsErr = err
		} else {
			d := n - r.drops0
			res.Dropped = &d
		}
	}
	missing := res.Expected - res.Delivered
	switch {
	case res.Dropped != nil:
		u := missing - *res.Dropped
		res.Unaccounted = &u
	case missing == 0:
		// Nothing is missing, so nothing can be unexplained, drops unknown or not.
		res.Unaccounted = new(int64)
	}

	if r.t0 > 0 {
		res.PublishS = (r.pubEnd - r.t0).Seconds()
		if res.PublishS > 0 {
			res.PubMsgsPerS = float64(res.MeasuredPublished) / res.PublishS
		}
		if o.fanout > 0 {
			if last > int64(r.t0) {
				res.ElapsedS = (time.Duration(last) - r.t0).Seconds()
				res.DeliveriesPerS = float64(res.MeasuredDelivered) / res.ElapsedS
				res.MsgsPerS = res.DeliveriesPerS / float64(o.fanout)
			}
		} else {
			res.ElapsedS, res.MsgsPerS = res.PublishS, res.PubMsgsPerS
			res.DeliveriesPerS = 0
		}
		rate := res.DeliveriesPerS
		if o.fanout == 0 {
			rate = res.MsgsPerS
		}
		res.MBPerS = rate * float64(o.payload) / 1e6
	}
	us := func(h *hdrhistogram.Histogram, q float64) float64 {
		return float64(h.ValueAtQuantile(q)) / 1e3
	}
	if res.LatencySamples = lat.TotalCount(); res.LatencySamples > 0 {
		res.MinUS, res.MaxUS = float64(lat.Min())/1e3, float64(lat.Max())/1e3
		res.P50US, res.P90US, res.P99US, res.P999US = us(lat, 50), us(lat, 90), us(lat, 99), us(lat, 99.9)
	}
	if res.AckSamples = ack.TotalCount(); res.AckSamples > 0 {
		res.AckMaxUS = float64(ack.Max()) / 1e3
		res.AckP50US, res.AckP90US, res.AckP99US, res.AckP999US = us(ack, 50), us(ack, 90), us(ack, 99), us(ack, 99.9)
	}
	return res
}

// verdict is the run's error: nil for a clean, balanced run. Every
// problem also prints on stderr, loudly, before the exit.
func (res *benchResult) verdict(runErr error) error {
	var errs []error
	if runErr != nil {
		errs = append(errs, runErr)
	}
	if res.TimedOut {
		errs = append(errs, fmt.Errorf("timed out after %s (--timeout): the report above is what arrived by then", formatDuration(time.Duration(res.TimeoutS*float64(time.Second)))))
	}
	if res.Interrupted {
		errs = append(errs, errors.New("interrupted: the report above is what arrived by then"))
	}
	missing := res.Expected - res.Delivered
	switch {
	case res.Unaccounted == nil:
		why := "drops unknown: give --admin to read the broker's drop counters"
		if res.dropsErr != nil {
			why = fmt.Sprintf("drops unknown: %v", res.dropsErr)
		}
		errs = append(errs, fmt.Errorf("UNACCOUNTED: %d of %d expected deliveries missing (%s)", missing, res.Expected, why))
	case *res.Unaccounted != 0:
		msg := fmt.Sprintf("UNACCOUNTED: %d: published %d x fanout %d - delivered %d - dropped %d",
			*res.Unaccounted, res.Published, res.Fanout, res.Delivered, *res.Dropped)
		if *res.Dropped > 0 && res.Batch > 1 {
			msg += " (the broker counts dropped batches, not messages, so a lossy run of batches cannot balance"
			if missing == *res.Dropped*int64(res.Batch) {
				msg += fmt.Sprintf("; dropped x --batch %d = %d messages, exactly the missing ones", res.Batch, missing)
			}
			msg += ")"
		}
		if res.InDoubt > 0 {
			msg += fmt.Sprintf(" (%d messages were in flight when the run was cut)", res.InDoubt)
		}
		errs = append(errs, errors.New(msg))
	}
	if res.Refused > 0 {
		fmt.Fprintf(os.Stderr, "felix bench: the broker refused %d messages as overloaded (not counted as published)\n", res.Refused)
	}
	for _, err := range res.subErrs {
		errs = append(errs, fmt.Errorf("a subscription ended early: %w", err))
	}
	if len(errs) == 0 {
		return nil
	}
	return errors.Join(errs...)
}

func (res *benchResult) printTable(w io.Writer) {
	size := fmt.Sprintf("%d B", res.Payload)
	run := fmt.Sprintf("count %s", groupDigits(int64(res.Count)))
	if res.Count == 0 {
		run = fmt.Sprintf("duration %s", time.Duration(res.DurationS*float64(time.Second)))
	}
	rate := "unpaced"
	if res.Rate > 0 {
		rate = fmt.Sprintf("paced at %s msg/s", groupDigits(int64(res.Rate)))
	}
	fmt.Fprintf(w, "\nfelix bench: %s profile, broker %s (policy %s), stream %s\n", res.Profile, res.Broker, res.Policy, res.Stream)
	fmt.Fprintf(w, "  payload %s, batch %d, ack %s, fanout %d over %d connections, %d publishers x %d in flight, %s, warmup %s, %s\n\n",
		size, res.Batch, res.Ack, res.Fanout, res.SubConns, res.Publishers, res.Inflight, run, groupDigits(int64(res.Warmup)), rate)

	row := func(k, v string) { fmt.Fprintf(w, "  %-16s %s\n", k, v) }
	row("published", fmt.Sprintf("%s (%s after the warmup)", groupDigits(res.Published), groupDigits(res.MeasuredPublished)))
	row("delivered", fmt.Sprintf("%s of %s expected (%s after the warmup)", groupDigits(res.Delivered), groupDigits(res.Expected), groupDigits(res.MeasuredDelivered)))
	if res.Dropped != nil {
		row("dropped", fmt.Sprintf("%s batches (broker counters)", groupDigits(*res.Dropped)))
	} else {
		row("dropped", "unknown")
	}
	if res.Unaccounted != nil {
		mark := ""
		if *res.Unaccounted != 0 {
			mark = "   <-- NOT ZERO"
		}
		row("unaccounted", groupDigits(*res.Unaccounted)+mark)
	} else {
		row("unaccounted", "unknown   <-- messages missing, drops unknown")
	}
	if res.Refused > 0 || res.InDoubt > 0 {
		row("refused", fmt.Sprintf("%s overloaded, %s in doubt when cut", groupDigits(res.Refused), groupDigits(res.InDoubt)))
	}
	if res.TimedOut {
		row("TIMED OUT", "the run hit --timeout; these are partial results")
	}
	if res.Interrupted {
		row("INTERRUPTED", "these are partial results")
	}
	fmt.Fprintln(w)
	if res.Fanout > 0 {
		row("throughput", fmt.Sprintf("%s msg/s, %s deliveries/s, %.1f MB/s delivered payload, over %.2fs to the last arrival",
			siRate(res.MsgsPerS), siRate(res.DeliveriesPerS), res.MBPerS, res.ElapsedS))
	} else {
		row("throughput", fmt.Sprintf("%s msg/s, %.1f MB/s published payload (no subscribers)", siRate(res.MsgsPerS), res.MBPerS))
	}
	row("publish rate", fmt.Sprintf("%s msg/s over %.2fs of publishing", siRate(res.PubMsgsPerS), res.PublishS))
	if res.LatencySamples > 0 {
		row("latency", fmt.Sprintf("p50 %s  p90 %s  p99 %s  p99.9 %s  (min %s, max %s; %s samples, publish call to delivery)",
			fmtUS(res.P50US), fmtUS(res.P90US), fmtUS(res.P99US), fmtUS(res.P999US), fmtUS(res.MinUS), fmtUS(res.MaxUS), groupDigits(res.LatencySamples)))
	}
	if res.AckSamples > 0 {
		row("ack latency", fmt.Sprintf("p50 %s  p90 %s  p99 %s  p99.9 %s  (max %s; %s acks)",
			fmtUS(res.AckP50US), fmtUS(res.AckP90US), fmtUS(res.AckP99US), fmtUS(res.AckP999US), fmtUS(res.AckMaxUS), groupDigits(res.AckSamples)))
	}
	fmt.Fprintln(w)
}

// groupDigits writes n with thousands separators: 1,234,567.
func groupDigits(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// siRate writes a rate with a k or M suffix: 612.3k.
func siRate(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

// fmtUS writes microseconds as µs below 1 ms, else as ms.
func fmtUS(us float64) string {
	switch {
	case us >= 10_000:
		return fmt.Sprintf("%.1fms", us/1e3)
	case us >= 1000:
		return fmt.Sprintf("%.2fms", us/1e3)
	}
	return fmt.Sprintf("%.0fµs", us)
}
