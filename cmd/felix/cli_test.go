package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// These tests run the felix binary as a user would: brokers, publishers and
// subscribers as separate processes on 127.0.0.1, each under a deadline.

const (
	procTimeout = 60 * time.Second // the most any one felix process may live
	waitTimeout = 20 * time.Second // the most a test waits for one thing to happen
	stopWithin  = 5 * time.Second  // a clean stop on SIGTERM takes less
)

var (
	felixBin       string // built once by TestMain
	emptyConfigDir string // $XDG_CONFIG_HOME and $HOME of every felix run: no contexts
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "felix-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	felixBin = filepath.Join(dir, "felix")
	emptyConfigDir = filepath.Join(dir, "config")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	out, err := exec.CommandContext(ctx, "go", "build", "-o", felixBin, ".").CombinedOutput()
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "go build felix: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// TestPubSubRoundTrip is the basic session: a broker on a free port, a
// subscriber, a publisher, and a clean SIGTERM.
func TestPubSubRoundTrip(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	sub := start(t, opts{}, "sub", "--broker", b.addr, "--ca", b.ca, "--token", b.token, "--stream", "s", "--count", "3", "--json")
	sub.waitStderrLine(t, "subscribed")

	pub := runFelix(t, opts{}, "pub", "--broker", b.addr, "--ca", b.ca, "--token", b.token, "--stream", "s", "a", "b", "c")
	pub.wantExit(t, 0)
	if want := "published 3 messages to default/default/s (ack: message) in "; !strings.Contains(pub.stderr.String(), want) {
		t.Errorf("pub stderr = %q, want it to contain %q", pub.stderr, want)
	}

	sub.wantExit(t, 0)
	var got []string
	for _, line := range lines(sub.stdout.String()) {
		var ev struct{ Stream, Payload string }
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("sub --json printed %q: %v", line, err)
		}
		if ev.Stream != "default/default/s" {
			t.Errorf("event stream = %q, want default/default/s", ev.Stream)
		}
		got = append(got, ev.Payload)
	}
	if strings.Join(got, ",") != "a,b,c" {
		t.Errorf("sub payloads = %q, want a, b, c in order (stdout %q)", got, sub.stdout)
	}

	b.stop(t)
	if !strings.Contains(b.stderr.String(), `"broker stopped"`) {
		t.Errorf("broker log has no \"broker stopped\":\n%s", b.stderr)
	}
}

// TestPubStdin publishes standard input's lines under each ack mode,
// including a line longer than bufio.Scanner's default 64 KiB.
func TestPubStdin(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	long := strings.Repeat("L", 100<<10)
	for _, ack := range []string{"none", "message", "batch"} {
		t.Run(ack, func(t *testing.T) {
			stream := "lines-" + ack
			sub := start(t, opts{}, "sub", "--broker", b.addr, "--ca", b.ca, "--token", b.token, "--stream", stream, "--count", "4")
			sub.waitStderrLine(t, "subscribed")
			pub := runFelix(t, opts{stdin: strings.NewReader("x\n" + long + "\n\nz\n")},
				"pub", "--broker", b.addr, "--ca", b.ca, "--token", b.token, "--stream", stream, "--ack", ack)
			pub.wantExit(t, 0)
			want := fmt.Sprintf("published 4 messages to default/default/%s (ack: %s)", stream, ack)
			if !strings.Contains(pub.stderr.String(), want) {
				t.Errorf("pub stderr = %q, want it to contain %q", pub.stderr, want)
			}
			sub.wantExit(t, 0)
			if got, want := sub.stdout.String(), "x\n"+long+"\n\nz\n"; got != want {
				t.Errorf("sub stdout = %.80q (%d bytes), want %.80q (%d bytes)", got, len(got), want, len(want))
			}
		})
	}

	// `tail -f log | felix pub` ends with Ctrl-C: a clean stop that still
	// delivers what was read, even fire-and-forget.
	t.Run("interrupted", func(t *testing.T) {
		sub := start(t, opts{}, "sub", "--broker", b.addr, "--ca", b.ca, "--token", b.token, "--stream", "tail", "--count", "2")
		sub.waitStderrLine(t, "subscribed")
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		defer w.Close() // the input never ends by itself
		pub := start(t, opts{stdin: r}, "pub", "--broker", b.addr, "--ca", b.ca, "--token", b.token, "--stream", "tail", "--ack", "none")
		if _, err := io.WriteString(w, "one\ntwo\n"); err != nil {
			t.Fatal(err)
		}
		sub.wantExit(t, 0)
		pub.signal(t, syscall.SIGINT)
		pub.wantExitWithin(t, 0, stopWithin)
		if got, want := sub.stdout.String(), "one\ntwo\n"; got != want {
			t.Errorf("sub stdout = %q, want %q", got, want)
		}
		if want := "published 2 messages to default/default/tail (ack: none)"; !strings.Contains(pub.stderr.String(), want) {
			t.Errorf("pub stderr = %q, want it to contain %q", pub.stderr, want)
		}
	})
}

// TestSubJSONBinary: a payload that is not UTF-8 also comes as base64.
func TestSubJSONBinary(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	sub := start(t, opts{}, "sub", "--broker", b.addr, "--ca", b.ca, "--token", b.token, "--stream", "bin", "--count", "1", "--json")
	sub.waitStderrLine(t, "subscribed")
	runFelix(t, opts{stdin: strings.NewReader("\xff\xfeA\n")}, "pub", "--broker", b.addr, "--ca", b.ca, "--token", b.token, "--stream", "bin").wantExit(t, 0)
	sub.wantExit(t, 0)
	var ev map[string]string
	if err := json.Unmarshal(sub.stdout.Bytes(), &ev); err != nil {
		t.Fatalf("sub --json printed %q: %v", sub.stdout, err)
	}
	want := map[string]string{"stream": "default/default/bin", "payload": "\ufffdA", "payload_base64": "//5B"}
	if fmt.Sprint(ev) != fmt.Sprint(want) {
		t.Errorf("sub --json printed %v, want %v", ev, want)
	}
}

// TestBrokerConfig covers precedence, --print-config, and that bad keys,
// variables and values are refused by name before the broker starts.
func TestBrokerConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeConfig := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}

	t.Run("env shows in print-config", func(t *testing.T) {
		r := runFelix(t, opts{env: []string{"FELIX_SUBSCRIBER_QUEUE_CAPACITY=100"}}, "broker", "--print-config")
		r.wantExit(t, 0)
		if !containsLine(r.stdout.String(), "subscriber_queue_capacity: 100") {
			t.Errorf("print-config printed\n%s\nwant the line subscriber_queue_capacity: 100", r.stdout)
		}
	})

	t.Run("precedence", func(t *testing.T) {
		file := writeConfig("precedence.yaml", "pub_queue_depth: 10\npublish_window: 10\nfanout_batch_size: 10\nlisten: 127.0.0.1:6000\ndata_dir: from-file\n")
		r := runFelix(t, opts{env: []string{"FELIX_PUBLISH_WINDOW=20", "FELIX_FANOUT_BATCH_SIZE=20", "FELIX_LISTEN=127.0.0.1:7000"}},
			"broker", "--config", file, "--fanout-batch-size", "30", "--print-config")
		r.wantExit(t, 0)
		for _, want := range []string{
			"pub_queue_depth: 10",         // file
			"publish_window: 20",          // env over file
			"fanout_batch_size: 30",       // flag over env
			"listen: 127.0.0.1:7000",      // env over file; the --listen default does not undo it
			"data_dir: from-file",         // file; the --data-dir default does not undo it
			"subscriber_lane_shard: auto", // default
		} {
			if !containsLine(r.stdout.String(), want) {
				t.Errorf("print-config printed\n%s\nwant the line %q", r.stdout, want)
			}
		}
	})

	t.Run("print-config loads back", func(t *testing.T) {
		first := runFelix(t, opts{}, "broker", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--event-batch-max-delay-us", "1ms", "--print-config")
		first.wantExit(t, 0)
		again := runFelix(t, opts{}, "broker", "--config", writeConfig("printed.yaml", first.stdout.String()), "--print-config")
		again.wantExit(t, 0)
		if first.stdout.String() != again.stdout.String() {
			t.Errorf("config printed, loaded and printed again changed:\n%s\nbecame\n%s", first.stdout, again.stdout)
		}
	})

	refusals := []struct {
		name  string
		env   []string
		args  []string
		wants []string
	}{
		{name: "unknown variable", env: []string{"FELIX_SUBSCRIBR_QUEUE_CAPACITY=8"},
			wants: []string{"unknown environment variable FELIX_SUBSCRIBR_QUEUE_CAPACITY", "did you mean FELIX_SUBSCRIBER_QUEUE_CAPACITY?"}},
		{name: "unknown file key", args: []string{"--config", writeConfig("typo.yaml", "subscribr_queue_capacity: 8\n")},
			wants: []string{`unknown key "subscribr_queue_capacity"`, "typo.yaml:1"}},
		{name: "missing file", args: []string{"--config", filepath.Join(dir, "nope.yaml")}, wants: []string{"nope.yaml"}},
		{name: "invalid value", args: []string{"--subscriber-queue-policy", "drop_all"}, wants: []string{"subscriber_queue_policy"}},
		{name: "invalid env value", env: []string{"FELIX_PUB_QUEUE_DEPTH=0"}, wants: []string{"pub_queue_depth"}},
		{name: "bad flag value", args: []string{"--pub-queue-depth", "many"}, wants: []string{"pub-queue-depth", "bad integer"}},
		{name: "empty listen", args: []string{"--listen", ""}, wants: []string{"config: listen"}},
		{name: "unknown flag", args: []string{"--no-such-flag"}, wants: []string{"no-such-flag"}},
		{name: "argument", args: []string{"extra"}, wants: []string{"no arguments"}},
		{name: "plaintext etcd off loopback", args: []string{"--cluster-etcd", "http://192.0.2.1:2379"}, wants: []string{"config: cluster_etcd: ", "plaintext", "cluster_etcd_allow_plaintext"}},
		{name: "tls etcd named http", env: []string{"FELIX_CLUSTER_ETCD_TLS_CA=ca.pem"}, args: []string{"--cluster-etcd", "http://127.0.0.1:2379"}, wants: []string{"would drop TLS", "https://"}},
	}
	for _, tt := range refusals {
		t.Run(tt.name, func(t *testing.T) {
			// With a free port and a temp data dir, so a refusal that
			// wrongly starts the broker does no harm before the deadline.
			args := append([]string{"broker", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--data-dir", t.TempDir()}, tt.args...)
			r := runFelix(t, opts{env: tt.env, timeout: 10 * time.Second}, args...)
			r.wantExit(t, 2)
			for _, want := range tt.wants {
				if !strings.Contains(r.stderr.String(), want) {
					t.Errorf("stderr = %q, want it to contain %q", r.stderr, want)
				}
			}
			if !strings.HasPrefix(r.stderr.String(), "felix: ") {
				t.Errorf("stderr = %q, want it to start with \"felix: \"", r.stderr)
			}
		})
	}
}

// TestBrokerHelp: felix broker --help describes the knobs, not only their
// units and variables, and says what --data-dir holds.
func TestBrokerHelp(t *testing.T) {
	t.Parallel()
	r := runFelix(t, opts{}, "broker", "--help")
	r.wantExit(t, 0)
	for _, tt := range []struct{ flag, want string }{
		{"--data-dir", "metadata.db (stream definitions) and the durable streams' logs"},
		{"--pub-queue-depth", "publish batches a shard admits"},
		{"--publish-queue-wait-timeout-ms", "0 fails at once"},
		{"--subscriber-queue-policy", "what a full subscriber queue does"},
		{"--subscriber-queue-max-bytes-total", "0 = off"},
		{"--durable-retention-age-ms", "0 keeps everything"},
		{"--replay-ring-max-bytes", "replay ring"},
	} {
		var line string
		for _, l := range lines(r.stdout.String()) {
			if f := strings.Fields(l); len(f) > 0 && f[0] == tt.flag {
				line = l
			}
		}
		if !strings.Contains(line, tt.want) {
			t.Errorf("felix broker --help: the %s line is %q, want it to contain %q", tt.flag, line, tt.want)
		}
	}
}

// TestPubCount: generated messages in batches, every one delivered in order.
func TestPubCount(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	sub := start(t, opts{}, "sub", "--broker", b.addr, "--ca", b.ca, "--token", b.token, "--stream", "bench", "--count", "1000")
	sub.waitStderrLine(t, "subscribed")
	pub := runFelix(t, opts{}, "pub", "--broker", b.addr, "--ca", b.ca, "--token", b.token, "--stream", "bench",
		"--count", "1000", "--size", "128", "--ack", "batch", "--json")
	pub.wantExit(t, 0)
	var sum struct {
		Published, Bytes int64
		Seconds          float64
		Stream, Ack      string
	}
	if err := json.Unmarshal(pub.stdout.Bytes(), &sum); err != nil {
		t.Fatalf("pub --json printed %q: %v", pub.stdout, err)
	}
	if sum.Published != 1000 || sum.Bytes != 128000 || sum.Stream != "default/default/bench" || sum.Ack != "batch" || sum.Seconds <= 0 {
		t.Errorf("pub --json = %+v, want 1000 published, 128000 bytes, default/default/bench, batch, seconds > 0", sum)
	}

	sub.wantExit(t, 0)
	got := lines(sub.stdout.String())
	if len(got) != 1000 {
		t.Fatalf("sub printed %d lines, want 1000", len(got))
	}
	for i, line := range got {
		if want := fmt.Sprintf("%04d ", i+1); len(line) != 128 || !strings.HasPrefix(line, want) {
			t.Fatalf("message %d = %.20q... (%d bytes), want 128 bytes starting %q", i+1, line, len(line), want)
		}
	}
}

// TestPubCountFireAndForget: pub exits right after handing its last
// fire-and-forget publish to the client, and Close still delivers all of
// them: none is lost at exit.
func TestPubCountFireAndForget(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	// The stream's subscriber queue drops new batches when full, and a
	// fire-and-forget publisher outruns a starved `felix sub`: a queue of
	// one batch per message keeps what this test checks (pub sends all of
	// them before it exits) apart from the policy's drops.
	sub := start(t, opts{}, "sub", "--broker", b.addr, "--ca", b.ca, "--token", b.token, "--stream", "ff", "--count", "1000",
		"--queue-capacity", "1000")
	sub.waitStderrLine(t, "subscribed")
	pub := runFelix(t, opts{}, "pub", "--broker", b.addr, "--ca", b.ca, "--token", b.token, "--stream", "ff",
		"--count", "1000", "--size", "16", "--ack", "none")
	pub.wantExit(t, 0)
	sub.wantExit(t, 0)
	got := lines(sub.stdout.String())
	if len(got) != 1000 {
		t.Fatalf("sub printed %d lines, want 1000", len(got))
	}
	for i, line := range got {
		if want := fmt.Sprintf("%04d ", i+1); !strings.HasPrefix(line, want) {
			t.Fatalf("message %d = %q, want it to start %q", i+1, line, want)
		}
	}
}

// TestDefaultsInWorkingDir is the walkthrough: a broker with default
// settings (but free ports) writes ./felix-data, and clients started in the
// same folder trust its certificate and use its admin.token with no flags.
// From another folder, a client without a token is refused and told how to
// get one.
func TestDefaultsInWorkingDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	broker := start(t, opts{dir: dir}, "broker", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0")
	// stderr is not a terminal, so the log is JSON; the addresses are in it,
	// the admin endpoint's first.
	var addr, admin string
	broker.waitStderr(t, "log lines with the bound addresses", func(line string) bool {
		var entry struct{ Message, Addr, Admin string }
		if json.Unmarshal([]byte(line), &entry) != nil {
			return false
		}
		switch {
		case strings.HasPrefix(entry.Message, "admin endpoint serving"):
			admin = entry.Admin
		case entry.Message == "broker accepting connections":
			addr = entry.Addr
		}
		return addr != "" && admin != ""
	})
	for _, f := range []string{"cert.pem", "admin.token"} {
		if _, err := os.Stat(filepath.Join(dir, "felix-data", f)); err != nil {
			t.Fatalf("broker with defaults: %v", err)
		}
	}

	counted := start(t, opts{dir: dir}, "sub", "--broker", addr, "--stream", "orders", "--count", "2")
	endless := start(t, opts{dir: dir}, "sub", "--broker", addr, "--stream", "orders")
	counted.waitStderrLine(t, "subscribed")
	endless.waitStderrLine(t, "subscribed")
	runFelix(t, opts{dir: dir}, "pub", "--broker", addr, "--stream", "orders", "hello", "world").wantExit(t, 0)

	counted.wantExit(t, 0)
	if got := counted.stdout.String(); got != "hello\nworld\n" {
		t.Errorf("sub --count 2 printed %q, want \"hello\\nworld\\n\"", got)
	}
	endless.waitStdout(t, "both messages", func(out string) bool { return out == "hello\nworld\n" })
	endless.signal(t, syscall.SIGTERM)
	endless.wantExitWithin(t, 0, stopWithin)
	runFelix(t, opts{dir: dir}, "tree", "--admin", admin).wantExit(t, 0)

	// Another folder: the certificate is given, the token is not.
	ca := filepath.Join(dir, "felix-data", "cert.pem")
	elsewhere := opts{dir: t.TempDir()}
	for _, args := range [][]string{
		{"pub", "--broker", addr, "--ca", ca, "--stream", "orders", "x"},
		{"sub", "--broker", addr, "--ca", ca, "--stream", "orders", "--count", "1"},
		{"tree", "--admin", admin},
	} {
		r := runFelix(t, elsewhere, args...)
		r.wantExit(t, 1)
		for _, want := range []string{"sent no token", "--token", "FELIX_TOKEN", "felix token create --data-dir DATA_DIR", "from the broker's folder"} {
			if !strings.Contains(r.stderr.String(), want) {
				t.Errorf("felix %s from another folder: stderr = %q, want it to contain %q", args[0], r.stderr, want)
			}
		}
	}
	token := readToken(t, filepath.Join(dir, "felix-data"))
	withEnv := opts{dir: elsewhere.dir, env: []string{"FELIX_TOKEN=" + token}}
	runFelix(t, withEnv, "pub", "--broker", addr, "--ca", ca, "--stream", "orders", "x").wantExit(t, 0)
	runFelix(t, withEnv, "tree", "--admin", admin).wantExit(t, 0)
	// FELIX_TOKEN in the environment is the clients': a broker ignores it.
	runFelix(t, withEnv, "broker", "--print-config").wantExit(t, 0)

	broker.signal(t, syscall.SIGINT)
	broker.wantExitWithin(t, 0, stopWithin)
}

// TestClientErrors: what a user sees when something is wrong.
func TestClientErrors(t *testing.T) {
	t.Parallel()
	b := startBroker(t)

	t.Run("nothing listening", func(t *testing.T) {
		r := runFelix(t, opts{}, "pub", "--broker", freeUDPAddr(t), "--insecure", "--connect-timeout", "1s", "--stream", "s", "x")
		r.wantExit(t, 1)
		if want := "is `felix broker` running?"; !strings.Contains(r.stderr.String(), "cannot reach broker at 127.0.0.1:") ||
			!strings.Contains(r.stderr.String(), want) {
			t.Errorf("stderr = %q, want \"cannot reach broker at ADDR: %s\"", r.stderr, want)
		}
	})
	t.Run("untrusted certificate", func(t *testing.T) {
		// A folder with no ./felix-data: only the system roots are trusted.
		elsewhere := opts{dir: t.TempDir()}
		r := runFelix(t, elsewhere, "sub", "--broker", b.addr, "--stream", "s", "--count", "1")
		r.wantExit(t, 1)
		for _, want := range []string{"does not trust", "--ca FILE", "--insecure"} {
			if !strings.Contains(r.stderr.String(), want) {
				t.Errorf("stderr = %q, want it to contain %q", r.stderr, want)
			}
		}
		runFelix(t, elsewhere, "pub", "--broker", b.addr, "--stream", "s", "--insecure", "--token", b.token, "x").wantExit(t, 0)
	})
	for _, ack := range []string{"none", "message", "batch"} {
		t.Run("refused publish, ack "+ack, func(t *testing.T) {
			// Under --ack none the refusal comes back asynchronously; pub
			// still reports it.
			r := runFelix(t, opts{}, "pub", "--broker", b.addr, "--ca", b.ca, "--token", b.token, "--stream", "no spaces", "--ack", ack, "x")
			r.wantExit(t, 1)
			if want := "felix: the broker refused a publish to default/default/no spaces: invalid_request: "; !strings.HasPrefix(r.stderr.String(), want) {
				t.Errorf("stderr = %q, want it to start with %q", r.stderr, want)
			}
		})
	}
	// A broker's refusal reads once: the command's context, the code, the
	// broker's message, and no second "felix:".
	refusals := []struct {
		args []string
		want string
	}{
		{[]string{"sub", "--stream", "one-shard", "--shard", "3"},
			"felix: subscribe to default/default/one-shard: not_found: stream default/default/one-shard has 1 shard(s); there is no shard 3\n"},
		{[]string{"read", "--stream", "nope", "--from", "0"},
			"felix: read default/default/nope shard 0 from 0: not_found: no stream default/default/nope\n"},
	}
	for _, tt := range refusals {
		t.Run(fmt.Sprintf("refused %q", tt.args), func(t *testing.T) {
			r := runFelix(t, opts{}, append(tt.args, "--broker", b.addr, "--ca", b.ca, "--token", b.token)...)
			r.wantExit(t, 1)
			if got := r.stderr.String(); got != tt.want {
				t.Errorf("stderr = %q, want %q", got, tt.want)
			}
		})
	}
	usage := []struct {
		args []string
		want string
	}{
		{[]string{"pub", "x"}, "--stream is required"},
		{[]string{"pub", "--stream", "s", "--ack", "always", "x"}, "--ack"},
		{[]string{"pub", "--stream", "s", "--count", "3", "x"}, "not both"},
		{[]string{"sub", "--stream", "s", "extra"}, "no arguments"},
		{[]string{"sub", "--stream", "s", "--ca", "c.pem", "--insecure"}, "--ca and --insecure"},
		{[]string{"bogus"}, `unknown command "bogus"`},
		{nil, "Usage:"},
	}
	for _, tt := range usage {
		t.Run(fmt.Sprintf("usage %q", tt.args), func(t *testing.T) {
			r := runFelix(t, opts{}, tt.args...)
			r.wantExit(t, 2)
			if !strings.Contains(r.stderr.String(), tt.want) {
				t.Errorf("stderr = %q, want it to contain %q", r.stderr, tt.want)
			}
		})
	}
	t.Run("version", func(t *testing.T) {
		r := runFelix(t, opts{}, "version")
		r.wantExit(t, 0)
		if !strings.HasPrefix(r.stdout.String(), "felix ") {
			t.Errorf("felix version printed %q", r.stdout)
		}
	})
	t.Run("help", func(t *testing.T) {
		r := runFelix(t, opts{}, "pub", "--help")
		r.wantExit(t, 0)
		if !strings.Contains(r.stdout.String(), "--ack") {
			t.Errorf("felix pub --help printed %q", r.stdout)
		}
	})
}

// TestFromTime: felix read and felix sub --from-time start at the first
// record stored at or after the time, on a durable stream: here the second
// of two publishes a millisecond apart. Bad times, --from with --from-time
// and an in-memory stream are refused clearly.
func TestFromTime(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	conn := []string{"--broker", b.addr, "--ca", b.ca, "--token", b.token}
	felix := func(args ...string) *proc { return runFelix(t, opts{}, append(args, conn...)...) }
	felix("stream", "create", "--stream", "timeline", "--durable").wantExit(t, 0)
	felix("pub", "--stream", "timeline", "old-0", "old-1").wantExit(t, 0)
	afterOld := time.Now()
	// Times on the wire are milliseconds: the next records must be stored
	// in a later one than the old records.
	for time.Now().UnixMilli() <= afterOld.UnixMilli() {
		time.Sleep(time.Millisecond)
	}
	between := time.Now().Format(time.RFC3339Nano)
	felix("pub", "--stream", "timeline", "new-0", "new-1").wantExit(t, 0)

	r := felix("read", "--stream", "timeline", "--from-time", between, "--json")
	r.wantExit(t, 0)
	var got []string
	for _, line := range lines(r.stdout.String()) {
		var rec struct {
			Offset  uint64
			Payload string
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("read --json printed %q: %v", line, err)
		}
		got = append(got, fmt.Sprintf("%d:%s", rec.Offset, rec.Payload))
	}
	if strings.Join(got, ",") != "2:new-0,3:new-1" {
		t.Errorf("read --from-time %s printed %q, want 2:new-0 and 3:new-1", between, got)
	}
	r = felix("read", "--stream", "timeline", "--from-time", "2000-01-01T00:00:00+01:00")
	r.wantExit(t, 0)
	if r.stdout.String() != "old-0\nold-1\nnew-0\nnew-1\n" {
		t.Errorf("read --from-time before everything printed %q, want every record", r.stdout)
	}
	r = felix("read", "--stream", "timeline", "--from-time", time.Now().Add(time.Hour).Format(time.RFC3339))
	r.wantExit(t, 0)
	if r.stdout.String() != "" {
		t.Errorf("read --from-time an hour ahead printed %q, want nothing", r.stdout)
	}

	sub := start(t, opts{}, append([]string{"sub", "--stream", "timeline", "--from-time", between, "--count", "3"}, conn...)...)
	sub.waitStderrLine(t, "subscribed")
	felix("pub", "--stream", "timeline", "live").wantExit(t, 0)
	sub.wantExit(t, 0)
	if got := sub.stdout.String(); got != "new-0\nnew-1\nlive\n" {
		t.Errorf("sub --from-time %s printed %q, want new-0, new-1 then live", between, got)
	}

	felix("pub", "--stream", "volatile", "x").wantExit(t, 0)
	r = felix("read", "--stream", "volatile", "--from-time", between)
	r.wantExit(t, 1)
	if want := "felix: find time " + between + " in default/default/volatile shard 0: invalid_request: stream default/default/volatile is in memory; time lookups need a durable stream"; !strings.HasPrefix(r.stderr.String(), want) {
		t.Errorf("read --from-time on an in-memory stream: stderr %q, want it to start with %q", r.stderr, want)
	}
	for _, cmd := range []string{"read", "sub"} {
		usage := []struct {
			args []string
			want string
		}{
			{[]string{"--from", "0", "--from-time", between}, "--from and --from-time both say where to start: give one"},
			{[]string{"--from-time", "yesterday"}, `--from-time must be an RFC 3339 time such as 2026-01-02T15:04:05Z or 2026-01-02T16:04:05.250+01:00, got "yesterday"`},
			{[]string{"--from-time", "2026-01-02 15:04:05"}, "--from-time must be an RFC 3339 time"},
			{[]string{"--from-time", ""}, "--from-time must be an RFC 3339 time"},
		}
		for _, tt := range usage {
			r := felix(append([]string{cmd, "--stream", "timeline"}, tt.args...)...)
			r.wantExit(t, 2)
			if !strings.Contains(r.stderr.String(), tt.want) {
				t.Errorf("felix %s %q: stderr %q, want it to contain %q", cmd, tt.args, r.stderr, tt.want)
			}
		}
	}
}

// --- helpers ---

type opts struct {
	dir     string        // working directory; "" for the test's
	env     []string      // added to the environment, which has no other FELIX_ variable
	stdin   io.Reader     // nil: no input
	timeout time.Duration // 0: procTimeout
}

// proc is a running felix process.
type proc struct {
	args           []string
	cmd            *exec.Cmd
	stdout, stderr *notifyBuffer
	done           chan struct{} // closed when the process has exited
	err            error         // Wait's result, set before done closes
}

// start runs felix with args and kills it at the deadline or when the
// test ends, whichever is first.
func start(t *testing.T, o opts, args ...string) *proc {
	t.Helper()
	timeout := o.timeout
	if timeout == 0 {
		timeout = procTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	cmd := exec.CommandContext(ctx, felixBin, args...)
	cmd.Dir = o.dir
	cmd.Stdin = o.stdin
	cmd.WaitDelay = 5 * time.Second // stop waiting for output a killed process left to a grandchild
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FELIX_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	// No felix context of the user's may change what a test runs: the
	// config directory is an empty one, unless o.env names another.
	cmd.Env = append(cmd.Env, "XDG_CONFIG_HOME="+emptyConfigDir, "HOME="+emptyConfigDir)
	cmd.Env = append(cmd.Env, o.env...)
	p := &proc{args: args, cmd: cmd, stdout: newNotifyBuffer(), stderr: newNotifyBuffer(), done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("start felix %q: %v", args, err)
	}
	go func() {
		p.err = cmd.Wait()
		cancel()
		close(p.done)
	}()
	t.Cleanup(func() {
		cancel() // kills it if still running
		<-p.done
	})
	return p
}

// runFelix is start, waiting for the exit.
func runFelix(t *testing.T, o opts, args ...string) *proc {
	t.Helper()
	p := start(t, o, args...)
	<-p.done
	return p
}

func (p *proc) exitCode() int {
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode() // -1 when killed by a signal
	}
	if p.err != nil {
		return -1
	}
	return 0
}

func (p *proc) wantExit(t *testing.T, code int) {
	t.Helper()
	p.wantExitWithin(t, code, waitTimeout)
}

func (p *proc) wantExitWithin(t *testing.T, code int, d time.Duration) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(d):
		t.Fatalf("felix %q still running after %s\nstdout: %s\nstderr: %s", p.args, d, p.stdout, p.stderr)
	}
	if got := p.exitCode(); got != code {
		t.Fatalf("felix %q exited %d (%v), want %d\nstdout: %.2000s\nstderr: %s", p.args, got, p.err, code, p.stdout, p.stderr)
	}
}

func (p *proc) signal(t *testing.T, sig os.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal felix %q: %v", p.args, err)
	}
}

// waitStderrLine waits until stderr has a line equal to want.
func (p *proc) waitStderrLine(t *testing.T, want string) {
	t.Helper()
	p.waitStderr(t, fmt.Sprintf("the line %q", want), func(line string) bool { return line == want })
}

// waitStderr waits until a line of stderr satisfies ok.
func (p *proc) waitStderr(t *testing.T, what string, ok func(line string) bool) {
	t.Helper()
	p.wait(t, p.stderr, "stderr", what, func(s string) bool {
		for _, line := range lines(s) {
			if ok(line) {
				return true
			}
		}
		return false
	})
}

// waitStdout waits until all of stdout satisfies ok.
func (p *proc) waitStdout(t *testing.T, what string, ok func(out string) bool) {
	t.Helper()
	p.wait(t, p.stdout, "stdout", what, ok)
}

func (p *proc) wait(t *testing.T, b *notifyBuffer, name, what string, ok func(string) bool) {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		s, changed := b.snapshot()
		if ok(s) {
			return
		}
		select {
		case <-changed:
		case <-p.done:
			if s, _ := b.snapshot(); ok(s) {
				return
			}
			t.Fatalf("felix %q exited (%v) before its %s showed %s\nstdout: %s\nstderr: %s", p.args, p.err, name, what, p.stdout, p.stderr)
		case <-deadline:
			t.Fatalf("felix %q: no %s on %s after %s\nstdout: %s\nstderr: %s", p.args, what, name, waitTimeout, p.stdout, p.stderr)
		}
	}
}

// brokerProc is a broker on a free port with its data in a temp dir.
type brokerProc struct {
	*proc
	addr  string
	ca    string // its generated certificate
	token string // its admin.token: full rights on tenant default
}

func startBroker(t *testing.T, extra ...string) *brokerProc {
	t.Helper()
	dir := t.TempDir()
	addrFile := filepath.Join(dir, "addr")
	p := start(t, opts{}, append([]string{"broker", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "data"),
		"--addr-file", addrFile, "--log-format", "json"}, extra...)...)
	// The address file comes from another process, which cannot tell this
	// one when it is there, so the test polls for it, briefly and under a
	// deadline. The broker writes it by rename: it is whole once it exists.
	deadline := time.Now().Add(waitTimeout)
	for {
		data, err := os.ReadFile(addrFile)
		if err == nil {
			// admin.token is written before the listener binds, so before the address file.
			return &brokerProc{proc: p, addr: strings.TrimSpace(string(data)), ca: filepath.Join(dir, "data", "cert.pem"),
				token: readToken(t, filepath.Join(dir, "data"))}
		}
		select {
		case <-p.done:
			t.Fatalf("broker exited (%v) before writing %s\nstderr: %s", p.err, addrFile, p.stderr)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("broker wrote no %s in %s\nstderr: %s", addrFile, waitTimeout, p.stderr)
		}
	}
}

// readToken reads the admin.token a broker wrote to dataDir.
func readToken(t *testing.T, dataDir string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dataDir, "admin.token"))
	if err != nil {
		t.Fatalf("the broker's admin token: %v", err)
	}
	return strings.TrimSpace(string(data))
}

// stop sends SIGTERM and wants a clean exit soon after.
func (b *brokerProc) stop(t *testing.T) {
	t.Helper()
	b.signal(t, syscall.SIGTERM)
	b.wantExitWithin(t, 0, stopWithin)
}

// freeUDPAddr returns a loopback UDP address nothing listens on.
func freeUDPAddr(t *testing.T) string {
	t.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := c.LocalAddr().String()
	c.Close()
	return addr
}

// notifyBuffer collects a process's output and tells waiters when it grows.
type notifyBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{} // closed and replaced on every write
}

func newNotifyBuffer() *notifyBuffer { return &notifyBuffer{changed: make(chan struct{})} }

func (b *notifyBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	close(b.changed)
	b.changed = make(chan struct{})
	return b.buf.Write(p)
}

// snapshot returns the output so far and a channel closed when more comes.
func (b *notifyBuffer) snapshot() (string, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String(), b.changed
}

func (b *notifyBuffer) String() string { s, _ := b.snapshot(); return s }

func (b *notifyBuffer) Bytes() []byte { return []byte(b.String()) }

// lines splits complete lines; a last line without its newline is left out.
func lines(s string) []string {
	var out []string
	for line := range strings.Lines(s) {
		if strings.HasSuffix(line, "\n") {
			out = append(out, strings.TrimSuffix(line, "\n"))
		}
	}
	return out
}

func containsLine(s, want string) bool {
	for _, line := range lines(s) {
		if line == want {
			return true
		}
	}
	return false
}

// TestPubIfOffset: felix pub --if-offset writes only at the expected offset;
// a stale one exits 1 naming the stream's next offset, and writes nothing.
func TestPubIfOffset(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	conn := []string{"--broker", b.addr, "--ca", b.ca, "--token", b.token}
	felix := func(args ...string) *proc { return runFelix(t, opts{}, append(args, conn...)...) }
	felix("stream", "create", "--stream", "ledger", "--durable").wantExit(t, 0)
	first := felix("pub", "--stream", "ledger", "--if-offset", "0", "a", "b")
	first.wantExit(t, 0)
	if !strings.Contains(first.stderr.String(), "at offset 0") {
		t.Errorf("pub --if-offset 0 said %q, want it to name offset 0", first.stderr)
	}
	stale := felix("pub", "--stream", "ledger", "--if-offset", "0", "--json", "c")
	stale.wantExit(t, 1)
	if !strings.Contains(stale.stderr.String(), "next offset is 2") || !strings.Contains(stale.stdout.String(), `"written":false`) {
		t.Errorf("a stale --if-offset: stderr %q, stdout %q; want the next offset 2 and written false", stale.stderr, stale.stdout)
	}
	felix("pub", "--stream", "ledger", "--if-offset", "2", "c").wantExit(t, 0)
	read := felix("read", "--stream", "ledger", "--from", "0")
	read.wantExit(t, 0)
	if got := strings.Count(read.stdout.String(), "\n"); got != 3 {
		t.Errorf("the log holds %d records after two writes and a refusal, want 3:\n%s", got, read.stdout)
	}
	felix("pub", "--stream", "ledger", "--if-offset", "3").wantExit(t, 2) // no message
}

// TestPubIdempotent: felix pub --idempotent publishes through an idempotent
// producer: every message lands once, in order, with its offsets.
func TestPubIdempotent(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	conn := []string{"--broker", b.addr, "--ca", b.ca, "--token", b.token}
	felix := func(args ...string) *proc { return runFelix(t, opts{}, append(args, conn...)...) }
	felix("stream", "create", "--stream", "safe", "--durable").wantExit(t, 0)
	pub := felix("pub", "--stream", "safe", "--idempotent", "--json", "a", "b", "c")
	pub.wantExit(t, 0)
	if !strings.Contains(pub.stdout.String(), `"first_offset":0`) || !strings.Contains(pub.stdout.String(), `"last_offset":2`) {
		t.Errorf("pub --idempotent --json printed %q, want offsets 0 to 2", pub.stdout)
	}
	felix("pub", "--stream", "safe", "--idempotent", "--ack", "none", "x").wantExit(t, 2)
	read := felix("read", "--stream", "safe", "--from", "0")
	read.wantExit(t, 0)
	if got := strings.Count(read.stdout.String(), "\n"); got != 3 {
		t.Errorf("the log holds %d records, want 3:\n%s", got, read.stdout)
	}
}
