package metrics

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// series gathers r's series of the metric name, keyed by their label
// values joined with "/".
func series(t *testing.T, r *prometheus.Registry, name string) map[string]*dto.Metric {
	t.Helper()
	families, err := r.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.Metric{}
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var key []string
			for _, lp := range m.GetLabel() {
				key = append(key, lp.GetValue())
			}
			out[strings.Join(key, "/")] = m
		}
	}
	return out
}

func TestParseStreamSeries(t *testing.T) {
	tests := []struct {
		give    string
		wantErr bool
		match   [][3]string
		miss    [][3]string
	}{
		{give: ""},
		{give: "default/default/orders", match: [][3]string{{"default", "default", "orders"}}, miss: [][3]string{{"default", "default", "order"}, {"t", "default", "orders"}}},
		{give: "acme/*/*, */billing/invoices", match: [][3]string{{"acme", "x", "y"}, {"t", "billing", "invoices"}}, miss: [][3]string{{"t", "billing", "x"}}},
		{give: "acme/orders", wantErr: true},
		{give: "acme//orders", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			s, err := ParseStreamSeries(tt.give)
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParseStreamSeries(%q) error %v, want error %v", tt.give, err, tt.wantErr)
			}
			if err != nil {
				return
			}
			for _, n := range tt.match {
				if !s.Matches(n[0], n[1], n[2]) {
					t.Errorf("%q does not match %v", tt.give, n)
				}
			}
			for _, n := range tt.miss {
				if s.Matches(n[0], n[1], n[2]) {
					t.Errorf("%q matches %v", tt.give, n)
				}
			}
		})
	}
}

// TestStreamSeriesBounded: past MaxStreamSeries matching streams, the rest
// share the _other series, and a stream keeps the series it got first.
func TestStreamSeriesBounded(t *testing.T) {
	s, err := ParseStreamSeries("t/*/*")
	if err != nil {
		t.Fatal(err)
	}
	r := prometheus.NewRegistry()
	l := NewLatency(r, s)
	for i := range MaxStreamSeries + 10 {
		l.ObserveAck("t", "ns", fmt.Sprint("s", i), true, 2, time.Millisecond)
	}
	l.ObserveAck("t", "ns", "s0", true, 1, time.Millisecond)
	l.ObserveAck("other-tenant", "ns", "s0", true, 1, time.Millisecond)
	published := series(t, r, "felix_stream_published_records_total")
	if len(published) != MaxStreamSeries+1 {
		t.Fatalf("%d per-stream series, want %d and _other", len(published), MaxStreamSeries)
	}
	// Labels gather sorted by name: namespace, stream, tenant.
	if got := published["ns/s0/t"].GetCounter().GetValue(); got != 3 {
		t.Errorf("s0 published %v, want 3 (its first stays its own)", got)
	}
	if got := published["_other/_other/_other"].GetCounter().GetValue(); got != 20 {
		t.Errorf("_other published %v, want the 10 later streams' 20", got)
	}
	if acks := series(t, r, "felix_publish_ack_seconds"); len(acks) != 1 || acks["true"].GetHistogram().GetSampleCount() != MaxStreamSeries+12 {
		t.Errorf("felix_publish_ack_seconds: %v, want one series, durable=true, with every ack", acks)
	}
}

type fakeLog struct {
	next   uint64
	closed bool
}

func (f *fakeLog) StartOffset() uint64 { return 0 }
func (f *fakeLog) NextOffset() uint64  { return f.next }
func (f *fakeLog) Committed() uint64   { return f.next - 1 }
func (f *fakeLog) Closed() bool        { return f.closed }

// TestTrackShard: a named stream's shard is reported until its log
// closes; another stream's is never.
func TestTrackShard(t *testing.T) {
	s, err := ParseStreamSeries("t/ns/s")
	if err != nil {
		t.Fatal(err)
	}
	r := prometheus.NewRegistry()
	l := NewLatency(r, s)
	named, unnamed := &fakeLog{next: 7}, &fakeLog{next: 9}
	l.TrackShard("t", "ns", "s", 2, named)
	l.TrackShard("t", "ns", "x", 0, unnamed)
	gathered := func() []string {
		families, err := r.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, mf := range families {
			for _, m := range mf.GetMetric() {
				labels := ""
				for _, lp := range m.GetLabel() {
					labels += lp.GetName() + "=" + lp.GetValue() + " "
				}
				if mf.GetName() == "felix_stream_shard_next_offset" || mf.GetName() == "felix_stream_shard_committed_offset" {
					out = append(out, fmt.Sprintf("%s %s%v", mf.GetName(), labels, m.GetGauge().GetValue()))
				}
			}
		}
		slices.Sort(out)
		return out
	}
	want := []string{
		"felix_stream_shard_committed_offset namespace=ns shard=2 stream=s tenant=t 6",
		"felix_stream_shard_next_offset namespace=ns shard=2 stream=s tenant=t 7",
	}
	if got := gathered(); !slices.Equal(got, want) {
		t.Fatalf("gathered %q, want %q", got, want)
	}
	named.closed = true
	if got := gathered(); len(got) != 0 {
		t.Fatalf("gathered %q after the log closed, want nothing", got)
	}
}
