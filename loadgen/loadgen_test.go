package loadgen

import (
	"context"
	"errors"
	"math"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/getfelix/felix-go/wire"
)

func TestWithDefaults(t *testing.T) {
	t.Parallel()
	got := Config{}.withDefaults()
	want := Config{
		Policy: "block", Payload: 128, Batch: 1, Publishers: 1, Inflight: 1, Count: 10_000,
		ConnectTimeout: 10 * time.Second,
		// 10,000 deliveries at the 25,000/s floor, plus the slack.
		Timeout: 400*time.Millisecond + 30*time.Second,
	}
	if got.Policy != want.Policy || got.Payload != want.Payload || got.Batch != want.Batch ||
		got.Publishers != want.Publishers || got.Inflight != want.Inflight || got.SubConns != 0 ||
		got.Count != want.Count || got.Duration != 0 || got.ConnectTimeout != want.ConnectTimeout || got.Timeout != want.Timeout {
		t.Errorf("Config{}.withDefaults() = %+v, want %+v", got, want)
	}
	if err := got.validate(); err != nil {
		t.Errorf("the zero Config does not validate: %v", err)
	}
	if got := (Config{Fanout: 4}).withDefaults(); got.SubConns != 4 {
		t.Errorf("Fanout 4: SubConns = %d, want one per subscriber (4)", got.SubConns)
	}
	if got := (Config{Duration: time.Second}).withDefaults(); got.Count != 0 {
		t.Errorf("Duration 1s: Count = %d, want 0 (the run is timed)", got.Count)
	}
}

func TestDefaultTimeout(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		give Config
		want time.Duration
	}{
		{"timed", Config{Duration: 10 * time.Second, Warmup: 500, Rate: 1000}, 10*time.Second + 750*time.Millisecond + 30*time.Second},
		{"counted at the floor", Config{Count: 1_000_000, Fanout: 2}, 80*time.Second + 30*time.Second},
		{"counted, paced slower than the floor", Config{Count: 1000, Rate: 100}, 15*time.Second + 30*time.Second},
	}
	for _, tt := range tests {
		if got := tt.give.defaultTimeout(); got != tt.want {
			t.Errorf("%s: defaultTimeout(%+v) = %s, want %s", tt.name, tt.give, got, tt.want)
		}
	}
}

func TestPaceInterval(t *testing.T) {
	t.Parallel()
	// 2 publishers x 4 loops, batches of 64, 512,000 msg/s: each loop sends
	// 1,000 batches a second.
	c := Config{Publishers: 2, Inflight: 4, Batch: 64, Rate: 512_000}
	if got := c.PaceInterval(); got != time.Millisecond {
		t.Errorf("PaceInterval(%+v) = %s, want 1ms", c, got)
	}
	if got := (Config{Rate: 1000}).PaceInterval(); got != time.Millisecond {
		t.Errorf("PaceInterval with zero sizes (read as 1) at 1000 msg/s = %s, want 1ms", got)
	}
}

func TestValidateRefuses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		give Config
	}{
		{"payload under the timestamp", Config{Payload: 4}},
		{"more connections than subscribers", Config{Fanout: 1, SubConns: 2}},
		{"negative fanout", Config{Fanout: -1}},
		{"count and duration", Config{Count: 1, Duration: time.Second}},
		{"negative warmup", Config{Warmup: -1}},
		{"NaN rate", Config{Rate: math.NaN()}},
		{"rate too fine to pace", Config{Rate: 2e6}},
		{"negative timeout", Config{Timeout: -time.Second}},
		{"replicas of an in-memory stream", Config{Replicas: 3}},
		{"negative replicas", Config{Durable: true, Replicas: -1}},
		{"subscribe only, no subscribers", Config{SubscribeOnly: true, Count: 10}},
		{"subscribe only, timed", Config{SubscribeOnly: true, Fanout: 1, Duration: time.Second}},
		{"subscribe only, paced", Config{SubscribeOnly: true, Fanout: 1, Count: 10, Rate: 100}},
		{"subscribe only, durable", Config{SubscribeOnly: true, Fanout: 1, Count: 10, Durable: true}},
	}
	for _, tt := range tests {
		err := tt.give.withDefaults().validate()
		if !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: validate(%+v) = %v, want ErrInvalidConfig", tt.name, tt.give, err)
		}
	}
}

// TestRunEmbedded: a short lossless run against the embedded broker
// balances, times every measured delivery and reports progress.
func TestRunEmbedded(t *testing.T) {
	var progress atomic.Int64
	cfg := Config{
		Batch: 8, Ack: wire.AckPerBatch, Fanout: 2, SubConns: 1, Inflight: 2,
		Duration: 1200 * time.Millisecond, Rate: 2000, Warmup: 40,
		Progress: func(p Progress) {
			if p.Phase == "" || p.Elapsed <= 0 {
				t.Errorf("progress %+v: want a phase and a positive elapsed time", p)
			}
			progress.Add(1)
		},
	}
	res, err := Run(context.Background(), cfg)
	if err != nil || res == nil {
		t.Fatalf("Run = %+v, %v; want a result and no error", res, err)
	}
	if res.Unaccounted == nil || *res.Unaccounted != 0 || res.Dropped == nil || *res.Dropped != 0 {
		t.Errorf("unaccounted %v, dropped %v: want 0 and 0", show(res.Unaccounted), show(res.Dropped))
	}
	if res.Published < 40+1000 || res.Delivered != 2*res.Published || res.MeasuredDelivered != 2*res.MeasuredPublished {
		t.Errorf("published %d (measured %d), delivered %d (measured %d): want over 1,040, and deliveries = 2 x published",
			res.Published, res.MeasuredPublished, res.Delivered, res.MeasuredDelivered)
	}
	if res.Latency.Samples != res.MeasuredDelivered || res.AckLatency.Samples != res.MeasuredPublished/8 {
		t.Errorf("latency samples %d, ack samples %d: want one per measured delivery (%d) and per batch (%d)",
			res.Latency.Samples, res.AckLatency.Samples, res.MeasuredDelivered, res.MeasuredPublished/8)
	}
	if res.MsgsPerS <= 0 || res.TimedOut || res.Interrupted || len(res.SubErrs) > 0 {
		t.Errorf("msgs/s %v, timed out %v, interrupted %v, subscription errors %v: want a rate and a clean end",
			res.MsgsPerS, res.TimedOut, res.Interrupted, res.SubErrs)
	}
	if progress.Load() == 0 {
		t.Error("Progress was never called in a run over a second long")
	}
}

// TestRunDialError: a broker that is not there is a DialError and no
// Result.
func TestRunDialError(t *testing.T) {
	t.Parallel()
	// A UDP port that was free a moment ago: nothing answers QUIC there.
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := pc.LocalAddr().String()
	pc.Close()
	res, err := Run(context.Background(), Config{Addr: addr, ConnectTimeout: 300 * time.Millisecond})
	var de *DialError
	if res != nil || !errors.As(err, &de) || de.Addr != addr {
		t.Errorf("Run against nothing at %s = %+v, %v; want no result and a DialError for %s", addr, res, err, addr)
	}
}

// TestRunZeroConfig: the zero Config runs, as its doc says: an embedded
// broker, 10,000 fire-and-forget messages, no subscribers.
func TestRunZeroConfig(t *testing.T) {
	res, err := Run(context.Background(), Config{})
	if err != nil || res == nil {
		t.Fatalf("Run(Config{}) = %+v, %v; want a result and no error", res, err)
	}
	if res.Published != 10_000 || res.Expected != 0 || res.Unaccounted == nil || *res.Unaccounted != 0 || res.MsgsPerS <= 0 {
		t.Errorf("published %d, expected %d, unaccounted %v, msgs/s %v: want 10,000, 0, 0 and a rate",
			res.Published, res.Expected, show(res.Unaccounted), res.MsgsPerS)
	}
}
