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

// The watch fanout row: --watchers prefix watches of one bucket, spread
// over --clients connections, and --writers writers putting SIZE-byte
// values to keys under the prefix, each its own connection with one put
// in flight, never more than --ahead puts past the newest one every
// watcher has. Each value starts with its
// sequence number and the time it was put, so a watcher's delivery
// records the put-to-delivery latency. Deliveries/s counts every
// watcher's deliveries in the window.

// watchPrefix is the prefix watched; the writer's keys cycle under it.
const watchPrefix = "w."

// watchSystem dials the watchers and the writer of one system.
type watchSystem interface {
	prepare(ctx context.Context) error
	// dialWatchers opens one connection and n watches of prefix on it;
	// each delivery's value is handed to deliver, from the watch's own
	// goroutine, until close.
	dialWatchers(ctx context.Context, n int, deliver func(value []byte)) (watchConn, error)
	dial(ctx context.Context) (store, error)
}

type watchConn interface {
	// close ends the watches and the connection and waits for their
	// goroutines; it returns the first error that ended a watch early.
	close() error
}

// fanout counts the deliveries of each put in flight: the writer puts
// seq only once every watcher has seq-ahead.
type fanout struct {
	watchers int64
	counts   []atomic.Int64
	// complete is the highest seq every watcher has, plus one.
	complete  atomic.Uint64
	progress  chan struct{}
	inWindow  atomic.Bool
	delivered atomic.Int64

	mu    sync.Mutex
	hists []*hdrhistogram.Histogram
}

func newFanout(watchers, ahead, conns int) *fanout {
	f := &fanout{watchers: int64(watchers), counts: make([]atomic.Int64, 4*ahead), progress: make(chan struct{}, 1)}
	for range conns {
		f.hists = append(f.hists, hdrhistogram.New(1, histMax/1e3, 3))
	}
	return f
}

// deliver takes one watcher's delivery of value, on connection conn.
func (f *fanout) deliver(conn int, hist *sync.Mutex, value []byte) {
	if len(value) < 16 {
		return
	}
	seq := binary.BigEndian.Uint64(value)
	put := int64(binary.BigEndian.Uint64(value[8:]))
	if f.inWindow.Load() {
		f.delivered.Add(1)
		lat := max(time.Now().UnixNano()-put, 1) / 1e3
		hist.Lock()
		_ = f.hists[conn].RecordValue(min(lat, histMax/1e3))
		hist.Unlock()
	}
	if f.counts[seq%uint64(len(f.counts))].Add(1) == f.watchers {
		for {
			c := f.complete.Load()
			if c >= seq+1 || f.complete.CompareAndSwap(c, seq+1) {
				break
			}
		}
		select {
		case f.progress <- struct{}{}:
		default:
		}
	}
}

// runWatch runs the watch fanout row: the watchers spread over
// s.clients connections, s.writers putting while every watcher keeps up,
// a warm-up, then the timed window.
func runWatch(sys watchSystem, s settings) (result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.duration+2*time.Minute)
	defer cancel()
	if err := sys.prepare(ctx); err != nil {
		return result{}, fmt.Errorf("prepare: %w", err)
	}
	f := newFanout(s.watchers, s.ahead, s.clients)
	conns, err := dialWatchConns(ctx, sys, s, f)
	defer func() {
		for _, c := range conns {
			_ = c.close()
		}
	}()
	if err != nil {
		return result{}, err
	}
	writers := make([]store, s.writers)
	for i := range writers {
		st, err := sys.dial(ctx)
		if err != nil {
			return result{}, fmt.Errorf("dial writer %d: %w", i, err)
		}
		defer st.close()
		writers[i] = st
	}

	var w writing
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, st := range writers {
		wg.Go(func() { w.run(ctx, f, st, s, stop) })
	}
	time.Sleep(s.warmup)
	cpu0 := procstat.Take(s.serverPID, s.clkTck)
	start := time.Now()
	f.inWindow.Store(true)
	time.Sleep(time.Until(start.Add(s.duration)))
	f.inWindow.Store(false)
	cpu1 := procstat.Take(s.serverPID, s.clkTck)
	window := time.Since(start)
	close(stop)
	wg.Wait()

	res := result{Op: s.op, Clients: s.clients, Watchers: s.watchers, Writers: s.writers, Payload: max(s.size, 16)}
	res.Ops, res.Errors = w.puts.Load(), w.errs.Load()
	if err := w.firstErr.Load(); err != nil {
		res.FirstErr = (*err).Error()
	}
	var closeErr error
	for _, c := range conns {
		if err := c.close(); err != nil && closeErr == nil {
			closeErr = err
		}
	}
	conns = nil
	if closeErr != nil {
		res.Errors++
		if res.FirstErr == "" {
			res.FirstErr = closeErr.Error()
		}
	}
	f.report(&res, window, cpu0, cpu1)
	return res, nil
}

// dialWatchConns opens s.clients connections sharing s.watchers watchers
// between them, each delivering into f; it returns those it opened, with
// the first error.
func dialWatchConns(ctx context.Context, sys watchSystem, s settings, f *fanout) ([]watchConn, error) {
	locks := make([]sync.Mutex, s.clients)
	conns := make([]watchConn, 0, s.clients)
	for i := range s.clients {
		n := s.watchers / s.clients
		if i < s.watchers%s.clients {
			n++
		}
		conn, err := sys.dialWatchers(ctx, n, func(v []byte) { f.deliver(i, &locks[i], v) })
		if err != nil {
			return conns, fmt.Errorf("watchers of connection %d: %w", i, err)
		}
		conns = append(conns, conn)
	}
	return conns, nil
}

// writing is the writers' shared sequence and what they counted.
type writing struct {
	next       atomic.Uint64
	puts, errs atomic.Int64 // puts: those in the timed window
	firstErr   atomic.Pointer[error]
}

// run is one writer: it puts the next sequence number (and the put time)
// under one of 100 keys whenever every watcher is at most s.ahead behind,
// until stop closes or a put fails.
func (w *writing) run(ctx context.Context, f *fanout, st store, s settings, stop <-chan struct{}) {
	value := make([]byte, max(s.size, 16))
	for i := 16; i < len(value); i++ {
		value[i] = byte('a' + i%26)
	}
	for {
		select {
		case <-stop:
			return
		default:
		}
		seq := w.next.Add(1) - 1
		err := f.waitFor(ctx, seq, uint64(s.ahead))
		if err == nil {
			f.counts[seq%uint64(len(f.counts))].Store(0)
			binary.BigEndian.PutUint64(value, seq)
			binary.BigEndian.PutUint64(value[8:], uint64(time.Now().UnixNano()))
			err = st.put(ctx, fmt.Sprintf("%sk%d", watchPrefix, seq%100), value)
		}
		if err != nil {
			w.errs.Add(1)
			w.firstErr.CompareAndSwap(nil, &err)
			return
		}
		if f.inWindow.Load() {
			w.puts.Add(1)
		}
	}
}

// report fills res's rates, latencies and CPU per delivery from the
// timed window.
func (f *fanout) report(res *result, window time.Duration, cpu0, cpu1 procstat.Sample) {
	all := hdrhistogram.New(1, histMax/1e3, 3)
	for _, h := range f.hists {
		all.Merge(h)
	}
	res.DurationS = window.Seconds()
	res.Delivered = f.delivered.Load()
	res.DeliveriesPerS = float64(res.Delivered) / window.Seconds()
	res.OpsPerS = float64(res.Ops) / window.Seconds()
	res.P50us = float64(all.ValueAtQuantile(50))
	res.P99us = float64(all.ValueAtQuantile(99))
	res.MaxUs = float64(all.Max())
	if res.Delivered > 0 {
		res.ClientCPUsPerM = perMillion(cpu1.Self-cpu0.Self, res.Delivered)
		if cpu0.ServerOK && cpu1.ServerOK {
			res.ServerCPUsPerM = perMillion(cpu1.Server-cpu0.Server, res.Delivered)
		}
	}
}

// errStalled: no put was delivered to every watcher for a long while (a
// watch that lagged and ended, or a server that stopped delivering).
var errStalled = errors.New("watch fanout stalled: a put not delivered to every watcher within 10s")

// waitFor waits until seq may be put: every watcher has seq-ahead.
func (f *fanout) waitFor(ctx context.Context, seq, ahead uint64) error {
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	for seq >= ahead && f.complete.Load() < seq-ahead+1 {
		select {
		case <-f.progress:
		case <-t.C:
			return errStalled
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// perMillion is d in seconds per million deliveries (n > 0).
func perMillion(d time.Duration, n int64) *float64 {
	v := d.Seconds() / float64(n) * 1e6
	return &v
}
