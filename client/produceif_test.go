package client_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/wire"
)

// TestProduceIfPipelines: one writer pipelines conditional batches, each
// expecting where the one before ends; all land in order. When another
// writer slips one in, the batch expecting that offset is refused with the
// new tail, and a later one expecting the new tail is written there, after
// the intruder (what ProduceIf's doc warns of).
func TestProduceIfPipelines(t *testing.T) {
	cfg := brokertest.Config(t)
	b := brokertest.Start(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := brokertest.Dial(t, b, cfg)
	st := client.Stream{Name: "owned"}
	if _, err := c.CreateStream(ctx, st, client.StreamConfig{Durable: true}); err != nil {
		t.Fatal(err)
	}
	const n = 500
	var mu sync.Mutex
	var offsets []uint64
	for i := range n {
		err := c.ProduceIf(ctx, st, [][]byte{fmt.Appendf(nil, "r%d", i)}, uint64(i), client.PublishOptions{}, func(r client.PublishResult, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Errorf("pipelined conditional %d: %v", len(offsets), err)
			}
			offsets = append(offsets, r.Offset)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for i, off := range offsets {
		if off != uint64(i) {
			t.Fatalf("conditional %d written at %d", i, off)
		}
	}
	// Another writer takes offset n; the owner's next two expect n (refused,
	// tail n+1) and n+1 (written at n+1, after the intruder).
	if _, err := brokertest.Dial(t, b, cfg).PublishIf(ctx, st, [][]byte{[]byte("intruder")}, n, client.PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	type outcome struct {
		off uint64
		err error
	}
	var outcomes []outcome
	for i := range 2 {
		if err := c.ProduceIf(ctx, st, [][]byte{[]byte("late")}, uint64(n+i), client.PublishOptions{}, func(r client.PublishResult, err error) {
			mu.Lock()
			outcomes = append(outcomes, outcome{r.Offset, err})
			mu.Unlock()
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	var r *wire.RefusedError
	if len(outcomes) != 2 || !errors.As(outcomes[0].err, &r) || r.Tail != n+1 {
		t.Fatalf("the batch expecting %d after an intruder took it: %+v, want refused with tail %d", n, outcomes, n+1)
	}
	if outcomes[1].err != nil || outcomes[1].off != n+1 {
		t.Fatalf("the batch expecting the new tail %d: %+v, want written there", n+1, outcomes[1])
	}
}
