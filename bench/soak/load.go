package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/getfelix/felix-go/client"
)

// Bounds on the well-behaved clients' calls: a call that takes longer is an
// error worth reporting, not something to wait out.
const (
	dialTimeout    = 20 * time.Second
	requestTimeout = 20 * time.Second
	closeTimeout   = 5 * time.Second
	// dialWorkers and subscribeWorkers bound the setup's concurrency: QUIC
	// handshakes cost CPU on both sides of two shared cores.
	dialWorkers      = 16
	subscribeWorkers = 32
	// subscriptionBuffer is each subscription's client-side event buffer.
	// The default (1024 events) would cost the load generator 400 MB of
	// channel buffers for 10 000 subscriptions; the drainers keep up.
	subscriptionBuffer = 64
	readInterval       = 200 * time.Millisecond
	readMaxRecords     = 100
)

// tally counts errors by what failed and the error's text.
type tally struct {
	total atomic.Int64
	mu    sync.Mutex
	kinds map[string]int64
}

func (t *tally) add(what string, err error) {
	t.total.Add(1)
	msg := what
	if err != nil {
		msg += ": " + err.Error()
	}
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.kinds == nil {
		t.kinds = map[string]int64{}
	}
	t.kinds[msg]++
}

// Count is one kind of error and how often it happened.
type Count struct {
	What  string `json:"what"`
	Count int64  `json:"count"`
}

func (t *tally) counts() []Count {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]Count, 0, len(t.kinds))
	for k, n := range t.kinds {
		out = append(out, Count{What: k, Count: n})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Count > out[j].Count })
	return out
}

// soakStream is one stream of the run.
type soakStream struct {
	st      client.Stream
	durable bool
}

// load is the well-behaved side: connections, subscriptions, publishers
// and readers, with their counters.
type load struct {
	cfg     config
	addr    string
	opts    client.Options
	streams []soakStream
	clients []*client.Client // by connection number; nil where the dial failed

	subsOpen  atomic.Int64
	published atomic.Int64 // messages acked to the publishers
	delivered atomic.Int64 // events the subscriptions received
	missed    atomic.Int64 // sequence numbers a subscription skipped (drops)
	reordered atomic.Int64 // a sequence number not above the last one
	lagged    atomic.Int64 // durable subscriptions ended as lagged and resumed
	reads     atomic.Int64
	records   atomic.Int64
	errs      tally

	closing  atomic.Bool // the run is closing the clients: subscriptions ending is expected
	drainers sync.WaitGroup
}

func newLoad(cfg config, addr, token, caFile string) *load {
	l := &load{cfg: cfg, addr: addr, clients: make([]*client.Client, cfg.Conns),
		opts: client.Options{Token: token, CAFile: caFile, SubscriptionBuffer: subscriptionBuffer}}
	for i := range cfg.Streams {
		durable := cfg.DurableOne > 0 && i%cfg.DurableOne == cfg.DurableOne-1
		l.streams = append(l.streams, soakStream{st: client.Stream{Name: fmt.Sprintf("soak-%03d", i)}, durable: durable})
	}
	return l
}

func (l *load) dial(ctx context.Context) (*client.Client, error) {
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	return client.Dial(ctx, l.addr, l.opts)
}

// createStreams makes the durable streams explicitly (the in-memory ones
// are made by their first subscribe) on connection 0.
func (l *load) createStreams(ctx context.Context) error {
	c := l.clients[0]
	for _, s := range l.streams {
		if !s.durable {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, requestTimeout)
		_, err := c.CreateStream(rctx, s.st, client.StreamConfig{Durable: true})
		cancel()
		if err != nil {
			return fmt.Errorf("create durable stream %s: %w", s.st.Name, err)
		}
	}
	return nil
}

// dialAll connects connections [from, cfg.Conns), dialWorkers at a time,
// until ctx ends. It returns how many are up.
func (l *load) dialAll(ctx context.Context, from int) int {
	jobs := make(chan int)
	var wg sync.WaitGroup
	var up atomic.Int64
	for range dialWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				c, err := l.dial(ctx)
				if err != nil {
					if ctx.Err() == nil {
						l.errs.add("dial", err)
					}
					continue
				}
				l.clients[i] = c
				up.Add(1)
			}
		}()
	}
feed:
	for i := from; i < l.cfg.Conns; i++ {
		select {
		case jobs <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	return int(up.Load()) + from
}

// placement puts subscription i on a connection and a stream. Connection j
// gets subscriptions j, j+conns, j+2·conns, … and those go to streams a
// step apart (step coprime with the stream count), so one connection's
// subscriptions are on different streams and every stream gets its share.
func placement(i, conns, streams int) (conn, stream int) {
	step := 13
	for gcd(step, streams) != 1 {
		step++
	}
	return i % conns, (i + (i/conns)*step) % streams
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// subscribeAll opens cfg.Subs subscriptions, subscribeWorkers at a time,
// until ctx ends, each with its drainer. It returns how many are open.
func (l *load) subscribeAll(ctx context.Context) int {
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range subscribeWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				ci, si := placement(i, l.cfg.Conns, len(l.streams))
				c := l.clients[ci]
				if c == nil {
					continue // its dial failed, counted there
				}
				s := l.streams[si]
				rctx, cancel := context.WithTimeout(ctx, requestTimeout)
				sub, err := c.Subscribe(rctx, s.st, client.SubscribeOptions{})
				cancel()
				if err != nil {
					if ctx.Err() == nil {
						l.errs.add("subscribe", err)
					}
					continue
				}
				l.subsOpen.Add(1)
				l.drainers.Add(1)
				go l.drain(c, s, sub)
			}
		}()
	}
feed:
	for i := range l.cfg.Subs {
		select {
		case jobs <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	return int(l.subsOpen.Load())
}

// drain takes a subscription's events and checks their sequence numbers
// (the publisher numbers each stream's messages 1, 2, …; a subscription
// starts wherever the stream is). A durable subscription that lags
// resumes from the offset the broker names.
func (l *load) drain(c *client.Client, s soakStream, sub *client.Subscription) {
	defer l.drainers.Done()
	var lastSeq, nextOffset uint64
	for {
		for ev := range sub.Events() {
			seq := binary.BigEndian.Uint64(ev.Payload)
			switch {
			case lastSeq == 0:
			case seq > lastSeq+1:
				l.missed.Add(int64(seq - lastSeq - 1))
			case seq <= lastSeq:
				l.reordered.Add(1)
			}
			lastSeq, nextOffset = seq, ev.Offset+1
			l.delivered.Add(1)
		}
		err := sub.Err()
		if l.closing.Load() {
			return
		}
		var lag *client.LaggedError
		if !errors.As(err, &lag) {
			l.subsOpen.Add(-1)
			l.errs.add("subscription ended", err)
			return
		}
		l.lagged.Add(1)
		from := max(lag.ResumeFrom, nextOffset)
		ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
		_ = sub.Close(ctx)
		sub, err = c.Subscribe(ctx, s.st, client.SubscribeOptions{From: client.FromOffset, FromOffset: from})
		cancel()
		if err != nil {
			l.subsOpen.Add(-1)
			if !l.closing.Load() {
				l.errs.add("resubscribe after lag", err)
			}
			return
		}
	}
}

// publish is publisher p: connection p publishes a batch to the streams it
// owns (stream i where i mod publishers is p), one after the other, at its
// share of cfg.Rate, until ctx ends. Each stream's messages carry 1, 2, …
// in their first 8 bytes.
func (l *load) publish(ctx context.Context, p int) {
	c := l.clients[p]
	var owned []int
	for i := p; i < len(l.streams); i += l.cfg.Publishers {
		owned = append(owned, i)
	}
	if c == nil || len(owned) == 0 {
		return
	}
	seqs := make([]uint64, len(owned))
	interval := time.Duration(int64(time.Second) * int64(l.cfg.Publishers*l.cfg.Batch) / int64(l.cfg.Rate))
	tick := time.NewTicker(max(interval, time.Millisecond))
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		k := n % len(owned)
		payloads := make([][]byte, l.cfg.Batch)
		for i := range payloads {
			seqs[k]++
			payloads[i] = make([]byte, l.cfg.Payload)
			binary.BigEndian.PutUint64(payloads[i], seqs[k])
		}
		pctx, cancel := context.WithTimeout(ctx, requestTimeout)
		err := c.PublishBatch(pctx, l.streams[owned[k]].st, payloads, client.PublishOptions{})
		cancel()
		switch {
		case err == nil:
			l.published.Add(int64(len(payloads)))
		case ctx.Err() != nil:
			return
		default:
			// The sequence numbers stay used: if the broker took the batch
			// after all, reusing them would look like a reorder.
			l.errs.add("publish", err)
		}
	}
}

// read is reader r: connection publishers+r range-reads the durable
// streams in turn, from a random offset below what was committed last
// time, and checks the page starts there and is contiguous.
func (l *load) read(ctx context.Context, r int) {
	c := l.clients[l.cfg.Publishers+r]
	var durable []client.Stream
	for _, s := range l.streams {
		if s.durable {
			durable = append(durable, s.st)
		}
	}
	if c == nil || len(durable) == 0 {
		return
	}
	committed := make([]uint64, len(durable))
	rng := rand.New(rand.NewPCG(uint64(r), 42))
	tick := time.NewTicker(readInterval)
	defer tick.Stop()
	for n := r; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		k := n % len(durable)
		var from uint64
		if committed[k] > 0 {
			from = rng.Uint64N(committed[k])
		}
		rctx, cancel := context.WithTimeout(ctx, requestTimeout)
		page, err := c.Read(rctx, durable[k], from, client.ReadOptions{MaxRecords: readMaxRecords})
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			l.errs.add("read", err)
			continue
		}
		l.reads.Add(1)
		l.records.Add(int64(len(page.Records)))
		committed[k] = page.Committed
		if from < page.Committed && len(page.Records) == 0 {
			l.errs.add("read", fmt.Errorf("%s from %d: no records below committed %d", durable[k].Name, from, page.Committed))
		}
		for i, rec := range page.Records {
			if rec.Offset != from+uint64(i) {
				l.errs.add("read", fmt.Errorf("%s from %d: record %d has offset %d, want %d", durable[k].Name, from, i, rec.Offset, from+uint64(i)))
				break
			}
		}
	}
}

// closeAll closes every client (their subscriptions end) and waits for the
// drainers, both bounded.
func (l *load) closeAll() {
	l.closing.Store(true)
	jobs := make(chan *client.Client)
	var wg sync.WaitGroup
	for range subscribeWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range jobs {
				ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
				_ = c.Close(ctx)
				cancel()
			}
		}()
	}
	for _, c := range l.clients {
		if c != nil {
			jobs <- c
		}
	}
	close(jobs)
	wg.Wait()
	done := make(chan struct{})
	go func() { l.drainers.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(closeTimeout):
		l.errs.add("close", errors.New("subscription drainers still running 5 s after every client closed"))
	}
}
