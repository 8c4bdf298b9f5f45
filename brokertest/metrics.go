package brokertest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/broker"
	"github.com/getfelix/felix-go/metrics"
)

// MetricValue gathers g and sums every series of the metric called name
// (counter, gauge or untyped) whose labels include the given name/value
// pairs. A metric with no series yet (a counter vector nobody has touched)
// is 0; found says whether any series matched.
func MetricValue(g prometheus.Gatherer, name string, labels ...string) (value float64, found bool, err error) {
	if len(labels)%2 != 0 {
		return 0, false, fmt.Errorf("brokertest: labels must be name/value pairs, got %q", labels)
	}
	families, err := g.Gather()
	if err != nil {
		return 0, false, err
	}
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !hasLabels(m, labels) {
				continue
			}
			found = true
			switch {
			case m.GetCounter() != nil:
				value += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				value += m.GetGauge().GetValue()
			case m.GetUntyped() != nil:
				value += m.GetUntyped().GetValue()
			default:
				return 0, false, fmt.Errorf("brokertest: %s is a %s, not a counter or gauge", name, mf.GetType())
			}
		}
	}
	return value, found, nil
}

func hasLabels(m *dto.Metric, pairs []string) bool {
	for i := 0; i < len(pairs); i += 2 {
		ok := false
		for _, lp := range m.GetLabel() {
			if lp.GetName() == pairs[i] && lp.GetValue() == pairs[i+1] {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// Value is MetricValue for tests: it fails tb on a gather error and returns
// 0 for a metric with no matching series.
func Value(tb testing.TB, b *broker.Broker, name string, labels ...string) float64 {
	tb.Helper()
	v, _, err := MetricValue(b.Metrics().Registry, name, labels...)
	if err != nil {
		tb.Fatalf("metric %s: %v", name, err)
	}
	return v
}

// Totals is the broker's live mailbox totals for one actor kind.
func Totals(b *broker.Broker, kind actors.Kind) metrics.KindTotals {
	return b.Metrics().Mailboxes().Totals()[kind]
}

// Eventually polls cond every few milliseconds until it holds, and fails tb
// (naming what) if ctx ends first. It is for states that no event announces,
// such as a counter reaching a value; it never sleeps once cond holds.
func Eventually(tb testing.TB, ctx context.Context, what string, cond func() bool) {
	tb.Helper()
	if err := Await(ctx, cond); err != nil {
		tb.Fatalf("waiting for %s: %v", what, err)
	}
}

// Await polls cond every few milliseconds until it holds or ctx ends.
func Await(ctx context.Context, cond func() bool) error {
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Peaks are the largest values a Sampler saw.
type Peaks struct {
	// Depth and Bytes are the largest summed depth and bytes seen per kind.
	Depth map[actors.Kind]int
	Bytes map[actors.Kind]int64
	// EgressBytes is the largest lane plus connection writer bytes seen in
	// one sample: deliveries that hold egress credit and wait in a mailbox.
	EgressBytes int64
	// Extra is the largest value of the Sampler's extra probe.
	Extra   float64
	Samples int
}

// Sampler reads a broker's mailbox totals (and optionally one more value)
// on a short period in the background and keeps the maxima, so a test can
// assert that a bound held throughout a run, not only at its end. Samples
// can miss a short excursion; the mailboxes' own PeakBytes cannot.
type Sampler struct {
	b     *broker.Broker
	extra func() float64
	stop  chan struct{}
	done  chan struct{}

	mu    sync.Mutex
	peaks Peaks
}

// StartSampler samples b every period until Stop, or until tb ends if the
// test never gets to Stop. extra, when not nil, is also sampled (for
// example a gauge read with MetricValue).
func StartSampler(tb testing.TB, b *broker.Broker, period time.Duration, extra func() float64) *Sampler {
	s := &Sampler{
		b: b, extra: extra, stop: make(chan struct{}), done: make(chan struct{}),
		peaks: Peaks{Depth: make(map[actors.Kind]int), Bytes: make(map[actors.Kind]int64)},
	}
	go s.run(period)
	tb.Cleanup(func() { s.Stop() })
	return s
}

func (s *Sampler) run(period time.Duration) {
	defer close(s.done)
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		s.sample()
		select {
		case <-tick.C:
		case <-s.stop:
			s.sample()
			return
		}
	}
}

func (s *Sampler) sample() {
	totals := s.b.Metrics().Mailboxes().Totals()
	var extra float64
	if s.extra != nil {
		extra = s.extra()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for kind, t := range totals {
		s.peaks.Depth[kind] = max(s.peaks.Depth[kind], t.Depth)
		s.peaks.Bytes[kind] = max(s.peaks.Bytes[kind], t.Bytes)
	}
	s.peaks.EgressBytes = max(s.peaks.EgressBytes, totals[actors.KindLane].Bytes+totals[actors.KindConnWriter].Bytes)
	s.peaks.Extra = max(s.peaks.Extra, extra)
	s.peaks.Samples++
}

// Stop ends sampling (after one last sample) and returns the maxima. It may
// be called more than once, but not concurrently.
func (s *Sampler) Stop() Peaks {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peaks
}
