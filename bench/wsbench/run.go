package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/getfelix/felix-go/bench/procstat"
)

// system dials the subscribers and the publisher of one system under test.
type system interface {
	// subscribe connects one subscriber and returns once the server holds
	// its subscription; from then on its own goroutine hands each
	// delivery to t.deliver until close.
	subscribe(ctx context.Context, t *tracker, i int) (subscriber, error)
	dialPublisher(ctx context.Context) (publisher, error)
}

type subscriber interface {
	// close ends the connection and waits for its goroutine.
	close()
}

type publisher interface {
	// publish sends one record without waiting for the server: payload
	// may be reused once it returns.
	publish(ctx context.Context, payload []byte) error
	// flush returns once every record published was taken by the
	// server, with the first one it refused.
	flush(ctx context.Context) error
	close()
}

// histMax bounds the recorded latencies (µs): a slower delivery is
// recorded as this.
const histMax = int64(time.Minute / time.Microsecond)

// histShards spreads the subscribers' latency records over this many
// histograms, each under its own lock: one per subscriber at three
// significant digits would take 128 KiB each.
const histShards = 16

// tracker counts what the subscribers get; every subscriber goroutine
// calls deliver, the publisher reads the counts.
type tracker struct {
	subscribers int
	warmup      uint64 // records with a lower sequence number are warmup
	warm        atomic.Int64
	delivered   atomic.Int64 // timed records' deliveries
	lastAt      atomic.Int64 // UnixNano of the latest timed delivery
	// wake is signalled after deliveries, for the publisher's window and
	// drain waits (a signal may stand for many deliveries).
	wake  chan struct{}
	hists [histShards]struct {
		sync.Mutex
		h *hdrhistogram.Histogram
	}
}

func newTracker(subscribers, warmup int) *tracker {
	t := &tracker{subscribers: subscribers, warmup: uint64(warmup), wake: make(chan struct{}, 1)}
	for i := range t.hists {
		t.hists[i].h = hdrhistogram.New(1, histMax, 3)
	}
	return t
}

// deliver records payloads subscriber sub received at at (UnixNano).
func (t *tracker) deliver(sub int, payloads [][]byte, at int64) {
	var warm, timed int64
	h := &t.hists[sub%histShards]
	h.Lock()
	for _, p := range payloads {
		if len(p) < recordHeader {
			continue // not ours: nothing else publishes on the stream
		}
		if binary.BigEndian.Uint64(p) < t.warmup {
			warm++
			continue
		}
		timed++
		sent := int64(binary.BigEndian.Uint64(p[8:]))
		_ = h.h.RecordValue(min(max((at-sent)/1e3, 1), histMax))
	}
	h.Unlock()
	if warm > 0 {
		t.warm.Add(warm)
	}
	if timed > 0 {
		t.delivered.Add(timed)
		for last := t.lastAt.Load(); at > last && !t.lastAt.CompareAndSwap(last, at); last = t.lastAt.Load() {
		}
	}
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// waitDeliveries waits for a delivery or until d passes.
func (t *tracker) waitDeliveries(ctx context.Context, d time.Duration) error {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-t.wake:
	case <-tm.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

type result struct {
	System        string  `json:"system"`
	Subscribers   int     `json:"subscribers"`
	Payload       int     `json:"payload"`
	Rate          int     `json:"rate"`
	Window        int     `json:"window"`
	ConnectS      float64 `json:"connect_s"`
	WindowS       float64 `json:"window_s"`
	Published     int64   `json:"published"`
	Expected      int64   `json:"expected"`
	Delivered     int64   `json:"delivered"`
	Missing       int64   `json:"missing"`
	DeliveriesPS  float64 `json:"deliveries_per_s"`
	P50us         float64 `json:"p50_us"`
	P99us         float64 `json:"p99_us"`
	MaxUs         float64 `json:"max_us"`
	PublishErrors int64   `json:"publish_errors"`
	// ServerCPU and ClientCPU are CPU seconds per million deliveries over
	// the timed window and the drain (not connecting or the warmup): the
	// server's (absent without --server-pid) and this process's, the
	// publisher's and every subscriber's; absent when nothing was
	// delivered.
	ServerCPU *float64 `json:"server_cpu_s_per_m,omitempty"`
	ClientCPU *float64 `json:"client_cpu_s_per_m,omitempty"`
	FirstErr  string   `json:"first_error,omitempty"`
}

// run connects the publisher and every subscriber, warms up, then times
// the fanout.
func run(sys system, s settings) (result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.duration+10*time.Minute)
	defer cancel()
	pub, err := sys.dialPublisher(ctx)
	if err != nil {
		return result{}, fmt.Errorf("publisher: %w", err)
	}
	defer pub.close()
	t := newTracker(s.subscribers, s.warmup)
	t0 := time.Now()
	subs, err := dialAll(ctx, sys, t, s)
	defer closeAll(subs)
	if err != nil {
		return result{}, err
	}
	res := result{Subscribers: s.subscribers, Payload: s.size, Rate: s.rate, Window: s.window, ConnectS: time.Since(t0).Seconds()}
	payload := make([]byte, s.size)
	for seq := range s.warmup {
		stamp(payload, uint64(seq))
		if err := pub.publish(ctx, payload); err != nil {
			return res, fmt.Errorf("warmup publish: %w", err)
		}
	}
	if err := pub.flush(ctx); err != nil {
		return res, fmt.Errorf("warmup publish: %w", err)
	}
	if err := awaitWarmup(ctx, t, s); err != nil {
		return res, err
	}
	cpu0 := procstat.Take(s.serverPID, s.clkTck)
	start := time.Now()
	published, pubErr := publishTimed(ctx, pub, t, s, payload, start)
	if err := pub.flush(ctx); err != nil && pubErr == nil {
		pubErr = err
	}
	res.Published = published
	res.Expected = published * int64(s.subscribers)
	drain(ctx, t, res.Expected, s.drain)
	cpu1 := procstat.Take(s.serverPID, s.clkTck)
	res.summarise(t, start, cpu0, cpu1)
	if pubErr != nil {
		res.PublishErrors = 1
		res.FirstErr = pubErr.Error()
	}
	return res, nil
}

// stamp writes seq and the time now at the start of payload.
func stamp(payload []byte, seq uint64) {
	binary.BigEndian.PutUint64(payload, seq)
	binary.BigEndian.PutUint64(payload[8:], uint64(time.Now().UnixNano()))
}

// dialAll connects every subscriber, s.dialers at once.
func dialAll(ctx context.Context, sys system, t *tracker, s settings) ([]subscriber, error) {
	subs := make([]subscriber, s.subscribers)
	errs := make([]error, s.subscribers)
	next := atomic.Int64{}
	var wg sync.WaitGroup
	for range min(s.dialers, s.subscribers) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < s.subscribers; i = int(next.Add(1) - 1) {
				if subs[i], errs[i] = sys.subscribe(ctx, t, i); errs[i] != nil {
					errs[i] = fmt.Errorf("subscriber %d: %w", i, errs[i])
					return
				}
			}
		})
	}
	wg.Wait()
	return subs, errors.Join(errs...)
}

func closeAll(subs []subscriber) {
	var wg sync.WaitGroup
	for _, sub := range subs {
		if sub != nil {
			wg.Go(sub.close)
		}
	}
	wg.Wait()
}

// warmupWait bounds the warmup: every subscriber is connected by then, so
// a record missing this long means a subscription that is not live.
const warmupWait = time.Minute

func awaitWarmup(ctx context.Context, t *tracker, s settings) error {
	want := int64(s.warmup) * int64(s.subscribers)
	deadline := time.Now().Add(warmupWait)
	for t.warm.Load() < want {
		if time.Now().After(deadline) {
			return fmt.Errorf("warmup: %d of %d deliveries in %s: a subscription is not live", t.warm.Load(), want, warmupWait)
		}
		if err := t.waitDeliveries(ctx, time.Second); err != nil {
			return fmt.Errorf("warmup: %w", err)
		}
	}
	return nil
}

// publishTimed publishes from start for s.duration, paced at s.rate, never
// more than s.window records ahead of the deliveries; it returns how many
// records it published and the first error.
func publishTimed(ctx context.Context, pub publisher, t *tracker, s settings, payload []byte, start time.Time) (int64, error) {
	end := start.Add(s.duration)
	subs := int64(s.subscribers)
	ahead := int64(s.window) * subs
	var n int64
	for time.Now().Before(end) {
		// The window: wait for deliveries, rechecking the clock now and then.
		for n*subs-t.delivered.Load() > ahead {
			if err := t.waitDeliveries(ctx, 100*time.Millisecond); err != nil {
				return n, err
			}
			if !time.Now().Before(end) {
				return n, nil
			}
		}
		if s.rate > 0 {
			due := start.Add(time.Duration(n) * time.Second / time.Duration(s.rate))
			if !due.Before(end) {
				return n, nil
			}
			if d := time.Until(due); d > 0 {
				time.Sleep(d) // pacing the publisher, not waiting for an event
			}
		}
		stamp(payload, t.warmup+uint64(n))
		if err := pub.publish(ctx, payload); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// drain waits for the deliveries still owed until none arrives for quiet.
func drain(ctx context.Context, t *tracker, expected int64, quiet time.Duration) {
	last, since := t.delivered.Load(), time.Now()
	for last < expected && time.Since(since) < quiet {
		if t.waitDeliveries(ctx, quiet-time.Since(since)) != nil {
			return
		}
		if now := t.delivered.Load(); now != last {
			last, since = now, time.Now()
		}
	}
}

// summarise fills the counts, the rate over the window (from the first
// timed publish to the last delivery), the latencies and the CPU.
func (r *result) summarise(t *tracker, start time.Time, cpu0, cpu1 procstat.Sample) {
	r.Delivered = t.delivered.Load()
	r.Missing = max(r.Expected-r.Delivered, 0)
	end := time.Unix(0, t.lastAt.Load())
	if end.Before(start) {
		end = time.Now()
	}
	r.WindowS = end.Sub(start).Seconds()
	if r.WindowS > 0 {
		r.DeliveriesPS = float64(r.Delivered) / r.WindowS
	}
	all := hdrhistogram.New(1, histMax, 3)
	for i := range t.hists {
		t.hists[i].Lock()
		all.Merge(t.hists[i].h)
		t.hists[i].Unlock()
	}
	r.P50us = float64(all.ValueAtQuantile(50))
	r.P99us = float64(all.ValueAtQuantile(99))
	r.MaxUs = float64(all.Max())
	if r.Delivered > 0 {
		r.ClientCPU = perMillion(cpu1.Self-cpu0.Self, r.Delivered)
		if cpu0.ServerOK && cpu1.ServerOK {
			r.ServerCPU = perMillion(cpu1.Server-cpu0.Server, r.Delivered)
		}
	}
}

// perMillion is d in seconds per million deliveries (n > 0).
func perMillion(d time.Duration, n int64) *float64 {
	v := d.Seconds() / float64(n) * 1e6
	return &v
}
