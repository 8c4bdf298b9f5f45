package streams

import (
	"sync/atomic"
	"testing"
	"time"
)

// watch registers a 1-buffered WakeChan with the shard, after after, and
// waits until the shard took it (a request behind it is answered).
func (ts *testShard) watch(t *testing.T, after uint64) (wake chan struct{}, w *WakeChan) {
	t.Helper()
	wake = make(chan struct{}, 1)
	w = &WakeChan{C: wake, Gone: make(chan struct{})}
	ts.post(t, &WatchCommitted{Waker: w, After: after})
	return wake, w
}

// post hands the shard a control message and waits until it handled it.
func (ts *testShard) post(t *testing.T, msg any) {
	t.Helper()
	if r := ts.ref.Mailbox.TryPost(msg, 0); !r.Accepted() {
		t.Fatalf("%T not admitted: %v", msg, r)
	}
	ts.barrier(t)
}

// barrier returns once the shard handled everything posted before it.
func (ts *testShard) barrier(t *testing.T) {
	t.Helper()
	if _, err := ts.sys.Root.RequestFuture(ts.ref.PID, &AddSubscriber{ID: 1 << 60}, eventTimeout).Result(); err != nil {
		t.Fatal(err)
	}
}

func woken(t *testing.T, wake <-chan struct{}, why string) {
	t.Helper()
	select {
	case <-wake:
	case <-time.After(eventTimeout):
		t.Fatalf("the watcher was not woken: %s", why)
	}
}

func notWoken(t *testing.T, wake <-chan struct{}, why string) {
	t.Helper()
	select {
	case <-wake:
		t.Fatalf("the watcher was woken: %s", why)
	default:
	}
}

// TestCommitWatchWokenByAFollowersApply: on a replicated shard's follower
// the records come from raft, never from a publish here; the apply of an
// entry the leader sent wakes the watcher, and an entry without records
// (a new leader's empty one) does not.
func TestCommitWatchWokenByAFollowersApply(t *testing.T) {
	r := &fakeReplica{term: 1}
	ts := spawnReplicatedShard(t, r)
	wake, _ := ts.watch(t, 0)
	notWoken(t, wake, "nothing was applied")
	r.appendFrom(1)
	r.commitAll(t)
	r.waitApplied(t)
	ts.barrier(t)
	notWoken(t, wake, "an entry without records moves no end")
	r.appendFrom(1, "from-leader")
	r.commitAll(t)
	woken(t, wake, "the follower applied a record")
	r.appendFrom(1, "more", "still")
	r.commitAll(t)
	woken(t, wake, "the follower applied two more")
}

// TestCommitWatchOnADurableShard: a watcher is woken by each delivered
// publish, at once when the end is already past what it read, never after
// it unwatched or once it is gone; the shard's stop wakes it a last time.
func TestCommitWatchOnADurableShard(t *testing.T) {
	log := newFakeLog(5)
	ts := spawnTestShard(t, ShardConfig{}, log, false, nil)
	wake, w := ts.watch(t, 5)
	notWoken(t, wake, "the end is where the watcher read it")
	answer(t, ts.publish(t, nil, "a"))
	woken(t, wake, "a publish was delivered")

	late, _ := ts.watch(t, 5)
	woken(t, late, "the end is already past what the watcher read")

	ts.post(t, &UnwatchCommitted{Waker: w})
	answer(t, ts.publish(t, nil, "b"))
	notWoken(t, wake, "the watcher unwatched")

	var wakes atomic.Int32
	gone := &funcWaker{func() bool { wakes.Add(1); return false }}
	ts.post(t, &WatchCommitted{Waker: gone, After: log.NextOffset()})
	answer(t, ts.publish(t, nil, "c"))
	answer(t, ts.publish(t, nil, "d"))
	if n := wakes.Load(); n != 1 {
		t.Fatalf("a gone watcher was woken %d times; want once, then forgotten", n)
	}

	<-late // woken by b, c or d
	ts.sys.Root.Send(ts.sup, &stopShard{key: shardKey{testScope, 0}})
	woken(t, late, "the shard stopped")
}

// TestCommitWatchesAreBounded: past maxCommitWatchers a shard takes no
// more watchers; the ones it has are still woken.
func TestCommitWatchesAreBounded(t *testing.T) {
	ts := spawnTestShard(t, ShardConfig{}, newFakeLog(0), false, nil)
	var wakes atomic.Int32
	for range maxCommitWatchers + 1 {
		ts.ref.Mailbox.TryPost(&WatchCommitted{Waker: &funcWaker{func() bool { wakes.Add(1); return true }}}, 0)
	}
	answer(t, ts.publish(t, nil, "a"))
	if n := wakes.Load(); n != maxCommitWatchers {
		t.Fatalf("%d watchers woken; want %d", n, maxCommitWatchers)
	}
}

type funcWaker struct{ wake func() bool }

func (f *funcWaker) Wake() bool { return f.wake() }
