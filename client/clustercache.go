package client

import (
	"context"
	"errors"

	"github.com/getfelix/felix-go/wire"
)

// A ClusterClient's cache calls go to the owner of the key's shard (a
// cache is routed as a stream is), following not_leader as publishes do.
// Reads are safe to make again; a write whose outcome is unknown is not
// retried (a counter add would count twice, a put-if might have applied),
// and its error says so.

func (k Cache) stream() Stream { return Stream{Tenant: k.Tenant, Namespace: k.Namespace, Name: k.Name} }

// CreateCache creates a cache on a live broker, as Client.CreateCache.
func (cc *ClusterClient) CreateCache(ctx context.Context, k Cache, spec CacheSpec) (wire.CacheInfo, error) {
	var info wire.CacheInfo
	err := cc.any(ctx, func(_ string, c *Client) error {
		var err error
		info, err = c.CreateCache(ctx, k, spec)
		return err
	})
	cc.forget(cc.scope(k.stream()))
	return info, err
}

// DescribeCache returns a cache's definition from a live broker.
func (cc *ClusterClient) DescribeCache(ctx context.Context, k Cache) (wire.CacheInfo, error) {
	var info wire.CacheInfo
	err := cc.any(ctx, func(_ string, c *Client) error {
		var err error
		info, err = c.DescribeCache(ctx, k)
		return err
	})
	return info, err
}

// cacheRoute makes call at the owner of key's shard.
func cacheRoute[T any](ctx context.Context, cc *ClusterClient, k Cache, key string, safe bool, call func(*Client) (T, error)) (T, error) {
	var out T
	err := cc.route(ctx, cc.scope(k.stream()), keyShard([]byte(key)), safe, func(c *Client) error {
		var err error
		out, err = call(c)
		return err
	})
	return out, err
}

// Put is Client.Put at the owner of key's shard.
func (cc *ClusterClient) Put(ctx context.Context, k Cache, key string, value []byte, o PutOptions) (wire.CacheResult, error) {
	return cacheRoute(ctx, cc, k, key, false, func(c *Client) (wire.CacheResult, error) { return c.Put(ctx, k, key, value, o) })
}

// Delete is Client.Delete at the owner of key's shard.
func (cc *ClusterClient) Delete(ctx context.Context, k Cache, key string, ifVersion *uint64) (wire.CacheResult, error) {
	return cacheRoute(ctx, cc, k, key, false, func(c *Client) (wire.CacheResult, error) { return c.Delete(ctx, k, key, ifVersion) })
}

// Get is Client.Get at the owner of key's shard.
func (cc *ClusterClient) Get(ctx context.Context, k Cache, key string) (wire.CacheValue, error) {
	return cacheRoute(ctx, cc, k, key, true, func(c *Client) (wire.CacheValue, error) { return c.Get(ctx, k, key) })
}

// CounterAdd is Client.CounterAdd at the owner of key's shard.
func (cc *ClusterClient) CounterAdd(ctx context.Context, k Cache, key string, delta int64) (wire.CounterValue, error) {
	return cacheRoute(ctx, cc, k, key, false, func(c *Client) (wire.CounterValue, error) { return c.CounterAdd(ctx, k, key, delta) })
}

// CounterGet is Client.CounterGet at the owner of key's shard.
func (cc *ClusterClient) CounterGet(ctx context.Context, k Cache, key string) (wire.CounterValue, error) {
	return cacheRoute(ctx, cc, k, key, true, func(c *Client) (wire.CounterValue, error) { return c.CounterGet(ctx, k, key) })
}

// Commit is Client.Commit at the owner of key's shard.
func (cc *ClusterClient) Commit(ctx context.Context, k Cache, key string, event []byte, ops []CacheOp) (wire.CacheResult, error) {
	return cacheRoute(ctx, cc, k, key, false, func(c *Client) (wire.CacheResult, error) { return c.Commit(ctx, k, key, event, ops) })
}

// StateGet is Client.StateGet at the owner of the keys' shard.
func (cc *ClusterClient) StateGet(ctx context.Context, k Cache, keys ...string) (wire.StateValues, error) {
	if len(keys) == 0 {
		return wire.StateValues{}, wire.NewError(wire.CodeInvalidRequest, "state_get needs a key")
	}
	return cacheRoute(ctx, cc, k, keys[0], true, func(c *Client) (wire.StateValues, error) { return c.StateGet(ctx, k, keys...) })
}

// ListShard is Client.ListShard at the owner of shard.
func (cc *ClusterClient) ListShard(ctx context.Context, k Cache, shard uint32, prefix, after string, limit uint32) (wire.CacheKeys, error) {
	var out wire.CacheKeys
	err := cc.route(ctx, cc.scope(k.stream()), fixedShard(shard), true, func(c *Client) error {
		var err error
		out, err = c.ListShard(ctx, k, shard, prefix, after, limit)
		return err
	})
	return out, err
}

// Watch is Client.Watch with each shard watched at its owner, and watched
// again there when its watch ends for a reason that cures (see Watcher).
func (cc *ClusterClient) Watch(ctx context.Context, k Cache, target WatchTarget, from WatchFrom) (*Watcher, error) {
	scope := cc.scope(k.stream())
	open := func(ctx context.Context, shard uint32, v *uint64, retained bool) (*Subscription, *wire.CacheWatchStarted, error) {
		var sub *Subscription
		var started *wire.CacheWatchStarted
		pick := fixedShard(shard)
		if !target.Prefix {
			pick = keyShard([]byte(target.Key))
		}
		err := cc.route(ctx, scope, pick, true, func(c *Client) error {
			var err error
			sub, started, err = c.watchShard(ctx, k, target, shard, v, retained, from.QueueCapacity)
			return err
		})
		return sub, started, err
	}
	follow := func(sub *Subscription, err error) bool {
		var lag *LaggedError
		var lost *ConnectionLostError
		ok := false
		switch {
		case errors.As(err, &lag), errors.As(err, &lost), errors.Is(err, ErrSubscriptionEnded):
			ok = true
		case errors.Is(err, ErrClosed):
			// The member's client went (not the watcher's Close, nor
			// the ClusterClient's).
			ok = sub != nil && sub.c.gone() && !cc.isClosed()
		}
		if ok {
			cc.forget(scope)
		}
		return ok
	}
	return startWatcher(ctx, k, target, from, open, follow)
}
