package broker_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/getfelix/felix-go/broker"
	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
)

// TestChaosDurable kills random feeders, lanes, connection writers and
// shards (panic and stop) while clients publish with acks to a durable
// stream and subscribe to it. Subscribers resume from the next offset they
// need whenever a subscription ends (stopped actor, lag). Afterwards every
// subscriber has every acknowledged record, in order, each exactly once:
// every gap was explained by an ended subscription and filled by resuming.
func TestChaosDurable(t *testing.T) {
	rng := brokertest.ChaosRand(t)
	cfg := brokertest.Config(t)
	cfg.Chaos = true
	cfg.DurableFsync = "on_commit"
	b := brokertest.Start(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	st := client.Stream{Name: "chaos-ledger"}
	admin := brokertest.Dial(t, b, cfg)
	if _, err := admin.CreateStream(ctx, st, client.StreamConfig{Durable: true}); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	acked := map[uint64]string{}
	stopPub := make(chan struct{})
	var pubs sync.WaitGroup
	for w := range 2 {
		c := brokertest.Dial(t, b, cfg)
		pubs.Add(1)
		go func() {
			defer pubs.Done()
			for i := 0; ; i++ {
				select {
				case <-stopPub:
					return
				default:
				}
				payload := fmt.Sprintf("w%d-%d", w, i)
				res, err := c.PublishResult(ctx, st, [][]byte{[]byte(payload)}, client.PublishOptions{})
				if err != nil {
					continue // a shard crash may fail the publish in hand: its fate is unknown, not acked
				}
				mu.Lock()
				acked[res.Offset] = payload
				mu.Unlock()
			}
		}()
	}

	type reader struct {
		got  map[uint64]string
		next uint64
	}
	readers := make([]*reader, 2)
	stopRead := make(chan uint64, len(readers)) // the offset to read up to, once known
	var subsWG sync.WaitGroup
	var resumes sync.Map
	for i := range readers {
		r := &reader{got: map[uint64]string{}}
		readers[i] = r
		c := brokertest.Dial(t, b, cfg)
		subsWG.Add(1)
		go func() {
			defer subsWG.Done()
			target := ^uint64(0)
			for r.next < target {
				sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
				sub, err := c.Subscribe(sctx, st, client.SubscribeOptions{From: client.FromOffset, FromOffset: r.next})
				scancel()
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					continue // the actor serving it was just killed: try again
				}
				for r.next < target {
					select {
					case target = <-stopRead:
					default:
					}
					ectx, ecancel := context.WithTimeout(ctx, 200*time.Millisecond)
					ev, err := sub.Next(ectx)
					ecancel()
					if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
						continue // nothing new yet
					}
					if err != nil {
						n, _ := resumes.LoadOrStore(fmt.Sprint(err), new(atomic.Int64))
						n.(*atomic.Int64).Add(1)
						break // ended (stopped actor or lag): resume from r.next
					}
					if ev.Offset != r.next {
						t.Errorf("reader got offset %d, expected %d: a silent gap or a duplicate", ev.Offset, r.next)
						return
					}
					r.got[ev.Offset] = string(ev.Payload)
					r.next++
				}
				_ = sub.Close(ctx)
			}
		}()
	}

	// Chaos for 3 s: a random data-path actor every 50 ms, panic or stop.
	kinds := []string{"feeder", "lane", "connection_writer", "shard"}
	deadline := time.Now().Add(3 * time.Second)
	kills := 0
	for time.Now().Before(deadline) {
		mode := "panic"
		if kills%2 == 1 {
			mode = "stop"
		}
		if _, err := b.Kill(broker.KillRequest{Kind: kinds[rng.IntN(len(kinds))], Mode: mode}); err == nil {
			kills++
		}
		time.Sleep(50 * time.Millisecond) // the chaos cadence, not synchronisation
	}
	close(stopPub)
	pubs.Wait()

	mu.Lock()
	var end uint64
	for off := range acked {
		end = max(end, off+1)
	}
	mu.Unlock()
	for range readers {
		stopRead <- end
	}
	subsWG.Wait()
	if t.Failed() {
		return
	}
	for i, r := range readers {
		for off, payload := range acked {
			if got, ok := r.got[off]; !ok || got != payload {
				t.Fatalf("reader %d: acked record %q at offset %d: got %q (present %v)", i, payload, off, got, ok)
			}
		}
	}
	var ended []string
	resumes.Range(func(k, v any) bool {
		ended = append(ended, fmt.Sprintf("%s ×%d", k, v.(*atomic.Int64).Load()))
		return true
	})
	t.Logf("%d kills; %d acked records, all delivered in order to both readers; subscriptions ended and resumed: %v", kills, len(acked), ended)
	if len(acked) == 0 {
		t.Fatal("nothing was acked")
	}
}
