package transport

import (
	"context"
	"math"
	"time"

	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/wire"
)

// handleCache answers the cache messages (wire/cache.go) when the session
// serves caches (service.Caches) and the connection negotiated
// FeatureCache; it reports whether msg was one.
func (h *connHandler) handleCache(ctx context.Context, r *responder, msg wire.Message) bool {
	id, ok := cacheRequestID(msg)
	if !ok {
		return false
	}
	caches, served := h.session.(service.Caches)
	switch {
	case h.info.Features&wire.FeatureCache == 0:
		r.fail(id, wire.NewError(wire.CodeInvalidRequest, "%s needs FeatureCache, which this connection did not negotiate", msg.Type()))
	case !served:
		r.fail(id, wire.NewError(wire.CodeInvalidRequest, "this broker serves no caches"))
	default:
		if w, ok := msg.(*wire.CacheWatch); ok {
			answer(r, id, func() (wire.Message, error) { return h.cacheWatch(ctx, caches, w) })
			break
		}
		answer(r, id, func() (wire.Message, error) { return cacheAnswer(ctx, caches, msg) })
	}
	return true
}

// cacheWatch registers a watch; its event stream is opened as a
// subscription's, before the answer.
func (h *connHandler) cacheWatch(ctx context.Context, s service.Caches, m *wire.CacheWatch) (wire.Message, error) {
	req := &service.CacheWatch{
		Scope: scopeOf(m.Tenant, m.Namespace, m.Cache), Key: m.Key, Prefix: m.Prefix, Shard: m.Shard,
		From: m.FromVersion, Retained: m.Retained, QueueCapacity: m.QueueCapacity,
		SnapshotEnd: h.info.Features&wire.FeatureCacheSnapshotEnd != 0,
	}
	res, err := s.CacheWatch(ctx, req, h.openEventStream)
	if err != nil {
		return nil, err
	}
	return &wire.CacheWatchStarted{
		RequestID: m.RequestID, SubscriptionID: res.ID, Shard: res.Shard, Shards: res.Shards, Resume: res.Resume,
		Resnapshot: res.Resnapshot, ResumableFrom: res.ResumableFrom, RetainedCount: uint64(res.Retained),
		QueueCapacity: res.QueueCapacity,
	}, nil
}

func cacheRequestID(msg wire.Message) (uint64, bool) {
	switch m := msg.(type) {
	case *wire.CacheCreate:
		return m.RequestID, true
	case *wire.CacheDescribe:
		return m.RequestID, true
	case *wire.CachePut:
		return m.RequestID, true
	case *wire.CacheDelete:
		return m.RequestID, true
	case *wire.CacheGet:
		return m.RequestID, true
	case *wire.CacheList:
		return m.RequestID, true
	case *wire.CounterAdd:
		return m.RequestID, true
	case *wire.CounterGet:
		return m.RequestID, true
	case *wire.CacheCommit:
		return m.RequestID, true
	case *wire.StateGet:
		return m.RequestID, true
	case *wire.CacheWatch:
		return m.RequestID, true
	}
	return 0, false
}

func cacheAnswer(ctx context.Context, s service.Caches, msg wire.Message) (wire.Message, error) {
	switch m := msg.(type) {
	case *wire.CacheCreate:
		spec := &service.CacheSpec{
			Scope: scopeOf(m.Tenant, m.Namespace, m.Cache), Shards: m.Shards, Durable: m.Durable,
			Replicas: int(m.Replicas), TTL: msDuration(m.TTLMS), History: int(m.History),
		}
		return cacheInfo(m.RequestID)(s.CreateCache(ctx, spec))
	case *wire.CacheDescribe:
		return cacheInfo(m.RequestID)(s.Cache(ctx, scopeOf(m.Tenant, m.Namespace, m.Cache)))
	case *wire.CachePut:
		w := &service.CacheWrite{Kind: service.CachePut, Key: m.Key, Value: m.Value, TTL: msDuration(m.TTLMS), IfAbsent: m.IfAbsent, IfVersion: m.IfVersion}
		return cacheWrite(ctx, s, m.RequestID, scopeOf(m.Tenant, m.Namespace, m.Cache), w)
	case *wire.CacheDelete:
		w := &service.CacheWrite{Kind: service.CacheDelete, Key: m.Key, IfVersion: m.IfVersion}
		return cacheWrite(ctx, s, m.RequestID, scopeOf(m.Tenant, m.Namespace, m.Cache), w)
	case *wire.CounterAdd:
		w := &service.CacheWrite{Kind: service.CounterAdd, Key: m.Key, Delta: m.Delta}
		res, err := s.CacheWrite(ctx, withScope(w, scopeOf(m.Tenant, m.Namespace, m.Cache)))
		if err != nil {
			return nil, err
		}
		if !res.Applied {
			return nil, wire.NewError(wire.CodeInvalidRequest, "counter_add refused: %s", res.Reason)
		}
		return &wire.CounterValue{RequestID: m.RequestID, Found: true, Value: res.Counter, Version: res.Version}, nil
	case *wire.CacheCommit:
		w := &service.CacheWrite{Kind: service.CacheCommit, Key: m.Key, Event: m.Event}
		for _, op := range m.Ops {
			w.Ops = append(w.Ops, service.CacheCommitOp{Key: op.Key, Value: op.Value, Delete: op.Delete, TTL: msDuration(op.TTLMS)})
		}
		return cacheWrite(ctx, s, m.RequestID, scopeOf(m.Tenant, m.Namespace, m.Cache), w)
	}
	return cacheReadAnswer(ctx, s, msg)
}

func cacheReadAnswer(ctx context.Context, s service.Caches, msg wire.Message) (wire.Message, error) {
	switch m := msg.(type) {
	case *wire.CacheGet:
		e, found, err := s.CacheGet(ctx, scopeOf(m.Tenant, m.Namespace, m.Cache), m.Key)
		if err != nil {
			return nil, err
		}
		v := cacheValue(e, found)
		v.RequestID, v.Key = m.RequestID, m.Key
		return &v, nil
	case *wire.CacheList:
		page, next, err := s.CacheList(ctx, scopeOf(m.Tenant, m.Namespace, m.Cache), m.Shard, m.Prefix, m.After, int(m.Limit))
		if err != nil {
			return nil, err
		}
		out := &wire.CacheKeys{RequestID: m.RequestID, Entries: make([]wire.CacheValue, 0, len(page)), Next: next}
		for _, e := range page {
			out.Entries = append(out.Entries, cacheValue(e, true))
		}
		return out, nil
	case *wire.CounterGet:
		c, found, err := s.CounterGet(ctx, scopeOf(m.Tenant, m.Namespace, m.Cache), m.Key)
		if err != nil {
			return nil, err
		}
		return &wire.CounterValue{RequestID: m.RequestID, Found: found, Value: c.Value, Version: c.Version}, nil
	case *wire.StateGet:
		ls, applied, err := s.StateGet(ctx, scopeOf(m.Tenant, m.Namespace, m.Cache), m.Keys)
		if err != nil {
			return nil, err
		}
		out := &wire.StateValues{RequestID: m.RequestID, Applied: applied, Values: make([]wire.CacheValue, 0, len(ls))}
		for _, l := range ls {
			v := cacheValue(l.CacheEntry, l.Found)
			v.Key = l.Key
			out.Values = append(out.Values, v)
		}
		return out, nil
	}
	return nil, wire.NewError(wire.CodeInvalidRequest, "%s is not a request", msg.Type())
}

func withScope(w *service.CacheWrite, scope wire.Scope) *service.CacheWrite {
	w.Scope = scope
	return w
}

func cacheWrite(ctx context.Context, s service.Caches, id uint64, scope wire.Scope, w *service.CacheWrite) (wire.Message, error) {
	res, err := s.CacheWrite(ctx, withScope(w, scope))
	if err != nil {
		return nil, err
	}
	return &wire.CacheResult{
		RequestID: id, Applied: res.Applied, Reason: res.Reason, Version: res.Version,
		Present: res.Present, HadPrev: res.HadPrev, Prev: res.Prev,
	}, nil
}

func cacheInfo(id uint64) func(*service.CacheInfo, error) (wire.Message, error) {
	return func(info *service.CacheInfo, err error) (wire.Message, error) {
		if err != nil {
			return nil, err
		}
		return &wire.CacheInfo{
			RequestID: id, Tenant: info.Scope.Tenant, Namespace: info.Scope.Namespace, Cache: info.Scope.Stream,
			Shards: info.Shards, Routing: info.Routing, Durable: info.Durable, Replicas: uint32(info.Replicas),
			TTLMS: info.TTL.Milliseconds(), History: uint32(info.History), Floors: info.Floors,
		}, nil
	}
}

func cacheValue(e service.CacheEntry, found bool) wire.CacheValue {
	if !found {
		return wire.CacheValue{}
	}
	v := wire.CacheValue{Found: true, Key: e.Key, Value: e.Value, Version: e.Version}
	if !e.Expires.IsZero() {
		v.ExpiresMS = e.Expires.UnixMilli()
	}
	return v
}

// msDuration reads a wire millisecond count; a negative one, or one past
// what a Duration holds, is -1, for the broker to refuse.
func msDuration(ms int64) time.Duration {
	if ms < 0 || ms > math.MaxInt64/int64(time.Millisecond) {
		return -1
	}
	return time.Duration(ms) * time.Millisecond
}
