package loadgen

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// samplePage is a text exposition with every shape sumCounters meets: HELP
// and TYPE lines, a bare sample (untyped), a float in exponent form, label
// sets to sum over (one with an escaped quote and a space), a name that
// only starts like a drop counter, and unrelated metrics.
const samplePage = `# HELP felix_sub_queue_dropped_total Batches refused.
# TYPE felix_sub_queue_dropped_total counter
felix_sub_queue_dropped_total 3
felix_sub_queue_drop_old_total 1e+01
# TYPE felix_lane_queue_dropped_total counter
felix_lane_queue_dropped_total{lane="0"} 2
felix_lane_queue_dropped_total{lane="1",x="a \"b\" c"} 5
felix_sub_queue_dropped_totally 100
# TYPE felix_delivered_messages_total counter
felix_delivered_messages_total 7
# TYPE go_goroutines gauge
go_goroutines 12
`

func TestSumCounters(t *testing.T) {
	t.Parallel()
	got, err := sumCounters(strings.NewReader(samplePage), dropCounters)
	if err != nil || got != 20 {
		t.Errorf("sumCounters(samplePage) = %d, %v; want 20 (3 + 10 + 2 + 5)", got, err)
	}
}

func TestSumCountersRefuses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		give string
		want string
	}{
		{"no drop counters", "go_goroutines 5\n", "no felix_sub_queue_dropped_total"},
		{"not a number", "felix_sub_queue_dropped_total many\n", "parse metrics"},
		{"unclosed labels", "felix_lane_queue_dropped_total{lane=\"0\" 2\n", "parse metrics"},
		{"an HTML page", "<html><body>not metrics</body></html>\n", "parse metrics"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := sumCounters(strings.NewReader(tt.give), dropCounters)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("sumCounters(%q) = %d, %v; want an error containing %q", tt.give, got, err, tt.want)
			}
		})
	}
}

// dropRegistry is a registry like a broker's: drop counters, one of them
// with labels, and a counter that is not a drop.
func dropRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	sub := prometheus.NewCounter(prometheus.CounterOpts{Name: "felix_sub_queue_dropped_total", Help: "h"})
	lane := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "felix_lane_queue_dropped_total", Help: "h"}, []string{"lane"})
	other := prometheus.NewCounter(prometheus.CounterOpts{Name: "felix_published_messages_total", Help: "h"})
	reg.MustRegister(sub, lane, other)
	sub.Add(4)
	lane.WithLabelValues("0").Add(1)
	lane.WithLabelValues("1").Add(2)
	other.Add(1000)
	return reg
}

// TestSumFamiliesGathered reads the counters the way the embedded broker's
// are read: straight from a registry.
func TestSumFamiliesGathered(t *testing.T) {
	t.Parallel()
	mfs, err := dropRegistry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	if sum, found := sumFamilies(mfs, dropCounters); sum != 7 || found != 3 {
		t.Errorf("sumFamilies = %v over %d samples, want 7 over 3", sum, found)
	}
}

// TestScrapeDrops reads the same counters over HTTP, as promhttp serves
// them: the request, the negotiated format and the parse together.
func TestScrapeDrops(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(promhttp.HandlerFor(dropRegistry(), promhttp.HandlerOpts{}))
	defer srv.Close()
	admin := strings.TrimPrefix(srv.URL, "http://")
	if got, err := scrapeDrops(context.Background(), admin); err != nil || got != 7 {
		t.Errorf("scrapeDrops(%s) = %d, %v; want 7", admin, got, err)
	}
}
