package broker

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/wire"
)

// Commit watches (service.CommitWatcher): a reader that is caught up with
// a durable shard (the Kafka listener's long-polling Fetch) is woken when
// a publish to the shard through this member is acknowledged, rather than
// reading again and again. The acknowledgement comes after the records
// are committed (under every fsync policy, and on a replicated shard's
// leader after the quorum), so the reader that wakes finds them.
//
// What this does not see, a watcher's safety re-read covers: a replicated
// shard's follower (its records come from raft, not from a publish here),
// entries a new raft leader applies that its predecessor proposed, and a
// publish admitted while no shard here was watched (it is not wrapped, so
// that publishing to a broker nobody watches allocates nothing more) and
// committed after a watch began.

// maxCommitWatches bounds the watches on one shard: each is a waiting
// Fetch, itself bounded per connection (kafka_max_inflight), so this only
// keeps one shard's wake-up from walking an unbounded list. A watch past
// it is refused overloaded and the reader polls.
const maxCommitWatches = 1024

type commitKey struct {
	scope wire.Scope
	shard uint32
}

// commitWatches is every watched shard's wake channels.
type commitWatches struct {
	// n counts the watches, so a publish to a broker nobody watches costs
	// one atomic load, and no wrapped acknowledgement.
	n  atomic.Int64
	mu sync.Mutex
	// shards: the channels of each watched shard (a watch is its channel's
	// pointer, so one reader may watch several shards with one channel).
	shards map[commitKey]map[*chan<- struct{}]struct{}
}

// add registers wake for key; false when the shard has too many.
func (w *commitWatches) add(key commitKey, wake *chan<- struct{}) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.shards == nil {
		w.shards = make(map[commitKey]map[*chan<- struct{}]struct{})
	}
	set := w.shards[key]
	if len(set) >= maxCommitWatches {
		return false
	}
	if set == nil {
		set = make(map[*chan<- struct{}]struct{})
		w.shards[key] = set
	}
	set[wake] = struct{}{}
	w.n.Add(1)
	return true
}

func (w *commitWatches) remove(key commitKey, wake *chan<- struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	set := w.shards[key]
	if _, ok := set[wake]; !ok {
		return
	}
	delete(set, wake)
	w.n.Add(-1)
	if len(set) == 0 {
		delete(w.shards, key)
	}
}

// watched reports whether any shard here has a watch: only then is a
// publish's acknowledgement wrapped.
func (w *commitWatches) watched() bool { return w.n.Load() > 0 }

// wake tells key's watchers, without blocking, that records were committed.
func (w *commitWatches) wake(key commitKey) {
	if w.n.Load() == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for ch := range w.shards[key] {
		select {
		case *ch <- struct{}{}:
		default: // already woken, not yet read again
		}
	}
}

// wrap makes done wake key's watchers once a publish is acknowledged.
func (w *commitWatches) wrap(key commitKey, done func(service.PublishResult)) func(service.PublishResult) {
	return func(r service.PublishResult) {
		if r.Err == nil {
			w.wake(key)
		}
		if done != nil {
			done(r)
		}
	}
}

// WatchCommitted implements service.CommitWatcher. It needs the same right
// as a range read of the shard, and the shard served here.
func (c *conn) WatchCommitted(ctx context.Context, scope wire.Scope, shard uint32, after uint64, wake chan<- struct{}) (func(), error) {
	key := commitKey{scope: scope, shard: shard}
	handle := &wake
	if !c.b.commits.add(key, handle) {
		return nil, wire.NewError(wire.CodeOverloaded, "shard %s#%d has %d commit watches", scope, shard, maxCommitWatches)
	}
	cancel := func() { c.b.commits.remove(key, handle) }
	// Registered first, read second: a commit after the read wakes the
	// watch, one before it is seen here.
	log, err := c.durableLog(ctx, scope, shard, "commit watches")
	if err != nil {
		cancel()
		return nil, err
	}
	if log.Committed() > after {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	return cancel, nil
}

var _ service.CommitWatcher = (*conn)(nil)
