package main

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
)

// TestIdempotentProducerSurvivesKill9: an idempotent producer publishes
// numbered batches to a broker process that is killed with SIGKILL and
// restarted on the same data directory and port, three times. It re-sends
// whatever it was not sure of; afterwards every record is in the log
// exactly once, in order. (It needs the shard's part: without it a re-sent
// batch is written twice.)
func TestIdempotentProducerSurvivesKill9(t *testing.T) {
	rng := brokertest.ChaosRand(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	startBroker := func(round int, listen string) (*proc, string) {
		addrFile := filepath.Join(dir, fmt.Sprintf("addr-%d", round))
		p := start(t, opts{}, "broker", "--listen", listen, "--admin", "", "--data-dir", data,
			"--addr-file", addrFile, "--durable-fsync", "on_commit", "--log-format", "json")
		return p, waitForFile(t, p, addrFile)
	}
	p, addr := startBroker(0, "127.0.0.1:0")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dial := func(ctx context.Context) (*client.Client, error) {
		// A short idle timeout: a killed broker answers nothing, and the
		// producer should notice within a second, not thirty.
		return client.Dial(ctx, addr, client.Options{CAFile: filepath.Join(data, "cert.pem"), Token: readToken(t, data),
			IdleTimeout: time.Second, KeepAlive: 200 * time.Millisecond})
	}
	st := client.Stream{Name: "ledger"}
	c, err := dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateStream(ctx, st, client.StreamConfig{Durable: true}); err != nil {
		t.Fatal(err)
	}
	prod, err := client.NewIdempotentProducer(ctx, func(ctx context.Context) (*client.Client, error) {
		if first := c; first != nil {
			c = nil
			return first, nil
		}
		return dial(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close(ctx)
	prod.AckTimeout = time.Second

	const batches, perBatch = 400, 3
	var published atomic.Int64
	done := make(chan error, 1)
	go func() {
		for i := range batches {
			batch := make([][]byte, perBatch)
			for j := range batch {
				batch[j] = []byte(fmt.Sprintf("%06d", i*perBatch+j))
			}
			if _, err := prod.Publish(ctx, st, batch, nil); err != nil {
				done <- fmt.Errorf("batch %d: %w", i, err)
				return
			}
			published.Add(1)
		}
		done <- nil
	}()
	for round := 1; round <= 3; round++ {
		time.Sleep(time.Duration(100+rng.IntN(300)) * time.Millisecond)
		if err := p.cmd.Process.Kill(); err != nil {
			t.Fatalf("kill: %v", err)
		}
		<-p.done
		t.Logf("killed after %d batches acknowledged", published.Load())
		p, _ = startBroker(round, addr) // the same port: the producer dials the address it knows
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	r, err := dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	var n int
	for from := uint64(0); ; {
		page, err := r.Read(ctx, st, from, client.ReadOptions{})
		if err != nil {
			t.Fatalf("read from %d: %v", from, err)
		}
		for _, rec := range page.Records {
			if want := fmt.Sprintf("%06d", n); string(rec.Payload) != want {
				t.Fatalf("offset %d holds %q, want %q (every record once, in order)", rec.Offset, rec.Payload, want)
			}
			n++
		}
		if len(page.Records) == 0 || page.Next >= page.Committed {
			break
		}
		from = page.Next
	}
	if n != batches*perBatch {
		t.Fatalf("the log holds %d records, want %d", n, batches*perBatch)
	}
}
