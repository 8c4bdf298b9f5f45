// Command natslat measures core NATS one-way latency the way `felix bench
// --profile latency` measures Felix's: one process publishes paced messages
// whose first 8 bytes carry the send time on the process's monotonic clock,
// and --fanout subscribers, each on its own connection, take the difference
// at delivery into an HDR histogram. It prints one JSON object with the same
// field names as felix bench --json (p50_us, p99_us, ...).
//
// It is its own module (bench/natslat/go.mod) so the felix module does not
// depend on nats.go. bench/compare.sh builds and runs it:
//
//	natslat --server nats://127.0.0.1:4222 --fanout 10 --rate 1000 --duration 10s --size 128
//
// Differences from felix bench's latency profile, by design of core NATS:
// a publish has no ack (felix bench waits for each message's ack before the
// next), so there is no ack latency; nats.go buffers the publish and its
// flusher goroutine writes it out at once.
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/nats-io/nats.go"
)

const (
	warmBit     = uint64(1) << 63
	histMax     = int64(time.Minute)
	settleAfter = 2 * time.Second
)

type sub struct {
	mu             sync.Mutex
	hist           *hdrhistogram.Histogram
	warm, measured atomic.Int64
	last           atomic.Int64
}

type result struct {
	System            string  `json:"system"`
	Subject           string  `json:"subject"`
	Payload           int     `json:"payload"`
	Fanout            int     `json:"fanout"`
	Rate              float64 `json:"rate"`
	DurationS         float64 `json:"duration_s"`
	Warmup            int     `json:"warmup"`
	Published         int64   `json:"published"`
	Delivered         int64   `json:"delivered"`
	Expected          int64   `json:"expected"`
	Missing           int64   `json:"missing"`
	TimedOut          bool    `json:"timed_out"`
	MeasuredPublished int64   `json:"measured_published"`
	MeasuredDelivered int64   `json:"measured_delivered"`
	MsgsPerS          float64 `json:"msgs_per_s"`
	DeliveriesPerS    float64 `json:"deliveries_per_s"`
	LatencySamples    int64   `json:"latency_samples"`
	MinUS             float64 `json:"min_us"`
	P50US             float64 `json:"p50_us"`
	P90US             float64 `json:"p90_us"`
	P99US             float64 `json:"p99_us"`
	P999US            float64 `json:"p999_us"`
	MaxUS             float64 `json:"max_us"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "natslat:", err)
		os.Exit(1)
	}
}

func run() error {
	server := flag.String("server", nats.DefaultURL, "NATS server URL")
	subject := flag.String("subject", fmt.Sprintf("natslat.%d", os.Getpid()), "subject")
	size := flag.Int("size", 128, "payload bytes, at least 8")
	fanout := flag.Int("fanout", 1, "subscribers, each on its own connection")
	rate := flag.Float64("rate", 1000, "messages per second (paced, absolute schedule)")
	duration := flag.Duration("duration", 10*time.Second, "measured publishing time")
	warmup := flag.Int("warmup", 500, "messages before measuring, left out of the latencies")
	timeout := flag.Duration("timeout", 0, "overall deadline (0: duration + 30s)")
	flag.Parse()
	switch {
	case *size < 8:
		return errors.New("--size must be at least 8 (the send timestamp)")
	case *fanout < 1:
		return errors.New("--fanout must be at least 1")
	case *rate <= 0 || *rate > 1e6:
		return errors.New("--rate must be in (0, 1e6]")
	case *duration <= 0:
		return errors.New("--duration must be positive")
	case *warmup < 0:
		return errors.New("--warmup must not be negative")
	}
	if *timeout == 0 {
		*timeout = *duration + 30*time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	base := time.Now()
	var subs []*sub
	var conns []*nats.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range *fanout {
		nc, err := nats.Connect(*server)
		if err != nil {
			return err
		}
		conns = append(conns, nc)
		s := &sub{hist: hdrhistogram.New(1, histMax, 3)}
		subs = append(subs, s)
		_, err = nc.Subscribe(*subject, func(m *nats.Msg) {
			now := int64(time.Since(base))
			if len(m.Data) < 8 {
				return
			}
			ts := binary.LittleEndian.Uint64(m.Data)
			if ts&warmBit != 0 {
				s.warm.Add(1)
				return
			}
			s.mu.Lock()
			_ = s.hist.RecordValue(min(max(now-int64(ts), 1), histMax))
			s.mu.Unlock()
			s.last.Store(now)
			s.measured.Add(1)
		})
		if err != nil {
			return err
		}
		if err := nc.Flush(); err != nil { // the subscription is registered
			return err
		}
	}
	pub, err := nats.Connect(*server)
	if err != nil {
		return err
	}
	conns = append(conns, pub)

	payload := make([]byte, *size)
	for i := 8; i < len(payload); i++ {
		payload[i] = 'a' + byte(i%26)
	}
	interval := time.Duration(float64(time.Second) / *rate)
	var published, measuredPub, warmPub int64
	publish := func(warm bool, n int, until time.Time) error {
		next := time.Now()
		timer := time.NewTimer(time.Hour)
		defer timer.Stop()
		for i := 0; n == 0 || i < n; i++ {
			if wait := time.Until(next); wait > 0 {
				timer.Reset(wait)
				select {
				case <-timer.C:
				case <-ctx.Done():
					return nil
				}
			}
			next = next.Add(interval)
			if n == 0 && !time.Now().Before(until) {
				return nil
			}
			ts := uint64(time.Since(base))
			if warm {
				ts |= warmBit
			}
			binary.LittleEndian.PutUint64(payload, ts)
			if err := pub.Publish(*subject, payload); err != nil {
				return err
			}
			published++
			if warm {
				warmPub++
			} else {
				measuredPub++
			}
		}
		return nil
	}
	waitFor := func(want int64, got func() int64) {
		last, lastChange := got(), time.Now()
		for ctx.Err() == nil {
			n := got()
			if n >= want {
				return
			}
			if n != last {
				last, lastChange = n, time.Now()
			} else if time.Since(lastChange) > settleAfter {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	sum := func(f func(*sub) int64) int64 {
		var n int64
		for _, s := range subs {
			n += f(s)
		}
		return n
	}
	if *warmup > 0 {
		if err := publish(true, *warmup, time.Time{}); err != nil {
			return err
		}
		_ = pub.Flush()
		waitFor(warmPub*int64(*fanout), func() int64 { return sum(func(s *sub) int64 { return s.warm.Load() }) })
	}
	t0 := time.Since(base)
	if err := publish(false, 0, time.Now().Add(*duration)); err != nil {
		return err
	}
	_ = pub.Flush()
	waitFor(published*int64(*fanout), func() int64 { return sum(func(s *sub) int64 { return s.warm.Load() + s.measured.Load() }) })
	for _, c := range conns {
		c.Close() // stops the handlers before the histograms are read
	}
	conns = nil

	res := result{
		System: "nats", Subject: *subject, Payload: *size, Fanout: *fanout, Rate: *rate,
		DurationS: duration.Seconds(), Warmup: *warmup, Published: published,
		Expected: published * int64(*fanout), MeasuredPublished: measuredPub, TimedOut: ctx.Err() != nil,
	}
	h := hdrhistogram.New(1, histMax, 3)
	var last int64
	for _, s := range subs {
		s.mu.Lock()
		h.Merge(s.hist)
		s.mu.Unlock()
		res.Delivered += s.warm.Load() + s.measured.Load()
		res.MeasuredDelivered += s.measured.Load()
		last = max(last, s.last.Load())
	}
	res.Missing = res.Expected - res.Delivered
	if el := time.Duration(last) - t0; el > 0 {
		res.DeliveriesPerS = float64(res.MeasuredDelivered) / el.Seconds()
		res.MsgsPerS = res.DeliveriesPerS / float64(*fanout)
	}
	us := func(q float64) float64 { return float64(h.ValueAtQuantile(q)) / 1e3 }
	if res.LatencySamples = h.TotalCount(); res.LatencySamples > 0 {
		res.MinUS, res.MaxUS = float64(h.Min())/1e3, float64(h.Max())/1e3
		res.P50US, res.P90US, res.P99US, res.P999US = us(50), us(90), us(99), us(99.9)
	}
	out, err := json.Marshal(res)
	if err != nil {
		return err
	}
	fmt.Println(string(out))
	if res.TimedOut {
		return errors.New("timed out: the report above is partial")
	}
	if res.Missing != 0 {
		return fmt.Errorf("%d of %d expected deliveries missing", res.Missing, res.Expected)
	}
	return nil
}
