package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestSoakSmoke runs the whole soak at a tiny scale against a freshly
// built broker (20 connections, 200 subscriptions, 5 s of load, the
// hostile clients included) and checks the summary: every connection and
// subscription reached, messages delivered with none missed, no client
// error, the broker answering /live to the end and stopping cleanly, and
// every goroutine of the load generator gone.
func TestSoakSmoke(t *testing.T) {
	defer goleak.VerifyNone(t)
	cfg := config{
		Duration: 5 * time.Second, Conns: 20, Subs: 200, Streams: 10, DurableOne: 5,
		Publishers: 2, Readers: 2, Rate: 1000, Batch: 10, Payload: 64, Hostile: true,
		Sample: time.Second, Setup: 20 * time.Second,
	}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	// A bound on a hang, not on speed: it covers building the broker too,
	// which alone took 53 s on a loaded 2-core machine.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	sum, err := newRun(cfg, &progress).run(ctx)
	if err != nil {
		t.Fatalf("run: %v\nprogress:\n%s", err, progress.String())
	}
	var table bytes.Buffer
	sum.printTable(&table)
	t.Logf("progress:\n%s%s", progress.String(), table.String())

	if !strings.Contains(table.String(), "SOAK SUMMARY") || !strings.Contains(table.String(), "peak RSS") {
		t.Errorf("the table has no summary")
	}
	var round Summary
	var js bytes.Buffer
	if err := writeJSON(&js, sum); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(js.Bytes(), &round); err != nil || round.PeakRSS != sum.PeakRSS {
		t.Errorf("the JSON summary does not round-trip (err %v): peak RSS %d, want %d", err, round.PeakRSS, sum.PeakRSS)
	}
	if !sum.Clean {
		t.Errorf("the run is not clean: %q", sum.Problems)
	}
	if !sum.LiveAtEnd || sum.LiveFailures != 0 {
		t.Errorf("/live at the end %v (%s), %d failures during the run; want it answering throughout", sum.LiveAtEnd, sum.LiveError, sum.LiveFailures)
	}
	if sum.ConnsReached != cfg.Conns || sum.SubsReached != cfg.Subs {
		t.Errorf("reached %d connections and %d subscriptions, want %d and %d", sum.ConnsReached, sum.SubsReached, cfg.Conns, cfg.Subs)
	}
	if sum.PeakRSS <= 0 || sum.PeakFDs <= 0 || sum.PeakHWM < sum.PeakRSS {
		t.Errorf("peak RSS %d, VmHWM %d, peak fds %d: want positive, VmHWM at least the sampled peak", sum.PeakRSS, sum.PeakHWM, sum.PeakFDs)
	}
	if sum.Published == 0 || sum.Delivered == 0 || sum.Reads == 0 {
		t.Errorf("published %d, delivered %d, read %d times: want traffic of every kind", sum.Published, sum.Delivered, sum.Reads)
	}
	if sum.Errors != 0 || sum.Missed != 0 {
		t.Errorf("%d client errors (%v), %d messages missed; want none", sum.Errors, sum.ErrorKinds, sum.Missed)
	}
	if len(sum.Hostile) != len(attacks) {
		t.Errorf("%d hostile reports, want one per attack (%d)", len(sum.Hostile), len(attacks))
	}
	if sum.BrokerDied || !sum.BrokerStoppedCleanly {
		t.Errorf("broker died %v, stop %q: want it alive to the end and stopped cleanly", sum.BrokerDied, sum.BrokerExit)
	}
}

// TestPlacement: every stream gets its share of the subscriptions, and a
// connection's subscriptions are on different streams.
func TestPlacement(t *testing.T) {
	tests := []struct{ subs, conns, streams int }{
		{10000, 1000, 100},
		{200, 20, 10},
		{200, 20, 13},
	}
	for _, tt := range tests {
		perStream := map[int]int{}
		perConn := map[int]map[int]bool{}
		for i := range tt.subs {
			c, s := placement(i, tt.conns, tt.streams)
			perStream[s]++
			if perConn[c] == nil {
				perConn[c] = map[int]bool{}
			}
			if perConn[c][s] && tt.subs/tt.conns <= tt.streams {
				t.Errorf("%+v: connection %d has two subscriptions on stream %d", tt, c, s)
			}
			perConn[c][s] = true
		}
		want := tt.subs / tt.streams
		for s := range tt.streams {
			if n := perStream[s]; n < want || n > want+1 {
				t.Errorf("%+v: stream %d has %d subscriptions, want %d or %d", tt, s, n, want, want+1)
			}
		}
	}
}
