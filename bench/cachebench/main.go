// Command cachebench is bench/compare.sh's cache rows: puts or gets of
// SIZE-byte values, CLIENTS clients each on its own connection with one
// operation in flight (closed loop: a client sends its next operation when
// the last one is answered), for DURATION, against one of three systems
// driven the same way:
//
//	felix   a Felix cache (client.Client Put and Get), durable or in memory
//	natskv  a NATS JetStream key/value bucket (nats.go jetstream KeyValue)
//	redis   Redis SET and GET (go-redis, one connection per client)
//
// Gets read keys a put phase wrote first (not timed). Each client cycles
// through KEYS keys of its own slice, so puts replace values rather than
// grow the key count. It prints one JSON object: ops_per_s (every client's
// answered operations over the timed window), p50_us and p99_us (each
// operation's round trip, HDR histogram), ops, errors, and the CPU per
// operation in the window of this process and (--server-pid) the server's.
//
// --op watch is the watch fanout row (felix and natskv; watch.go):
// --watchers prefix watches over --clients connections, --writers
// writers putting under the prefix; it prints deliveries_per_s, p50_us
// and p99_us put to delivery, and CPU seconds per million deliveries.
//
// It is its own module (bench/cachebench/go.mod) so the felix module does
// not depend on nats.go or go-redis; it builds the felix client from this
// checkout (a replace directive). bench/compare.sh builds and runs it:
//
//	cachebench --system natskv --server nats://127.0.0.1:4222 --op put --clients 16 --duration 5s
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/getfelix/felix-go/bench/procstat"
)

// histMax bounds the recorded latencies: an operation slower than this is
// recorded as this.
const histMax = int64(time.Minute)

// store is one client's connection to the system under test.
type store interface {
	put(ctx context.Context, key string, value []byte) error
	get(ctx context.Context, key string) error
	close()
}

// system connects stores and makes the bucket (cache, KV bucket) they use.
type system interface {
	prepare(ctx context.Context) error
	dial(ctx context.Context) (store, error)
}

type settings struct {
	op       string
	clients  int
	duration time.Duration
	size     int
	keys     int
	// serverPID, when set, is the server process whose CPU the window
	// is charged; clkTck its /proc clock ticks a second.
	serverPID int
	clkTck    int
	// The watch row's: watches in all (over clients connections), how
	// many puts the writer may be past the last one every watcher has,
	// and how long it runs before the window opens.
	watchers int
	writers  int
	ahead    int
	warmup   time.Duration
}

type result struct {
	System    string  `json:"system"`
	Op        string  `json:"op"`
	Clients   int     `json:"clients"`
	Payload   int     `json:"payload"`
	DurationS float64 `json:"duration_s"`
	Ops       int64   `json:"ops"`
	Errors    int64   `json:"errors"`
	OpsPerS   float64 `json:"ops_per_s"`
	P50us     float64 `json:"p50_us"`
	P99us     float64 `json:"p99_us"`
	MaxUs     float64 `json:"max_us"`
	// ServerCPUus and ClientCPUus are CPU µs per answered operation over
	// the window (not the dial or the fill before it): the server's
	// (absent without --server-pid) and this process's; absent when no
	// operation was answered.
	ServerCPUus *float64 `json:"server_cpu_us_per_op,omitempty"`
	ClientCPUus *float64 `json:"client_cpu_us_per_op,omitempty"`
	// The watch row's: watches, deliveries in the window and their rate,
	// and CPU seconds per million deliveries (p50/p99 are put to
	// delivery there).
	Watchers       int      `json:"watchers,omitempty"`
	Writers        int      `json:"writers,omitempty"`
	Delivered      int64    `json:"delivered,omitempty"`
	DeliveriesPerS float64  `json:"deliveries_per_s,omitempty"`
	ServerCPUsPerM *float64 `json:"server_cpu_s_per_m_deliveries,omitempty"`
	ClientCPUsPerM *float64 `json:"client_cpu_s_per_m_deliveries,omitempty"`
	FirstErr       string   `json:"first_error,omitempty"`
}

func main() {
	var s settings
	name := flag.String("system", "felix", "felix, natskv or redis")
	flag.StringVar(&s.op, "op", "put", "put, get or watch (felix and natskv: a prefix watch fanned out to --watchers)")
	flag.IntVar(&s.clients, "clients", 1, "clients, each on its own connection, one operation in flight each (watch: the watchers' connections)")
	flag.IntVar(&s.watchers, "watchers", 1000, "watch: prefix watches in all, spread over --clients connections")
	flag.IntVar(&s.writers, "writers", 4, "watch: writers, each on its own connection with one put in flight")
	flag.IntVar(&s.ahead, "ahead", 16, "watch: puts the writer may be past the last one every watcher has")
	flag.DurationVar(&s.warmup, "warmup", time.Second, "watch: puts before the window opens")
	flag.DurationVar(&s.duration, "duration", 5*time.Second, "how long the timed window lasts")
	flag.IntVar(&s.size, "size", 128, "value bytes")
	flag.IntVar(&s.keys, "keys", 1000, "keys per client")
	flag.IntVar(&s.serverPID, "server-pid", 0, "the server's process id, to charge its CPU in the window to the operations (0: not measured)")
	flag.IntVar(&s.clkTck, "clk-tck", 100, "the /proc clock ticks a second (getconf CLK_TCK)")
	var fo felixOptions
	flag.StringVar(&fo.addr, "broker", "127.0.0.1:5000", "felix: broker address")
	flag.StringVar(&fo.ca, "ca", "felix-data/cert.pem", "felix: the broker's certificate")
	flag.StringVar(&fo.token, "token", os.Getenv("FELIX_TOKEN"), "felix: token")
	flag.StringVar(&fo.cache, "cache", "bench-cache", "felix: the cache (created if absent)")
	flag.BoolVar(&fo.durable, "durable", true, "felix: a durable cache (false: in memory)")
	flag.UintVar(&fo.shards, "shards", 1, "felix: the cache's shards (one, as a KV bucket is one stream)")
	server := flag.String("server", "nats://127.0.0.1:4222", "natskv: server URL")
	bucket := flag.String("bucket", "bench", "natskv: the bucket (created if absent, file storage)")
	redisAddr := flag.String("addr", "127.0.0.1:6379", "redis: host:port")
	flag.Parse()
	if err := s.validate(); err != nil {
		fail(err)
	}
	var sys system
	switch *name {
	case "felix":
		sys = &felixSystem{o: fo}
	case "natskv":
		sys = &natsSystem{url: *server, bucket: *bucket}
	case "redis":
		sys = &redisSystem{addr: *redisAddr}
	default:
		fail(fmt.Errorf("--system %q: want felix, natskv or redis", *name))
	}
	var res result
	var err error
	if s.op == "watch" {
		ws, ok := sys.(watchSystem)
		if !ok {
			fail(fmt.Errorf("--op watch: --system %s has no watches here", *name))
		}
		res, err = runWatch(ws, s)
	} else {
		res, err = run(sys, s)
	}
	if err != nil {
		fail(err)
	}
	res.System = *name
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		fail(err)
	}
	if res.Errors > 0 {
		os.Exit(1) // the JSON is printed; the run was not clean
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "cachebench:", err)
	os.Exit(1)
}

func (s settings) validate() error {
	switch {
	case s.op != "put" && s.op != "get" && s.op != "watch":
		return fmt.Errorf("--op %q: want put, get or watch", s.op)
	case s.op == "watch" && (s.watchers < 1 || s.watchers > 100000 || s.clients > s.watchers || s.writers < 1 || s.ahead < s.writers || s.warmup < 0):
		return fmt.Errorf("--watchers %d, --clients %d, --writers %d, --ahead %d, --warmup %s: want 1 to 100000 watchers, at most one connection each, a writer or more and ahead at least the writers", s.watchers, s.clients, s.writers, s.ahead, s.warmup)
	case s.clients < 1 || s.clients > 1024:
		return fmt.Errorf("--clients %d: want 1 to 1024", s.clients)
	case s.duration <= 0:
		return errors.New("--duration: want a positive duration")
	case s.size < 0 || s.size > 1<<20:
		return fmt.Errorf("--size %d: want 0 to 1 MiB", s.size)
	case s.keys < 1 || s.keys > 1<<20:
		return fmt.Errorf("--keys %d: want 1 to %d", s.keys, 1<<20)
	case s.serverPID < 0 || s.clkTck < 1:
		return fmt.Errorf("--server-pid %d, --clk-tck %d: want a pid (or 0) and a positive tick rate", s.serverPID, s.clkTck)
	}
	return nil
}

// run dials every client, writes the keys gets will read, then times the
// operations for s.duration.
func run(sys system, s settings) (result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.duration+2*time.Minute)
	defer cancel()
	if err := sys.prepare(ctx); err != nil {
		return result{}, fmt.Errorf("prepare: %w", err)
	}
	stores := make([]store, s.clients)
	for i := range stores {
		st, err := sys.dial(ctx)
		if err != nil {
			return result{}, fmt.Errorf("dial client %d: %w", i, err)
		}
		defer st.close()
		stores[i] = st
	}
	value := make([]byte, s.size)
	for i := range value {
		value[i] = byte('a' + i%26)
	}
	if s.op == "get" {
		if err := fill(ctx, stores, s.keys, value); err != nil {
			return result{}, fmt.Errorf("write the keys to get: %w", err)
		}
	}
	return measure(ctx, stores, s, value), nil
}

func keyOf(client, i int) string { return fmt.Sprintf("c%d.k%d", client, i) }

// fill puts every key each client will get, the clients in parallel.
func fill(ctx context.Context, stores []store, keys int, value []byte) error {
	errs := make([]error, len(stores))
	var wg sync.WaitGroup
	for c, st := range stores {
		wg.Go(func() {
			for i := range keys {
				if err := st.put(ctx, keyOf(c, i), value); err != nil {
					errs[c] = err
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// clientResult is one client's operations in the window.
type clientResult struct {
	hist     *hdrhistogram.Histogram
	ops      int64
	errors   int64
	firstErr error
}

// measure runs every client until the window closes; an operation
// answered after the window closed is not counted.
func measure(ctx context.Context, stores []store, s settings, value []byte) result {
	out := make([]clientResult, len(stores))
	cpu0 := procstat.Take(s.serverPID, s.clkTck)
	start := time.Now()
	end := start.Add(s.duration)
	var wg sync.WaitGroup
	for c, st := range stores {
		wg.Go(func() {
			r := clientResult{hist: hdrhistogram.New(1, histMax, 3)}
			for i := 0; ; i++ {
				key := keyOf(c, i%s.keys)
				t0 := time.Now()
				var err error
				if s.op == "put" {
					err = st.put(ctx, key, value)
				} else {
					err = st.get(ctx, key)
				}
				t1 := time.Now()
				if t1.After(end) {
					break
				}
				if err != nil {
					if r.errors == 0 {
						r.firstErr = err
					}
					r.errors++
					continue
				}
				r.ops++
				_ = r.hist.RecordValue(min(int64(t1.Sub(t0)), histMax))
			}
			out[c] = r
		})
	}
	wg.Wait()
	cpu1 := procstat.Take(s.serverPID, s.clkTck)
	all := hdrhistogram.New(1, histMax, 3)
	res := result{Op: s.op, Clients: s.clients, Payload: s.size, DurationS: s.duration.Seconds()}
	for _, r := range out {
		all.Merge(r.hist)
		res.Ops += r.ops
		res.Errors += r.errors
		if r.firstErr != nil && res.FirstErr == "" {
			res.FirstErr = r.firstErr.Error()
		}
	}
	// The operations that ended after the window are not counted, so the
	// rate is over the window alone.
	res.OpsPerS = float64(res.Ops) / s.duration.Seconds()
	res.P50us = float64(all.ValueAtQuantile(50)) / 1e3
	res.P99us = float64(all.ValueAtQuantile(99)) / 1e3
	res.MaxUs = float64(all.Max()) / 1e3
	if res.Ops > 0 {
		res.ClientCPUus = perOp(cpu1.Self-cpu0.Self, res.Ops)
		if cpu0.ServerOK && cpu1.ServerOK {
			res.ServerCPUus = perOp(cpu1.Server-cpu0.Server, res.Ops)
		}
	}
	return res
}

// perOp is d per operation in microseconds (ops > 0).
func perOp(d time.Duration, ops int64) *float64 {
	v := float64(d.Microseconds()) / float64(ops)
	return &v
}
