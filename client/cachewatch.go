package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/getfelix/felix-go/wire"
)

// WatchTarget is what a watch covers: one key (WatchKey), or every key
// starting with a prefix (WatchPrefix), on every shard of the cache.
type WatchTarget struct {
	Key    string
	Prefix bool
}

// WatchKey watches one key, on its shard.
func WatchKey(key string) WatchTarget { return WatchTarget{Key: key} }

// WatchPrefix watches every key starting with prefix, on every shard.
func WatchPrefix(prefix string) WatchTarget { return WatchTarget{Key: prefix, Prefix: true} }

// WatchFrom is where a watch starts. The zero value starts at the next
// change.
type WatchFrom struct {
	// Versions resumes: each shard named gets every change from its
	// version on (Watcher.Resume gives them after a watch ended). A shard
	// whose version the broker can no longer replay starts over retained,
	// and its events come marked Retained first (WatchEvent.Resnapshot).
	Versions map[uint32]uint64
	// Retained sends the current value of every covered key first, each
	// marked Retained, then every change after them, for the shards
	// Versions does not name.
	Retained bool
	// QueueCapacity asks for each shard's watch queue capacity (changes);
	// zero takes the broker's default.
	QueueCapacity int
}

// WatchEvent is one change of a watched key, a retained key's value, or
// the end of a shard's snapshot.
type WatchEvent struct {
	Shard uint32
	Kind  wire.WatchKind
	Key   string
	Value []byte
	// Version is the offset in Shard of the record that made the change
	// (a retained event: the key's version; a snapshot's end: the version
	// the shard's changes start from).
	Version uint64
	// Retained marks a snapshot's event: the key's value when the watch
	// (re)started. Resnapshot marks a snapshot that replaced a resume:
	// keys not in it were deleted meanwhile. Every snapshot of a shard,
	// even one of no key, ends with an event of Kind WatchSnapshotEnd
	// (Retained, no key): a prefix watch's reader drops then what it
	// holds of the shard that the snapshot did not name. A key watch's
	// resnapshot that does not hold the key reports it first as a
	// WatchDelete (Retained, Resnapshot, Version the snapshot's end): it
	// was deleted while the watch was away. (A broker without
	// FeatureCacheSnapshotEnd marks no end, and such a resume shows
	// nothing.)
	Retained, Resnapshot bool
	// Commit marks a change of an atomic commit; the commit's event
	// (Kind WatchCommitEvent) comes after its changes.
	Commit bool
}

// WatchLaggedError ends a watch that fell behind: its queue on Shard was
// full when a change came. Watch again with Watcher.Resume to miss
// nothing; Retained says the shard's snapshot was not yet whole, so that
// shard must start retained again.
type WatchLaggedError struct {
	Shard      uint32
	ResumeFrom uint64
	Retained   bool
}

func (e *WatchLaggedError) Error() string {
	return fmt.Sprintf("felix: cache watch on shard %d lagged; resume from version %d", e.Shard, e.ResumeFrom)
}

// Watcher delivers a watch's events: one shard's in version order, the
// shards' interleaved. A Client's watcher ends at the first shard's end
// (a lag: *WatchLaggedError); a ClusterClient's watches a shard again
// where it ended, at its owner, when the watch lagged, the shard moved or
// its connection was lost: from the version after the last event Next
// returned (inside a commit, past the commit's changes already returned),
// so nothing is missed or repeated. Next is for one goroutine; Close may
// be called from another.
type Watcher struct {
	cache  Cache
	target WatchTarget
	open   openShardWatch
	// follow resumes a shard whose watch (sub) ended for a reason a new
	// watch cures (ClusterClient); otherwise the end is Next's error.
	follow func(sub *Subscription, err error) bool

	events chan watchItem
	life   context.Context
	end    context.CancelFunc
	wg     sync.WaitGroup

	// Next's own: each shard's position, and an event Next returns
	// before it reads the next one (a key watch's snapshot end, after
	// the delete it implied).
	shards map[uint32]*shardPosition
	held   *WatchEvent
	// resumed counts shard watches made again (a ClusterClient's).
	resumed atomic.Int64

	mu struct {
		sync.Mutex
		subs map[uint32]*Subscription
	}
}

// shardPosition is where a shard's watch is: the version it resumes from,
// how many changes of that version (a commit's) were returned already,
// and how many retained events of its snapshot are still to come (its
// end among them, when the broker marks it) and how many came.
type shardPosition struct {
	resume       uint64
	skip         int
	retainedDue  uint64
	retainedSeen uint64
	resnapshot   bool
	pause        backoff
	// pending: the shard's watch ended for a reason a new one cures and
	// is not watched again yet (a Next's context ended first); every
	// Next tries again before it waits.
	pending bool
}

type watchItem struct {
	shard uint32
	gen   *Subscription
	ev    WatchEvent
	err   error
}

// openShardWatch asks one shard for a watch.
type openShardWatch func(ctx context.Context, shard uint32, from *uint64, retained bool) (*Subscription, *wire.CacheWatchStarted, error)

// Watch watches a key or a prefix of k (rights: cache.read on the key,
// or on the whole prefix). When it returns, every later change is
// delivered.
func (c *Client) Watch(ctx context.Context, k Cache, target WatchTarget, from WatchFrom) (*Watcher, error) {
	if c.features&wire.FeatureCache == 0 {
		return nil, ErrNoCaches
	}
	open := func(ctx context.Context, shard uint32, v *uint64, retained bool) (*Subscription, *wire.CacheWatchStarted, error) {
		return c.watchShard(ctx, k, target, shard, v, retained, from.QueueCapacity)
	}
	return startWatcher(ctx, k, target, from, open, nil)
}

// watchShard sends one CacheWatch and pairs its answer with its event
// stream, read as a subscription's.
func (c *Client) watchShard(ctx context.Context, k Cache, target WatchTarget, shard uint32, from *uint64, retained bool, capacity int) (*Subscription, *wire.CacheWatchStarted, error) {
	s := k.scope(c)
	started, err := cacheCall[*wire.CacheWatchStarted](ctx, c, func(id uint64) wire.Message {
		return &wire.CacheWatch{RequestID: id, Tenant: s.Tenant, Namespace: s.Namespace, Cache: s.Stream,
			Key: target.Key, Prefix: target.Prefix, Shard: shard, FromVersion: from, Retained: retained,
			QueueCapacity: int64(capacity)}
	})
	if err != nil {
		return nil, nil, err
	}
	rs, err := c.eventStream(ctx, started.SubscriptionID)
	if err != nil {
		return nil, nil, err
	}
	sub := &Subscription{c: c, id: started.SubscriptionID, capacity: started.QueueCapacity, stream: rs,
		done: make(chan struct{}), events: make(chan Event, c.opts.SubscriptionBuffer)}
	c.subsMu.Lock()
	c.subsMu.byID[sub.id] = sub
	c.subsMu.Unlock()
	c.wg.Add(1)
	go sub.read(rs)
	return sub, &started, nil
}

// startWatcher opens the first shard's watch (a key's, or a prefix's
// shard 0), whose answer says how many shards a prefix watch covers, then
// the others. A key watch resumes from Versions' one entry.
func startWatcher(ctx context.Context, k Cache, target WatchTarget, from WatchFrom, open openShardWatch, follow func(*Subscription, error) bool) (*Watcher, error) {
	w := &Watcher{cache: k, target: target, open: open, follow: follow, events: make(chan watchItem, 64), shards: map[uint32]*shardPosition{}}
	w.mu.subs = map[uint32]*Subscription{}
	w.life, w.end = context.WithCancel(context.Background())
	version := func(n uint32) *uint64 {
		v, ok := from.Versions[n]
		if !ok {
			return nil
		}
		return &v
	}
	first := version(0)
	if !target.Prefix {
		if len(from.Versions) > 1 {
			return nil, wire.NewError(wire.CodeInvalidRequest, "a key watch resumes one shard; Versions names %d", len(from.Versions))
		}
		for _, v := range from.Versions {
			first = &v
		}
	}
	shards, err := w.startShard(ctx, 0, first, from.Retained && first == nil, 0)
	for n := uint32(1); err == nil && target.Prefix && n < shards; n++ {
		_, err = w.startShard(ctx, n, version(n), from.Retained && version(n) == nil, 0)
	}
	if err != nil {
		_ = w.Close(ctx)
		return nil, err
	}
	return w, nil
}

// startShard opens shard n's watch (for a key watch, its key's shard,
// whatever n) and its forwarder, and returns the cache's shard count.
func (w *Watcher) startShard(ctx context.Context, n uint32, from *uint64, retained bool, skip int) (uint32, error) {
	sub, started, err := w.open(ctx, n, from, retained)
	if err != nil {
		return 0, err
	}
	n = started.Shard
	pos := w.shards[n]
	if pos == nil {
		pos = &shardPosition{}
		w.shards[n] = pos
	}
	pos.resume, pos.skip = started.Resume, skip
	pos.retainedDue, pos.resnapshot, pos.retainedSeen = started.RetainedCount, started.Resnapshot, 0
	if started.Resnapshot || retained {
		pos.skip = 0
		if sub.c.features&wire.FeatureCacheSnapshotEnd != 0 {
			pos.retainedDue++ // its end
		}
	}
	w.mu.Lock()
	w.mu.subs[n] = sub
	w.mu.Unlock()
	w.wg.Add(1)
	go w.forward(n, sub, pos.skip, pos.resume)
	return started.Shards, nil
}

// forward decodes one shard's events into the merged queue; a resumed
// watch first drops the changes of its resume version already returned
// (a commit's, when the watch ended inside it). It ends with the
// subscription's end, or at Close.
func (w *Watcher) forward(n uint32, sub *Subscription, skip int, resume uint64) {
	defer w.wg.Done()
	for {
		ev, err := sub.Next(w.life)
		var item watchItem
		if err != nil {
			item = watchItem{shard: n, gen: sub, err: err}
		} else {
			we, derr := wire.DecodeCacheWatchEvent(ev.Payload)
			if derr != nil {
				item = watchItem{shard: n, gen: sub, err: fmt.Errorf("%w: %v", ErrProtocol, derr)}
			} else {
				if skip > 0 && we.Version == resume && we.Flags&wire.WatchFlagRetained == 0 {
					skip--
					continue
				}
				item = watchItem{shard: n, gen: sub, ev: WatchEvent{
					Shard: n, Kind: we.Kind, Key: we.Key, Value: we.Value, Version: we.Version,
					Retained: we.Flags&wire.WatchFlagRetained != 0, Commit: we.Flags&wire.WatchFlagCommit != 0,
				}}
			}
		}
		select {
		case w.events <- item:
		case <-w.life.Done():
			return
		}
		if item.err != nil {
			return
		}
	}
}

// Next waits for the next event. It returns ErrClosed after Close, a
// *WatchLaggedError when a shard's watch fell behind (a ClusterClient's
// watcher resumes instead), and the error that ended a shard's watch. A
// ClusterClient's resume that fails (ctx ended first, or the shard's
// owner refused) is returned and tried again by the next Next.
func (w *Watcher) Next(ctx context.Context) (WatchEvent, error) {
	if ev := w.held; ev != nil {
		w.held = nil
		return *ev, nil
	}
	for {
		if err := w.resumePending(ctx); err != nil {
			return WatchEvent{}, err
		}
		var item watchItem
		select {
		case item = <-w.events:
		case <-ctx.Done():
			return WatchEvent{}, ctx.Err()
		case <-w.life.Done():
			return WatchEvent{}, ErrClosed
		}
		if !w.current(item) {
			continue // a shard's earlier watch, replaced
		}
		pos := w.shards[item.shard]
		if item.err == nil {
			pos.advance(&item.ev)
			if item.ev.Kind == wire.WatchSnapshotEnd && pos.resnapshot && pos.retainedSeen == 0 && !w.target.Prefix {
				w.held = &item.ev
				return WatchEvent{Shard: item.shard, Kind: wire.WatchDelete, Key: w.target.Key, Version: item.ev.Version,
					Retained: true, Resnapshot: true}, nil
			}
			return item.ev, nil
		}
		if w.follow == nil || !w.follow(item.gen, item.err) {
			_ = w.Close(ctx)
			return WatchEvent{}, w.ended(item.shard, pos, item.err)
		}
		// Resumed at the top of the loop: a resume left unmade by an
		// error stays pending for the next call rather than leaving the
		// shard unwatched.
		pos.pending = true
	}
}

// resumePending watches again every shard whose watch ended and is not
// watched again yet; one whose resume fails stays pending.
func (w *Watcher) resumePending(ctx context.Context) error {
	for n, pos := range w.shards {
		if !pos.pending {
			continue
		}
		if w.life.Err() != nil {
			return ErrClosed // closed: nothing is watched again
		}
		if err := w.resumeShard(ctx, n, pos); err != nil {
			return err
		}
		pos.pending = false
	}
	return nil
}

func (w *Watcher) current(item watchItem) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.mu.subs[item.shard] == item.gen
}

// advance moves a shard's position past ev, returned.
func (pos *shardPosition) advance(ev *WatchEvent) {
	switch {
	case ev.Kind == wire.WatchSnapshotEnd:
		ev.Resnapshot = pos.resnapshot
		pos.retainedDue = 0 // whole, whatever was counted
	case ev.Retained:
		ev.Resnapshot = pos.resnapshot
		pos.retainedSeen++
		if pos.retainedDue > 0 {
			pos.retainedDue--
		}
	case ev.Commit && ev.Kind != wire.WatchCommitEvent:
		if pos.resume == ev.Version {
			pos.skip++
		} else {
			pos.resume, pos.skip = ev.Version, 1
		}
		pos.pause = backoff{}
	default:
		pos.resume, pos.skip = ev.Version+1, 0
		pos.pause = backoff{}
	}
}

// ended turns a shard watch's end into the error Next reports.
func (w *Watcher) ended(n uint32, pos *shardPosition, err error) error {
	var lag *LaggedError
	if errors.As(err, &lag) {
		return &WatchLaggedError{Shard: n, ResumeFrom: pos.resume, Retained: pos.retainedDue > 0}
	}
	return err
}

// resumeShard watches shard n again from its position, after a pause:
// retained again if its snapshot was not whole.
func (w *Watcher) resumeShard(ctx context.Context, n uint32, pos *shardPosition) error {
	w.mu.Lock()
	old := w.mu.subs[n]
	delete(w.mu.subs, n)
	w.mu.Unlock()
	if old != nil {
		_ = old.Close(ctx)
	}
	if err := pos.pause.sleep(ctx); err != nil {
		return err
	}
	w.resumed.Add(1)
	var err error
	if pos.retainedDue > 0 {
		_, err = w.startShard(ctx, n, nil, true, 0)
	} else {
		from := pos.resume
		_, err = w.startShard(ctx, n, &from, false, pos.skip)
	}
	return err
}

// Resume is where each shard's watch resumes from after the events Next
// returned: WatchFrom.Versions for a new Watch that misses nothing. Call
// it from Next's goroutine.
func (w *Watcher) Resume() map[uint32]uint64 {
	out := make(map[uint32]uint64, len(w.shards))
	for n, pos := range w.shards {
		out[n] = pos.resume
	}
	return out
}

// Resumed counts the shard watches a ClusterClient's watcher made again
// where one ended.
func (w *Watcher) Resumed() int64 { return w.resumed.Load() }

// Close ends every shard's watch.
func (w *Watcher) Close(ctx context.Context) error {
	w.end()
	w.mu.Lock()
	subs := w.mu.subs
	w.mu.subs = map[uint32]*Subscription{}
	w.mu.Unlock()
	var errs []error
	for _, sub := range subs {
		if err := sub.Close(ctx); err != nil && !errors.Is(err, ErrClosed) {
			errs = append(errs, err)
		}
	}
	w.wg.Wait()
	return errors.Join(errs...)
}
