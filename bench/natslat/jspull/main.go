// Command jspull is the NATS side of bench/compare.sh's consumer group row:
// a JetStream pull consumer (file storage, explicit acks) shared by N
// consumers, each on its own connection, fetching batches and acking every
// message, over COUNT records of SIZE bytes published beforehand (not
// timed). It prints {"msgs_per_s": ...}: records acked per second, from the
// first fetch to the last ack.
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

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func main() {
	server := flag.String("server", nats.DefaultURL, "NATS URL")
	name := flag.String("stream", "GRP", "JetStream stream to create (purged first)")
	count := flag.Int("count", 100000, "records")
	size := flag.Int("size", 128, "payload bytes")
	consumers := flag.Int("consumers", 4, "consumers, each on its own connection")
	batch := flag.Int("batch", 100, "records per fetch")
	flag.Parse()
	if err := run(*server, *name, *count, *size, *consumers, *batch); err != nil {
		fmt.Fprintln(os.Stderr, "jspull:", err)
		os.Exit(1)
	}
}

func run(server, name string, count, size, consumers, batch int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	nc, js, err := connect(server)
	if err != nil {
		return err
	}
	defer nc.Close()
	subject := "grp." + name
	_ = js.DeleteStream(ctx, name)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subject}, Storage: jetstream.FileStorage}); err != nil {
		return err
	}
	payload := make([]byte, size)
	for i := 0; i < count; i++ {
		if _, err := js.PublishAsync(subject, payload); err != nil {
			return err
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return ctx.Err()
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, name, jetstream.ConsumerConfig{
		Durable: "workers", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 10000, AckWait: 30 * time.Second,
	}); err != nil {
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
			errs <- consume(ctx, server, name, batch, int64(count), &acked)
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

// consume fetches batches and acks each message (Ack: published, not
// confirmed one by one; the connection is flushed at the end) until count
// records were acked by all consumers.
func consume(ctx context.Context, server, name string, batch int, count int64, acked *atomic.Int64) error {
	nc, js, err := connect(server)
	if err != nil {
		return err
	}
	defer nc.Close()
	cons, err := js.Consumer(ctx, name, "workers")
	if err != nil {
		return err
	}
	for acked.Load() < count {
		msgs, err := cons.Fetch(batch, jetstream.FetchMaxWait(200*time.Millisecond))
		if err != nil {
			return err
		}
		n := int64(0)
		for m := range msgs.Messages() {
			if err := m.Ack(); err != nil {
				return err
			}
			n++
		}
		if msgs.Error() != nil && ctx.Err() != nil {
			return ctx.Err()
		}
		acked.Add(n)
	}
	// Acks are published asynchronously: flush so the server has them all.
	return nc.FlushWithContext(ctx)
}

// connect opens a connection and its JetStream context.
func connect(server string) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(server)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}
