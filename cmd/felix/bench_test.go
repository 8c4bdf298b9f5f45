package main

import (
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// benchJSON is the part of felix bench --json the tests read. Pointers
// tell a null (unknown) from a zero.
type benchJSON struct {
	Profile           string
	Broker            string
	Policy            string
	Payload           int64
	Batch             int
	Fanout            int
	SubConns          int `json:"sub_conns"`
	Published         int64
	Delivered         int64
	Expected          int64
	Dropped           *int64
	Unaccounted       *int64
	TimedOut          bool  `json:"timed_out"`
	MeasuredPublished int64 `json:"measured_published"`
	MeasuredDelivered int64 `json:"measured_delivered"`

	MsgsPerS       float64 `json:"msgs_per_s"`
	DeliveriesPerS float64 `json:"deliveries_per_s"`
	MBPerS         float64 `json:"mb_per_s"`
	P50US          float64 `json:"p50_us"`
	P90US          float64 `json:"p90_us"`
	P99US          float64 `json:"p99_us"`
	P999US         float64 `json:"p999_us"`
	AckP50US       float64 `json:"ack_p50_us"`
	AckP99US       float64 `json:"ack_p99_us"`
}

func parseBench(t *testing.T, p *proc) benchJSON {
	t.Helper()
	var res benchJSON
	if err := json.Unmarshal(p.stdout.Bytes(), &res); err != nil {
		t.Fatalf("bench --json printed %q: %v\nstderr: %s", p.stdout, err, p.stderr)
	}
	return res
}

// checkBalanced wants a lossless, fully accounted run with every rate and
// latency field filled in.
func checkBalanced(t *testing.T, res benchJSON, fanout int) {
	t.Helper()
	if res.Unaccounted == nil || *res.Unaccounted != 0 {
		t.Errorf("unaccounted = %v, want 0", res.Unaccounted)
	}
	if res.Published == 0 || res.Delivered != res.Published*int64(fanout) || res.Expected != res.Delivered {
		t.Errorf("published %d, delivered %d, expected %d: want delivered = published x %d", res.Published, res.Delivered, res.Expected, fanout)
	}
	if res.MeasuredPublished == 0 || res.MeasuredDelivered != res.MeasuredPublished*int64(fanout) {
		t.Errorf("measured published %d, delivered %d: want delivered = published x %d", res.MeasuredPublished, res.MeasuredDelivered, fanout)
	}
	for name, v := range map[string]float64{
		"msgs_per_s": res.MsgsPerS, "deliveries_per_s": res.DeliveriesPerS, "mb_per_s": res.MBPerS,
		"p50_us": res.P50US, "p90_us": res.P90US, "p99_us": res.P99US, "p999_us": res.P999US,
		"ack_p50_us": res.AckP50US, "ack_p99_us": res.AckP99US,
	} {
		if !(v > 0) {
			t.Errorf("%s = %v, want > 0", name, v)
		}
	}
	if !(res.P50US <= res.P90US && res.P90US <= res.P99US && res.P99US <= res.P999US) {
		t.Errorf("percentiles out of order: p50 %v, p90 %v, p99 %v, p99.9 %v", res.P50US, res.P90US, res.P99US, res.P999US)
	}
}

// TestBenchLatencySmoke: the latency profile against the embedded broker,
// a couple of seconds at a modest rate.
func TestBenchLatencySmoke(t *testing.T) {
	t.Parallel()
	p := runFelix(t, opts{}, "bench", "--profile", "latency", "--rate", "500", "--duration", "2s",
		"--warmup", "50", "--fanout", "2", "--json", "--quiet")
	p.wantExit(t, 0)
	res := parseBench(t, p)
	checkBalanced(t, res, 2)
	if res.Profile != "latency" || res.Broker != "embedded" || res.Policy != "block" || res.Batch != 1 || res.Fanout != 2 || res.Payload != 128 {
		t.Errorf("parameters = %+v, want latency, embedded, block, batch 1, fanout 2, payload 128", res)
	}
	if res.Dropped == nil || *res.Dropped != 0 {
		t.Errorf("dropped = %v, want 0 (the embedded broker's counters)", res.Dropped)
	}
	if res.Published != 50+res.MeasuredPublished {
		t.Errorf("published %d, want the 50 warmup + %d measured", res.Published, res.MeasuredPublished)
	}
}

// TestBenchThroughputSmoke: batches, subscribers sharing one connection,
// the human table on stdout without --json.
func TestBenchThroughputSmoke(t *testing.T) {
	t.Parallel()
	p := runFelix(t, opts{}, "bench", "--profile", "throughput", "--count", "20000", "--warmup", "640",
		"--fanout", "3", "--sub-conns", "1", "--payload", "64", "--json")
	p.wantExit(t, 0)
	res := parseBench(t, p)
	checkBalanced(t, res, 3)
	if res.Batch != 64 || res.SubConns != 1 || res.MeasuredPublished != 20000 {
		t.Errorf("batch %d, sub_conns %d, measured published %d: want 64, 1, 20000", res.Batch, res.SubConns, res.MeasuredPublished)
	}
	// With --json the table goes to stderr, alongside the progress lines.
	if !strings.Contains(p.stderr.String(), "unaccounted      0") {
		t.Errorf("stderr has no table with unaccounted 0:\n%s", p.stderr)
	}

	prof := filepath.Join(t.TempDir(), "cpu.pprof")
	table := runFelix(t, opts{}, "bench", "--count", "2000", "--warmup", "0", "--quiet", "--cpu-profile", prof)
	table.wantExit(t, 0)
	// A Go CPU profile is a gzipped protocol buffer.
	if f, err := os.Open(prof); err != nil {
		t.Errorf("--cpu-profile wrote no file: %v", err)
	} else {
		zr, err := gzip.NewReader(f)
		if err == nil {
			var n int64
			n, err = io.Copy(io.Discard, zr)
			if err == nil && n == 0 {
				err = errors.New("empty")
			}
		}
		if err != nil {
			t.Errorf("--cpu-profile's file is not a profile: %v", err)
		}
		_ = f.Close()
	}
	for _, want := range []string{"throughput profile", "unaccounted      0", "latency          p50 "} {
		if !strings.Contains(table.stdout.String(), want) {
			t.Errorf("bench stdout has no %q:\n%s", want, table.stdout)
		}
	}
}

// TestBenchRemote: against a broker process, with its drop counters read
// through --admin, and without (drops unknown, but nothing missing).
func TestBenchRemote(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	var admin string
	b.waitStderr(t, "the admin address in the log", func(line string) bool {
		var entry struct{ Message, Admin string }
		if json.Unmarshal([]byte(line), &entry) == nil && entry.Admin != "" {
			admin = entry.Admin
			return true
		}
		return false
	})

	p := runFelix(t, opts{}, "bench", "--broker", b.addr, "--ca", b.ca, "--token", b.token, "--admin", admin,
		"--count", "5000", "--warmup", "0", "--json", "--quiet")
	p.wantExit(t, 0)
	res := parseBench(t, p)
	checkBalanced(t, res, 1)
	if res.Dropped == nil || *res.Dropped != 0 || res.Broker != b.addr {
		t.Errorf("broker %q, dropped %v: want %s, 0", res.Broker, res.Dropped, b.addr)
	}

	p = runFelix(t, opts{}, "bench", "--broker", b.addr, "--ca", b.ca, "--token", b.token, "--count", "2000", "--warmup", "0", "--json", "--quiet")
	p.wantExit(t, 0)
	if res := parseBench(t, p); res.Dropped != nil || res.Unaccounted == nil || *res.Unaccounted != 0 {
		t.Errorf("without --admin: dropped %v, unaccounted %v; want null (unknown) and 0 (nothing missing)", res.Dropped, res.Unaccounted)
	}
	if !strings.Contains(p.stdout.String(), `"dropped":null`) {
		t.Errorf("without --admin, --json should say \"dropped\":null: %s", p.stdout)
	}
}

// TestBenchRoles: a run split over a --role sub and a --role pub process
// against one broker balances on the sub side, which counts the warmup the
// pub process sent apart from the measured messages; --ack none publishes
// unanswered and its deliveries are still counted.
func TestBenchRoles(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "--subscriber-queue-policy", "block", "--subscriber-lane-queue-policy", "block")
	remote := []string{"bench", "--broker", b.addr, "--ca", b.ca, "--token", b.token, "--json", "--quiet"}
	for _, ack := range []string{"batch", "none"} {
		stream := "roles-" + ack
		sub := start(t, opts{}, append(remote, "--role", "sub", "--stream", stream, "--fanout", "3", "--count", "6400", "--warmup", "640")...)
		sub.waitStderrLine(t, "subscribed")
		pub := runFelix(t, opts{}, append(remote, "--role", "pub", "--stream", stream, "--count", "6400", "--warmup", "640", "--ack", ack)...)
		pub.wantExit(t, 0)
		sub.wantExit(t, 0)
		pr, sr := parseBench(t, pub), parseBench(t, sub)
		if pr.Published != 7040 || pr.Fanout != 0 || pr.Expected != 0 {
			t.Errorf("ack %s: pub published %d, fanout %d, expected %d: want 7040, 0, 0", ack, pr.Published, pr.Fanout, pr.Expected)
		}
		if sr.Expected != 3*7040 || sr.Delivered != sr.Expected || sr.MeasuredDelivered != 3*6400 ||
			sr.Unaccounted == nil || *sr.Unaccounted != 0 || !(sr.DeliveriesPerS > 0) {
			t.Errorf("ack %s: sub expected %d, delivered %d (measured %d), unaccounted %v, deliveries/s %v: "+
				"want 21120, all of them (19200 measured), 0 and a rate", ack, sr.Expected, sr.Delivered, sr.MeasuredDelivered, sr.Unaccounted, sr.DeliveriesPerS)
		}
		if sr.P50US != 0 {
			t.Errorf("ack %s: sub reported a p50 of %vµs from another process's clock, want none", ack, sr.P50US)
		}
	}
}

// TestBenchDeadline: a run that cannot finish in its --timeout reports
// what it got and exits 1, on time.
func TestBenchDeadline(t *testing.T) {
	t.Parallel()
	start := time.Now()
	p := runFelix(t, opts{}, "bench", "--profile", "latency", "--rate", "50", "--count", "1000", "--warmup", "0",
		"--timeout", "2s", "--json", "--quiet")
	p.wantExit(t, 1)
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("a run with --timeout 2s took %s", took)
	}
	res := parseBench(t, p)
	if !res.TimedOut || res.Published == 0 || res.Published >= 1000 {
		t.Errorf("timed_out %v, published %d: want true and a partial count", res.TimedOut, res.Published)
	}
	if !strings.Contains(p.stderr.String(), "timed out after 2s (--timeout)") {
		t.Errorf("stderr does not say it timed out:\n%s", p.stderr)
	}
}

// TestBenchBadInput: nonsense is refused before anything runs, with exit 2
// and a message naming the problem.
func TestBenchBadInput(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--payload", "4"}, "--payload must be at least 8 bytes"},
		{[]string{"--payload", "32MiB"}, "larger than the 16 MiB frame cap"},
		{[]string{"--payload", "1MiB", "--batch", "64"}, "does not fit in one 16 MiB frame"},
		{[]string{"--profile", "latency", "--fanout", "0"}, "--fanout 0 with the latency profile"},
		{[]string{"--fanout", "0", "--sub-conns", "2"}, "there are no subscribers to connect"},
		{[]string{"--fanout", "-1"}, "--fanout must not be negative"},
		{[]string{"--fanout", "2", "--sub-conns", "3"}, "more connections than --fanout 2"},
		{[]string{"--publishers", "0"}, "--publishers must be 1 to 1000"},
		{[]string{"--profile", "latency", "--rate", "2e6"}, "cannot be paced"},
		{[]string{"--rate", "-5"}, "--rate must be a finite number"},
		{[]string{"--rate", "NaN"}, "--rate must be a finite number"},
		{[]string{"--count", "0", "--duration", "0"}, "--count and --duration are both zero"},
		{[]string{"--count", "0"}, "--count and --duration are both zero"},
		{[]string{"--count", "10", "--duration", "1s"}, "give --count or --duration, not both"},
		{[]string{"--count", "-3"}, "--count must not be negative"},
		{[]string{"--warmup", "-2"}, "--warmup must not be negative"},
		{[]string{"--duration", "2s", "--timeout", "1s"}, "leaves no time past --duration"},
		{[]string{"--profile", "latency", "--batch", "8"}, "publishes one event per batch"},
		{[]string{"--profile", "bogus"}, "--profile: want latency or throughput"},
		{[]string{"--policy", "drop_all"}, "--policy: want block, drop_new or drop_old"},
		{[]string{"--fsync", "always"}, "--fsync must be none, periodic or on_commit"},
		{[]string{"--fsync", "on_commit"}, "--fsync applies to --durable"},
		{[]string{"--replicas", "3"}, "--replicas applies to --durable streams only"},
		{[]string{"--durable", "--replicas", "-1"}, "--replicas must not be negative"},
		{[]string{"--durable", "--replicas", "3"}, "--replicas 3 needs --broker at a member of a cluster"},
		{[]string{"--ca", "x.pem"}, "--ca applies to --broker only"},
		{[]string{"--admin", "127.0.0.1:1"}, "--admin applies to --broker only"},
		{[]string{"--broker", "127.0.0.1:5000", "--policy", "block"}, "uses its own subscriber_queue_policy"},
		{[]string{"--broker", "nowhere"}, "--broker: want host:port"},
		{[]string{"--broker", "127.0.0.1:5000", "--ca", "x.pem", "--insecure"}, "contradict each other"},
		{[]string{"--stream", "a/b"}, "--stream: stream name"},
		{[]string{"--role", "relay"}, "--role: want both, pub or sub"},
		{[]string{"--role", "pub", "--stream", "s"}, "needs --broker and --stream"},
		{[]string{"--role", "sub", "--broker", "127.0.0.1:5000"}, "needs --broker and --stream"},
		{[]string{"--role", "pub", "--broker", "127.0.0.1:5000", "--stream", "s", "--fanout", "2"}, "--role pub holds no subscribers"},
		{[]string{"--role", "sub", "--broker", "127.0.0.1:5000", "--stream", "s", "--fanout", "0"}, "--role sub needs --fanout 1 or more"},
		{[]string{"--role", "sub", "--broker", "127.0.0.1:5000", "--stream", "s", "--duration", "2s"}, "--role sub needs --count"},
		{[]string{"--role", "sub", "--broker", "127.0.0.1:5000", "--stream", "s", "--ack", "none"}, "belong to the --role pub process"},
		{[]string{"--ack", "sometimes"}, "--ack: want none, message or batch"},
		{[]string{"extra"}, "bench takes no arguments"},
		{[]string{"--no-such-flag"}, "unknown flag: --no-such-flag"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			p := runFelix(t, opts{timeout: 20 * time.Second}, append([]string{"bench"}, tc.args...)...)
			p.wantExit(t, 2)
			if !strings.Contains(p.stderr.String(), tc.want) {
				t.Errorf("stderr = %q, want it to contain %q", p.stderr, tc.want)
			}
			if !strings.Contains(p.stderr.String(), "Run 'felix bench --help' for usage.") {
				t.Errorf("stderr = %q, want the pointer to bench's help", p.stderr)
			}
			if p.stdout.String() != "" {
				t.Errorf("a refused run printed on stdout: %q", p.stdout)
			}
		})
	}
}

func TestGroupDigits(t *testing.T) {
	t.Parallel()
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -45000: "-45,000"} {
		if got := groupDigits(n); got != want {
			t.Errorf("groupDigits(%d) = %q, want %q", n, got, want)
		}
	}
}
