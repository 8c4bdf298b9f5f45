package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/loadgen"
	"github.com/getfelix/felix-go/wire"
)

// felix bench: the flags, their checks and the report around
// loadgen.Run, which publishes, subscribes and accounts.

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
	token          string
	admin          string
	policy         string
	stream         string
	connectTimeout time.Duration
	durable        bool
	fsync          string
	replicas       int

	role string
	ack  string

	json       bool
	quiet      bool
	cpuProfile string

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
	fs.StringVar(&o.token, "token", "", "with --broker: the token to authenticate with; default $"+tokenEnv+", else ./"+client.DefaultTokenFile+" when it exists")
	fs.StringVar(&o.admin, "admin", "", "with --broker: the broker's admin address (host:port), scraped for its drop counters; without it drops are unknown")
	fs.StringVar(&o.policy, "policy", "block", "embedded broker's subscriber queue policy: block (lossless), drop_new or drop_old")
	fs.StringVar(&o.stream, "stream", "", "stream to use (default: a fresh bench-XXXXXXXX name)")
	fs.DurationVar(&o.connectTimeout, "connect-timeout", 10*time.Second, "give up connecting after this long")
	fs.BoolVar(&o.durable, "durable", false, "publish to a durable stream (created for the run); acks come after the log write, or the fsync under --fsync on_commit")
	fs.StringVar(&o.fsync, "fsync", "periodic", "with --durable and the embedded broker: none, periodic or on_commit")
	fs.IntVar(&o.replicas, "replicas", 0, "with --durable: the stream's replication factor (0: the broker's default, 3 in a cluster of at least 3 members); the run publishes at the shard's leader")
	fs.StringVar(&o.role, "role", "both", "both (publishers and subscribers in this process), pub (the publishers alone) or sub (the --fanout subscribers alone, for a --role pub process with the same --count and --warmup: no latency, the payloads carry the other process's clock)")
	fs.StringVar(&o.ack, "ack", "", "the answer each publish waits for: none (written, no answer: losses show as unaccounted), message or batch (default: the profile's, latency message, throughput batch)")
	fs.BoolVar(&o.json, "json", false, "print one JSON object with the parameters and results on stdout (the table goes to stderr)")
	fs.BoolVarP(&o.quiet, "quiet", "q", false, "print no progress or table on stderr (errors still print)")
	fs.StringVar(&o.cpuProfile, "cpu-profile", "", "write this process's Go CPU profile over the run (connecting included; the embedded broker too, without --broker) to this file, for go tool pprof")
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

--role pub and --role sub split a run over two processes against one --broker,
as nats bench pub and nats bench sub do, so each process's CPU is its own: start
the sub process (it prints "subscribed" on stderr once every subscription is
made), then the pub process with the same --count and --warmup. The sub
process expects (warmup + count) x fanout deliveries (it gives up once none
came for 10 s) and reports no latency.

Accounting covers the whole run, warmup included: unaccounted = published x
fanout - delivered - dropped must be 0. The broker's drop counters count
batches, not messages, so a lossy run with batches over one message cannot
balance: bench says so. A run with unaccounted messages, or one cut by
--timeout or SIGINT, prints its report and exits 1.

Examples:
  felix bench --profile latency --fanout 10
  felix bench --profile throughput --payload 1KiB --count 200000 --json
  felix bench --broker 127.0.0.1:5000 --ca felix-data/cert.pem --admin 127.0.0.1:5080
  felix bench --broker 127.0.0.1:5000 --stream s --role sub --fanout 10 --count 100000 &
  felix bench --broker 127.0.0.1:5000 --stream s --role pub --count 100000 --ack none`,
		flags: fs,
	}
	c.run = o.run
	return c
}

// check reports flag mistakes before anything starts, and fills in the
// profile's defaults.
func (o *benchOpts) check(args []string) error {
	if len(args) > 0 {
		return usagef("bench takes no arguments, got %q", args)
	}
	switch o.fsync {
	case "none", "periodic", "on_commit":
	default:
		return usagef("--fsync must be none, periodic or on_commit, got %q", o.fsync)
	}
	if o.flags.Changed("fsync") && (!o.durable || o.brokerAddr != "") {
		return usagef("--fsync applies to --durable with the embedded broker (a running broker uses its own durable_fsync)")
	}
	if err := o.checkReplicas(); err != nil {
		return err
	}
	if err := o.applyProfile(); err != nil {
		return err
	}
	if err := o.checkRole(); err != nil {
		return err
	}
	if err := o.checkRun(); err != nil {
		return err
	}
	if o.stream != "" {
		if err := wire.ValidateName("stream", o.stream); err != nil {
			return usagef("--stream: %s", err.(*wire.Error).Message)
		}
	}
	if o.brokerAddr == "" {
		return o.checkEmbedded()
	}
	return o.checkRemote()
}

// checkReplicas: --replicas goes with --durable, and only a cluster (a
// running broker) replicates.
func (o *benchOpts) checkReplicas() error {
	switch {
	case !o.flags.Changed("replicas"):
		return nil
	case o.replicas < 0:
		return usagef("--replicas must not be negative, got %d", o.replicas)
	case !o.durable:
		return usagef("--replicas applies to --durable streams only")
	case o.replicas > 1 && o.brokerAddr == "":
		return usagef("--replicas %d needs --broker at a member of a cluster: the embedded broker is one broker", o.replicas)
	}
	return nil
}

// applyProfile fills in the profile's values for the flags not given.
func (o *benchOpts) applyProfile() error {
	changed := o.flags.Changed
	prof, ok := benchProfiles[o.profile]
	if !ok {
		return usagef("--profile: want latency or throughput, got %q", o.profile)
	}
	switch o.ack {
	case "":
	case "none":
		prof.ack = wire.AckNone
	case "message":
		prof.ack = wire.AckPerMessage
	case "batch":
		prof.ack = wire.AckPerBatch
	default:
		return usagef("--ack: want none, message or batch, got %q", o.ack)
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
	return nil
}

// checkRole: a pub process holds no subscribers, and a sub process none of
// what only a publisher has.
func (o *benchOpts) checkRole() error {
	changed := o.flags.Changed
	switch o.role {
	case "both":
	case "pub":
		if changed("fanout") && o.fanout != 0 || changed("sub-conns") {
			return usagef("--role pub holds no subscribers: run them with --role sub (--fanout there)")
		}
		o.fanout, o.subConns = 0, 0
	case "sub":
		switch {
		case o.fanout < 1:
			return usagef("--role sub needs --fanout 1 or more subscribers, got %d", o.fanout)
		case o.duration > 0 || o.count == 0:
			return usagef("--role sub needs --count (and the same --warmup) as the --role pub process: it waits for that many")
		case o.durable:
			return usagef("--role sub with --durable: the --role pub process creates the durable stream")
		case changed("rate") && o.rate > 0 || changed("publishers") || changed("inflight") || changed("batch") || changed("ack"):
			return usagef("--rate, --publishers, --inflight, --batch and --ack belong to the --role pub process")
		}
		o.rate = 0
	default:
		return usagef("--role: want both, pub or sub, got %q", o.role)
	}
	if o.role != "both" && (o.brokerAddr == "" || o.stream == "") {
		return usagef("--role %s needs --broker and --stream: the other process must reach the same stream on the same broker", o.role)
	}
	return nil
}

// checkRun checks the run's shape: sizes, connections, its end and pace.
func (o *benchOpts) checkRun() error {
	loops := o.publishers * o.inflight
	switch {
	case o.payload < loadgen.MinPayload:
		return usagef("--payload must be at least %d bytes (the first %d carry the send timestamp), got %d", loadgen.MinPayload, loadgen.MinPayload, o.payload)
	case o.payload > maxLineBytes:
		return usagef("--payload %d is larger than the 16 MiB frame cap", o.payload)
	case o.fanout < 0:
		return usagef("--fanout must not be negative, got %d", o.fanout)
	case o.fanout == 0 && o.profile == "latency" && o.role == "both":
		return usagef("--fanout 0 with the latency profile: nothing would be delivered to time; give --fanout 1 or more")
	case o.fanout == 0 && o.flags.Changed("sub-conns") && o.subConns > 0:
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
	case o.rate > 0 && o.paceInterval() < loadgen.FinestPace:
		return usagef("--rate %.0f msg/s cannot be paced: each of the %d publishing loops would send a batch of %d every %s, "+
			"finer than %s; at most %.0f msg/s here (raise --batch, --publishers or --inflight, or give --rate 0 for unpaced)",
			o.rate, loops, o.batch, o.paceInterval(), loadgen.FinestPace, float64(o.batch*loops)/loadgen.FinestPace.Seconds())
	case o.timeout < 0:
		return usagef("--timeout must not be negative, got %s", o.timeout)
	case o.timeout > 0 && o.duration > 0 && o.timeout <= o.duration:
		return usagef("--timeout %s leaves no time past --duration %s to deliver and report", o.timeout, o.duration)
	case o.connectTimeout <= 0:
		return usagef("--connect-timeout must be positive, got %s", o.connectTimeout)
	}
	return nil
}

func (o *benchOpts) checkEmbedded() error {
	for _, f := range []string{"ca", "insecure", "token", "admin"} {
		if o.flags.Changed(f) {
			return usagef("--%s applies to --broker only (the embedded broker needs none)", f)
		}
	}
	switch o.policy {
	case "block", "drop_new", "drop_old":
	default:
		return usagef("--policy: want block, drop_new or drop_old, got %q", o.policy)
	}
	return nil
}

func (o *benchOpts) checkRemote() error {
	if _, _, err := net.SplitHostPort(o.brokerAddr); err != nil {
		return usagef("--broker: want host:port, got %q", o.brokerAddr)
	}
	if o.flags.Changed("policy") {
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
	return nil
}

// paceInterval is how often each publishing loop sends a batch under --rate.
func (o *benchOpts) paceInterval() time.Duration {
	return loadgen.Config{Batch: o.batch, Publishers: o.publishers, Inflight: o.inflight, Rate: o.rate}.PaceInterval()
}

// config is the run the flags ask for; zero --timeout is left to
// loadgen's estimate.
func (o *benchOpts) config() loadgen.Config {
	cfg := loadgen.Config{
		Addr: o.brokerAddr, Admin: o.admin, Policy: o.policy, Fsync: o.fsync,
		Stream: o.stream, Durable: o.durable, Replicas: o.replicas,
		Payload: int(o.payload), Batch: o.batch, Ack: o.prof.ack,
		Fanout: o.fanout, SubConns: o.subConns, Publishers: o.publishers, Inflight: o.inflight,
		Count: o.count, Duration: o.duration, Warmup: o.warmup, Rate: o.rate,
		Timeout: o.timeout, ConnectTimeout: o.connectTimeout,
		SubscribeOnly: o.role == "sub",
	}
	if o.role == "sub" {
		// The line a script waits for before it starts the --role pub process.
		cfg.Ready = func() { fmt.Fprintln(os.Stderr, "subscribed") }
	}
	if o.brokerAddr != "" {
		token, _ := flagOrEnvToken(o.token)
		cfg.Client = client.Options{CAFile: o.caFile, Insecure: o.insecure, Token: token}
	}
	if !o.quiet {
		cfg.Progress = printProgress(os.Stderr)
	}
	return cfg
}

func (o *benchOpts) run(ctx context.Context, args []string) error {
	if err := o.check(args); err != nil {
		return err
	}
	stopProfile, err := startCPUProfile(o.cpuProfile)
	if err != nil {
		return err
	}
	res, runErr := loadgen.Run(ctx, o.config())
	// A profile that could not be written fails the run without hiding
	// the run's own error or its report.
	runErr = errors.Join(o.explainDialError(runErr), stopProfile())
	if res == nil {
		return runErr // failed while setting up: there is nothing to report
	}
	rep := o.report(res)
	if !o.quiet || !o.json {
		w := io.Writer(os.Stdout)
		if o.json {
			w = os.Stderr
		}
		rep.printTable(w)
	}
	if o.json {
		out, err := json.Marshal(rep)
		if err != nil {
			return err
		}
		if _, err := fmt.Printf("%s\n", out); err != nil {
			return err
		}
	}
	return rep.verdict(runErr)
}

// startCPUProfile starts the Go CPU profile into path (nothing when path
// is empty) and returns what stops it and closes the file.
func startCPUProfile(path string) (stop func() error, err error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpu-profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("--cpu-profile: %w", err)
	}
	return func() error {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			return fmt.Errorf("--cpu-profile: %w", err)
		}
		return nil
	}, nil
}

// explainDialError says what to do about a connection to the broker that
// failed, as pub and sub do; other errors pass through.
func (o *benchOpts) explainDialError(err error) error {
	var de *loadgen.DialError
	if !errors.As(err, &de) {
		return err
	}
	co := connOpts{broker: de.Addr, tenant: "default", caFile: o.caFile, insecure: o.insecure, token: o.token}
	return co.explainDialError(de.Addr, de.Err)
}

// printProgress returns a loadgen.Config.Progress that prints a line per
// call on w, with the rates since the previous one.
func printProgress(w io.Writer) func(loadgen.Progress) {
	var last loadgen.Progress
	return func(p loadgen.Progress) {
		secs := (p.Elapsed - last.Elapsed).Seconds()
		fmt.Fprintf(w, "bench %5.1fs %-10s published %s (%s/s)  delivered %s (%s/s)\n",
			p.Elapsed.Seconds(), p.Phase, groupDigits(p.Published), siRate(float64(p.Published-last.Published)/secs),
			groupDigits(p.Delivered), siRate(float64(p.Delivered-last.Delivered)/secs))
		last = p
	}
}

// benchResult is the report: parameters, accounting, rates, latencies.
type benchResult struct {
	Profile string `json:"profile"`
	Role    string `json:"role"`
	Broker  string `json:"broker"`
	Policy  string `json:"policy"`
	Stream  string `json:"stream"`
	// Target is where the run published: the broker, or in a cluster the
	// owner of the durable stream's shard. Replicas as asked (0: default).
	Target     string  `json:"target"`
	Replicas   int     `json:"replicas"`
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

// report is the result with the parameters that produced it, as the
// table and --json show them.
func (o *benchOpts) report(res *loadgen.Result) *benchResult {
	rep := &benchResult{
		Profile: o.profile, Role: o.role, Broker: "embedded", Policy: o.policy, Stream: res.Stream,
		Target: res.Target, Replicas: o.replicas,
		Payload: int64(o.payload), Batch: o.batch, Ack: o.prof.ack.String(), Fanout: o.fanout,
		Publishers: o.publishers, Inflight: o.inflight, SubConns: o.subConns,
		Count: o.count, DurationS: o.duration.Seconds(), Warmup: o.warmup, Rate: o.rate, TimeoutS: res.Timeout.Seconds(),

		Published: res.Published, Delivered: res.Delivered, Expected: res.Expected,
		Dropped: res.Dropped, DroppedUnit: "batches", Unaccounted: res.Unaccounted,
		Refused: res.Refused, InDoubt: res.InDoubt, Foreign: res.Foreign,
		TimedOut: res.TimedOut, Interrupted: res.Interrupted,

		MeasuredPublished: res.MeasuredPublished, MeasuredDelivered: res.MeasuredDelivered,
		ElapsedS: res.Elapsed.Seconds(), PublishS: res.PublishTime.Seconds(),
		MsgsPerS: res.MsgsPerS, PubMsgsPerS: res.PubMsgsPerS, DeliveriesPerS: res.DeliveriesPerS, MBPerS: res.MBPerS,

		LatencySamples: res.Latency.Samples, MinUS: us(res.Latency.Min), MaxUS: us(res.Latency.Max),
		P50US: us(res.Latency.P50), P90US: us(res.Latency.P90), P99US: us(res.Latency.P99), P999US: us(res.Latency.P999),

		AckSamples: res.AckLatency.Samples, AckMaxUS: us(res.AckLatency.Max),
		AckP50US: us(res.AckLatency.P50), AckP90US: us(res.AckLatency.P90),
		AckP99US: us(res.AckLatency.P99), AckP999US: us(res.AckLatency.P999),

		dropsErr: res.DropsErr, subErrs: res.SubErrs,
	}
	if o.brokerAddr != "" {
		rep.Broker, rep.Policy = o.brokerAddr, "broker's own"
	}
	return rep
}

// us is d in microseconds, as the report prints latencies.
func us(d time.Duration) float64 { return float64(d) / 1e3 }

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
	if res.Role != "both" {
		fmt.Fprintf(w, "  role %s: the other half of the run is another process\n", res.Role)
	}
	if res.Target != "" && res.Target != res.Broker {
		fmt.Fprintf(w, "  published at %s, the owner of the stream's shard (replicas: %d, 0 is the broker's default)\n", res.Target, res.Replicas)
	}
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
