package main

import (
	"context"
	"fmt"
	"sync"

	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/wire"
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

// dialWatchers opens one connection and n prefix watches on it.
func (f *felixSystem) dialWatchers(ctx context.Context, n int, deliver func([]byte)) (watchConn, error) {
	c, err := client.Dial(ctx, f.o.addr, f.options())
	if err != nil {
		return nil, err
	}
	wc := &felixWatchConn{c: c}
	wc.life, wc.stop = context.WithCancel(context.Background())
	for range n {
		w, err := c.Watch(ctx, f.cache, client.WatchPrefix(watchPrefix), client.WatchFrom{})
		if err != nil {
			_ = wc.close()
			return nil, err
		}
		wc.watchers = append(wc.watchers, w)
		wc.wg.Go(func() {
			for {
				ev, err := w.Next(wc.life)
				if err != nil {
					if wc.life.Err() == nil {
						wc.fail(err)
					}
					return
				}
				if ev.Kind == wire.WatchPut {
					deliver(ev.Value)
				}
			}
		})
	}
	return wc, nil
}

type felixWatchConn struct {
	c        *client.Client
	watchers []*client.Watcher
	life     context.Context
	stop     context.CancelFunc
	wg       sync.WaitGroup
	mu       sync.Mutex
	err      error
}

func (wc *felixWatchConn) fail(err error) {
	wc.mu.Lock()
	defer wc.mu.Unlock()
	if wc.err == nil {
		wc.err = err
	}
}

func (wc *felixWatchConn) close() error {
	wc.stop()
	wc.wg.Wait()
	for _, w := range wc.watchers {
		_ = w.Close(context.Background())
	}
	_ = wc.c.Close(context.Background())
	wc.mu.Lock()
	defer wc.mu.Unlock()
	return wc.err
}
