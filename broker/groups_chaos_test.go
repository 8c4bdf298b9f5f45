package broker_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/getfelix/felix-go/broker"
	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/wire"
)

// ackLedger counts the acks of every offset, across consumers.
type ackLedger struct {
	mu    sync.Mutex
	acked map[uint64]int
}

func (l *ackLedger) add(recs []client.GroupRecord) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range recs {
		l.acked[r.Offset]++
	}
}

// missing counts the offsets below n never acked, and the acks past the
// first (redeliveries that were acked again).
func (l *ackLedger) missing(n int) (missing, again int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for o := range uint64(n) {
		switch k := l.acked[o]; {
		case k == 0:
			missing++
		case k > 1:
			again += k - 1
		}
	}
	return missing, again
}

// consumeAll runs consumers polling and acking until ctx ends; errors
// (an actor killed under them) only make them poll again.
func consumeAll(ctx context.Context, c *client.Client, st client.Stream, consumers int, ledger *ackLedger) *sync.WaitGroup {
	var wg sync.WaitGroup
	for i := range consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g := c.Group(st, "workers", client.GroupOptions{Consumer: string(rune('a' + i))})
			defer g.Close()
			for ctx.Err() == nil {
				recs, err := g.Poll(ctx, 50, 100*time.Millisecond)
				if err != nil || len(recs) == 0 {
					continue
				}
				if err := g.Ack(ctx, recs...); err == nil {
					ledger.add(recs)
				} else {
					var se *client.SettleError
					if errors.As(err, &se) {
						// Some were settled: count those.
						failed := make(map[uint64]bool)
						for _, f := range se.Failures {
							failed[f.Offset] = true
						}
						ledger.add(slices.DeleteFunc(recs, func(r client.GroupRecord) bool { return failed[r.Offset] }))
					}
				}
			}
		}()
	}
	return &wg
}

// TestChaosGroups: group actors killed by panic and by stop while four
// consumers consume lose nothing that was acked: every record is acked at
// least once, and once everything is acked, stopping the actors again
// hands nothing out again (the cursor was written).
func TestChaosGroups(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := brokertest.Config(t)
	cfg.Chaos = true
	cfg.GroupVisibilityTimeout = 300 * time.Millisecond
	const n = 5000
	f := newGroupFixture(t, ctx, cfg, n)
	b := f.b

	ledger := &ackLedger{acked: make(map[uint64]int)}
	cctx, stop := context.WithCancel(ctx)
	wg := consumeAll(cctx, f.c, f.st, 4, ledger)
	kills := 0
	for i := 0; ; i++ {
		if m, _ := ledger.missing(n); m == 0 {
			break
		}
		if ctx.Err() != nil {
			m, _ := ledger.missing(n)
			t.Fatalf("%d records never acked after %d kills", m, kills)
		}
		mode := []string{"panic", "stop"}[i%2]
		if _, err := b.Kill(broker.KillRequest{Kind: "group", Mode: mode}); err == nil {
			kills++
		}
		select {
		case <-time.After(20 * time.Millisecond): // the pace of the kills, not a wait for an event
		case <-ctx.Done():
		}
	}
	stop()
	wg.Wait()
	_, again := ledger.missing(n)
	t.Logf("%d records acked through %d kills; %d acks were of redeliveries", n, kills, again)
	if kills < 5 {
		t.Fatalf("only %d kills landed", kills)
	}
	brokertest.Eventually(t, ctx, "the cursor at the end", func() bool {
		info, err := f.c.DescribeGroup(ctx, f.st, "workers")
		return err == nil && info.Shards[0].Cursor == n
	})
	// Stopped once more, the actor replays its state: nothing comes again.
	if _, err := b.Kill(broker.KillRequest{Kind: "group", Mode: "stop"}); err != nil {
		t.Fatalf("kill: %v", err)
	}
	g := f.c.Group(f.st, "workers", client.GroupOptions{})
	defer g.Close()
	// A poll that meets the stopping actor is refused shard_unavailable
	// (retry); the new actor answers.
	var recs []client.GroupRecord
	var err error
	brokertest.Eventually(t, ctx, "a poll answered after the stop", func() bool {
		recs, err = g.Poll(ctx, 100, 200*time.Millisecond)
		return !errors.Is(err, wire.ErrUnavailable)
	})
	if err != nil || len(recs) != 0 {
		t.Fatalf("after the last stop: %d records, %v", len(recs), err)
	}
}

// TestGroupStateSurvivesRestart: the cursor and the dead letters are
// durable; claims in flight are handed out again after a restart.
func TestGroupStateSurvivesRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := brokertest.Config(t)
	st := client.Stream{Name: "jobs"}
	run := func(do func(c *client.Client, g *client.Group)) {
		b, err := broker.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Start(); err != nil {
			t.Fatal(err)
		}
		c := brokertest.Dial(t, b, cfg)
		g := c.Group(st, "workers", client.GroupOptions{})
		do(c, g)
		g.Close()
		_ = c.Close(ctx)
		if err := b.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
	run(func(c *client.Client, g *client.Group) {
		f := &groupFixture{cfg: cfg, c: c, st: st}
		if _, err := c.CreateStream(ctx, st, client.StreamConfig{Durable: true}); err != nil {
			t.Fatal(err)
		}
		f.publish(t, ctx, 0, 10)
		if _, err := c.CreateGroup(ctx, st, "workers", client.GroupStart{Kind: "earliest"}); err != nil {
			t.Fatal(err)
		}
		recs, err := g.Poll(ctx, 6, 0)
		if err != nil || len(recs) != 6 {
			t.Fatalf("poll: %v, %v", recs, err)
		}
		// 0-3 acked, 4 a dead letter, 5 in flight at the restart.
		if err := g.Ack(ctx, recs[:4]...); err != nil {
			t.Fatal(err)
		}
		if err := g.DeadLetter(ctx, recs[4]); err != nil {
			t.Fatal(err)
		}
	})
	run(func(c *client.Client, g *client.Group) {
		info, err := c.DescribeGroup(ctx, st, "workers")
		if err != nil || info.Shards[0].Cursor != 5 || info.Shards[0].DeadLetters != 1 {
			t.Fatalf("after restart: %+v, %v", info, err)
		}
		recs, err := g.Poll(ctx, 100, 0)
		if err != nil || !slices.Equal(offsets(recs), []uint64{5, 6, 7, 8, 9}) {
			t.Fatalf("after restart: %+v, %v", recs, err)
		}
		if names, err := c.ListGroups(ctx, st); err != nil || !slices.Equal(names, []string{"workers"}) {
			t.Fatalf("groups: %v, %v", names, err)
		}
		if err := c.DeleteGroup(ctx, st, "workers"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.DescribeGroup(ctx, st, "workers"); !errors.Is(err, wire.ErrNotFound) {
			t.Fatalf("describe a deleted group: %v", err)
		}
	})
	run(func(c *client.Client, g *client.Group) {
		if names, err := c.ListGroups(ctx, st); err != nil || len(names) != 0 {
			t.Fatalf("groups after delete and restart: %v, %v", names, err)
		}
	})
}
