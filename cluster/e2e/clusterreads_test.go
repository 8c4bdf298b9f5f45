package e2e_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/clustertest"
)

// A ClusterClient's reads and subscriptions through a leader kill.

// readCallTimeout bounds one ClusterClient.Read: through a failover it
// takes about a second; the bound only catches a hang.
const readCallTimeout = 15 * time.Second

// tailReader reads the replicated stream through a ClusterClient from
// offset 0 on, page after page, until stop closes; every record read is
// kept, and the first error ends it.
type tailReader struct {
	mu      sync.Mutex
	records []client.Record
	err     error
	done    chan struct{}
}

func startTailReader(ctx context.Context, cc *client.ClusterClient, stop <-chan struct{}) *tailReader {
	tr := &tailReader{done: make(chan struct{})}
	go func() {
		defer close(tr.done)
		for from := uint64(0); ; {
			select {
			case <-stop:
				return
			default:
			}
			rctx, cancel := context.WithTimeout(ctx, readCallTimeout)
			page, err := cc.Read(rctx, replicatedStream, from, client.ReadOptions{MaxRecords: 200})
			cancel()
			if err != nil {
				tr.fail(err)
				return
			}
			tr.mu.Lock()
			tr.records = append(tr.records, page.Records...)
			tr.mu.Unlock()
			if len(page.Records) == 0 {
				// Read never waits for records: caught up, look again soon.
				time.Sleep(10 * time.Millisecond)
				continue
			}
			from = page.Next
		}
	}()
	return tr
}

func (tr *tailReader) fail(err error) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.err = err
}

func (tr *tailReader) count() (int, error) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return len(tr.records), tr.err
}

// subscriber collects what a ClusterSubscription's Next returns until
// its ctx ends.
type subscriber struct {
	cs      *client.ClusterSubscription
	mu      sync.Mutex
	offsets []uint64
	err     error
	done    chan struct{}
}

func startSubscriber(ctx context.Context, cs *client.ClusterSubscription) *subscriber {
	s := &subscriber{cs: cs, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			ev, err := cs.Next(ctx)
			s.mu.Lock()
			if err != nil {
				if ctx.Err() == nil {
					s.err = err
				}
				s.mu.Unlock()
				return
			}
			s.offsets = append(s.offsets, ev.Offset)
			s.mu.Unlock()
		}
	}()
	return s
}

func (s *subscriber) count() (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.offsets), s.err
}

// waitFor waits until n() reaches want, failing at once when what it
// counts has ended with an error rather than at ctx's end.
func waitFor(ctx context.Context, t *testing.T, what string, want int, n func() (int, error)) {
	t.Helper()
	for {
		got, err := n()
		switch {
		case err != nil:
			t.Fatalf("%s: %d, want %d; it ended: %v", what, got, want, err)
		case got >= want:
			return
		case ctx.Err() != nil:
			t.Fatalf("%s: %d, want %d", what, got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestClusterReadAndSubscriptionFollowALeaderKill: while producers
// publish, a ClusterClient reads the replicated shard page after page and
// a ClusterSubscription follows it from the start; the leader is killed.
// The reads go on at the new leader without an error, every record read is
// the one the converged log has at that offset, and the subscription's
// offsets run 0, 1, 2, ... without going back or skipping across the
// failover.
func TestClusterReadAndSubscriptionFollowALeaderKill(t *testing.T) {
	r := startFaultRun(t, clustertest.Options{}, 2, 30, 2*time.Minute)
	stopReading := make(chan struct{})
	reader := startTailReader(r.ctx, r.cc, stopReading)
	cs, err := r.cc.Subscribe(r.ctx, replicatedStream, client.SubscribeOptions{From: client.FromEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cs.Close(context.Background()) }()
	sctx, stopSubscriber := context.WithCancel(r.ctx)
	sub := startSubscriber(sctx, cs)
	waitFor(r.ctx, t, "records read before the kill", 30, reader.count)
	waitFor(r.ctx, t, "events before the kill", 30, sub.count)

	leader := leaderOf(r.ctx, t, r.c)
	leader.Kill()
	r.progress(t, 60, "after the leader's kill")
	acked := r.acks.count()
	waitFor(r.ctx, t, "records read after the kill", acked, reader.count)
	waitFor(r.ctx, t, "events after the kill", acked, sub.count)
	close(stopReading)
	<-reader.done
	stopSubscriber()
	<-sub.done

	leader.Restart(t) // finish compares every replica
	log := r.finish(t)
	if reader.err != nil {
		t.Fatalf("a read failed across the leader's kill: %v", reader.err)
	}
	for i, rec := range reader.records {
		if rec.Offset != uint64(i) {
			t.Fatalf("read record %d has offset %d: reads skipped or repeated", i, rec.Offset)
		}
		if i >= len(log) || string(log[i].Payload) != string(rec.Payload) {
			t.Fatalf("read %q at offset %d, which the converged log does not hold there", rec.Payload, i)
		}
	}
	if sub.err != nil {
		t.Fatalf("the subscription ended: %v", sub.err)
	}
	for i, off := range sub.offsets {
		if off != uint64(i) {
			t.Fatalf("event %d has offset %d (the one before %d): the subscription went back or skipped across the failover (resubscribed %d times, skipped %d)",
				i, off, sub.offsets[max(0, i-1)], cs.Resubscribes(), cs.Skipped())
		}
	}
	if cs.Resubscribes() == 0 {
		t.Errorf("the subscription never subscribed again, though its leader %s was killed", leader.NodeID)
	}
	t.Logf("%d records read, %d events, %d resubscriptions, %d events skipped as already returned", len(reader.records), len(sub.offsets), cs.Resubscribes(), cs.Skipped())
}
