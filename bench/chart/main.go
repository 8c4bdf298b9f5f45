// Command chart draws bench/compare.sh's summary as an SVG bar chart, with
// no tools beyond the standard library:
//
//	go run ./bench/chart -in summary.tsv -out bench/results/latest.svg -title "..."
//
// The input is the TSV compare.sh writes, one row per scenario and metric:
//
//	scenario <TAB> metric <TAB> unit <TAB> felix <TAB> nats <TAB> ratio
//
// (felix and nats are medians; "NA" where a system has no value). Three
// panels: the Felix/NATS ratio of delivered throughput (metric
// "deliveries/s"), p99 latency side by side (metric "p99"), and the healthy
// subscriber's rate next to a frozen one as a share of its unobstructed rate
// (metric "healthy share").
package main

import (
	"bufio"
	"flag"
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
)

type row struct {
	scenario, metric, unit string
	felix, nats, ratio     float64 // NaN: no value
}

func main() {
	in := flag.String("in", "", "summary TSV from compare.sh (default: standard input)")
	out := flag.String("out", "", "SVG file to write (default: standard output)")
	title := flag.String("title", "Felix vs NATS", "chart title")
	flag.Parse()
	var r io.Reader = os.Stdin
	if *in != "" {
		f, err := os.Open(*in)
		if err != nil {
			fail(err)
		}
		defer f.Close()
		r = f
	}
	rows, err := parse(r)
	if err != nil {
		fail(err)
	}
	svg := render(*title, rows)
	if *out == "" {
		fmt.Print(svg)
		return
	}
	if err := os.WriteFile(*out, []byte(svg), 0o644); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "chart:", err)
	os.Exit(1)
}

func parse(r io.Reader) ([]row, error) {
	var rows []row
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimRight(sc.Text(), "\r")
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(line, "\t")
		if len(f) != 6 {
			return nil, fmt.Errorf("line %d: want 6 tab-separated fields, got %d", n, len(f))
		}
		rows = append(rows, row{scenario: f[0], metric: f[1], unit: f[2], felix: num(f[3]), nats: num(f[4]), ratio: num(f[5])})
	}
	return rows, sc.Err()
}

func num(s string) float64 {
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil {
		return math.NaN()
	}
	return v
}

const (
	width     = 960
	labelW    = 250 // left column for scenario names
	barH      = 16
	gap       = 10
	panelTop  = 56 // room for a panel's title and legend
	chartW    = width - labelW - 110
	felixFill = "#2f6fb3"
	natsFill  = "#9aa5b1"
	ratioFill = "#3a8f5c"
)

type svgBuf struct{ strings.Builder }

func (b *svgBuf) f(format string, a ...any) { fmt.Fprintf(b, format, a...) }

func (b *svgBuf) text(x, y float64, anchor, size, weight, s string) {
	b.f(`<text x="%.1f" y="%.1f" text-anchor="%s" font-size="%s" font-weight="%s">%s</text>`+"\n", x, y, anchor, size, weight, html.EscapeString(s))
}

func render(title string, rows []row) string {
	var body svgBuf
	y := 40.0
	body.text(width/2, 26, "middle", "18", "bold", title)

	pick := func(metric string) []row {
		var out []row
		for _, r := range rows {
			if r.metric == metric {
				out = append(out, r)
			}
		}
		return out
	}
	if rs := pick("deliveries/s"); len(rs) > 0 {
		y = ratioPanel(&body, y, "Delivered throughput, Felix / NATS (median; 1.0 = equal, higher is better for Felix)", rs)
	}
	if rs := pick("p99"); len(rs) > 0 {
		y = pairPanel(&body, y, "p99 end-to-end latency, µs (median; lower is better)", rs, func(v float64) string { return fmt.Sprintf("%.0f µs", v) })
	}
	if rs := pick("healthy share"); len(rs) > 0 {
		y = pairPanel(&body, y, "Healthy subscriber next to a frozen one, % of its unobstructed rate (median; higher is better)", rs,
			func(v float64) string { return fmt.Sprintf("%.0f%%", v*100) })
	}
	var out svgBuf
	out.f(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%.0f" viewBox="0 0 %d %.0f" font-family="sans-serif">`+"\n", width, y+10, width, y+10)
	out.f(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	out.WriteString(body.String())
	out.f("</svg>\n")
	return out.String()
}

// ratioPanel draws one bar per row: its ratio, with a line at 1.0.
func ratioPanel(b *svgBuf, y float64, title string, rs []row) float64 {
	b.text(20, y+20, "start", "14", "bold", title)
	top := y + panelTop - 20
	hi := 1.0
	for _, r := range rs {
		if !math.IsNaN(r.ratio) {
			hi = math.Max(hi, r.ratio)
		}
	}
	hi = niceCeil(hi * 1.1)
	scale := chartW / hi
	for i, r := range rs {
		by := top + float64(i)*(barH+gap)
		b.text(labelW-10, by+barH-3, "end", "12", "normal", r.scenario)
		if math.IsNaN(r.ratio) {
			b.text(labelW+4, by+barH-3, "start", "12", "normal", "no value")
			continue
		}
		w := r.ratio * scale
		b.f(`<rect x="%d" y="%.1f" width="%.1f" height="%d" fill="%s"/>`+"\n", labelW, by, w, barH, ratioFill)
		b.text(float64(labelW)+w+6, by+barH-3, "start", "12", "normal", fmt.Sprintf("%.2f×", r.ratio))
	}
	bottom := top + float64(len(rs))*(barH+gap)
	one := float64(labelW) + scale
	b.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black" stroke-dasharray="4 3"/>`+"\n", one, top-6, one, bottom)
	b.text(one, bottom+12, "middle", "11", "normal", "1.0")
	return bottom + 30
}

// pairPanel draws two bars per row, Felix above NATS, on a shared scale.
func pairPanel(b *svgBuf, y float64, title string, rs []row, label func(float64) string) float64 {
	b.text(20, y+20, "start", "14", "bold", title)
	legendY := y + 34
	b.f(`<rect x="%d" y="%.1f" width="12" height="12" fill="%s"/>`+"\n", labelW, legendY-10, felixFill)
	b.text(float64(labelW)+16, legendY, "start", "12", "normal", "Felix")
	b.f(`<rect x="%d" y="%.1f" width="12" height="12" fill="%s"/>`+"\n", labelW+70, legendY-10, natsFill)
	b.text(float64(labelW)+86, legendY, "start", "12", "normal", "NATS")
	top := y + panelTop
	hi := 0.0
	for _, r := range rs {
		for _, v := range []float64{r.felix, r.nats} {
			if !math.IsNaN(v) {
				hi = math.Max(hi, v)
			}
		}
	}
	if hi <= 0 {
		hi = 1
	}
	scale := chartW / niceCeil(hi*1.05)
	for i, r := range rs {
		by := top + float64(i)*(2*barH+gap)
		b.text(labelW-10, by+barH+4, "end", "12", "normal", r.scenario)
		for j, v := range []float64{r.felix, r.nats} {
			fill := []string{felixFill, natsFill}[j]
			yy := by + float64(j*barH)
			if math.IsNaN(v) {
				b.text(labelW+4, yy+barH-3, "start", "11", "normal", "no value")
				continue
			}
			w := v * scale
			b.f(`<rect x="%d" y="%.1f" width="%.1f" height="%d" fill="%s"/>`+"\n", labelW, yy, w, barH-1, fill)
			b.text(float64(labelW)+w+6, yy+barH-4, "start", "11", "normal", label(v))
		}
	}
	return top + float64(len(rs))*(2*barH+gap) + 20
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}
