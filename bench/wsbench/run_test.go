package main

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/internal/quicconf"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, brokertest.LeakOptions()...)
}

// TestFelixFanout runs the bench against an in-process broker's browser
// front end: every timed record reaches every WebSocket subscriber, and
// the rate, latencies and the server's CPU are reported.
func TestFelixFanout(t *testing.T) {
	cfg := brokertest.Config(t)
	cfg.BrowserListen = "127.0.0.1:0"
	br := brokertest.Start(t, cfg)
	sys := &felixSystem{o: felixOptions{
		addr: br.Addr().String(), browser: br.BrowserAddr().String(),
		ca:    filepath.Join(cfg.DataDir, quicconf.CertFile),
		token: brokertest.Token(t, cfg, "default"), tenant: "default", namespace: "default", stream: "wsbench",
	}}
	s := settings{subscribers: 20, size: 64, duration: 300 * time.Millisecond, window: 8, warmup: 3,
		drain: 10 * time.Second, dialers: 4, serverPID: os.Getpid(), clkTck: 100}
	res, err := run(sys, s)
	if err != nil {
		t.Fatal(err)
	}
	if res.Published == 0 || res.Missing != 0 || res.Delivered != res.Published*20 || res.PublishErrors != 0 {
		t.Fatalf("published %d, delivered %d of %d (missing %d), publish errors %d (%s): want every record at every subscriber",
			res.Published, res.Delivered, res.Expected, res.Missing, res.PublishErrors, res.FirstErr)
	}
	if res.DeliveriesPS <= 0 || res.P50us <= 0 || res.P99us < res.P50us || res.ServerCPU == nil || res.ClientCPU == nil {
		t.Fatalf("deliveries/s %.0f, p50 %.0f µs, p99 %.0f µs, server CPU %v, client CPU %v: want a rate, p99 ≥ p50 > 0 and both CPUs",
			res.DeliveriesPS, res.P50us, res.P99us, res.ServerCPU, res.ClientCPU)
	}
}

// fakeSystem delivers each record at once to every subscriber but those
// in lose, which get none of the timed records.
type fakeSystem struct {
	t    *tracker
	subs int
	lose map[int]bool
}

type fakeSubscriber struct{}

func (fakeSubscriber) close() {}

func (f *fakeSystem) subscribe(_ context.Context, t *tracker, _ int) (subscriber, error) {
	f.t = t
	return fakeSubscriber{}, nil
}

func (f *fakeSystem) dialPublisher(context.Context) (publisher, error) { return f, nil }

func (f *fakeSystem) publish(_ context.Context, payload []byte) error {
	for i := range f.subs {
		if !f.lose[i] || binary.BigEndian.Uint64(payload) < f.t.warmup {
			f.t.deliver(i, [][]byte{append([]byte(nil), payload...)}, time.Now().UnixNano())
		}
	}
	return nil
}

func (f *fakeSystem) flush(context.Context) error { return nil }
func (f *fakeSystem) close()                      {}

// TestMissingCounted: a subscriber that gets no timed record is counted
// missing, the paced publisher sends rate × duration records, and the
// drain gives up once nothing arrives for its quiet time.
func TestMissingCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := &fakeSystem{subs: 5, lose: map[int]bool{3: true}}
		s := settings{subscribers: 5, size: 16, duration: time.Second, rate: 100, window: 1000, warmup: 2,
			drain: 200 * time.Millisecond, dialers: 2, clkTck: 100}
		start := time.Now()
		res, err := run(sys, s)
		if err != nil {
			t.Fatal(err)
		}
		if res.Published != 100 || res.Expected != 500 || res.Delivered != 400 || res.Missing != 100 {
			t.Errorf("published %d, expected %d, delivered %d, missing %d: want 100, 500, 400, 100",
				res.Published, res.Expected, res.Delivered, res.Missing)
		}
		if took, want := time.Since(start), 990*time.Millisecond+200*time.Millisecond; took != want {
			t.Errorf("the run took %s: want %s, the last publish at 0.99 s and the drain's 200 ms after it", took, want)
		}
	})
}

// TestWindowHoldsPublisher: the publisher stops once it is window ×
// subscribers deliveries ahead; here one subscriber of five gets nothing,
// so after 4 × 5 records (and the one that crossed the bound) it waits
// out the duration.
func TestWindowHoldsPublisher(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := &fakeSystem{subs: 5, lose: map[int]bool{3: true}}
		s := settings{subscribers: 5, size: 16, duration: time.Second, window: 4, warmup: 2,
			drain: 200 * time.Millisecond, dialers: 2, clkTck: 100}
		start := time.Now()
		res, err := run(sys, s)
		if err != nil {
			t.Fatal(err)
		}
		if res.Published != 21 || res.Missing != 21 {
			t.Errorf("published %d, missing %d: want 21 and 21", res.Published, res.Missing)
		}
		if took, want := time.Since(start), time.Second+200*time.Millisecond; took != want {
			t.Errorf("the run took %s: want %s, the duration and the drain", took, want)
		}
	})
}
