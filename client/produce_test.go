package client_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/wire"
)

// promised records what each promise got, in the order they were called.
type promised struct {
	mu      sync.Mutex
	calls   []int // the Produce call each promise belongs to
	results []client.PublishResult
	errs    []error
}

func (p *promised) promise(i int) func(client.PublishResult, error) {
	return func(res client.PublishResult, err error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.calls = append(p.calls, i)
		p.results = append(p.results, res)
		p.errs = append(p.errs, err)
	}
}

func (p *promised) len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.calls)
}

// readAll reads a durable stream's shard 0 from offset 0 to its committed end.
func readAll(t *testing.T, ctx context.Context, c *client.Client, s client.Stream) []client.Record {
	t.Helper()
	var all []client.Record
	for from := uint64(0); ; {
		page, err := c.Read(ctx, s, from, client.ReadOptions{})
		if err != nil {
			t.Fatalf("read %s from %d: %v", s.Name, from, err)
		}
		all = append(all, page.Records...)
		if len(page.Records) == 0 || page.Next >= page.Committed {
			return all
		}
		from = page.Next
	}
}

// TestProduceResolvesInOrder: many asynchronous publishes from one
// goroutine, single messages and batches mixed, resolve in call order
// with consecutive offsets on a durable stream, and the log holds each
// payload at the offset its promise named.
func TestProduceResolvesInOrder(t *testing.T) {
	cfg := brokertest.Config(t)
	b := brokertest.Start(t, cfg)
	c := brokertest.Dial(t, b, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := client.Stream{Name: "ordered"}
	if _, err := c.CreateStream(ctx, s, client.StreamConfig{Durable: true}); err != nil {
		t.Fatalf("create %s: %v", s.Name, err)
	}

	const calls = 5000
	var got promised
	sizes := make([]int, calls) // records per call: every 7th call is a batch of 3
	var buf [3][]byte
	for i := range calls {
		sizes[i] = 1
		if i%7 == 0 {
			sizes[i] = 3
		}
		batch := buf[:sizes[i]]
		for j := range batch {
			batch[j] = fmt.Appendf(batch[j][:0], "%d.%d", i, j) // reused: Produce copies
		}
		o := client.PublishOptions{Ack: wire.AckPerMessage}
		if i%2 == 1 {
			o.Ack = wire.AckPerBatch
		}
		if err := c.Produce(ctx, s, batch, o, got.promise(i)); err != nil {
			t.Fatalf("produce %d: %v", i, err)
		}
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
	if n := got.len(); n != calls {
		t.Fatalf("after Flush %d promises were called, want %d", n, calls)
	}
	next := uint64(0)
	for k, i := range got.calls {
		if i != k {
			t.Fatalf("promise %d called for produce %d: out of order", k, i)
		}
		if err := got.errs[k]; err != nil {
			t.Fatalf("produce %d: %v", i, err)
		}
		if res := got.results[k]; !res.HasOffset || res.Offset != next {
			t.Fatalf("produce %d resolved with %+v, want offset %d", i, res, next)
		}
		next += uint64(sizes[i])
	}

	recs := readAll(t, ctx, c, s)
	if uint64(len(recs)) != next {
		t.Fatalf("the log holds %d records, want %d", len(recs), next)
	}
	off := 0
	for i, n := range sizes {
		for j := range n {
			r := recs[off]
			if want := fmt.Sprintf("%d.%d", i, j); r.Offset != uint64(off) || string(r.Payload) != want {
				t.Fatalf("record %d = %q at offset %d, want %q at %d", off, r.Payload, r.Offset, want, off)
			}
			off++
		}
	}
}

// TestProduceWindowBoundsInflight: at most the window's requests are
// unanswered on a publish stream (the broker's publish window, or
// Options.PublishWindow when lower), the unanswered and queued bytes stay
// within PublishInflightBytes, and both bounds are reached: the publisher
// keeps the window full rather than waiting for each ack.
func TestProduceWindowBoundsInflight(t *testing.T) {
	cfg := brokertest.Config(t)
	cfg.PublishWindow = 8
	b := brokertest.Start(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	for _, tt := range []struct {
		name       string
		window     int // Options.PublishWindow
		wantWindow int
	}{
		{"broker's window", 0, 8},
		{"client's lower window", 3, 3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			const budget = 64 << 10
			c := brokertest.DialOptions(t, b, cfg, client.Options{PublishWindow: tt.window, PublishInflightBytes: budget})
			if got := c.PublishWindow(); got != tt.wantWindow {
				t.Fatalf("PublishWindow() = %d, want %d", got, tt.wantWindow)
			}
			var maxReqs atomic.Int64
			var maxBytes atomic.Int64
			client.SetInflightHook(c, func(reqs int, bytes int64) {
				if int64(reqs) > maxReqs.Load() {
					maxReqs.Store(int64(reqs))
				}
				if bytes > maxBytes.Load() {
					maxBytes.Store(bytes)
				}
			})
			const calls = 2000
			payload := make([]byte, 1<<10)
			var got promised
			s := client.Stream{Name: "window-" + fmt.Sprint(tt.window)}
			for i := range calls {
				if err := c.Produce(ctx, s, [][]byte{payload}, client.PublishOptions{}, got.promise(i)); err != nil {
					t.Fatalf("produce %d: %v", i, err)
				}
			}
			if err := c.Flush(ctx); err != nil {
				t.Fatalf("flush: %v", err)
			}
			for k, i := range got.calls {
				if i != k || got.errs[k] != nil {
					t.Fatalf("promise %d: call %d, error %v; want call %d, no error", k, i, got.errs[k], k)
				}
			}
			if len(got.calls) != calls {
				t.Fatalf("%d promises called, want %d", len(got.calls), calls)
			}
			if m := maxReqs.Load(); m != int64(tt.wantWindow) {
				t.Errorf("at most %d requests were unanswered at once, want exactly the window, %d", m, tt.wantWindow)
			}
			if m := maxBytes.Load(); m > budget || m < budget/2 {
				t.Errorf("at most %d bytes were unanswered or queued, want at most the budget %d and near it", m, budget)
			}
		})
	}
}

// TestProduceRefusedResolvesOnlyItsOwn: a publish the broker refuses (to
// another tenant's stream: forbidden) fails its own promise with the
// broker's typed error; the publishes around it, on the same publish
// stream, succeed with consecutive offsets.
func TestProduceRefusedResolvesOnlyItsOwn(t *testing.T) {
	cfg := brokertest.Config(t)
	b := brokertest.Start(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// No dedicated streams: every scope shares the pooled publish stream.
	c := brokertest.DialOptions(t, b, cfg, client.Options{PublishShardStreams: -1})
	good, theirs := client.Stream{Name: "mine"}, client.Stream{Tenant: "other", Name: "theirs"}
	if _, err := c.CreateStream(ctx, good, client.StreamConfig{Durable: true}); err != nil {
		t.Fatalf("create: %v", err)
	}
	const calls = 300
	var got promised
	for i := range calls {
		s := good
		if i%50 == 25 {
			s = theirs
		}
		if err := c.Produce(ctx, s, [][]byte{[]byte(fmt.Sprint(i))}, client.PublishOptions{}, got.promise(i)); err != nil {
			t.Fatalf("produce %d: %v", i, err)
		}
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
	if len(got.calls) != calls {
		t.Fatalf("%d promises called, want %d", len(got.calls), calls)
	}
	next := uint64(0)
	for k, i := range got.calls {
		if i != k {
			t.Fatalf("promise %d called for produce %d: out of order", k, i)
		}
		err := got.errs[k]
		if i%50 == 25 {
			if !errors.Is(err, wire.ErrForbidden) {
				t.Fatalf("produce %d to another tenant's stream: %v, want forbidden", i, err)
			}
			continue
		}
		if err != nil || got.results[k].Offset != next {
			t.Fatalf("produce %d: %+v, %v; want offset %d, no error", i, got.results[k], err, next)
		}
		next++
	}
	if err := c.Publish(ctx, good, []byte("after"), client.PublishOptions{}); err != nil {
		t.Fatalf("publish after the refusals: %v", err)
	}
}

// TestProduceBrokerStopped: a broker that stops while publishes are
// unanswered (its shard stalled behind a subscriber that never reads)
// resolves every outstanding promise, each exactly once, soon: the ones it
// did not answer as it stopped with an error. None hangs.
func TestProduceBrokerStopped(t *testing.T) {
	cfg := brokertest.Config(t)
	cfg.SubscriberQueuePolicy = "block"
	cfg.SubscriberLaneQueuePolicy = "block"
	cfg.SubscriberQueueCapacity = 1
	cfg.SubscriberEgressMaxBytes = 64 << 10
	cfg.PubQueueDepth = 1
	b := brokertest.Start(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	stalled := client.Stream{Name: "stalled"}
	frozen := brokertest.DialOptions(t, b, cfg, client.Options{SubscriptionBuffer: 1})
	if _, err := frozen.Subscribe(ctx, stalled, client.SubscribeOptions{}); err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	// A budget over what the loop below produces: Produce never waits.
	c := brokertest.DialOptions(t, b, cfg, client.Options{PublishInflightBytes: 16 << 20})

	var got promised
	payload := make([]byte, 32<<10)
	produced := 0
	for produced < 256 { // 8 MiB: several times what the frozen subscription absorbs
		if err := c.Produce(ctx, stalled, [][]byte{payload}, client.PublishOptions{}, got.promise(produced)); err != nil {
			t.Fatalf("produce %d: %v", produced, err)
		}
		produced++
	}
	brokertest.Eventually(t, ctx, "the stalled stream's shard mailbox to fill", func() bool {
		return brokertest.Totals(b, actors.KindShard).Depth >= cfg.PubQueueDepth &&
			brokertest.Value(t, b, "felix_sub_queue_blocked_total") > 0
	})
	before := got.len()
	if before == produced {
		t.Fatalf("all %d publishes were answered before the stop; the shard did not stall", produced)
	}

	stopCtx, stopCancel := context.WithTimeout(ctx, 10*time.Second)
	defer stopCancel()
	if err := b.Stop(stopCtx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	flushCtx, flushCancel := context.WithTimeout(ctx, 10*time.Second)
	defer flushCancel()
	start := time.Now()
	ferr := c.Flush(flushCtx)
	if got.len() != produced {
		t.Fatalf("%s after the broker stopped, %d of %d promises were called (Flush: %v)", time.Since(start), got.len(), produced, ferr)
	}
	failed := 0
	for k, i := range got.calls {
		if i != k {
			t.Fatalf("promise %d called for produce %d: out of order", k, i)
		}
		if err := got.errs[k]; err != nil {
			failed++
			var lost *client.ConnectionLostError
			var werr *wire.Error
			if !errors.As(err, &lost) && !errors.As(err, &werr) {
				t.Errorf("produce %d failed with %T %v, want a ConnectionLostError or the broker's error", i, err, err)
			}
		}
	}
	t.Logf("%d of %d publishes answered before the stop; %d failed; all resolved %s after it", before, produced, failed, time.Since(start))
	// The broker answers some of them as it stops (the stalled subscriber
	// is given up); the rest fail with it.
	if failed == 0 {
		t.Errorf("no promise failed, want the ones the broker had not answered when it stopped to")
	}
	if err := c.Produce(ctx, stalled, [][]byte{payload}, client.PublishOptions{}, got.promise(produced)); err == nil {
		t.Errorf("produce after the broker stopped: no error")
	}
}
