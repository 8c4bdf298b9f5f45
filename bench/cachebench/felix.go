package main

import (
	"context"
	"fmt"

	"github.com/getfelix/felix-go/client"
)

type felixOptions struct {
	addr, ca, token, cache string
	durable                bool
	shards                 uint
}

// felixSystem is a Felix broker's cache.
type felixSystem struct {
	o     felixOptions
	cache client.Cache
}

func (f *felixSystem) options() client.Options {
	return client.Options{CAFile: f.o.ca, Token: f.o.token}
}

func (f *felixSystem) prepare(ctx context.Context) error {
	f.cache = client.Cache{Name: f.o.cache}
	c, err := client.Dial(ctx, f.o.addr, f.options())
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	_, err = c.CreateCache(ctx, f.cache, client.CacheSpec{Shards: uint32(f.o.shards), Durable: f.o.durable})
	return err
}

func (f *felixSystem) dial(ctx context.Context) (store, error) {
	c, err := client.Dial(ctx, f.o.addr, f.options())
	if err != nil {
		return nil, err
	}
	return &felixStore{c: c, cache: f.cache}, nil
}

type felixStore struct {
	c     *client.Client
	cache client.Cache
}

func (s *felixStore) put(ctx context.Context, key string, value []byte) error {
	res, err := s.c.Put(ctx, s.cache, key, value, client.PutOptions{})
	if err == nil && !res.Applied {
		err = fmt.Errorf("put %s not applied: %s", key, res.Reason)
	}
	return err
}

func (s *felixStore) get(ctx context.Context, key string) error {
	v, err := s.c.Get(ctx, s.cache, key)
	if err == nil && !v.Found {
		err = fmt.Errorf("get %s: not found", key)
	}
	return err
}

func (s *felixStore) close() { _ = s.c.Close(context.Background()) }
