package streams

import (
	"slices"
	"sort"
	"strings"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/cache"
	"github.com/getfelix/felix-go/wire"
)

// Cache watches. A watch is a subscriber of one cache shard: its feeder's
// mailbox is the watch's queue, and the shard offers it each change its
// key or prefix covers, as one Envelope per change whose one payload is
// the change's wire.CacheWatchEvent, encoded once and shared by every
// watcher it matches. The changes are what applying a record did
// (cache.Result.Changes), not the records: a refused conditional write
// changes nothing and is seen by nobody. A commit's changes carry its
// version and go out in op order, followed by its event (the commit's
// event bytes), to every watcher that saw at least one of them: the event
// is where the commit ends.
//
// Registration (AddWatcher) and the start are one step of the shard:
// the snapshot of a retained watch, or the changes a resume asks for,
// are taken in the same Receive that adds the watcher, so every later
// change reaches its queue and none comes twice.
//
// A resume replays the shard's recent changes, kept in memory
// (watchHistory, bounded by watchHistoryChanges and watchHistoryBytes,
// filled again when the index is rebuilt from the log on open): a
// version below what it holds, or below the index's ResumableFrom (what
// compaction of the log left resumable), starts over as a retained watch
// and says so (WatcherAdded.Resnapshot).
//
// Lag: the shard offers a change with no wait, whatever the stream's
// policy; a watcher whose queue refuses it is forgotten and told so
// (SubscriberEvicted with the change's version), so a slow watcher costs
// the writers and the other watchers nothing, and its feeder ends the
// watch naming the version to resume from.

// AddWatcher registers a watch's feeder with a cache shard, which answers
// *WatcherAdded.
type AddWatcher struct {
	actors.ControlMessage
	ID     uint64
	Feeder *actors.Mailbox
	// Key is the key watched, or with Prefix the prefix of the keys.
	Key    string
	Prefix bool
	// From, when set, resumes: every change at *From or later.
	From *uint64
	// Retained sends every matching key's current value first.
	Retained bool
	// SnapshotEnd follows every retained snapshot, even one of no key,
	// with a wire.WatchSnapshotEnd event (the watcher's connection
	// negotiated it).
	SnapshotEnd bool
}

// WatcherAdded answers AddWatcher.
type WatcherAdded struct {
	ID uint64
	// Resume is the version the watch's changes start from: every change
	// from it on reaches the feeder, the ones in Backlog first.
	Resume uint64
	// Backlog is what the feeder writes before its queue: a retained
	// watch's snapshot (and its end, when asked), or a resume's changes,
	// oldest first.
	Backlog []*Envelope
	// Retained is how many of Backlog are a snapshot's keys.
	Retained int
	// Resnapshot says a resume asked for changes the shard no longer
	// holds (below ResumableFrom) and was answered as a retained watch.
	Resnapshot    bool
	ResumableFrom uint64
	Err           error
}

// Bounds of a cache shard's memory of its recent changes, which a resume
// replays.
const (
	watchHistoryChanges = 4096
	watchHistoryBytes   = 8 << 20
)

// Bounds of a retained watch's snapshot: it is taken in one step of the
// shard, and held by the feeder until written.
const (
	maxRetainedKeys  = 10000
	maxRetainedBytes = 64 << 20
)

// errRetainedTooLarge refuses a retained watch whose snapshot is past the
// bounds above.
var errRetainedTooLarge = wire.NewError(wire.CodeLimitExceeded, "a retained watch takes at most %d keys and %d bytes; watch a narrower prefix, or without retained", maxRetainedKeys, maxRetainedBytes)

// watcher is one watch of a cache shard.
type watcher struct {
	id     uint64
	feeder *actors.Mailbox
	key    string
	prefix bool
}

func (w *watcher) covers(key string) bool {
	if w.prefix {
		return strings.HasPrefix(key, w.key)
	}
	return key == w.key
}

// watchChange is one change as the history keeps it.
type watchChange struct {
	env *Envelope
	key string
	// commitEnd marks a commit's event: it goes to a watcher that saw a
	// change of the same commit.
	commitEnd bool
}

// watchHistory is a shard's recent changes, oldest first, and floor: the
// lowest version from which it holds every change.
type watchHistory struct {
	changes []watchChange
	bytes   int64
	floor   uint64
	// maxChanges, when set (tests), replaces watchHistoryChanges.
	maxChanges int
}

func (h *watchHistory) push(c watchChange) {
	h.changes = append(h.changes, c)
	h.bytes += c.env.MailboxBytes()
	limit := watchHistoryChanges
	if h.maxChanges > 0 {
		limit = h.maxChanges
	}
	drop := 0
	for len(h.changes)-drop > limit || h.bytes > watchHistoryBytes {
		// A version goes whole: a resume from it needs all its changes.
		h.floor = h.changes[drop].env.Base + 1
		for drop < len(h.changes) && h.changes[drop].env.Base < h.floor {
			h.bytes -= h.changes[drop].env.MailboxBytes()
			drop++
		}
	}
	if drop > 0 {
		clear(h.changes[:drop])
		h.changes = h.changes[drop:]
	}
}

// since returns the changes at version from or later.
func (h *watchHistory) since(from uint64) []watchChange {
	i := sort.Search(len(h.changes), func(i int) bool { return h.changes[i].env.Base >= from })
	return h.changes[i:]
}

// watchState is a cache shard's watch side, in its cacheState.
type watchState struct {
	watchers []watcher
	history  watchHistory
	// delivered and lagged count this batch's offers, for FanoutStats.
	delivered, lagged int
	// scratch: the changes of the record being applied.
	changes []watchChange
}

// recordChanges turns what applying the record at offset did into watch
// changes, keeps them in the history and offers them to every watcher
// they match.
func (s *shard) recordChanges(offset uint64, res *cache.Result) {
	w := &s.cache.watch
	w.changes = appendChanges(w.changes[:0], offset, res)
	if len(w.changes) == 0 {
		return
	}
	for _, c := range w.changes {
		w.history.push(c)
	}
	s.offerChanges(w.changes)
	clear(w.changes)
}

// appendChanges appends the watch changes of what applying the record at
// offset did, each encoded once: a commit's in op order, then its event.
func appendChanges(out []watchChange, offset uint64, res *cache.Result) []watchChange {
	if len(res.Changes) == 0 {
		return out
	}
	commit := res.Kind == cache.KindCommit
	var flags uint8
	if commit {
		flags = wire.WatchFlagCommit
	}
	for i := range res.Changes {
		ch := &res.Changes[i]
		ev := wire.CacheWatchEvent{Kind: watchKind(res.Kind, ch), Flags: flags, Version: offset, Key: ch.Key, Value: ch.Value}
		out = append(out, watchChange{env: watchEnvelope(&ev, offset, commit), key: ch.Key})
	}
	if commit {
		ev := wire.CacheWatchEvent{Kind: wire.WatchCommitEvent, Flags: flags, Version: offset, Value: res.Event}
		out = append(out, watchChange{env: watchEnvelope(&ev, offset, false), commitEnd: true})
	}
	return out
}

func watchKind(k cache.Kind, ch *cache.Entry) wire.WatchKind {
	switch {
	case !ch.Deleted:
		return wire.WatchPut
	case k == cache.KindExpire:
		return wire.WatchExpire
	}
	return wire.WatchDelete
}

// watchEnvelope wraps one encoded change. Its Resume is the version a
// watch resumes from once it has the change: the next one, unless more of
// the same record follow (a commit's, before its event).
func watchEnvelope(ev *wire.CacheWatchEvent, version uint64, more bool) *Envelope {
	env := NewEnvelope([][]byte{wire.AppendCacheWatchEvent(nil, ev)})
	env.Base, env.Resume = version, version+1
	if more {
		env.Resume = version
	}
	return env
}

// offerChanges offers one record's changes to every watcher they match,
// with no wait: a watcher whose queue is full is forgotten and told the
// version it did not get.
func (s *shard) offerChanges(changes []watchChange) {
	w := &s.cache.watch
	alive := w.watchers[:0]
	for _, wr := range w.watchers {
		if s.offerTo(&wr, changes) {
			alive = append(alive, wr)
		}
	}
	clear(w.watchers[len(alive):])
	w.watchers = alive
}

// offerTo offers changes to one watcher and reports whether it stays.
func (s *shard) offerTo(wr *watcher, changes []watchChange) bool {
	w := &s.cache.watch
	saw := false
	for _, c := range changes {
		if c.commitEnd && !saw || !c.commitEnd && !wr.covers(c.key) {
			continue
		}
		saw = true
		switch wr.feeder.TryPost(c.env, 0) {
		case actors.Posted, actors.PostedEvicting:
			w.delivered++
		case actors.Closed:
			return false
		default:
			w.lagged++
			// Control traffic: it enters the full queue, after what it holds.
			wr.feeder.TryPost(&SubscriberEvicted{ResumeFrom: c.env.Base}, 0)
			s.logger.Debug().Uint64("subscription", wr.id).Uint64("version", c.env.Base).Msg("cache watcher's queue full; its watch ends lagged")
			return false
		}
	}
	return true
}

func (s *shard) handleAddWatcher(ctx actor.Context, msg *AddWatcher) {
	if err := s.cacheReadable(); err != nil {
		ctx.Respond(&WatcherAdded{ID: msg.ID, Err: err})
		return
	}
	added, err := s.watchStart(msg)
	if err != nil {
		ctx.Respond(&WatcherAdded{ID: msg.ID, Err: err})
		return
	}
	s.used()
	s.cache.watch.watchers = append(s.cache.watch.watchers, watcher{id: msg.ID, feeder: msg.Feeder, key: msg.Key, prefix: msg.Prefix})
	ctx.Respond(added)
}

// watchStart is where a new watch starts and what it is sent first.
func (s *shard) watchStart(msg *AddWatcher) (*WatcherAdded, error) {
	w := &s.cache.watch
	added := &WatcherAdded{ID: msg.ID, Resume: s.delivered, ResumableFrom: max(w.history.floor, s.cache.index.ResumableFrom())}
	retained := msg.Retained
	if from := msg.From; from != nil && !retained {
		switch {
		case *from > s.delivered:
			return nil, wire.NewError(wire.CodeInvalidRequest, "version %d is past %s shard %d's applied end %d", *from, s.scope, s.n, s.delivered)
		case *from < added.ResumableFrom:
			added.Resnapshot, retained = true, true
		default:
			added.Resume = *from
			added.Backlog = backlogFor(msg, w.history.since(*from))
			return added, nil
		}
	}
	if retained {
		entries, complete := s.cache.index.Matching(msg.Key, msg.Prefix, s.now().UnixNano(), maxRetainedKeys, maxRetainedBytes)
		if !complete {
			return nil, errRetainedTooLarge
		}
		added.Retained = len(entries)
		for i := range entries {
			e := &entries[i]
			ev := wire.CacheWatchEvent{Kind: wire.WatchPut, Flags: wire.WatchFlagRetained, Version: e.Version, Key: e.Key, Value: e.Value}
			env := NewEnvelope([][]byte{wire.AppendCacheWatchEvent(nil, &ev)})
			// A snapshot moves no resume version: a watch that ends
			// within it resumes where its changes start.
			env.Base = e.Version
			added.Backlog = append(added.Backlog, env)
		}
		if msg.SnapshotEnd {
			// Without it a snapshot of no key sends nothing, and a key
			// deleted while its watcher was away is never reported.
			ev := wire.CacheWatchEvent{Kind: wire.WatchSnapshotEnd, Flags: wire.WatchFlagRetained, Version: added.Resume}
			env := NewEnvelope([][]byte{wire.AppendCacheWatchEvent(nil, &ev)})
			env.Base = added.Resume
			added.Backlog = append(added.Backlog, env)
		}
	}
	return added, nil
}

// backlogFor picks the changes a resuming watch covers from the history.
func backlogFor(msg *AddWatcher, changes []watchChange) []*Envelope {
	wr := watcher{key: msg.Key, prefix: msg.Prefix}
	var out []*Envelope
	var sawAt uint64
	saw := false
	for _, c := range changes {
		switch {
		case c.commitEnd && saw && sawAt == c.env.Base:
		case !c.commitEnd && wr.covers(c.key):
			saw, sawAt = true, c.env.Base
		default:
			continue
		}
		out = append(out, c.env)
	}
	return out
}

// removeWatcher forgets watcher id, if the shard has it.
func (s *shard) removeWatcher(id uint64) bool {
	if s.cache == nil {
		return false
	}
	w := &s.cache.watch
	for i, wr := range w.watchers {
		if wr.id == id {
			w.watchers = slices.Delete(w.watchers, i, i+1)
			return true
		}
	}
	return false
}

// hasWatchers says whether a cache shard has a watch: an in-memory one is
// not idle then.
func (s *shard) hasWatchers() bool {
	return s.cache != nil && len(s.cache.watch.watchers) > 0
}
