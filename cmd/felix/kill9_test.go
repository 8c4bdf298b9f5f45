package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/wire"
)

// TestKill9KeepsEveryAckedRecord kills a broker with SIGKILL in a loop while
// a client publishes acked batches to a durable stream under on_commit.
// After every restart, each acknowledged record is present once, at the
// offset its ack named, with its content, and no offset is reused.
func TestKill9KeepsEveryAckedRecord(t *testing.T) {
	rng := brokertest.ChaosRand(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	type acked struct {
		offset  uint64
		payload string
	}
	var all []acked
	st := client.Stream{Name: "ledger"}
	const rounds = 5
	for round := range rounds {
		addrFile := filepath.Join(dir, fmt.Sprintf("addr-%d", round))
		p := start(t, opts{}, "broker", "--listen", "127.0.0.1:0", "--admin", "", "--data-dir", data,
			"--addr-file", addrFile, "--durable-fsync", "on_commit", "--log-format", "json")
		addr := waitForFile(t, p, addrFile)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		c, err := client.Dial(ctx, addr, client.Options{CAFile: filepath.Join(data, "cert.pem"), Token: readToken(t, data)})
		if err != nil {
			cancel()
			t.Fatalf("round %d: dial: %v", round, err)
		}
		if round == 0 {
			if _, err := c.CreateStream(ctx, st, client.StreamConfig{Durable: true}); err != nil {
				t.Fatalf("create: %v", err)
			}
		}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for w := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					batch := make([][]byte, 4)
					for j := range batch {
						batch[j] = []byte(fmt.Sprintf("r%d-w%d-%d-%d", round, w, i, j))
					}
					res, err := c.PublishResult(ctx, st, batch, client.PublishOptions{Ack: wire.AckPerBatch})
					if err != nil {
						return // the broker died under us: this batch's fate is unknown
					}
					mu.Lock()
					for j, b := range batch {
						all = append(all, acked{offset: res.Offset + uint64(j), payload: string(b)})
					}
					mu.Unlock()
				}
			}()
		}
		time.Sleep(time.Duration(100+rng.IntN(300)) * time.Millisecond) // the kill lands at a random moment
		if err := p.cmd.Process.Kill(); err != nil {
			t.Fatalf("kill: %v", err)
		}
		<-p.done
		// A killed broker sends nothing more; the client would learn of it
		// only at the QUIC idle timeout. Stop waiting for acks now: a batch
		// whose ack never came has an unknown fate, which is allowed.
		cancel()
		wg.Wait()
		closeCtx, closeCancel := context.WithTimeout(context.Background(), time.Second)
		_ = c.Close(closeCtx)
		closeCancel()
	}
	if len(all) == 0 {
		t.Fatal("no publish was ever acknowledged")
	}

	// A last broker reads everything back.
	addrFile := filepath.Join(dir, "addr-final")
	p := start(t, opts{}, "broker", "--listen", "127.0.0.1:0", "--admin", "", "--data-dir", data,
		"--addr-file", addrFile, "--durable-fsync", "on_commit")
	addr := waitForFile(t, p, addrFile)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, addr, client.Options{CAFile: filepath.Join(data, "cert.pem"), Token: readToken(t, data)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	logged := map[uint64]string{}
	seen := map[string]uint64{}
	for from := uint64(0); ; {
		page, err := c.Read(ctx, st, from, client.ReadOptions{})
		if err != nil {
			t.Fatalf("read from %d: %v", from, err)
		}
		for _, r := range page.Records {
			if prev, dup := seen[string(r.Payload)]; dup {
				t.Fatalf("record %q is in the log twice, at %d and %d", r.Payload, prev, r.Offset)
			}
			seen[string(r.Payload)] = r.Offset
			logged[r.Offset] = string(r.Payload)
		}
		if len(page.Records) == 0 || page.Next >= page.Committed {
			break
		}
		from = page.Next
	}
	for _, a := range all {
		if got, ok := logged[a.offset]; !ok || got != a.payload {
			t.Fatalf("acked record %q at offset %d: the log has %q (present %v)", a.payload, a.offset, got, ok)
		}
	}
	t.Logf("%d acked records over %d kills, all present; %d records in the log", len(all), rounds, len(logged))
}

// waitForFile polls for the address file a broker process writes (another
// process cannot signal this one, so a short bounded poll it is).
func waitForFile(t *testing.T, p *proc, path string) string {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		if data, err := os.ReadFile(path); err == nil {
			return strings.TrimSpace(string(data))
		}
		select {
		case <-p.done:
			t.Fatalf("broker exited (%v) before writing %s\nstderr: %s", p.err, path, p.stderr)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("broker wrote no %s in %s\nstderr: %s", path, waitTimeout, p.stderr)
		}
	}
}
