package metrics

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// latencyBuckets, in seconds, span a fire-and-forget publish on loopback
// (tens of microseconds) to an fsync under load or a quorum's (hundreds of
// milliseconds), two to three buckets per decade.
var latencyBuckets = []float64{
	0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5,
}

// MaxStreamSeries bounds the streams that get series of their own
// (StreamSeries): past it, further streams' samples go to the series whose
// labels are all OtherStream, so a wildcard pattern cannot grow the
// registry without bound.
const MaxStreamSeries = 256

// OtherStream labels the per-stream series of the streams past
// MaxStreamSeries.
const OtherStream = "_other"

// Latency holds the publish latency histograms: to the publisher's ack,
// and to the subscribers' delivery.
type Latency struct {
	// Ack is from a publish reaching its shard's mailbox to its ack being
	// handed back to the front end (after the fsync or quorum its
	// durability asks for), by durable ("true", "false").
	Ack *prometheus.HistogramVec
	// Delivery is from a publish reaching its shard's mailbox to the
	// event batch holding it written to a subscriber's stream, once per
	// batch written, measured from the batch's oldest publish. History
	// (a replay from a log or the replay ring) is not timed.
	Delivery prometheus.Histogram

	streams *StreamSeries
}

// NewLatency registers the latency histograms and, when streams has
// patterns, the per-stream series, in r.
func NewLatency(r *prometheus.Registry, streams *StreamSeries) *Latency {
	l := &Latency{
		Ack: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "felix_publish_ack_seconds",
			Help:    "Seconds from a publish reaching its shard's mailbox to its ack, by durable (after the fsync or quorum the stream's durability asks for).",
			Buckets: latencyBuckets,
		}, []string{"durable"}),
		Delivery: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "felix_publish_delivery_seconds",
			Help:    "Seconds from a publish reaching its shard's mailbox to its event batch written to a subscriber's stream, per batch written (from its oldest publish); replays from a log are not timed.",
			Buckets: latencyBuckets,
		}),
		streams: streams,
	}
	r.MustRegister(l.Ack, l.Delivery)
	if streams != nil && streams.enabled() {
		streams.register(r)
	}
	return l
}

// ObserveAck records one acked publish of tenant/namespace/stream that
// took d.
func (l *Latency) ObserveAck(tenant, namespace, stream string, durable bool, records int, d time.Duration) {
	label := "false"
	if durable {
		label = "true"
	}
	l.Ack.WithLabelValues(label).Observe(d.Seconds())
	if s := l.streams; s != nil && s.enabled() {
		if labels, ok := s.labels(tenant, namespace, stream); ok {
			s.ack.WithLabelValues(labels...).Observe(d.Seconds())
			s.published.WithLabelValues(labels...).Add(float64(records))
		}
	}
}

// ObserveDelivery records one batch written to a subscriber, whose oldest
// publish reached its shard at published (unix ns; 0: not timed).
func (l *Latency) ObserveDelivery(published int64, now time.Time) {
	if published == 0 {
		return
	}
	l.Delivery.Observe(now.Sub(time.Unix(0, published)).Seconds())
}

// StreamSeries decides which streams get series of their own: those
// matching one of its patterns, the first MaxStreamSeries of them. A
// pattern is tenant/namespace/stream, each part a name or *. Safe for
// concurrent use; a decision, once made, stays for the process's life.
type StreamSeries struct {
	patterns [][3]string

	published *prometheus.CounterVec
	ack       *prometheus.HistogramVec
	offsets   *shardOffsets

	mu struct {
		sync.Mutex
		seen map[[3]string]seriesDecision // the decision for each stream seen
		own  int                          // streams with their own series
	}
}

// ParseStreamSeries reads a comma-separated list of tenant/namespace/stream
// patterns (each part a name or *); empty is no stream.
func ParseStreamSeries(list string) (*StreamSeries, error) {
	s := &StreamSeries{}
	for p := range strings.SplitSeq(list, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		parts := strings.Split(p, "/")
		if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
			return nil, fmt.Errorf("metrics: stream pattern %q: want tenant/namespace/stream, each a name or *", p)
		}
		s.patterns = append(s.patterns, [3]string(parts))
	}
	s.mu.seen = map[[3]string]seriesDecision{}
	return s, nil
}

func (s *StreamSeries) enabled() bool { return len(s.patterns) > 0 }

func (s *StreamSeries) register(r *prometheus.Registry) {
	labels := []string{"tenant", "namespace", "stream"}
	s.published = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "felix_stream_published_records_total",
		Help: "Acked published records, for the streams metrics_streams names (at most 256; later ones under _other).",
	}, labels)
	s.ack = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "felix_stream_publish_ack_seconds",
		Help:    "felix_publish_ack_seconds for the streams metrics_streams names (at most 256; later ones under _other).",
		Buckets: latencyBuckets,
	}, labels)
	s.offsets = &shardOffsets{}
	s.offsets.mu.logs = map[shardKey]OffsetSource{}
	r.MustRegister(s.published, s.ack, s.offsets)
}

// Matches reports whether tenant/namespace/stream matches a pattern.
func (s *StreamSeries) Matches(tenant, namespace, stream string) bool {
	name := [3]string{tenant, namespace, stream}
	for _, p := range s.patterns {
		if (p[0] == "*" || p[0] == name[0]) && (p[1] == "*" || p[1] == name[1]) && (p[2] == "*" || p[2] == name[2]) {
			return true
		}
	}
	return false
}

// labels are the label values of tenant/namespace/stream's series, or
// false when it has none.
func (s *StreamSeries) labels(tenant, namespace, stream string) ([]string, bool) {
	key := [3]string{tenant, namespace, stream}
	s.mu.Lock()
	d, ok := s.mu.seen[key]
	if !ok {
		d = seriesNone
		if s.Matches(tenant, namespace, stream) {
			d = seriesOther
			if s.mu.own < MaxStreamSeries {
				d = seriesOwn
				s.mu.own++
			}
		}
		// A stream with its own series is always remembered (it holds one
		// of the MaxStreamSeries places); the others up to a bound, past
		// which they are matched again each time.
		if d == seriesOwn || len(s.mu.seen) < 16*MaxStreamSeries {
			s.mu.seen[key] = d
		}
	}
	s.mu.Unlock()
	switch d {
	case seriesOwn:
		return key[:], true
	case seriesOther:
		return []string{OtherStream, OtherStream, OtherStream}, true
	}
	return nil, false
}

// A stream's series decision.
type seriesDecision uint8

const (
	seriesNone  seriesDecision = iota // no pattern matches
	seriesOwn                         // its own series
	seriesOther                       // matched past MaxStreamSeries: _other
)
