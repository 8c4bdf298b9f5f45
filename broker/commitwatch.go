package broker

import (
	"context"
	"sync"

	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/streams"
	"github.com/getfelix/felix-go/wire"
)

// WatchCommitted implements service.CommitWatcher: the watch is the shard's
// own (streams.WatchCommitted), so a reader is woken by every advance of
// the committed end, whatever made it: a publish here, or a raft apply on
// a replicated shard's leader or follower. It needs the same right as a
// range read of the shard, and the shard served here.
func (c *conn) WatchCommitted(ctx context.Context, scope wire.Scope, shard uint32, after uint64, wake chan<- struct{}) (func(), error) {
	ref, _, err := c.durableLog(ctx, scope, shard, "commit watches")
	if err != nil {
		return nil, err
	}
	gone := make(chan struct{})
	w := &streams.WakeChan{C: wake, Gone: gone}
	unwatch := ref.WatchCommitted(w, after)
	var once sync.Once
	return func() {
		once.Do(func() {
			// Gone first: should the unwatch not arrive (the shard
			// stopped), the shard forgets the watch at its next advance.
			close(gone)
			unwatch()
		})
	}, nil
}

var _ service.CommitWatcher = (*conn)(nil)
