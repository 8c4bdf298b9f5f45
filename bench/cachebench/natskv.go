package main

import (
	"context"

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
