package main

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// redisSystem is a redis-server: SET and GET, each client one
// connection (a pool of one).
type redisSystem struct {
	addr string
}

func (r *redisSystem) prepare(ctx context.Context) error {
	c := r.client()
	defer c.Close()
	return c.Ping(ctx).Err()
}

func (r *redisSystem) client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: r.addr, PoolSize: 1, MinIdleConns: 1})
}

func (r *redisSystem) dial(ctx context.Context) (store, error) {
	c := r.client()
	if err := c.Ping(ctx).Err(); err != nil {
		_ = c.Close()
		return nil, err
	}
	return &redisStore{c: c}, nil
}

type redisStore struct{ c *redis.Client }

func (s *redisStore) put(ctx context.Context, key string, value []byte) error {
	return s.c.Set(ctx, key, value, 0).Err()
}

func (s *redisStore) get(ctx context.Context, key string) error {
	return s.c.Get(ctx, key).Err()
}

func (s *redisStore) close() { _ = s.c.Close() }
