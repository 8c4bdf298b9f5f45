package broker_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/wire"
)

func publishN(t *testing.T, ctx context.Context, c *client.Client, st client.Stream, from, n int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		if _, err := c.PublishResult(ctx, st, [][]byte{[]byte(fmt.Sprintf("m%05d", i))}, client.PublishOptions{}); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
}

func expectRun(t *testing.T, ctx context.Context, next func(context.Context) (client.Event, error), from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		ev, err := next(ctx)
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if want := fmt.Sprintf("m%05d", i); string(ev.Payload) != want || ev.Offset != uint64(i) {
			t.Fatalf("event %d = %q at offset %d, want %q at %d", i, ev.Payload, ev.Offset, want, i)
		}
	}
}

// TestResumeFromOffset: a subscription started at an offset replays the
// history from the log, then continues live, with no gap and no duplicate;
// Subscribed names where history ends.
func TestResumeFromOffset(t *testing.T) {
	for _, fsync := range []string{"on_commit", "periodic"} {
		t.Run(fsync, func(t *testing.T) {
			cfg := brokertest.Config(t)
			cfg.DurableFsync = fsync
			b := brokertest.Start(t, cfg)
			c := brokertest.Dial(t, b, cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			st := client.Stream{Name: "replay"}
			if _, err := c.CreateStream(ctx, st, client.StreamConfig{Durable: true}); err != nil {
				t.Fatal(err)
			}
			publishN(t, ctx, c, st, 0, 2000)

			sub, err := c.Subscribe(ctx, st, client.SubscribeOptions{From: client.FromOffset, FromOffset: 100})
			if err != nil {
				t.Fatalf("subscribe from 100: %v", err)
			}
			if start, live, durable := sub.Offsets(); start != 100 || live != 2000 || !durable {
				t.Fatalf("Subscribed offsets = %d, %d, %v; want 100, 2000, durable", start, live, durable)
			}
			publishN(t, ctx, c, st, 2000, 50) // live, while history is replayed
			expectRun(t, ctx, sub.Next, 100, 2050)

			early, err := c.Subscribe(ctx, st, client.SubscribeOptions{From: client.FromEarliest})
			if err != nil {
				t.Fatal(err)
			}
			expectRun(t, ctx, early.Next, 0, 2050)
		})
	}
}

func TestResumeCursorErrors(t *testing.T) {
	cfg := brokertest.Config(t)
	b := brokertest.Start(t, cfg)
	c := brokertest.Dial(t, b, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st := client.Stream{Name: "cursor"}
	if _, err := c.CreateStream(ctx, st, client.StreamConfig{Durable: true}); err != nil {
		t.Fatal(err)
	}
	publishN(t, ctx, c, st, 0, 10)
	_, err := c.Subscribe(ctx, st, client.SubscribeOptions{From: client.FromOffset, FromOffset: 50})
	var cursor *wire.CursorError
	if !errors.As(err, &cursor) || cursor.Reason != "in_future" || cursor.Available != 10 {
		t.Fatalf("subscribe from 50 of 10: %v, want in_future with available 10", err)
	}
	if _, err := c.Subscribe(ctx, client.Stream{Name: "memory"}, client.SubscribeOptions{From: client.FromOffset, FromOffset: 3}); !errors.As(err, &cursor) || cursor.Reason != "in_future" || cursor.Available != 0 {
		t.Fatalf("offset 3 of an empty in-memory stream: %v, want in_future with available 0", err)
	}
	// The connection still serves after refusals.
	sub, err := c.Subscribe(ctx, st, client.SubscribeOptions{From: client.FromOffset, FromOffset: 10})
	if err != nil {
		t.Fatal(err)
	}
	publishN(t, ctx, c, st, 10, 1)
	expectRun(t, ctx, sub.Next, 10, 11)
}

// TestLaggedSubscriptionResumes: a durable subscriber whose queue overflows
// is ended as lagged with the offset to resume from, never with a silent
// gap; the resuming subscription reads the hole back from the log and the
// reader sees every record once, in order.
func TestLaggedSubscriptionResumes(t *testing.T) {
	cfg := brokertest.Config(t)
	cfg.SubscriberQueueCapacity = 4
	cfg.SubscriberEgressMaxBytes = 4 << 10
	b := brokertest.Start(t, cfg)
	pub := brokertest.Dial(t, b, cfg)
	slow := brokertest.DialOptions(t, b, cfg, client.Options{SubscriptionBuffer: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st := client.Stream{Name: "lag"}
	if _, err := pub.CreateStream(ctx, st, client.StreamConfig{Durable: true}); err != nil {
		t.Fatal(err)
	}
	plain, err := slow.Subscribe(ctx, st, client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	resuming, err := slow.SubscribeResuming(ctx, st, client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 3000
	publishN(t, ctx, pub, st, 0, n) // neither subscriber reads yet: both fall behind
	var lag *client.LaggedError
	for i := 0; ; i++ {
		ev, err := plain.Next(ctx)
		if errors.As(err, &lag) {
			if lag.ResumeFrom != uint64(i) {
				t.Fatalf("lagged after %d events, resume from %d: a gap would be silent", i, lag.ResumeFrom)
			}
			break
		}
		if err != nil {
			t.Fatalf("plain subscription: %v", err)
		}
		if ev.Offset != uint64(i) {
			t.Fatalf("plain subscription skipped from %d to %d without ending as lagged", i, ev.Offset)
		}
	}
	expectRun(t, ctx, resuming.Next, 0, n)
}

// TestInMemoryEarliestReplaysTheRing: on an in-memory stream, earliest means
// what the replay ring still holds; the ring's backlog and the live batches
// meet with no gap and no duplicate, and carry no offsets.
func TestInMemoryEarliestReplaysTheRing(t *testing.T) {
	cfg := brokertest.Config(t)
	cfg.ReplayRingRecords = 50 // the ring keeps the newest 50
	cfg.SubscriberQueuePolicy = "block"
	cfg.SubscriberLaneQueuePolicy = "block"
	b := brokertest.Start(t, cfg)
	c := brokertest.Dial(t, b, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st := client.Stream{Name: "ring"}
	publishN(t, ctx, c, st, 0, 80)
	sub, err := c.Subscribe(ctx, st, client.SubscribeOptions{From: client.FromEarliest})
	if err != nil {
		t.Fatal(err)
	}
	publishN(t, ctx, c, st, 80, 20)
	for i := 30; i < 100; i++ {
		ev, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if want := fmt.Sprintf("m%05d", i); string(ev.Payload) != want || ev.HasOffset {
			t.Fatalf("event %d = %q (offset shown %v), want %q without an offset", i, ev.Payload, ev.HasOffset, want)
		}
	}
}

// TestCatchUpFillsHolesLeftDuringReplay: while a long history is replayed,
// live publishes overflow the subscriber's small queue (drop_new); the
// catch-up passes read those holes from the log, so a plain subscription
// sees every record once, in order, without ending as lagged.
func TestCatchUpFillsHolesLeftDuringReplay(t *testing.T) {
	cfg := brokertest.Config(t)
	cfg.SubscriberQueueCapacity = 4
	b := brokertest.Start(t, cfg)
	pub := brokertest.Dial(t, b, cfg)
	c := brokertest.Dial(t, b, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st := client.Stream{Name: "catchup"}
	if _, err := pub.CreateStream(ctx, st, client.StreamConfig{Durable: true}); err != nil {
		t.Fatal(err)
	}
	// A long history (written in batches, to be quick), so the replay is
	// still running while the live publishes below overflow the queue.
	const history, live = 100000, 300
	for i := 0; i < history; i += 100 {
		batch := make([][]byte, 100)
		for j := range batch {
			batch[j] = []byte(fmt.Sprintf("m%05d", i+j))
		}
		if _, err := pub.PublishResult(ctx, st, batch, client.PublishOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	sub, err := c.Subscribe(ctx, st, client.SubscribeOptions{From: client.FromEarliest})
	if err != nil {
		t.Fatal(err)
	}
	// Fire-and-forget, so all of them land while the history is replayed.
	for i := history; i < history+live; i++ {
		if err := pub.Publish(ctx, st, []byte(fmt.Sprintf("m%05d", i)), client.PublishOptions{FireAndForget: true}); err != nil {
			t.Fatal(err)
		}
	}
	expectRun(t, ctx, sub.Next, 0, history+live)
	if dropped := brokertest.Value(t, b, "felix_sub_queue_dropped_total"); dropped == 0 {
		t.Fatalf("the queue dropped nothing during the replay, so the catch-up was not exercised")
	} else {
		t.Logf("%v batches dropped from the queue during the replay, all read back from the log", dropped)
	}
}

// TestResumeInMemoryFromRing: an in-memory stream's history is its replay
// ring. A start before the ring is a cursor error too_old naming the ring's
// oldest offset (it was invalid_request); a start inside it replays the
// ring from there, then continues live.
func TestResumeInMemoryFromRing(t *testing.T) {
	cfg := brokertest.Config(t)
	cfg.ReplayRingRecords = 4
	b := brokertest.Start(t, cfg)
	c := brokertest.Dial(t, b, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st := client.Stream{Name: "ring"}
	for i := range 10 {
		if err := c.Publish(ctx, st, []byte(fmt.Sprintf("m%05d", i)), client.PublishOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := c.Subscribe(ctx, st, client.SubscribeOptions{From: client.FromOffset, FromOffset: 2})
	var cursor *wire.CursorError
	if !errors.As(err, &cursor) || cursor.Reason != "too_old" || cursor.Available != 6 {
		t.Fatalf("offset 2 with a ring of offsets 6-9: %v, want too_old with available 6", err)
	}
	sub, err := c.Subscribe(ctx, st, client.SubscribeOptions{From: client.FromOffset, FromOffset: 7})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Publish(ctx, st, []byte("m00010"), client.PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := 7; i <= 10; i++ {
		ev, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if want := fmt.Sprintf("m%05d", i); string(ev.Payload) != want {
			t.Fatalf("event %d = %q, want %q", i, ev.Payload, want)
		}
	}
}
