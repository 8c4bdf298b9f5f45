package streams

import (
	"testing"
	"time"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/wire"
)

// TestIdleInMemoryShardStops: an in-memory shard with no subscriber and no
// publish for the idle timeout stops (its ring goes with it) and says so;
// a subscriber keeps it alive. Shards of implicit streams were never
// reclaimed, so idle rings pinned memory for good.
func TestIdleInMemoryShardStops(t *testing.T) {
	idle := make(chan wire.Scope, 1)
	cfg := ShardConfig{RingRecords: 16, IdleTimeout: 100 * time.Millisecond, OnIdle: func(s wire.Scope, _ uint32) { idle <- s }}
	ts := spawnTestShard(t, cfg, nil, false, nil)
	answer(t, ts.publish(t, nil, "kept in the ring"))
	ts.addFeeder(t, 1, actors.MailboxConfig{Capacity: 16, Policy: actors.DropNew})
	select {
	case <-idle:
		t.Fatal("a shard with a subscriber stopped as idle")
	case <-time.After(400 * time.Millisecond): // 4 idle timeouts: the absence of the event
	}
	ts.sys.Root.Send(ts.ref.PID, &RemoveSubscriber{ID: 1})
	select {
	case s := <-idle:
		if s != testScope {
			t.Fatalf("idle reported for %s, want %s", s, testScope)
		}
	case <-time.After(eventTimeout):
		t.Fatal("an in-memory shard with no subscriber and no publish did not stop as idle")
	}
	deadline := time.Now().Add(eventTimeout)
	for !ts.ref.Mailbox.IsClosed() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) // the stop follows OnIdle on the shard's goroutine
	}
	if !ts.ref.Mailbox.IsClosed() {
		t.Fatal("the idle shard said so but did not stop")
	}
}
