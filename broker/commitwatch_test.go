package broker

import (
	"testing"

	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/wire"
)

// TestCommitWatches: an acknowledged publish wakes its shard's watches
// once (a full channel is not blocked on), not another shard's nor after
// cancel, and a shard takes at most maxCommitWatches.
func TestCommitWatches(t *testing.T) {
	var w commitWatches
	key := commitKey{scope: wire.Scope{Tenant: "t", Namespace: "n", Stream: "s"}, shard: 1}
	other := commitKey{scope: key.scope, shard: 2}
	ch := make(chan struct{}, 1)
	var send chan<- struct{} = ch
	if !w.add(key, &send) {
		t.Fatal("the first watch was refused")
	}
	acked := 0
	done := w.wrap(key, func(service.PublishResult) { acked++ })
	done(service.PublishResult{})
	done(service.PublishResult{}) // the channel is full: not blocked on
	w.wrap(other, nil)(service.PublishResult{})
	if acked != 2 || len(ch) != 1 {
		t.Fatalf("acked %d, %d wake-ups pending, want 2 and 1", acked, len(ch))
	}
	<-ch
	w.wrap(key, nil)(service.PublishResult{Err: wire.ErrStorage})
	if len(ch) != 0 {
		t.Fatal("a failed publish woke the watch")
	}
	w.remove(key, &send)
	done(service.PublishResult{})
	if len(ch) != 0 || w.n.Load() != 0 {
		t.Fatalf("a cancelled watch was woken (%d) or counted (%d)", len(ch), w.n.Load())
	}
	handles := make([]chan<- struct{}, maxCommitWatches+1)
	for i := range handles {
		handles[i] = ch
		if ok := w.add(key, &handles[i]); ok != (i < maxCommitWatches) {
			t.Fatalf("watch %d: added %v", i, ok)
		}
	}
}
