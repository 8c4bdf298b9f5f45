package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/getfelix/felix-go/client"
)

// TestPubJSONAcksKilled: felix pub --json-acks killed
// with SIGKILL mid-run has printed only what the broker acknowledged, so
// every offset it printed is in the log with its payload. The lines come
// in order: offsets and message indexes consecutive from 0.
func TestPubJSONAcksKilled(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	for _, tt := range []struct {
		name string
		args []string
	}{
		{"ack per message", nil},
		{"ack per batch", []string{"--ack", "batch", "--batch-size", "16"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			stream := "acked-" + strings.ReplaceAll(tt.name, " ", "-")
			conn := []string{"--broker", b.addr, "--ca", b.ca, "--token", b.token, "--stream", stream}
			runFelix(t, opts{}, append([]string{"stream", "create", "--durable"}, conn...)...).wantExit(t, 0)

			const count = 5_000_000 // far more than it publishes before the kill
			args := append([]string{"pub", "--count", strconv.Itoa(count), "--size", "64", "--json-acks", "-q"}, conn...)
			pub := start(t, opts{}, append(args, tt.args...)...)
			const enough = 2000
			pub.waitStdout(t, fmt.Sprintf("%d ack lines", enough), func(out string) bool { return strings.Count(out, "\n") >= enough })
			if err := pub.cmd.Process.Kill(); err != nil {
				t.Fatalf("kill pub: %v", err)
			}
			<-pub.done

			type ack struct {
				Offset *uint64
				Count  uint64
				Index  uint64
			}
			out := pub.stdout.String()
			if !strings.HasSuffix(out, "\n") {
				t.Fatalf("pub's output ends in a partial line: %q", out[max(0, len(out)-200):])
			}
			var acks []ack
			next := uint64(0)
			for i, line := range lines(out) {
				var a ack
				if err := json.Unmarshal([]byte(line), &a); err != nil || a.Offset == nil || a.Count == 0 {
					t.Fatalf("--json-acks line %d is %q (%v), want {\"offset\":N,\"count\":M,\"index\":I}", i+1, line, err)
				}
				if *a.Offset != next || a.Index != next {
					t.Fatalf("--json-acks line %d is %q, want offset and index %d: acks in order, none missing", i+1, line, next)
				}
				next += a.Count
				acks = append(acks, a)
			}

			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			defer cancel()
			c, err := client.Dial(ctx, b.addr, client.Options{CAFile: b.ca, Token: b.token})
			if err != nil {
				t.Fatalf("dial: %v", err)
			}
			defer c.Close(ctx)
			logged := map[uint64][]byte{}
			for from := uint64(0); from < next; {
				page, err := c.Read(ctx, client.Stream{Name: stream}, from, client.ReadOptions{})
				if err != nil {
					t.Fatalf("read from %d: %v", from, err)
				}
				if len(page.Records) == 0 {
					break
				}
				for _, r := range page.Records {
					logged[r.Offset] = r.Payload
				}
				from = page.Next
			}
			width := len(strconv.Itoa(count))
			for _, a := range acks {
				for j := range a.Count {
					off := *a.Offset + j
					got, ok := logged[off]
					want := fmt.Sprintf("%0*d ", width, a.Index+j+1) // the generated message's number
					if !ok || len(got) != 64 || !strings.HasPrefix(string(got), want) {
						t.Fatalf("acknowledged offset %d (message %d): the log has %.20q (present %v), want 64 bytes starting %q", off, a.Index+j+1, got, ok, want)
					}
				}
			}
			t.Logf("%d ack lines, %d records acknowledged before the kill, all in the log", len(acks), next)
		})
	}
}
