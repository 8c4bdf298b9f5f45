package loadgen

import (
	"testing"
	"time"
)

func ptr(v int64) *int64 { return &v }

func TestUnaccounted(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                string
		expected, delivered int64
		dropped             *int64
		want                *int64
	}{
		{"balanced, drops known", 100, 100, ptr(0), ptr(0)},
		{"balanced by drops", 100, 90, ptr(10), ptr(0)},
		{"missing beyond drops", 100, 80, ptr(10), ptr(10)},
		{"drops counted in batches, over-explain", 100, 98, ptr(5), ptr(-3)},
		{"nothing missing, drops unknown", 100, 100, nil, ptr(0)},
		{"missing, drops unknown", 100, 99, nil, nil},
	}
	for _, tt := range tests {
		got := unaccounted(tt.expected, tt.delivered, tt.dropped)
		if (got == nil) != (tt.want == nil) || (got != nil && *got != *tt.want) {
			t.Errorf("%s: unaccounted(%d, %d, %v) = %v, want %v", tt.name, tt.expected, tt.delivered, show(tt.dropped), show(got), show(tt.want))
		}
	}
}

// show prints a nullable count for failure messages.
func show(p *int64) any {
	if p == nil {
		return "nil"
	}
	return *p
}

func TestPercentiles(t *testing.T) {
	t.Parallel()
	h := newHist()
	if p := percentiles(h); p != (Percentiles{}) {
		t.Errorf("percentiles of an empty histogram = %+v, want all zero", p)
	}
	// 1..1000 µs, one sample each: p50 is 500 µs, p99.9 999 µs, within
	// the histogram's 3 significant digits.
	for i := int64(1); i <= 1000; i++ {
		record(h, i*int64(time.Microsecond))
	}
	p := percentiles(h)
	near := func(got, want time.Duration) bool { return got >= want-want/500 && got <= want+want/500 }
	if p.Samples != 1000 || !near(p.Min, time.Microsecond) || !near(p.Max, time.Millisecond) ||
		!near(p.P50, 500*time.Microsecond) || !near(p.P90, 900*time.Microsecond) ||
		!near(p.P99, 990*time.Microsecond) || !near(p.P999, 999*time.Microsecond) {
		t.Errorf("percentiles of 1..1000 µs = %+v, want 1000 samples, min 1µs, p50 500µs, p90 900µs, p99 990µs, p99.9 999µs, max 1ms", p)
	}
}

// TestRecordClamps: a latency out of the histogram's range still counts,
// at the nearest end, so a clock step cannot lose a sample.
func TestRecordClamps(t *testing.T) {
	t.Parallel()
	h := newHist()
	record(h, -5)
	record(h, 2*histMax)
	if p := percentiles(h); p.Samples != 2 || p.Min != 1 || p.Max < time.Duration(histMax)*999/1000 {
		t.Errorf("after recording -5 ns and 2 minutes: %+v, want 2 samples, min 1ns, max about a minute", p)
	}
}

func TestSetRates(t *testing.T) {
	t.Parallel()
	s := time.Second
	tests := []struct {
		name               string
		fanout, payload    int
		measPub, measDel   int64
		t0, pubEnd, last   time.Duration
		wantMsgs, wantDels float64
		wantPub, wantMB    float64
		wantElapsed        time.Duration
	}{
		{"fanout 2", 2, 1000, 1000, 2000, 1 * s, 2 * s, 3 * s, 500, 1000, 1000, 1, 2 * s},
		{"no subscribers", 0, 1000, 1000, 0, 1 * s, 3 * s, 0, 500, 0, 500, 0.5, 2 * s},
		{"nothing arrived", 1, 1000, 1000, 0, 1 * s, 2 * s, 0, 0, 0, 1000, 0, 0},
	}
	for _, tt := range tests {
		res := &Result{MeasuredPublished: tt.measPub, MeasuredDelivered: tt.measDel}
		res.setRates(Config{Fanout: tt.fanout, Payload: tt.payload}, tt.t0, tt.pubEnd, tt.last)
		if res.MsgsPerS != tt.wantMsgs || res.DeliveriesPerS != tt.wantDels || res.PubMsgsPerS != tt.wantPub ||
			res.MBPerS != tt.wantMB || res.Elapsed != tt.wantElapsed || res.PublishTime != tt.pubEnd-tt.t0 {
			t.Errorf("%s: msgs/s %v, deliveries/s %v, pub msgs/s %v, MB/s %v, elapsed %s, publish %s; want %v, %v, %v, %v, %s, %s",
				tt.name, res.MsgsPerS, res.DeliveriesPerS, res.PubMsgsPerS, res.MBPerS, res.Elapsed, res.PublishTime,
				tt.wantMsgs, tt.wantDels, tt.wantPub, tt.wantMB, tt.wantElapsed, tt.pubEnd-tt.t0)
		}
	}
}
