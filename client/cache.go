package client

import (
	"context"
	"fmt"
	"time"

	"github.com/getfelix/felix-go/wire"
)

// Cache names a cache: tenant (the client's when empty), namespace
// ("default" when empty) and name. A cache shares the streams' names.
type Cache struct {
	Tenant    string
	Namespace string
	Name      string
}

func (k Cache) scope(c *Client) wire.Scope { return k.stream().scope(c) }

// CacheSpec is what CreateCache makes.
type CacheSpec struct {
	Shards   uint32
	Durable  bool
	Replicas uint32        // 0: the broker's default
	TTL      time.Duration // a put's expiry when it names none; 0: none
	// History is how many changes per key compaction keeps below its
	// horizon (1 to 64; 0: the broker's 1).
	History uint32
}

// PutOptions make a put expire or conditional.
type PutOptions struct {
	// TTL replaces the cache's TTL for this put.
	TTL time.Duration
	// IfAbsent puts only if the key is absent; IfVersion only if the key
	// is at that version. At most one.
	IfAbsent  bool
	IfVersion *uint64
}

// CacheOp is one put or delete of a Commit.
type CacheOp struct {
	Key    string
	Value  []byte
	Delete bool
	TTL    time.Duration
}

// ErrNoCaches is returned when the broker does not offer caches.
var ErrNoCaches = wire.NewError(wire.CodeInvalidRequest, "the broker does not offer caches (FeatureCache)")

// CreateCache creates a cache, or confirms one with the same settings.
func (c *Client) CreateCache(ctx context.Context, k Cache, spec CacheSpec) (wire.CacheInfo, error) {
	s := k.scope(c)
	return cacheCall[*wire.CacheInfo](ctx, c, func(id uint64) wire.Message {
		return &wire.CacheCreate{RequestID: id, Tenant: s.Tenant, Namespace: s.Namespace, Cache: s.Stream,
			Shards: spec.Shards, Durable: spec.Durable, Replicas: spec.Replicas, TTLMS: spec.TTL.Milliseconds(), History: spec.History}
	})
}

// DescribeCache returns a cache's definition.
func (c *Client) DescribeCache(ctx context.Context, k Cache) (wire.CacheInfo, error) {
	s := k.scope(c)
	return cacheCall[*wire.CacheInfo](ctx, c, func(id uint64) wire.Message {
		return &wire.CacheDescribe{RequestID: id, Tenant: s.Tenant, Namespace: s.Namespace, Cache: s.Stream}
	})
}

// Put sets key to value. The result says whether it applied (a condition
// may refuse it) and the key's version.
func (c *Client) Put(ctx context.Context, k Cache, key string, value []byte, o PutOptions) (wire.CacheResult, error) {
	s := k.scope(c)
	return cacheCall[*wire.CacheResult](ctx, c, func(id uint64) wire.Message {
		return &wire.CachePut{RequestID: id, Tenant: s.Tenant, Namespace: s.Namespace, Cache: s.Stream,
			Key: key, Value: value, TTLMS: o.TTL.Milliseconds(), IfAbsent: o.IfAbsent, IfVersion: o.IfVersion}
	})
}

// Delete deletes key (only at ifVersion, when set); the result carries
// the value removed.
func (c *Client) Delete(ctx context.Context, k Cache, key string, ifVersion *uint64) (wire.CacheResult, error) {
	s := k.scope(c)
	return cacheCall[*wire.CacheResult](ctx, c, func(id uint64) wire.Message {
		return &wire.CacheDelete{RequestID: id, Tenant: s.Tenant, Namespace: s.Namespace, Cache: s.Stream, Key: key, IfVersion: ifVersion}
	})
}

// Get reads key (Found false: absent).
func (c *Client) Get(ctx context.Context, k Cache, key string) (wire.CacheValue, error) {
	s := k.scope(c)
	return cacheCall[*wire.CacheValue](ctx, c, func(id uint64) wire.Message {
		return &wire.CacheGet{RequestID: id, Tenant: s.Tenant, Namespace: s.Namespace, Cache: s.Stream, Key: key}
	})
}

// ListShard reads one page of one shard's keys by prefix, after after;
// Next names the following page's after ("" at the shard's end). Every
// shard of the cache (DescribeCache) holds its own keys.
func (c *Client) ListShard(ctx context.Context, k Cache, shard uint32, prefix, after string, limit uint32) (wire.CacheKeys, error) {
	s := k.scope(c)
	return cacheCall[*wire.CacheKeys](ctx, c, func(id uint64) wire.Message {
		return &wire.CacheList{RequestID: id, Tenant: s.Tenant, Namespace: s.Namespace, Cache: s.Stream,
			Shard: shard, Prefix: prefix, After: after, Limit: limit}
	})
}

// CounterAdd adds delta to a counter and returns the total. At least
// once: if the answer is lost and the add is sent again, an add that had
// applied counts twice.
func (c *Client) CounterAdd(ctx context.Context, k Cache, key string, delta int64) (wire.CounterValue, error) {
	s := k.scope(c)
	return cacheCall[*wire.CounterValue](ctx, c, func(id uint64) wire.Message {
		return &wire.CounterAdd{RequestID: id, Tenant: s.Tenant, Namespace: s.Namespace, Cache: s.Stream, Key: key, Delta: delta}
	})
}

// CounterGet reads a counter.
func (c *Client) CounterGet(ctx context.Context, k Cache, key string) (wire.CounterValue, error) {
	s := k.scope(c)
	return cacheCall[*wire.CounterValue](ctx, c, func(id uint64) wire.Message {
		return &wire.CounterGet{RequestID: id, Tenant: s.Tenant, Namespace: s.Namespace, Cache: s.Stream, Key: key}
	})
}

// Commit writes event and ops as one record on key's shard: every op's key
// must route to the same shard as key.
func (c *Client) Commit(ctx context.Context, k Cache, key string, event []byte, ops []CacheOp) (wire.CacheResult, error) {
	s := k.scope(c)
	wops := make([]wire.CacheCommitOp, 0, len(ops))
	for _, op := range ops {
		wops = append(wops, wire.CacheCommitOp{Key: op.Key, Value: op.Value, Delete: op.Delete, TTLMS: op.TTL.Milliseconds()})
	}
	return cacheCall[*wire.CacheResult](ctx, c, func(id uint64) wire.Message {
		return &wire.CacheCommit{RequestID: id, Tenant: s.Tenant, Namespace: s.Namespace, Cache: s.Stream, Key: key, Event: event, Ops: wops}
	})
}

// StateGet reads keys of one shard as of one applied offset.
func (c *Client) StateGet(ctx context.Context, k Cache, keys ...string) (wire.StateValues, error) {
	s := k.scope(c)
	return cacheCall[*wire.StateValues](ctx, c, func(id uint64) wire.Message {
		return &wire.StateGet{RequestID: id, Tenant: s.Tenant, Namespace: s.Namespace, Cache: s.Stream, Keys: keys}
	})
}

// cacheCall sends the request build makes and returns its answer of type
// T, by value.
func cacheCall[T interface {
	*A
	wire.Message
}, A any](ctx context.Context, c *Client, build func(id uint64) wire.Message) (A, error) {
	var zero A
	if c.features&wire.FeatureCache == 0 {
		return zero, ErrNoCaches
	}
	id := c.nextReq.Add(1)
	req := build(id)
	res, err := c.request(ctx, id, req)
	if err != nil {
		return zero, err
	}
	m, ok := res.(T)
	if !ok {
		return zero, fmt.Errorf("%w: %s answered with %s", ErrProtocol, req.Type(), res.Type())
	}
	return *m, nil
}
