package broker_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/getfelix/felix-go/brokertest"
)

// dashboardPath is the Grafana dashboard the repository ships.
var dashboardPath = filepath.Join("..", "docs", "grafana", "felix.json")

var (
	descRe = regexp.MustCompile(`^Desc\{fqName: "([^"]+)".*variableLabels: \{([^}]*)\}\}$`)
	// metricRe finds the metric names in a query: this broker's, Go's and
	// the process collector's, with a label selector when one follows.
	metricRe   = regexp.MustCompile(`\b((?:felix|go|process)_[a-zA-Z0-9_]+)(\{[^}]*\})?`)
	selectorRe = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
	byRe       = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
)

// exportedMetrics is every metric a broker registers, whether or not it has
// a series yet, with its label names: what Registry.Describe lists.
func exportedMetrics(t *testing.T, reg *prometheus.Registry) map[string][]string {
	t.Helper()
	ch := make(chan *prometheus.Desc, 64)
	go func() {
		reg.Describe(ch)
		close(ch)
	}()
	out := map[string][]string{}
	for d := range ch {
		m := descRe.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read the name and labels of %s", d)
		}
		var labels []string
		if m[2] != "" {
			labels = strings.Split(m[2], ",")
		}
		out[m[1]] = labels
	}
	return out
}

// dashboardQueries are the PromQL expressions of the dashboard's panels
// (rows' nested ones too) and template variables, each with where it is.
func dashboardQueries(t *testing.T, raw []byte) map[string]string {
	t.Helper()
	var d struct {
		Panels     []dashPanel `json:"panels"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	out := map[string]string{}
	var walk func([]dashPanel)
	walk = func(ps []dashPanel) {
		for _, p := range ps {
			if p.Type != "row" && len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, tg := range p.Targets {
				if tg.Expr == "" {
					t.Errorf("panel %q target %s has no expr", p.Title, tg.RefID)
				}
				out["panel "+p.Title+" "+tg.RefID] = tg.Expr
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			var s string
			if err := json.Unmarshal(v.Query, &s); err != nil {
				t.Fatalf("variable %s: query is neither a string nor {query}: %s", v.Name, v.Query)
			}
			q.Query = s
		}
		out["variable "+v.Name] = q.Query
	}
	return out
}

type dashPanel struct {
	Title   string `json:"title"`
	Type    string `json:"type"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []dashPanel `json:"panels"`
}

// TestDashboardNamesExportedMetrics parses every query of the shipped
// Grafana dashboard and checks that each metric it names is one a broker
// registers (a histogram's _bucket, _sum and _count series too), with the
// per-stream series on, and that each label it selects or groups by is
// one of the metric's labels. A renamed metric or label fails here, not on
// an operator's empty panel.
func TestDashboardNamesExportedMetrics(t *testing.T) {
	cfg := brokertest.Config(t)
	cfg.MetricsStreams = "*/*/*"
	b := brokertest.Start(t, cfg)
	exported := exportedMetrics(t, b.Metrics().Registry)
	raw, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	queries := dashboardQueries(t, raw)
	if len(queries) < 10 {
		t.Fatalf("%s: %d queries, want the dashboard's panels", dashboardPath, len(queries))
	}
	for where, q := range queries {
		found := metricRe.FindAllStringSubmatch(q, -1)
		if len(found) == 0 {
			t.Errorf("%s: %q names no felix, go or process metric", where, q)
		}
		var names []string
		labelsOf := map[string][]string{} // each name's labels, "le" for a bucket
		for _, m := range found {
			name, extra := m[1], []string(nil)
			labels, ok := exported[name]
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if base, cut := strings.CutSuffix(name, suffix); !ok && cut {
					labels, ok = exported[base]
					if suffix == "_bucket" {
						extra = []string{"le"}
					}
				}
			}
			if !ok {
				t.Errorf("%s: %s is not a metric the broker exports (query %q)", where, name, q)
				continue
			}
			names = append(names, name)
			for _, sel := range selectorRe.FindAllStringSubmatch(m[2], -1) {
				if !slices.Contains(labels, sel[1]) {
					t.Errorf("%s: %s has no label %q (it has %v; query %q)", where, name, sel[1], labels, q)
				}
			}
			labelsOf[name] = append(slices.Clone(labels), extra...)
		}
		for _, by := range byRe.FindAllStringSubmatch(q, -1) {
			for l := range strings.SplitSeq(by[1], ",") {
				l = strings.TrimSpace(l)
				if l == "" {
					continue
				}
				if !slices.ContainsFunc(names, func(n string) bool { return slices.Contains(labelsOf[n], l) }) {
					t.Errorf("%s: groups by %q, which none of %v has (query %q)", where, l, names, q)
				}
			}
		}
	}
}
