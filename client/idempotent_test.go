package client_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/internal/quicconf"
	"github.com/getfelix/felix-go/routing"
	"github.com/getfelix/felix-go/wire"
)

// TestIdempotentProducerSequencesPerShard: on a 4-shard keyed stream, the
// producer numbers each shard's batches 0, 1, 2, ... as the broker routes
// them, carries its id, and keeps counting on a new connection when the
// old one is gone (the sequences seen on the wire).
func TestIdempotentProducerSequencesPerShard(t *testing.T) {
	cfg := brokertest.Config(t)
	b := brokertest.Start(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := client.Stream{Name: "keyed"}
	info, err := brokertest.Dial(t, b, cfg).CreateStream(ctx, st, client.StreamConfig{Durable: true, Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	rt, err := routing.Parse(info.Routing)
	if err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var sent []*wire.Publish
	var clients []*client.Client
	dial := func(ctx context.Context) (*client.Client, error) {
		c, err := client.Dial(ctx, b.Addr().String(), client.Options{CAFile: filepath.Join(cfg.DataDir, quicconf.CertFile), Token: brokertest.Token(t, cfg, "default")})
		if err != nil {
			return nil, err
		}
		client.SetSendHook(c, func(p *wire.Publish) {
			mu.Lock()
			defer mu.Unlock()
			cp := *p
			sent = append(sent, &cp)
		})
		mu.Lock()
		clients = append(clients, c)
		mu.Unlock()
		return c, nil
	}
	p, err := client.NewIdempotentProducer(ctx, dial)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)

	const batches = 40
	for i := range batches {
		if i == batches/2 {
			mu.Lock()
			c := clients[len(clients)-1]
			mu.Unlock()
			_ = c.Close(ctx) // the producer must dial again and go on counting
		}
		key := []byte(fmt.Sprintf("k%d", i%7))
		if _, err := p.Publish(ctx, st, [][]byte{[]byte(fmt.Sprint(i))}, key); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(clients) != 2 {
		t.Errorf("%d clients dialed, want 2", len(clients))
	}
	if len(sent) != batches {
		t.Fatalf("%d publishes on the wire, want %d", len(sent), batches)
	}
	next := map[uint32]uint64{}
	for i, wp := range sent {
		shard := rt.ShardFor(wp.Key, 4)
		if !wp.Idempotent || wp.ProducerID != p.ID() || wp.Sequence != next[shard] || wp.Ack != wire.AckPerBatch {
			t.Fatalf("publish %d (key %s, shard %d): idempotent %v producer %d sequence %d ack %v, want producer %d sequence %d per batch",
				i, wp.Key, shard, wp.Idempotent, wp.ProducerID, wp.Sequence, wp.Ack, p.ID(), next[shard])
		}
		next[shard]++
	}
	if len(next) < 2 {
		t.Fatalf("the keys reached %d shard(s); the test wants several", len(next))
	}
}
