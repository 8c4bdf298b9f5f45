// Command groupbench is the Felix side of bench/compare.sh's consumer group
// row: COUNT records of SIZE bytes are published to a new durable stream
// (not timed), then a group hands them out to N consumers, each on its own
// connection, polling batches and acking each batch (one settlement per
// batch, answered by the broker) until every record was acked. It prints
// {"msgs_per_s": ...}: records acked per second, from the first poll to the
// last ack.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/wire"
)

func main() {
	broker := flag.String("broker", "127.0.0.1:5000", "broker address")
	ca := flag.String("ca", "felix-data/cert.pem", "the broker's certificate")
	token := flag.String("token", os.Getenv("FELIX_TOKEN"), "token")
	stream := flag.String("stream", "grp", "durable stream to create")
	count := flag.Int("count", 100000, "records")
	size := flag.Int("size", 128, "payload bytes")
	consumers := flag.Int("consumers", 4, "consumers, each on its own connection")
	batch := flag.Int("batch", 100, "records per poll")
	flag.Parse()
	opts := client.Options{CAFile: *ca, Token: *token}
	if err := run(*broker, opts, client.Stream{Name: *stream}, *count, *size, *consumers, *batch); err != nil {
		fmt.Fprintln(os.Stderr, "groupbench:", err)
		os.Exit(1)
	}
}

func run(addr string, opts client.Options, st client.Stream, count, size, consumers, batch int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, addr, opts)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	if _, err := c.CreateStream(ctx, st, client.StreamConfig{Durable: true}); err != nil {
		return err
	}
	payload := make([]byte, size)
	for i := 0; i < count; i += 1000 {
		recs := make([][]byte, min(1000, count-i))
		for j := range recs {
			recs[j] = payload
		}
		if _, err := c.PublishResult(ctx, st, recs, client.PublishOptions{Ack: wire.AckPerBatch}); err != nil {
			return err
		}
	}
	if _, err := c.CreateGroup(ctx, st, "workers", client.GroupStart{Kind: "earliest"}); err != nil {
		return err
	}
	var acked atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, consumers)
	start := time.Now()
	for range consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- consume(ctx, addr, opts, st, batch, int64(count), &acked)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"msgs_per_s": float64(count) / elapsed.Seconds(), "count": count, "elapsed_s": elapsed.Seconds(),
	})
}

// consume polls and acks until count records were acked by all consumers.
// A batch's ack goes out while the next batch is polled (a Group settles
// on a stream of its own), at most one ack in flight: JetStream's Ack does
// not wait either. Every ack is answered before it counts.
func consume(ctx context.Context, addr string, opts client.Options, st client.Stream, batch int, count int64, acked *atomic.Int64) error {
	c, err := client.Dial(ctx, addr, opts)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	g := c.Group(st, "workers", client.GroupOptions{})
	defer g.Close()
	ackDone := make(chan error, 1)
	ackDone <- nil
	for acked.Load() < count {
		recs, err := g.Poll(ctx, batch, 200*time.Millisecond)
		if err != nil {
			return err
		}
		if len(recs) == 0 {
			continue
		}
		if err := <-ackDone; err != nil {
			return err
		}
		go func() {
			err := g.Ack(ctx, recs...)
			if err == nil {
				acked.Add(int64(len(recs)))
			}
			ackDone <- err
		}()
	}
	return <-ackDone
}
