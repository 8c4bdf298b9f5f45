// Package loadgen drives a broker with publishers and subscribers and
// accounts for every message.
//
// Publishers and subscribers run in this process, so one monotonic clock
// times each message from the publish call to its delivery: the first 8
// bytes of every payload carry the send time (nanoseconds since the run
// began; the top bit marks a warmup message). Accounting covers the whole
// run, warmup included: published x fanout - delivered - dropped is what
// nobody can explain, and a clean run leaves it at 0.
//
// `felix bench` is this package behind flags; a Go program calls Run.
package loadgen

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/wire"
)

const (
	// MinPayload is the smallest payload a run can send: the send timestamp.
	MinPayload = tsBytes
	// FinestPace is the shortest interval one publishing loop can keep: a
	// Rate needing a batch more often than this from every loop is refused.
	FinestPace = time.Microsecond
	// ProgressEvery is how often Config.Progress is called.
	ProgressEvery = time.Second
)

// The defaults Config.withDefaults fills in for zero fields.
const (
	defaultPayload        = 128
	defaultCount          = 10_000
	defaultConnectTimeout = 10 * time.Second
	// Floors for the default Timeout of a Count run without a Rate: the
	// slowest delivery rate a run may have and still finish.
	slowestDeliveries = 25_000.0
	timeoutSlack      = 30 * time.Second
)

// ErrInvalidConfig is returned by Run, wrapped with the field at fault,
// for a Config it cannot run.
var ErrInvalidConfig = errors.New("loadgen: invalid config")

// Config describes one run. The zero Config is a valid run: an embedded
// broker, one fire-and-forget publisher of 10,000 messages of 128 bytes,
// no subscribers.
type Config struct {
	// Addr is the broker's host:port. Empty starts a broker in this process
	// for the run, on a free 127.0.0.1 port with a temporary data directory.
	Addr string
	// Client is how connections dial Addr: TLS trust and tenant. Ignored by
	// the embedded broker, which is trusted through its own certificate.
	Client client.Options
	// Admin is the admin host:port of the broker at Addr, scraped for its
	// drop counters at the start and the end. Empty: drops are unknown (the
	// embedded broker's counters are always read).
	Admin string

	// Policy is the embedded broker's subscriber queue policy: block,
	// drop_new or drop_old. Empty means block, which is lossless end to end
	// (the lanes block too).
	Policy string
	// Fsync is the embedded broker's durable_fsync: none, periodic or
	// on_commit. Empty keeps the broker's default (periodic).
	Fsync string

	// Stream is the stream's name. Empty makes a fresh bench-XXXXXXXX.
	Stream string
	// Durable creates the stream as a durable one before subscribing.
	// Against a running broker (Addr) the run then publishes and
	// subscribes at the owner of the stream's shard 0, which in a cluster
	// may be another member (Result.Target).
	Durable bool
	// Replicas is the durable stream's replication factor; zero takes the
	// broker's default (3 in a cluster of at least 3 members with a peer
	// link, else 1). Only a cluster replicates.
	Replicas int

	// Payload is each message's size in bytes, at least MinPayload.
	// Zero means 128.
	Payload int
	// Batch is the messages per publish call. Zero means 1.
	Batch int
	// Ack is the answer each publish waits for. Zero is wire.AckNone: a
	// publish returns once written, and the ack latency is that write.
	Ack wire.AckMode

	// Fanout is the number of subscribers. Zero measures the publishers
	// alone.
	Fanout int
	// SubConns is the number of connections the subscribers share, round
	// robin. Zero means one per subscriber.
	SubConns int
	// Publishers is the number of publishing connections. Zero means 1.
	Publishers int
	// Inflight is the publish loops per publishing connection, each with one
	// publish awaiting its answer. Zero means 1.
	Inflight int

	// Count is the messages to publish after the warmup; Duration is how
	// long to publish instead. Give one: both zero means Count 10,000.
	Count    int
	Duration time.Duration
	// Warmup is the messages published and delivered before measuring,
	// counted for accounting but left out of rates and latencies. Zero: none.
	Warmup int
	// Rate paces all publishers together to this many msg/s. Zero publishes
	// as fast as answers allow.
	Rate float64

	// Timeout is the overall deadline; the run reports what it got when it
	// hits. Zero means Duration (or the time Count takes at Rate, or at a
	// floor of 25,000 deliveries/s), plus the warmup's, plus 30 s.
	Timeout time.Duration
	// ConnectTimeout bounds each dial. Zero means 10 s.
	ConnectTimeout time.Duration

	// SubscribeOnly runs the subscribers alone, for publishers in another
	// process (a run with Fanout 0 there), so each side's CPU is its own, as
	// nats bench sub and nats bench pub are two processes. The run waits for
	// (Warmup + Count) x Fanout deliveries, as long as Timeout allows for the
	// first and 10 s between the later ones; its rates run from the
	// first measured arrival to the last. It reports no latency: the
	// payloads carry the publisher's clock, not this process's. It needs a
	// Count and no Duration, Rate or Durable: those are the publisher's.
	SubscribeOnly bool
	// Ready, if set, is called once every subscription is made, before any
	// publishing of this run's own: the moment a publisher in another
	// process may start.
	Ready func()

	// Progress, if set, is called every ProgressEvery from one goroutine
	// until the run ends. It should return quickly: the run does not wait
	// for it, but the next call does.
	Progress func(Progress)
}

// Phase is what a run is doing, for progress reports.
type Phase string

// The phases of a run, in order.
const (
	PhaseConnecting Phase = "connecting"
	PhaseWarmup     Phase = "warmup"
	PhaseMeasuring  Phase = "measuring"
	PhaseDraining   Phase = "draining"
)

// Progress is a snapshot of a run in flight. Counts are totals since the
// run began, warmup included.
type Progress struct {
	Elapsed   time.Duration // since the run began
	Phase     Phase
	Published int64
	Delivered int64
}

// withDefaults returns c with every zero field that has a default filled
// in; Timeout last, since it depends on the others.
func (c Config) withDefaults() Config {
	c.Policy = cmp.Or(c.Policy, "block")
	c.Payload = cmp.Or(c.Payload, defaultPayload)
	c.Batch = cmp.Or(c.Batch, 1)
	c.Publishers = cmp.Or(c.Publishers, 1)
	c.Inflight = cmp.Or(c.Inflight, 1)
	c.SubConns = cmp.Or(c.SubConns, c.Fanout)
	if c.Count == 0 && c.Duration == 0 {
		c.Count = defaultCount
	}
	c.ConnectTimeout = cmp.Or(c.ConnectTimeout, defaultConnectTimeout)
	if c.Timeout == 0 {
		c.Timeout = c.defaultTimeout()
	}
	return c
}

// validate refuses what cannot run. It checks a Config after withDefaults.
func (c Config) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	switch {
	case c.Payload < MinPayload:
		return bad("Payload %d is under the %d-byte send timestamp", c.Payload, MinPayload)
	case c.Fanout < 0 || c.SubConns < 0 || c.SubConns > c.Fanout:
		return bad("Fanout %d, SubConns %d: want 0 <= SubConns <= Fanout", c.Fanout, c.SubConns)
	case c.Publishers < 1 || c.Inflight < 1 || c.Batch < 1:
		return bad("Publishers %d, Inflight %d, Batch %d: want each at least 1", c.Publishers, c.Inflight, c.Batch)
	case c.Count < 0 || c.Duration < 0 || c.Warmup < 0:
		return bad("Count %d, Duration %s, Warmup %d: want none negative", c.Count, c.Duration, c.Warmup)
	case c.Count > 0 && c.Duration > 0:
		return bad("Count %d and Duration %s: give one", c.Count, c.Duration)
	case math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0) || c.Rate < 0:
		return bad("Rate %v: want a finite msg/s, 0 or more", c.Rate)
	case c.Rate > 0 && c.PaceInterval() < FinestPace:
		return bad("Rate %.0f msg/s: each loop would publish every %s, finer than %s", c.Rate, c.PaceInterval(), FinestPace)
	case c.Replicas < 0 || c.Replicas > 0 && !c.Durable:
		return bad("Replicas %d: want 0 or more, and only with Durable", c.Replicas)
	case c.SubscribeOnly && (c.Fanout < 1 || c.Count < 1 || c.Rate > 0 || c.Durable):
		return bad("SubscribeOnly with Fanout %d, Count %d, Rate %v, Durable %v: want subscribers and a Count, "+
			"and no Rate or Durable (the publisher's)", c.Fanout, c.Count, c.Rate, c.Durable)
	case c.Timeout < 0 || c.ConnectTimeout < 0:
		return bad("Timeout %s, ConnectTimeout %s: want neither negative", c.Timeout, c.ConnectTimeout)
	}
	return nil
}

// PaceInterval is how often each publishing loop sends a batch under Rate,
// zero fields read as their defaults.
func (c Config) PaceInterval() time.Duration {
	loops := cmp.Or(c.Publishers, 1) * cmp.Or(c.Inflight, 1)
	return time.Duration(float64(cmp.Or(c.Batch, 1)*loops) / c.Rate * float64(time.Second))
}

// defaultTimeout is Duration (or the time Count takes at Rate, or at a
// slow floor of deliveries per second), plus the warmup's and 30 s.
func (c Config) defaultTimeout() time.Duration {
	perMsg := func(n int) time.Duration {
		deliveries := float64(n) * float64(max(c.Fanout, 1))
		t := deliveries / slowestDeliveries
		if c.Rate > 0 {
			t = max(t, 1.5*float64(n)/c.Rate)
		}
		return time.Duration(t * float64(time.Second))
	}
	d := c.Duration
	if c.Count > 0 {
		d = perMsg(c.Count)
	}
	return d + perMsg(c.Warmup) + timeoutSlack
}

// DialError is a connection to the broker that could not be made; callers
// that know where the address and trust came from can explain it.
type DialError struct {
	Addr string
	Err  error
}

func (e *DialError) Error() string { return fmt.Sprintf("dial %s: %v", e.Addr, e.Err) }
func (e *DialError) Unwrap() error { return e.Err }

// Run runs one load test against the broker cfg names and accounts for it.
//
// It returns a nil Result when the run could not start (an invalid Config,
// the embedded broker, a failed dial or subscribe before anything was
// published). Otherwise it returns the Result, partial when the run was
// cut by ctx (Interrupted) or Timeout (TimedOut), and the error that ended
// it early, if one did. A Result with a nonzero Unaccounted is not an
// error here: the caller judges it.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	errDeadline := fmt.Errorf("loadgen: the run hit its timeout of %s", cfg.Timeout)
	rctx, cancel := context.WithTimeoutCause(ctx, cfg.Timeout, errDeadline)
	defer cancel()

	t, err := startTarget(cfg)
	if err != nil {
		return nil, err
	}
	defer t.stop()

	r := newRun(cfg, t)
	stopProgress := r.progress()
	runErr := r.execute(rctx)
	stopProgress()
	r.close()
	if runErr != nil && rctx.Err() == nil && r.published.Load() == 0 {
		return nil, runErr // failed while setting up: there is nothing to report
	}
	r.timedOut = errors.Is(context.Cause(rctx), errDeadline)
	r.interrupted = ctx.Err() != nil
	return r.result(), runErr
}
