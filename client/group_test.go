package client_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/wire"
)

// TestConsume: Consume acks what the handler returns nil for, nacks what
// it fails (the record comes again with its attempts one higher), and
// extends a handler that outlasts the visibility, so its record is not
// handed out twice.
func TestConsume(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := brokertest.Config(t)
	b := brokertest.Start(t, cfg)
	c := brokertest.Dial(t, b, cfg)
	st := client.Stream{Name: "work"}
	if _, err := c.CreateStream(ctx, st, client.StreamConfig{Durable: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PublishResult(ctx, st, [][]byte{[]byte("slow"), []byte("flaky"), []byte("fine")}, client.PublishOptions{Ack: wire.AckPerBatch}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateGroup(ctx, st, "w", client.GroupStart{Kind: "earliest"}); err != nil {
		t.Fatal(err)
	}
	g := c.Group(st, "w", client.GroupOptions{Visibility: 200 * time.Millisecond})
	defer g.Close()
	cctx, stop := context.WithCancel(ctx)
	var acked atomic.Int32
	seen := map[string][]uint32{}
	var nacked []string // Nacked's records, on Consume's goroutine
	opts := client.ConsumeOptions{Batch: 1, Wait: time.Second, Nacked: func(_ context.Context, r client.GroupRecord) {
		nacked = append(nacked, fmt.Sprintf("%s attempt %d", r.Payload, r.Attempts))
	}}
	err := g.Consume(cctx, opts, func(_ context.Context, r client.GroupRecord) error {
		seen[string(r.Payload)] = append(seen[string(r.Payload)], r.Attempts)
		switch {
		case string(r.Payload) == "slow":
			time.Sleep(500 * time.Millisecond) // the work outlasts the 200 ms visibility: Consume extends it
		case string(r.Payload) == "flaky" && r.Attempts == 1:
			return errors.New("try again")
		}
		if acked.Add(1) == 3 {
			stop()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen["slow"]) != 1 || len(seen["fine"]) != 1 || len(seen["flaky"]) != 2 || seen["flaky"][1] != 2 {
		t.Fatalf("hand-outs: %v", seen)
	}
	if fmt.Sprint(nacked) != "[flaky attempt 1]" {
		t.Errorf("Nacked saw %q, want the failed first attempt of flaky alone", nacked)
	}
	info, err := c.DescribeGroup(ctx, st, "w")
	if err != nil || info.Shards[0].Cursor != 3 {
		t.Fatalf("describe: %+v, %v", info, err)
	}
}
