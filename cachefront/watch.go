package cachefront

import (
	"context"

	"github.com/getfelix/felix-go/auth"
	"github.com/getfelix/felix-go/cache"
	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/streams"
	"github.com/getfelix/felix-go/wire"
)

// WatchShard checks the right to watch and finds the shard: a key's own,
// or the one a prefix watch names. A replicated shard confirms its
// leadership first (ReadIndex), as a read does, so the watch starts from
// an applied end that holds every write acknowledged before it.
func (s Session) WatchShard(ctx context.Context, req *service.CacheWatch) (ref *streams.ShardRef, n, shards uint32, err error) {
	if err := req.Scope.Validate(); err != nil {
		return nil, 0, 0, err
	}
	if len(req.Key) > cache.MaxKeyBytes || (!req.Prefix && req.Key == "") {
		return nil, 0, 0, wire.NewError(wire.CodeInvalidRequest, "a watch names a key of 1 to %d bytes, or a prefix of at most %d", cache.MaxKeyBytes, cache.MaxKeyBytes)
	}
	if err := s.authorizeKeys(auth.ActionCacheRead, req.Scope, req.Prefix, req.Key); err != nil {
		return nil, 0, 0, err
	}
	def, err := s.cacheDef(ctx, req.Scope)
	if err != nil {
		return nil, 0, 0, err
	}
	n = req.Shard
	switch {
	case !req.Prefix:
		n = def.Routing.ShardFor([]byte(req.Key), def.Shards)
	case n >= def.Shards:
		return nil, 0, 0, wire.NewError(wire.CodeNotFound, "cache %s has %d shards, no shard %d", req.Scope, def.Shards, n)
	}
	ref, err = s.c.Shard(ctx, req.Scope, n)
	if err == nil && ref.Durable {
		_, err = ref.Log(ctx)
	}
	if err == nil {
		_, err = s.c.ConfirmRead(ctx, ref, 0)
	}
	return ref, n, def.Shards, err
}
