package main

import (
	"context"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// natsSystem is a JetStream key/value bucket: file storage, history 1
// (a key keeps its latest value, as a Felix cache does), the server's
// default sync.
type natsSystem struct {
	url, bucket string
}

func (n *natsSystem) prepare(ctx context.Context) error {
	nc, err := nats.Connect(n.url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	_, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: n.bucket, History: 1, Storage: jetstream.FileStorage})
	return err
}

func (n *natsSystem) dial(ctx context.Context) (store, error) {
	nc, err := nats.Connect(n.url)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	kv, err := js.KeyValue(ctx, n.bucket)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &natsStore{nc: nc, kv: kv}, nil
}

type natsStore struct {
	nc *nats.Conn
	kv jetstream.KeyValue
}

func (s *natsStore) put(ctx context.Context, key string, value []byte) error {
	_, err := s.kv.Put(ctx, key, value)
	return err
}

func (s *natsStore) get(ctx context.Context, key string) error {
	_, err := s.kv.Get(ctx, key)
	return err
}

func (s *natsStore) close() { s.nc.Close() }

// dialWatchers opens one connection and n watches of the prefix's keys
// (updates only) on it.
func (n *natsSystem) dialWatchers(ctx context.Context, watchers int, deliver func([]byte)) (watchConn, error) {
	nc, err := nats.Connect(n.url)
	if err != nil {
		return nil, err
	}
	wc := &natsWatchConn{nc: nc}
	js, err := jetstream.New(nc)
	if err != nil {
		_ = wc.close()
		return nil, err
	}
	kv, err := js.KeyValue(ctx, n.bucket)
	if err != nil {
		_ = wc.close()
		return nil, err
	}
	for range watchers {
		w, err := kv.Watch(ctx, watchPrefix+">", jetstream.UpdatesOnly())
		if err != nil {
			_ = wc.close()
			return nil, err
		}
		wc.watchers = append(wc.watchers, w)
		wc.wg.Go(func() {
			for e := range w.Updates() {
				if e != nil && e.Operation() == jetstream.KeyValuePut {
					deliver(e.Value())
				}
			}
		})
	}
	return wc, nil
}

type natsWatchConn struct {
	nc       *nats.Conn
	watchers []jetstream.KeyWatcher
	wg       sync.WaitGroup
}

func (wc *natsWatchConn) close() error {
	for _, w := range wc.watchers {
		_ = w.Stop()
	}
	wc.nc.Close()
	wc.wg.Wait()
	return nil
}
