package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/wire"
)

// groupLedger counts every offset's acks across consumers and brokers.
type groupLedger struct {
	mu    sync.Mutex
	acked []int
}

func (l *groupLedger) add(recs []client.GroupRecord, failed map[uint64]bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range recs {
		if !failed[r.Offset] {
			l.acked[r.Offset]++
		}
	}
}

// counts returns the offsets never acked and the acks past the first.
func (l *groupLedger) counts() (missing, again int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range l.acked {
		if k == 0 {
			missing++
		} else {
			again += k - 1
		}
	}
	return missing, again
}

// groupConsumer polls and acks until ctx ends; at random it dies holding
// a polled batch (its connection closed, nothing settled) and a new one
// takes its place.
func groupConsumer(ctx context.Context, rng *rand.Rand, addr string, copts client.Options, st client.Stream, ledger *groupLedger, deaths *int64, mu *sync.Mutex) {
	for ctx.Err() == nil {
		c, err := client.Dial(ctx, addr, copts)
		if err != nil {
			return // the broker is gone
		}
		g := c.Group(st, "workers", client.GroupOptions{})
		for ctx.Err() == nil {
			recs, err := g.Poll(ctx, 100, 200*time.Millisecond)
			if err != nil {
				break
			}
			mu.Lock()
			die := len(recs) > 0 && rng.IntN(25) == 0
			mu.Unlock()
			if die {
				mu.Lock()
				*deaths++
				mu.Unlock()
				break
			}
			err = g.Ack(ctx, recs...)
			var se *client.SettleError
			switch {
			case err == nil:
				ledger.add(recs, nil)
			case errors.As(err, &se):
				failed := make(map[uint64]bool)
				for _, f := range se.Failures {
					failed[f.Offset] = true
				}
				ledger.add(recs, failed)
			}
		}
		closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = c.Close(closeCtx)
		cancel()
	}
}

// TestGroupKill9AtLeastOnce: four consumers in a group consume 100 000
// records while the broker is SIGKILLed and restarted three times and
// consumers die at random holding records. At the end every record was
// acked at least once; the redelivered count is reported.
func TestGroupKill9AtLeastOnce(t *testing.T) {
	const n, kills = 100_000, 3
	rng := brokertest.ChaosRand(t)
	var rngMu sync.Mutex
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	st := client.Stream{Name: "jobs"}
	ledger := &groupLedger{acked: make([]int, n)}
	var deaths int64
	var redelivered uint64
	for round := 0; round <= kills; round++ {
		addrFile := filepath.Join(dir, fmt.Sprintf("addr-%d", round))
		p := start(t, opts{timeout: 2 * time.Minute}, "broker", "--listen", "127.0.0.1:0", "--admin", "", "--data-dir", data,
			"--addr-file", addrFile, "--group-visibility-timeout-ms", "1000", "--log-format", "json")
		addr := waitForFile(t, p, addrFile)
		copts := client.Options{CAFile: filepath.Join(data, "cert.pem"), Token: readToken(t, data)}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		if round == 0 {
			prepareGroupStream(t, ctx, addr, copts, st, n)
		}
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				groupConsumer(ctx, rng, addr, copts, st, ledger, &deaths, &rngMu)
			}()
		}
		if round < kills {
			rngMu.Lock()
			d := time.Duration(300+rng.IntN(700)) * time.Millisecond
			rngMu.Unlock()
			time.Sleep(d) // the kill lands at a random moment of the consumption
			if err := p.cmd.Process.Kill(); err != nil {
				t.Fatalf("kill: %v", err)
			}
			<-p.done
		} else {
			redelivered = finishGroup(t, ctx, addr, copts, st, ledger)
		}
		cancel()
		wg.Wait()
		if m, _ := ledger.counts(); round < kills && m == 0 {
			t.Logf("round %d: every record was acked before the kill", round)
		}
	}
	missing, again := ledger.counts()
	if missing != 0 {
		t.Fatalf("%d of %d records were never acked", missing, n)
	}
	t.Logf("%d records acked at least once through %d SIGKILLs and %d consumer deaths; %d acks were of records acked before; the last broker redelivered %d",
		n, kills, deaths, again, redelivered)
}

// prepareGroupStream makes the durable stream, n records and the group.
func prepareGroupStream(t *testing.T, ctx context.Context, addr string, copts client.Options, st client.Stream, n int) {
	t.Helper()
	c, err := client.Dial(ctx, addr, copts)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.CreateStream(ctx, st, client.StreamConfig{Durable: true}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i += 1000 {
		batch := make([][]byte, 1000)
		for j := range batch {
			batch[j] = []byte(fmt.Sprintf("job-%06d", i+j))
		}
		if _, err := c.PublishResult(ctx, st, batch, client.PublishOptions{Ack: wire.AckPerBatch}); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
	if _, err := c.CreateGroup(ctx, st, "workers", client.GroupStart{Kind: "earliest"}); err != nil {
		t.Fatal(err)
	}
}

// finishGroup waits until every record was acked and the group's cursor
// is at the end; it returns the last broker's redelivery count.
func finishGroup(t *testing.T, ctx context.Context, addr string, copts client.Options, st client.Stream, ledger *groupLedger) uint64 {
	t.Helper()
	c, err := client.Dial(ctx, addr, copts)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	var info client.GroupInfo
	brokertest.Eventually(t, ctx, "every record acked and the cursor at the end", func() bool {
		m, _ := ledger.counts()
		info, err = c.DescribeGroup(ctx, st, "workers")
		return m == 0 && err == nil && info.Shards[0].Cursor == info.Shards[0].Committed
	})
	return info.Shards[0].Redeliveries
}
