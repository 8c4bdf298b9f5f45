// Package cachefront is the caches' side of service.Caches, on the
// client's goroutines: a cache is a stream definition with cache settings,
// a write a cache publish on its key's shard, a read a request to that
// shard, confirmed first on a replicated one. Rights: cache.manage to
// create and describe, cache.write to write, cache.read to read, each
// grant possibly naming keys or a prefix. A watch, which is a
// subscription, is the broker's (its subscribe handshake); WatchShard is
// its check and routing.
package cachefront

import (
	"context"
	"errors"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/auth"
	"github.com/getfelix/felix-go/cache"
	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/streams"
	"github.com/getfelix/felix-go/wire"
)

// Front is what every connection's cache calls share: one per broker.
type Front struct {
	cfg Config
}

// Config is what a Front needs of the broker that assembles it.
type Config struct {
	// Root sends the shards their reads.
	Root *actor.RootContext
	// ReplicasFor settles a new cache's replica count as a stream's.
	ReplicasFor func(*service.StreamSpec) (int, error)
	// AllowPublish charges a write to its tenant's publish rate.
	AllowPublish func(tenant string, records int, bytes int64, now time.Time) error
	// PublishWait bounds the wait for room in a full shard's mailbox
	// (publish_queue_wait_timeout_ms).
	PublishWait time.Duration
}

// New makes the caches' front over cfg.
func New(cfg Config) *Front { return &Front{cfg: cfg} }

// Conn is what a connection lends its cache calls: its principal's checks
// and its lookups.
type Conn interface {
	// Authorize checks the connection's principal for action on scope;
	// AuthorizeBy with the principal's check given (one naming keys).
	Authorize(action auth.Action, scope wire.Scope) error
	AuthorizeBy(scope wire.Scope, check func(*auth.Principal) error) error
	// Registry asks the streams registry msg and returns its definition.
	Registry(ctx context.Context, msg any) (streams.Def, error)
	// Def is scope's definition, as the connection last learnt it; never
	// made on first use. Forget drops what it learnt of scope.
	Def(ctx context.Context, scope wire.Scope) (streams.Def, error)
	Forget(scope wire.Scope)
	// Shard returns shard n of scope as served here.
	Shard(ctx context.Context, scope wire.Scope, n uint32) (*streams.ShardRef, error)
	// ConfirmRead has a replicated shard confirm a read that starts now
	// (streams.ConfirmRead); any other shard answers at once.
	ConfirmRead(ctx context.Context, ref *streams.ShardRef, followerLag time.Duration) (*streams.ReadConfirmed, error)
}

// Session is one connection's cache calls of service.Caches but the
// watch; the broker's connection embeds it.
type Session struct {
	f *Front
	c Conn
}

// Session returns c's cache calls.
func (f *Front) Session(c Conn) Session { return Session{f: f, c: c} }

// requestTimeout bounds a shard's answer to a read.
const requestTimeout = 5 * time.Second

var errNotCache = wire.NewError(wire.CodeInvalidRequest, "the stream is not a cache")

// maxCacheTTL bounds a TTL, so an expiry (the shard's clock plus it) stays
// far inside int64 nanoseconds.
const maxCacheTTL = 100 * 365 * 24 * time.Hour

func checkTTL(ttl time.Duration) error {
	if ttl < 0 || ttl > maxCacheTTL {
		return wire.NewError(wire.CodeInvalidRequest, "ttl must be 0 (none) to %s", maxCacheTTL)
	}
	return nil
}

// CreateCache implements service.Caches.
func (s Session) CreateCache(ctx context.Context, spec *service.CacheSpec) (*service.CacheInfo, error) {
	if err := spec.Scope.Validate(); err != nil {
		return nil, err
	}
	if err := s.c.Authorize(auth.ActionCacheManage, spec.Scope); err != nil {
		return nil, err
	}
	if err := checkTTL(spec.TTL); err != nil {
		return nil, err
	}
	if spec.History < 0 || spec.History > cache.MaxHistory {
		return nil, wire.NewError(wire.CodeInvalidRequest, "history must be 1 to %d (0: %d)", cache.MaxHistory, cache.DefaultHistory)
	}
	replicas, err := s.f.cfg.ReplicasFor(&service.StreamSpec{Scope: spec.Scope, Shards: spec.Shards, Durable: spec.Durable, Replicas: spec.Replicas})
	if err != nil {
		return nil, err
	}
	def := streams.Def{
		Scope: spec.Scope, Shards: spec.Shards, Durable: spec.Durable, Replicas: replicas,
		Cache: &streams.CacheSettings{TTL: spec.TTL, History: streams.HistoryOrDefault(spec.History)},
	}
	d, err := s.c.Registry(ctx, &streams.CreateStream{Def: def})
	if err != nil {
		return nil, err
	}
	s.c.Forget(def.Scope)
	return cacheInfo(d), nil
}

// Cache implements service.Caches.
func (s Session) Cache(ctx context.Context, scope wire.Scope) (*service.CacheInfo, error) {
	if err := scope.Validate(); err != nil {
		return nil, err
	}
	if err := s.c.Authorize(auth.ActionCacheManage, scope); err != nil {
		return nil, err
	}
	d, err := s.c.Registry(ctx, &streams.GetStream{Scope: scope})
	if err != nil {
		return nil, err
	}
	if d.Cache == nil {
		return nil, errNotCache
	}
	info := cacheInfo(d)
	info.Floors = s.cacheFloors(ctx, d)
	return info, nil
}

// cacheFloors asks each of a cache's shards for its floor, nil unless all
// answer: a shard served elsewhere, or not open, leaves the definition
// answered without them.
func (s Session) cacheFloors(ctx context.Context, d streams.Def) []uint64 {
	floors := make([]uint64, 0, d.Shards)
	for n := range d.Shards {
		ref, err := s.c.Shard(ctx, d.Scope, n)
		if err != nil {
			return nil
		}
		res, err := s.cacheRead(ctx, ref, &streams.CacheFloor{})
		if err != nil {
			return nil
		}
		floors = append(floors, res.Floor)
	}
	return floors
}

func cacheInfo(d streams.Def) *service.CacheInfo {
	return &service.CacheInfo{
		CacheSpec: service.CacheSpec{Scope: d.Scope, Shards: d.Shards, Durable: d.Durable, Replicas: max(d.Replicas, 1), TTL: d.Cache.TTL, History: streams.HistoryOrDefault(d.Cache.History)},
		Routing:   d.Routing.String(),
	}
}

// cacheDef is a cache's definition, never made on first use (a put to a
// cache nobody created is refused not_found, not made a stream).
func (s Session) cacheDef(ctx context.Context, scope wire.Scope) (streams.Def, error) {
	d, err := s.c.Def(ctx, scope)
	if err == nil && d.Cache == nil {
		err = errNotCache
	}
	return d, err
}

// authorizeKeys checks action on keys of scope (a grant may name keys);
// prefix says keys are a list's prefixes.
func (s Session) authorizeKeys(action auth.Action, scope wire.Scope, prefix bool, keys ...string) error {
	return s.c.AuthorizeBy(scope, func(p *auth.Principal) error { return p.CheckKeys(action, scope, prefix, keys...) })
}

// cacheShard checks action on keys of scope and finds the shard key (the
// first of keys) routes to.
func (s Session) cacheShard(ctx context.Context, action auth.Action, scope wire.Scope, keys ...string) (*streams.ShardRef, uint32, error) {
	if err := scope.Validate(); err != nil {
		return nil, 0, err
	}
	if err := s.authorizeKeys(action, scope, false, keys...); err != nil {
		return nil, 0, err
	}
	key := keys[0]
	def, err := s.cacheDef(ctx, scope)
	if err != nil {
		return nil, 0, err
	}
	n := def.Routing.ShardFor([]byte(key), def.Shards)
	ref, err := s.c.Shard(ctx, scope, n)
	return ref, n, err
}

// CacheWrite implements service.Caches.
func (s Session) CacheWrite(ctx context.Context, w *service.CacheWrite) (*service.CacheWriteResult, error) {
	keys := []string{w.Key}
	for _, o := range w.Ops {
		keys = append(keys, o.Key)
	}
	ref, n, err := s.cacheShard(ctx, auth.ActionCacheWrite, w.Scope, keys...)
	if err != nil {
		return nil, err
	}
	op, err := s.cacheOp(ctx, w, n)
	if err != nil {
		return nil, err
	}
	if err := s.f.cfg.AllowPublish(w.Scope.Tenant, 1, int64(len(w.Value)+len(w.Event)), time.Now()); err != nil {
		return nil, err
	}
	answered := make(chan streams.PublishResult, 1)
	p := &streams.Publish{Cache: op, Done: func(r streams.PublishResult) { answered <- r }, Received: time.Now().UnixNano()}
	wait := s.f.cfg.PublishWait
	if dl, ok := ctx.Deadline(); ok {
		wait = max(0, min(wait, time.Until(dl)))
	}
	switch ref.Mailbox.TryPost(p, wait) {
	case actors.Posted, actors.PostedEvicting:
	case actors.Closed:
		s.c.Forget(w.Scope)
		return nil, wire.NewError(wire.CodeShardUnavailable, "cache %s shard %d is not available; retry", w.Scope, n)
	default:
		return nil, wire.NewError(wire.CodeOverloaded, "cache %s did not take the write within %s", w.Scope, wait)
	}
	select {
	case r := <-answered:
		if r.Err != nil {
			return nil, r.Err
		}
		return cacheWriteResult(r.Cache), nil
	case <-ctx.Done():
		// The write stays in the shard and may still apply.
		return nil, wire.WrapError(wire.CodeUnacknowledged, ctx.Err(), "cache write to %s: the outcome is unknown", w.Scope)
	}
}

// cacheOp builds the shard's write; a commit's keys must all be on shard n.
func (s Session) cacheOp(ctx context.Context, w *service.CacheWrite, n uint32) (*streams.CacheOp, error) {
	if err := checkTTL(w.TTL); err != nil {
		return nil, err
	}
	r := cache.Record{Key: w.Key, Value: w.Value}
	switch {
	case w.IfAbsent && w.IfVersion != nil:
		return nil, wire.NewError(wire.CodeInvalidRequest, "a write is conditional on absence or on a version, not both")
	case w.IfAbsent:
		r.Cond = cache.Cond{Kind: cache.CondAbsent}
	case w.IfVersion != nil:
		r.Cond = cache.Cond{Kind: cache.CondVersion, Version: *w.IfVersion}
	}
	op := &streams.CacheOp{TTL: w.TTL}
	switch w.Kind {
	case service.CachePut:
		r.Kind = cache.KindPut
	case service.CacheDelete:
		r.Kind = cache.KindDelete
	case service.CounterAdd:
		r.Kind, r.Delta = cache.KindCounterAdd, w.Delta
	case service.CacheCommit:
		def, err := s.cacheDef(ctx, w.Scope)
		if err != nil {
			return nil, err
		}
		r = cache.Record{Kind: cache.KindCommit, Event: w.Event}
		for _, o := range w.Ops {
			if err := checkTTL(o.TTL); err != nil {
				return nil, err
			}
			if got := def.Routing.ShardFor([]byte(o.Key), def.Shards); got != n {
				return nil, wire.NewError(wire.CodeInvalidRequest, "commit key %q is on shard %d, not on shard %d with %q: a commit writes one shard", o.Key, got, n, w.Key)
			}
			r.Ops = append(r.Ops, cache.Op{Key: o.Key, Value: o.Value, Delete: o.Delete})
			op.OpTTLs = append(op.OpTTLs, o.TTL)
		}
	default:
		return nil, wire.NewError(wire.CodeInvalidRequest, "unknown cache write %d", w.Kind)
	}
	op.Record = r
	return op, nil
}

func cacheWriteResult(r *cache.Result) *service.CacheWriteResult {
	if r == nil {
		return &service.CacheWriteResult{}
	}
	out := &service.CacheWriteResult{Applied: r.Err == nil, Reason: cacheReason(r.Err), Version: r.Version, Present: r.Present, Counter: r.Counter}
	if r.Prev != nil {
		out.Prev, out.HadPrev = r.Prev.Value, true
	}
	return out
}

func cacheReason(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, cache.ErrConditionFailed):
		return "condition_failed"
	case errors.Is(err, cache.ErrNotFound):
		return "not_found"
	case errors.Is(err, cache.ErrFull):
		return "full"
	case errors.Is(err, cache.ErrCounterOverflow):
		return "overflow"
	}
	return "invalid"
}

// cacheRead asks shard ref a read. A replicated shard confirms first that
// it still leads and applied everything committed before the read began
// (raft's ReadIndex, as a stream's reads), so the index it answers from
// is at least that fresh: a read sees every write acknowledged before it.
func (s Session) cacheRead(ctx context.Context, ref *streams.ShardRef, msg any) (*streams.CacheReadResult, error) {
	if _, err := s.c.ConfirmRead(ctx, ref, 0); err != nil {
		return nil, err
	}
	res, err := actors.Request[*streams.CacheReadResult](actors.Detached(ctx), s.f.cfg.Root, ref.PID, msg, requestTimeout)
	if err != nil {
		return nil, err
	}
	return res, res.Err
}

// CacheGet implements service.Caches.
func (s Session) CacheGet(ctx context.Context, scope wire.Scope, key string) (service.CacheEntry, bool, error) {
	ref, _, err := s.cacheShard(ctx, auth.ActionCacheRead, scope, key)
	if err != nil {
		return service.CacheEntry{}, false, err
	}
	res, err := s.cacheRead(ctx, ref, &streams.CacheGet{Key: key})
	if err != nil || !res.Found {
		return service.CacheEntry{}, false, err
	}
	return cacheEntry(res.Entry), true, nil
}

// CacheList implements service.Caches.
func (s Session) CacheList(ctx context.Context, scope wire.Scope, shard uint32, prefix, after string, limit int) ([]service.CacheEntry, string, error) {
	if err := scope.Validate(); err != nil {
		return nil, "", err
	}
	if err := s.authorizeKeys(auth.ActionCacheRead, scope, true, prefix); err != nil {
		return nil, "", err
	}
	def, err := s.cacheDef(ctx, scope)
	if err != nil {
		return nil, "", err
	}
	if shard >= def.Shards {
		return nil, "", wire.NewError(wire.CodeNotFound, "cache %s has %d shards, no shard %d", scope, def.Shards, shard)
	}
	ref, err := s.c.Shard(ctx, scope, shard)
	if err != nil {
		return nil, "", err
	}
	res, err := s.cacheRead(ctx, ref, &streams.CacheList{Prefix: prefix, After: after, Limit: limit})
	if err != nil {
		return nil, "", err
	}
	page := make([]service.CacheEntry, 0, len(res.Page))
	for _, e := range res.Page {
		page = append(page, cacheEntry(e))
	}
	return page, res.Next, nil
}

// CounterGet implements service.Caches.
func (s Session) CounterGet(ctx context.Context, scope wire.Scope, key string) (service.CacheCounter, bool, error) {
	ref, _, err := s.cacheShard(ctx, auth.ActionCacheRead, scope, key)
	if err != nil {
		return service.CacheCounter{}, false, err
	}
	res, err := s.cacheRead(ctx, ref, &streams.CounterGet{Key: key})
	if err != nil {
		return service.CacheCounter{}, false, err
	}
	return service.CacheCounter{Value: res.Counter.Value, Version: res.Counter.Version}, res.Found, nil
}

// StateGet implements service.Caches.
func (s Session) StateGet(ctx context.Context, scope wire.Scope, keys []string) ([]service.CacheLookup, uint64, error) {
	if len(keys) == 0 || len(keys) > cache.MaxCommitOps {
		return nil, 0, wire.NewError(wire.CodeInvalidRequest, "state_get takes 1 to %d keys, got %d", cache.MaxCommitOps, len(keys))
	}
	ref, n, err := s.cacheShard(ctx, auth.ActionCacheRead, scope, keys...)
	if err != nil {
		return nil, 0, err
	}
	def, err := s.cacheDef(ctx, scope)
	if err != nil {
		return nil, 0, err
	}
	for _, k := range keys[1:] {
		if got := def.Routing.ShardFor([]byte(k), def.Shards); got != n {
			return nil, 0, wire.NewError(wire.CodeInvalidRequest, "state_get key %q is on shard %d, not on shard %d with %q: state_get reads one shard", k, got, n, keys[0])
		}
	}
	res, err := s.cacheRead(ctx, ref, &streams.StateGet{Keys: keys})
	if err != nil {
		return nil, 0, err
	}
	out := make([]service.CacheLookup, 0, len(res.Lookups))
	for _, l := range res.Lookups {
		e := cacheEntry(l.Entry)
		e.Key = l.Key
		out = append(out, service.CacheLookup{CacheEntry: e, Found: l.Found})
	}
	return out, res.Applied, nil
}

func cacheEntry(e cache.Entry) service.CacheEntry {
	out := service.CacheEntry{Key: e.Key, Value: e.Value, Version: e.Version}
	if e.Expires != 0 {
		out.Expires = time.Unix(0, e.Expires)
	}
	return out
}
