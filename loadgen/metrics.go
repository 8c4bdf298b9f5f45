package loadgen

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrapeTimeout bounds one read of a broker's /metrics page.
const scrapeTimeout = 5 * time.Second

// dropCounters are the broker's drop counters summed into Result.Dropped.
// Each counts batches (a refused publish batch, an evicted one, a refused
// coalesced delivery), not messages.
var dropCounters = []string{
	"felix_sub_queue_dropped_total",
	"felix_sub_queue_drop_old_total",
	"felix_lane_queue_dropped_total",
}

// scrapeDrops sums the drop counters on a broker's /metrics page.
func scrapeDrops(ctx context.Context, admin string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, scrapeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+admin+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	// promhttp negotiates the format; ask for the text one, which is what
	// sumCounters parses, rather than rely on what it sends by default.
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
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

// sumCounters adds up the samples of the named metrics in the Prometheus
// text format, over all their label sets. It fails on a page that does not
// parse, and on one with none of the names: that is not a felix broker's.
func sumCounters(r io.Reader, names []string) (int64, error) {
	// UTF-8 names are what client_golang may expose since v1.20; the legacy
	// scheme would refuse a page the broker considers valid.
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return 0, fmt.Errorf("parse metrics: %w", err)
	}
	sum, found := sumFamilies(slices.Collect(maps.Values(fams)), names)
	if found == 0 {
		return 0, fmt.Errorf("no %s on the metrics page: is it a felix broker's admin address?", strings.Join(names, ", "))
	}
	return int64(sum), nil
}

// sumFamilies adds up the counter (or untyped) samples of the named metric
// families, and says how many samples it found.
func sumFamilies(fams []*dto.MetricFamily, names []string) (sum float64, found int) {
	for _, mf := range fams {
		if !slices.Contains(names, mf.GetName()) {
			continue
		}
		for _, m := range mf.GetMetric() {
			switch {
			case m.Counter != nil:
				sum += m.GetCounter().GetValue()
			case m.Untyped != nil:
				// A page without TYPE lines has only untyped samples.
				sum += m.GetUntyped().GetValue()
			default:
				continue
			}
			found++
		}
	}
	return sum, found
}
