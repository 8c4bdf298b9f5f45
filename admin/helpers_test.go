package admin_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/broker"
	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/config"
	"github.com/getfelix/felix-go/wire"
)

// Helpers of the admin tests: a broker, its admin endpoint's URLs, and the
// frozen-subscriber rig the tree page's test fills a feeder with (as the
// broker's isolation tests do).

// seq is the payload of message i: fixed width, so order is visible in a diff.
func seq(i int) string { return fmt.Sprintf("m%06d", i) }

const (
	kib = 1 << 10
	// A frozen subscriber's batches: 16 payloads of 1 KiB, enough of them
	// (4.7 MiB) to overrun a frozen subscription several times over.
	isoPer     = 16
	isoSize    = kib
	isoBatches = 300
)

// rig is one broker with a publisher.
type rig struct {
	t   *testing.T
	cfg config.Config
	b   *broker.Broker
	ctx context.Context
	pub *client.Client
	st  client.Stream
}

func newRig(t *testing.T, timeout time.Duration, tune func(*config.Config)) *rig {
	t.Helper()
	cfg := brokertest.Config(t)
	if tune != nil {
		tune(&cfg)
	}
	b := brokertest.Start(t, cfg)
	return &rig{t: t, cfg: cfg, b: b, ctx: brokertest.Context(t, timeout), pub: brokertest.Dial(t, b, cfg), st: client.Stream{Name: "iso"}}
}

// frozenClient dials a client whose subscriptions buffer a single event: a
// subscription on it that is never read stops reading its QUIC stream after
// its first frame.
func (r *rig) frozenClient() *client.Client {
	return brokertest.DialOptions(r.t, r.b, r.cfg, client.Options{SubscriptionBuffer: 1})
}

func (r *rig) subscribe(c *client.Client, st client.Stream, o client.SubscribeOptions) *client.Subscription {
	r.t.Helper()
	sub, err := c.Subscribe(r.ctx, st, o)
	if err != nil {
		r.t.Fatalf("subscribe to %s: %v", st.Name, err)
	}
	return sub
}

func (r *rig) value(name string, labels ...string) float64 {
	r.t.Helper()
	return brokertest.Value(r.t, r.b, name, labels...)
}

// publish publishes batches of per numbered messages of size bytes, acked
// per batch, one at a time.
func (r *rig) publish(st client.Stream, batches, per, size int) {
	r.t.Helper()
	for i := range batches {
		batch := make([][]byte, per)
		for j := range batch {
			p := make([]byte, max(size, len(seq(0))))
			copy(p, seq(i*per+j))
			batch[j] = p
		}
		if err := r.pub.PublishBatch(r.ctx, st, batch, client.PublishOptions{Ack: wire.AckPerBatch}); err != nil {
			r.t.Fatalf("publish batch %d: %v", i, err)
		}
	}
}

// awaitFeederDepth waits until the feeders' summed depth is want: the frozen
// subscription's queue is full and every other feeder's is empty.
func (r *rig) awaitFeederDepth(want int) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(r.ctx, 10*time.Second)
	defer cancel()
	if err := brokertest.Await(ctx, func() bool { return brokertest.Totals(r.b, actors.KindFeeder).Depth == want }); err != nil {
		r.t.Fatalf("feeder mailboxes never settled at depth %d (a full frozen queue): %+v; dropped %v, byte-dropped %v, evicted %v",
			want, brokertest.Totals(r.b, actors.KindFeeder), r.value("felix_sub_queue_dropped_total"),
			r.value("felix_sub_queue_byte_dropped_total"), r.value("felix_sub_queue_drop_old_total"))
	}
}

// awaitFanouts waits until every fanout of batches to subs subscribers has
// been counted as enqueued, dropped or evicted-into. The shard counts a
// fanout just after acking it, so an ack can arrive before its count.
func (r *rig) awaitFanouts(batches, subs int) {
	r.t.Helper()
	want := float64(batches * subs)
	ctx, cancel := context.WithTimeout(r.ctx, 10*time.Second)
	defer cancel()
	brokertest.Eventually(r.t, ctx, fmt.Sprintf("%v fanouts counted", want), func() bool {
		return r.value("felix_sub_queue_enqueued_total")+r.value("felix_sub_queue_dropped_total") == want
	})
}
