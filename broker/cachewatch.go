package broker

import (
	"context"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/lanes"
	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/sessions"
	"github.com/getfelix/felix-go/streams"
	"github.com/getfelix/felix-go/subscribers"
)

// CacheWatch implements service.Caches with the subscribe handshake
// (Subscribe's steps): a watch is a subscription whose feeder the cache
// shard registers as a watcher. The shard takes the snapshot or the
// replayed changes in the same step that adds the watcher, so the answer
// goes out only once every later change reaches the watch's queue.
// Rights: cache.read on the key, or on the whole prefix.
func (c *conn) CacheWatch(ctx context.Context, req *service.CacheWatch, open service.OpenSink) (*service.CacheWatchStarted, error) {
	ref, n, shards, err := c.WatchShard(ctx, req)
	if err != nil {
		return nil, err
	}
	release, err := c.b.tenants.AcquireSubscription(req.Scope.Tenant)
	if err != nil {
		return nil, err
	}
	writer, err := actors.Request[*lanes.WriterRef](actors.Detached(ctx), c.b.system.Root, c.session, &sessions.GetWriter{}, requestTimeout)
	if err != nil {
		release()
		return nil, err
	}
	id := c.b.nextSubID.Add(1)
	sink, err := open(id)
	if err != nil {
		release()
		return nil, err
	}
	sub, queue, err := c.spawnFeeder(ctx, id, req.Scope, n, ref, writer, sink, c.grantCapacity(req.QueueCapacity), req)
	if err != nil {
		release()
		return nil, err
	}
	if err := c.adopt(ctx, sub, release); err != nil {
		return nil, err
	}
	add := &streams.AddWatcher{ID: id, Feeder: queue, Key: req.Key, Prefix: req.Prefix, From: req.From, Retained: req.Retained, SnapshotEnd: req.SnapshotEnd}
	added, err := actors.Request[*streams.WatcherAdded](actors.Detached(ctx), c.b.system.Root, ref.PID, add, requestTimeout)
	if err == nil {
		err = added.Err
	}
	if err != nil {
		c.b.system.Root.Send(c.session, &sessions.EndSubscription{ID: id, Abort: true})
		return nil, err
	}
	c.b.system.Root.Send(sub.Feeder, &subscribers.Start{Backlog: added.Backlog, From: added.Resume, Live: added.Resume})
	return &service.CacheWatchStarted{
		ID: id, Shard: n, Shards: shards, Resume: added.Resume, Resnapshot: added.Resnapshot, ResumableFrom: added.ResumableFrom,
		Retained: added.Retained, QueueCapacity: queue.Config().Capacity,
	}, nil
}
