// Command wsbench is bench/compare.sh's WebSocket fanout rows: SUBSCRIBERS
// WebSocket subscribers (each its own connection, default 1,000) on one
// stream or subject and one publisher, against one of two systems driven
// the same way:
//
//	felix  a Felix broker's browser front end (browser_listen): each
//	       subscriber speaks webfront's framing over coder/websocket; the
//	       publisher is a felix/1 client (client.Produce, acked, one
//	       record a publish, pipelined)
//	nats   a nats-server's websocket listener: each subscriber is a
//	       nats.go connection to a ws:// URL; the publisher is a nats.go
//	       connection over NATS's own TCP protocol (unacked, buffered)
//
// Each publisher uses its system's native protocol, neither over
// WebSocket: what is measured is the fanout to WebSocket connections.
//
// Every record carries its sequence number and send time. After a warmup
// (every warmup record delivered to every subscriber, so all are live),
// the publisher sends for DURATION, at RATE records a second (0: as fast
// as the window allows), never more than WINDOW records ahead of what the
// subscribers have taken (published × subscribers − delivered ≤ WINDOW ×
// subscribers), the same end-to-end bound on both systems, so neither
// broker's own flow control or slow-consumer handling decides the rate.
// Then it waits for the deliveries still owed (until none arrives for
// DRAIN). It prints one JSON object: deliveries_per_s (timed deliveries
// from the first timed publish to the last delivery), p50_us and p99_us
// (publish-to-delivery latency over every delivery, HDR histogram),
// missing (timed deliveries that never came), and the CPU seconds per
// million deliveries of the server (--server-pid, /proc) and of this
// process (getrusage) over the same window.
//
// It is its own module (bench/wsbench/go.mod) so the felix module does not
// depend on nats.go; it builds webfront's frames and the felix client from
// this checkout (a replace directive). bench/compare.sh builds and runs it:
//
//	wsbench --system nats --ws-url ws://127.0.0.1:8080 --server nats://127.0.0.1:4222 --subscribers 100
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"
)

// recordHeader is a record's sequence number and send time (UnixNano),
// big-endian, at the start of its payload.
const recordHeader = 16

type settings struct {
	subscribers int
	size        int
	duration    time.Duration
	rate        int
	window      int
	warmup      int
	drain       time.Duration
	dialers     int
	// serverPID, when set, is the server process whose CPU the window is
	// charged; clkTck its /proc clock ticks a second.
	serverPID int
	clkTck    int
}

func main() {
	var s settings
	name := flag.String("system", "felix", "felix or nats")
	flag.IntVar(&s.subscribers, "subscribers", 1000, "WebSocket subscribers, each on its own connection")
	flag.IntVar(&s.size, "size", 128, "record bytes (at least 16: the sequence number and send time)")
	flag.DurationVar(&s.duration, "duration", 10*time.Second, "how long the publisher sends (the timed window, before the drain)")
	flag.IntVar(&s.rate, "rate", 0, "records a second the publisher sends (0: as fast as --window allows)")
	flag.IntVar(&s.window, "window", 64, "records the publisher may be ahead of the subscribers' deliveries, on average")
	flag.IntVar(&s.warmup, "warmup", 10, "records delivered to every subscriber before the timed window")
	flag.DurationVar(&s.drain, "drain", 5*time.Second, "after the publisher stops, how long without a delivery ends the wait for the rest")
	flag.IntVar(&s.dialers, "dialers", 16, "subscriber connections dialled at once (a broker bounds connections not yet authenticated per address)")
	flag.IntVar(&s.serverPID, "server-pid", 0, "the server's process id, to charge its CPU in the window to the deliveries (0: not measured)")
	flag.IntVar(&s.clkTck, "clk-tck", 100, "the /proc clock ticks a second (getconf CLK_TCK)")
	var fo felixOptions
	flag.StringVar(&fo.addr, "broker", "127.0.0.1:5000", "felix: the broker's felix/1 address (the publisher)")
	flag.StringVar(&fo.browser, "browser", "127.0.0.1:7380", "felix: the broker's browser_listen address (the subscribers)")
	flag.StringVar(&fo.ca, "ca", "felix-data/cert.pem", "felix: the broker's certificate")
	flag.StringVar(&fo.token, "token", os.Getenv("FELIX_TOKEN"), "felix: token (empty with auth none)")
	flag.StringVar(&fo.tenant, "tenant", "default", "felix: tenant")
	flag.StringVar(&fo.namespace, "namespace", "default", "felix: namespace")
	stream := flag.String("stream", "wsfanout", "felix: the stream (in memory); nats: the subject")
	var no natsOptions
	flag.StringVar(&no.server, "server", "nats://127.0.0.1:4222", "nats: the publisher's URL (NATS's TCP protocol)")
	flag.StringVar(&no.wsURL, "ws-url", "ws://127.0.0.1:8080", "nats: the websocket listener's URL (the subscribers)")
	flag.Parse()
	if err := s.validate(); err != nil {
		fail(err)
	}
	var sys system
	switch *name {
	case "felix":
		fo.stream = *stream
		sys = &felixSystem{o: fo}
	case "nats":
		no.subject = *stream
		sys = &natsSystem{o: no}
	default:
		fail(fmt.Errorf("--system %q: want felix or nats", *name))
	}
	res, err := run(sys, s)
	if err != nil {
		fail(err)
	}
	res.System = *name
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		fail(err)
	}
	if res.Missing > 0 || res.PublishErrors > 0 {
		os.Exit(1) // the JSON is printed; the run was not clean
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "wsbench:", err)
	os.Exit(1)
}

func (s settings) validate() error {
	switch {
	case s.subscribers < 1 || s.subscribers > 100_000:
		return fmt.Errorf("--subscribers %d: want 1 to 100000", s.subscribers)
	case s.size < recordHeader || s.size > 1<<20:
		return fmt.Errorf("--size %d: want %d to 1 MiB", s.size, recordHeader)
	case s.duration <= 0 || s.drain <= 0:
		return errors.New("--duration, --drain: want positive durations")
	case s.rate < 0:
		return fmt.Errorf("--rate %d: want 0 (unpaced) or more", s.rate)
	case s.window < 1:
		return fmt.Errorf("--window %d: want at least 1", s.window)
	case s.warmup < 1:
		return fmt.Errorf("--warmup %d: want at least 1 (it shows every subscriber is live)", s.warmup)
	case s.dialers < 1:
		return fmt.Errorf("--dialers %d: want at least 1", s.dialers)
	case s.serverPID < 0 || s.clkTck < 1:
		return fmt.Errorf("--server-pid %d, --clk-tck %d: want a pid (or 0) and a positive tick rate", s.serverPID, s.clkTck)
	}
	return nil
}
