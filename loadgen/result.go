package loadgen

import (
	"context"
	"errors"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/getfelix/felix-go/client"
)

// Latencies are recorded in nanoseconds, from 1 ns up to a minute, to 3
// significant digits.
const histMax = int64(time.Minute)

// Result is a run's report: accounting over the whole run, then rates and
// latencies over its measured part, after the warmup.
type Result struct {
	// Stream is the stream's name, the generated one when Config.Stream was
	// empty. Timeout is the deadline the run had, after defaults.
	Stream  string
	Timeout time.Duration
	// Target is the broker address the run published and subscribed at:
	// Config.Addr, or the owner of a durable stream's shard in a cluster;
	// empty for the embedded broker.
	Target string

	// Accounting over the whole run, warmup included.
	Published int64 // messages the broker acknowledged (or took, under wire.AckNone)
	Delivered int64 // messages the subscribers got, over all of them
	Expected  int64 // Published x Fanout
	// Dropped is the change in the broker's drop counters over the run, in
	// batches, not messages; nil when unknown (no Admin, or a read failed:
	// DropsErr says why).
	Dropped  *int64
	DropsErr error
	// Unaccounted is Expected - Delivered - Dropped: 0 for a clean run; nil
	// when messages are missing and Dropped is unknown.
	Unaccounted *int64
	Refused     int64 // messages the broker refused as overloaded, not in Published
	InDoubt     int64 // messages in flight when the run was cut, not in Published
	Foreign     int64 // deliveries too short to carry a timestamp: not ours
	TimedOut    bool  // the run hit Config.Timeout
	Interrupted bool  // ctx ended the run (and Timeout did not)
	// SubErrs are the errors that ended subscriptions before the run did.
	SubErrs []error

	// The measured part, after the warmup.
	MeasuredPublished int64
	MeasuredDelivered int64
	// Elapsed runs from the measured start to the last measured arrival
	// (with no subscribers, it is PublishTime); PublishTime from the measured
	// start to the last publish's return.
	Elapsed     time.Duration
	PublishTime time.Duration
	MsgsPerS    float64 // messages delivered per second (per subscriber), or published with Fanout 0
	PubMsgsPerS float64 // messages published per second
	// DeliveriesPerS is every subscriber's deliveries per second; 0 with
	// Fanout 0.
	DeliveriesPerS float64
	MBPerS         float64 // payload MB/s delivered (published with Fanout 0)

	Latency    Percentiles // publish call to delivery
	AckLatency Percentiles // publish call to its return: the answer, as Config.Ack asks
}

// Percentiles summarises a latency histogram. All zero when Samples is 0.
type Percentiles struct {
	Samples                       int64
	Min, P50, P90, P99, P999, Max time.Duration
}

func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(1, histMax, 3) }

// record adds a latency in ns, clamped into the histogram's range: a clock
// step cannot make it fail, and an outlier still counts.
func record(h *hdrhistogram.Histogram, ns int64) {
	_ = h.RecordValue(min(max(ns, 1), histMax))
}

func percentiles(h *hdrhistogram.Histogram) Percentiles {
	p := Percentiles{Samples: h.TotalCount()}
	if p.Samples == 0 {
		return p
	}
	at := func(q float64) time.Duration { return time.Duration(h.ValueAtQuantile(q)) }
	p.Min, p.Max = time.Duration(h.Min()), time.Duration(h.Max())
	p.P50, p.P90, p.P99, p.P999 = at(50), at(90), at(99), at(99.9)
	return p
}

// result gathers the counters and histograms into the report. It runs
// after the readers and loops have exited, and reads the drop counters once
// more: after the deliveries settled.
func (r *run) result() *Result {
	res := &Result{
		Stream: r.stream.Name, Timeout: r.cfg.Timeout,
		Published: r.published.Load(), Refused: r.refused.Load(), InDoubt: r.inDoubt.Load(),
		TimedOut: r.timedOut, Interrupted: r.interrupted && !r.timedOut,
		MeasuredPublished: r.measuredPub.Load(), DropsErr: r.dropsErr,
	}
	if r.cfg.Addr != "" {
		res.Target = r.t.addr
	}
	lat := newHist()
	var first, last int64
	for _, s := range r.subs {
		if f := s.first.Load(); f > 0 && (first == 0 || f < first) {
			first = f
		}
		res.Delivered += s.warm.Load() + s.measured.Load()
		res.MeasuredDelivered += s.measured.Load()
		res.Foreign += s.foreign.Load()
		last = max(last, s.last.Load())
		lat.Merge(s.hist)
		if s.err != nil && !errors.Is(s.err, client.ErrClosed) {
			res.SubErrs = append(res.SubErrs, s.err)
		}
	}
	ack := newHist()
	for _, l := range r.loops {
		ack.Merge(l.hist)
	}
	res.Expected = res.Published * int64(r.cfg.Fanout)
	if r.cfg.SubscribeOnly {
		// Another process published: what it was to publish is all there is.
		res.Expected = int64(r.cfg.Warmup+r.cfg.Count) * int64(r.cfg.Fanout)
		r.t0, r.pubEnd = time.Duration(first), time.Duration(first)
	}
	r.readDrops(res)
	res.Unaccounted = unaccounted(res.Expected, res.Delivered, res.Dropped)
	if r.t0 > 0 {
		res.setRates(r.cfg, r.t0, r.pubEnd, time.Duration(last))
	}
	res.Latency, res.AckLatency = percentiles(lat), percentiles(ack)
	return res
}

// readDrops sets res.Dropped to the change in the drop counters since the
// run connected, when both reads work.
func (r *run) readDrops(res *Result) {
	if r.t.drops == nil || !r.dropsKnown {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	n, err := r.t.drops(ctx)
	cancel()
	if err != nil {
		res.DropsErr = err
		return
	}
	d := n - r.drops0
	res.Dropped = &d
}

// unaccounted is expected - delivered - dropped, or nil when that cannot be
// known: messages are missing and the drops are unknown.
func unaccounted(expected, delivered int64, dropped *int64) *int64 {
	missing := expected - delivered
	switch {
	case dropped != nil:
		u := missing - *dropped
		return &u
	case missing == 0:
		// Nothing is missing, so nothing can be unexplained, drops unknown or not.
		return new(int64)
	}
	return nil
}

// setRates fills in the rates from the measured start t0, the end of
// publishing and the last measured arrival, all since the run began.
func (res *Result) setRates(cfg Config, t0, pubEnd, last time.Duration) {
	res.PublishTime = pubEnd - t0
	if res.PublishTime > 0 {
		res.PubMsgsPerS = float64(res.MeasuredPublished) / res.PublishTime.Seconds()
	}
	var rate float64 // what MBPerS counts: deliveries, or publishes with no subscribers
	if cfg.Fanout > 0 {
		if last > t0 {
			res.Elapsed = last - t0
			res.DeliveriesPerS = float64(res.MeasuredDelivered) / res.Elapsed.Seconds()
			res.MsgsPerS = res.DeliveriesPerS / float64(cfg.Fanout)
		}
		rate = res.DeliveriesPerS
	} else {
		res.Elapsed, res.MsgsPerS = res.PublishTime, res.PubMsgsPerS
		rate = res.MsgsPerS
	}
	res.MBPerS = rate * float64(cfg.Payload) / 1e6
}
