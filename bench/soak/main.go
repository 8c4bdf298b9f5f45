// Command soak is the soak benchmark of what clients can make the broker
// hold: it runs a felix broker as a child process on loopback, holds many
// connections and subscriptions on it for a long time under mixed publish
// and read traffic while a few hostile clients loop the attacks
// broker/hostile_test.go plays once, and reports the broker process's peak
// memory and file descriptors. It is not run in CI (the
// smoke test in main_test.go is, at a tiny scale):
//
//	go run ./bench/soak --duration 10m                  # 1000 connections, 10 000 subscriptions
//	go run ./bench/soak --duration 1m --json > soak.json
//
// Phases: the broker starts (--listen and --admin on 127.0.0.1:0, a temp
// data directory, its admin.token); one client creates the streams (every
// fifth durable); the rest of --conns connect; --subs subscriptions are
// spread over the connections and the streams; then --duration of load:
// publishers publish batches at --rate messages a second in all, readers
// range-read the durable streams, every subscription drains its events and
// checks their sequence numbers, and the hostile clients loop. Every
// --sample it reads the broker's /proc/PID/status (VmRSS, VmHWM), counts
// /proc/PID/fd, scrapes /metrics and asks /live, and prints a progress line.
// At the end it closes every client, checks that the broker let go of the
// connections and subscriptions, asks /live once more, stops the broker with
// SIGTERM and prints the summary (a table, or JSON with --json).
//
// Only the broker process is measured: the QUIC state of a thousand client
// connections belongs to this load generator, which shares the machine.
//
// Exit status: 0 when the run was clean, 1 when the broker died or stopped
// answering /live, a well-behaved client saw an error, or the target counts
// were not reached; 2 for a flag mistake; 3 when the hard deadline cut it.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// config is one run's shape; zero fields take the defaults of flags.
type config struct {
	Duration   time.Duration `json:"duration"`
	Conns      int           `json:"conns"`
	Subs       int           `json:"subs"`
	Streams    int           `json:"streams"`
	DurableOne int           `json:"durable_every"` // every DurableOne-th stream is durable
	Publishers int           `json:"publishers"`
	Readers    int           `json:"readers"`
	Rate       int           `json:"rate_msgs_per_s"`
	Batch      int           `json:"batch"`
	Payload    int           `json:"payload_bytes"`
	Hostile    bool          `json:"hostile"`
	Sample     time.Duration `json:"sample"`
	Setup      time.Duration `json:"setup_timeout"`
	Settle     time.Duration `json:"settle"`
	Felix      string        `json:"felix"`
	// BrokerArgs are extra flags for `felix broker`.
	BrokerArgs []string `json:"broker_args,omitempty"`
}

// hardGrace is how long past its planned end (setup, load and shutdown)
// a run may take before the hard deadline kills the broker and exits.
const hardGrace = 2 * time.Minute

func main() {
	var cfg config
	var asJSON bool
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.DurationVar(&cfg.Duration, "duration", 10*time.Minute, "how long the load runs once every connection and subscription is up")
	fs.IntVar(&cfg.Conns, "conns", 1000, "well-behaved client connections (publishers and readers among them)")
	fs.IntVar(&cfg.Subs, "subs", 10000, "subscriptions, spread over the connections and the streams")
	fs.IntVar(&cfg.Streams, "streams", 100, "streams")
	fs.IntVar(&cfg.DurableOne, "durable-every", 5, "every Nth stream is durable (0: none)")
	fs.IntVar(&cfg.Publishers, "publishers", 4, "publishing connections, each owning a share of the streams")
	fs.IntVar(&cfg.Readers, "readers", 4, "connections range-reading the durable streams (5 reads a second each)")
	fs.IntVar(&cfg.Rate, "rate", 2000, "messages published per second, all publishers together")
	fs.IntVar(&cfg.Batch, "batch", 20, "messages per published batch")
	fs.IntVar(&cfg.Payload, "payload", 128, "payload bytes (at least 8: a sequence number)")
	fs.BoolVar(&cfg.Hostile, "hostile", true, "run the hostile clients")
	fs.DurationVar(&cfg.Sample, "sample", 5*time.Second, "how often to sample the broker")
	fs.DurationVar(&cfg.Setup, "setup-timeout", 5*time.Minute, "how long connecting and subscribing may take; the load starts with what was reached")
	fs.DurationVar(&cfg.Settle, "settle", 0, "after every client closed, wait up to this long for the broker's next garbage collection (it runs one at least every 2m) and sample again: what it kept of the run")
	fs.StringVar(&cfg.Felix, "felix", "", "the felix binary to run (default: go build ./cmd/felix into a temp dir)")
	fs.BoolVar(&asJSON, "json", false, "print the summary as JSON on stdout (the table goes to stderr)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		os.Exit(2)
	}
	cfg.BrokerArgs = fs.Args()
	if err := cfg.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(2)
	}

	// The first SIGINT or SIGTERM ends the load early and shuts down
	// cleanly; a second one, or the hard deadline, kills the broker and
	// exits at once.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	r := newRun(cfg, os.Stderr)
	hard := time.AfterFunc(cfg.Setup+cfg.Duration+hardGrace, func() { r.abort("hard deadline") })
	defer hard.Stop()
	go func() {
		<-ctx.Done()
		stop() // a second signal now kills the process the default way...
		hard.Reset(hardGrace / 4)
	}()

	sum, err := r.run(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
	table := os.Stdout
	if asJSON {
		table = os.Stderr
	}
	sum.printTable(table)
	if asJSON {
		if err := writeJSON(os.Stdout, sum); err != nil {
			fmt.Fprintln(os.Stderr, "soak:", err)
			os.Exit(1)
		}
	}
	if !sum.Clean {
		os.Exit(1)
	}
}

func (c *config) validate() error {
	var errs []error
	if c.Duration <= 0 {
		errs = append(errs, fmt.Errorf("--duration must be positive, got %s", c.Duration))
	}
	if c.Conns < 1 || c.Subs < 0 || c.Streams < 1 {
		errs = append(errs, fmt.Errorf("--conns (%d) and --streams (%d) must be at least 1, --subs (%d) at least 0", c.Conns, c.Streams, c.Subs))
	}
	if c.Publishers < 1 || c.Readers < 0 || c.Publishers+c.Readers > c.Conns {
		errs = append(errs, fmt.Errorf("--publishers (%d, at least 1) and --readers (%d) must fit in --conns (%d)", c.Publishers, c.Readers, c.Conns))
	}
	if c.Rate < 1 || c.Batch < 1 {
		errs = append(errs, fmt.Errorf("--rate (%d) and --batch (%d) must be at least 1", c.Rate, c.Batch))
	}
	if c.Payload < 8 {
		errs = append(errs, fmt.Errorf("--payload must be at least 8 (a sequence number), got %d", c.Payload))
	}
	if c.Sample <= 0 || c.Setup <= 0 || c.DurableOne < 0 {
		errs = append(errs, fmt.Errorf("--sample (%s) and --setup-timeout (%s) must be positive, --durable-every (%d) not negative", c.Sample, c.Setup, c.DurableOne))
	}
	return errors.Join(errs...)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
