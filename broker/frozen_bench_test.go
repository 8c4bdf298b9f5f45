package broker_test

import (
	"context"
	"testing"
	"time"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/broker"
	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/config"
	"github.com/getfelix/felix-go/wire"
)

// BenchmarkFrozenSubscriber measures what one subscriber that stops reading
// costs a healthy subscriber of the same stream (NATS core loses
// about 89% of the healthy rate in the same experiment). In one run it measures the healthy
// subscriber's delivered rate alone, then with a frozen subscriber beside
// it, and reports both and their ratio. b.N is the number of messages per
// phase: 128-byte payloads, acked batches of 64 from one publishing
// goroutine, default bounds except the overflow policy and the egress bound
// (benchEgress). A warm-up phase runs first.
//
// Variants: the frozen subscriber on the healthy one's connection
// (same_conn) or on its own (other_conn). Under block the healthy
// subscriber stops by design once the frozen one is full (the shard waits on
// it); a healthy subscriber that receives nothing for benchStall while the
// publisher is stuck is reported as healthy_stalled=1, with the rate of
// what it received until then.
//
// Besides the rates: peak_queued_bytes is the largest feeder mailbox peak
// in the frozen phase (the frozen subscriber's queue), *_dropped_batches the
// subscriber-queue drops and evictions per phase, *_lane_dropped the
// deliveries refused by a full writer lane per phase, *_received_frac what
// the healthy subscriber got of b.N, peak_lane_depth the largest sampled
// summed lane depth in the frozen phase.
//
//	go test -run '^$' -bench FrozenSubscriber -benchtime 200000x -count 5 ./broker/
func BenchmarkFrozenSubscriber(b *testing.B) {
	for _, policy := range []string{"drop_new", "drop_old", "block"} {
		for _, where := range []string{"other_conn", "same_conn"} {
			b.Run(policy+"/"+where, func(b *testing.B) { benchFrozen(b, policy, where == "same_conn", benchEgress) })
		}
	}
	// At the default egress bound a frozen subscriber's frames pile up in
	// its connection writer (up to 256 MiB) before its queue fills, so no
	// overflow policy is exercised in a 200k-message run: shown once.
	b.Run("default_egress/drop_new/other_conn", func(b *testing.B) {
		benchFrozen(b, "drop_new", false, config.Default().SubscriberEgressMaxBytes)
	})
}

// benchEgress is subscriber_egress_max_bytes for the policy variants: small
// enough that the frozen subscriber stops at its egress share and fills its
// queue (512 batches, 4 MiB here) within a 200k-message run, so the overflow
// policy decides what happens to it.
const benchEgress = 1 << 20

// benchStall is how long a healthy subscriber may receive nothing before
// the phase gives up on it.
const benchStall = 3 * time.Second

type phaseResult struct {
	received int
	elapsed  time.Duration
	stalled  bool
	// peakQueued is the largest byte peak of any feeder mailbox (the
	// subscriber queue), read before the phase's subscriptions end.
	peakQueued int64
	// peakLane is the largest summed lane mailbox depth sampled.
	peakLane int
}

func (p phaseResult) rate() float64 { return float64(p.received) / p.elapsed.Seconds() }

func benchFrozen(b *testing.B, policy string, sameConn bool, egress int64) {
	cfg := brokertest.Config(b)
	cfg.SubscriberQueuePolicy = policy
	cfg.SubscriberEgressMaxBytes = egress
	br := brokertest.Start(b, cfg)
	pub := brokertest.Dial(b, br, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// Warm up (heap, code paths) so the first measured phase is not the
	// cold one; then alone, then with the frozen peer.
	benchPhase(b, ctx, br, pub, cfg, client.Stream{Name: "warmup"}, false, sameConn, min(b.N, 20000))
	drops := func() float64 {
		return brokertest.Value(b, br, "felix_sub_queue_dropped_total") + brokertest.Value(b, br, "felix_sub_queue_drop_old_total")
	}
	lane0, drops0 := brokertest.Value(b, br, "felix_lane_queue_dropped_total"), drops()
	alone := benchPhase(b, ctx, br, pub, cfg, client.Stream{Name: "alone"}, false, sameConn, b.N)
	lane1 := brokertest.Value(b, br, "felix_lane_queue_dropped_total")
	drops1 := drops()
	with := benchPhase(b, ctx, br, pub, cfg, client.Stream{Name: "frozen"}, true, sameConn, b.N)
	lane2 := brokertest.Value(b, br, "felix_lane_queue_dropped_total")
	drops2 := drops()

	b.ReportMetric(0, "ns/op")
	b.ReportMetric(alone.rate(), "healthy_alone_msgs/s")
	b.ReportMetric(with.rate(), "healthy_with_frozen_msgs/s")
	b.ReportMetric(with.rate()/alone.rate(), "ratio")
	b.ReportMetric(float64(alone.received)/float64(b.N), "alone_received_frac")
	b.ReportMetric(float64(with.received)/float64(b.N), "with_received_frac")
	stalled := 0.0
	if with.stalled || alone.stalled {
		stalled = 1
	}
	b.ReportMetric(stalled, "healthy_stalled")
	b.ReportMetric(float64(with.peakQueued), "peak_queued_bytes")
	// Queue drops in the alone phase are the healthy subscriber's own: it
	// fell a whole queue behind a publisher whose acks do not wait for
	// delivery. In the frozen phase they are (almost all) the frozen one's.
	b.ReportMetric(drops1-drops0, "alone_dropped_batches")
	b.ReportMetric(drops2-drops1, "with_dropped_batches")
	b.ReportMetric(lane1-lane0, "alone_lane_dropped")
	b.ReportMetric(lane2-lane1, "with_lane_dropped")
	b.ReportMetric(float64(with.peakLane), "peak_lane_depth")
}

// benchPhase publishes b.N numbered messages to st and measures a healthy
// subscriber's delivery, with a frozen subscriber on st when frozen is set.
func benchPhase(b *testing.B, ctx context.Context, br *broker.Broker, pub *client.Client, cfg config.Config, st client.Stream, frozen, sameConn bool, total int) phaseResult {
	b.Helper()
	healthyc := brokertest.Dial(b, br, cfg)
	var frozenc *client.Client
	if frozen {
		frozenc = healthyc
		if !sameConn {
			frozenc = brokertest.Dial(b, br, cfg)
		}
		if _, err := frozenc.Subscribe(ctx, st, client.SubscribeOptions{}); err != nil {
			b.Fatalf("subscribe frozen: %v", err)
		}
	}
	healthy, err := healthyc.Subscribe(ctx, st, client.SubscribeOptions{})
	if err != nil {
		b.Fatalf("subscribe healthy: %v", err)
	}

	const per, size = 64, 128
	payloads := make([][]byte, per)
	for i := range payloads {
		payloads[i] = make([]byte, size)
	}
	pubCtx, stopPub := context.WithCancel(ctx)
	defer stopPub()
	pubDone := make(chan error, 1)
	sampler := brokertest.StartSampler(b, br, time.Millisecond, nil)
	start := time.Now()
	go func() {
		for sent := 0; sent < total; sent += per {
			n := min(per, total-sent)
			if err := pub.PublishBatch(pubCtx, st, payloads[:n], client.PublishOptions{Ack: wire.AckPerBatch}); err != nil {
				pubDone <- err
				return
			}
		}
		pubDone <- nil
	}()

	var res phaseResult
	var last time.Time
	pubFinished := false
	for res.received < total {
		wait, cancelWait := context.WithTimeout(ctx, benchStall)
		_, err := healthy.Next(wait)
		cancelWait()
		if err != nil {
			// Nothing for benchStall: either the publisher is stuck (a
			// stall) or it finished and some messages never came (lost,
			// e.g. refused by a full lane under drop_new).
			select {
			case err := <-pubDone:
				pubFinished = err == nil
			default:
			}
			res.stalled = !pubFinished
			break
		}
		res.received++
		last = time.Now()
	}
	res.peakLane = sampler.Stop().Depth[actors.KindLane]
	if last.IsZero() {
		last = time.Now()
	}
	res.elapsed = last.Sub(start)
	res.peakQueued = brokertest.Totals(br, actors.KindFeeder).PeakBytes
	// Stop the publisher (block parks it behind the frozen subscriber),
	// then let the frozen subscriber go so nothing waits on it.
	stopPub()
	if !pubFinished {
		select {
		case <-pubDone:
		case <-time.After(10 * time.Second):
		}
	}
	if res.received < total {
		b.Logf("%s: healthy subscriber got %d of %d messages (stalled: %v)", st.Name, res.received, total, res.stalled)
	}
	if err := healthy.Close(ctx); err != nil && !res.stalled {
		b.Fatalf("close healthy: %v", err)
	}
	if frozen {
		_ = frozenc.Close(ctx)
	}
	return res
}
