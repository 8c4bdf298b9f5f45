package broker_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/routing"
	"github.com/getfelix/felix-go/streams"
	"github.com/getfelix/felix-go/wire"
)

// TestKeyedPublishesFollowRouting: on a 4-shard stream each key's messages
// land, in order, on the shard the routing names; no key goes to shard 0.
func TestKeyedPublishesFollowRouting(t *testing.T) {
	for _, name := range []string{"modulo", "jump"} {
		t.Run(name, func(t *testing.T) {
			cfg := brokertest.Config(t)
			b := brokertest.Start(t, cfg)
			c := brokertest.Dial(t, b, cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			st := client.Stream{Name: "keyed"}
			info, err := c.CreateStream(ctx, st, client.StreamConfig{Shards: 4, Routing: name})
			if err != nil {
				t.Fatalf("create: %v", err)
			}
			if info.Shards != 4 || info.Routing != name || info.Implicit {
				t.Fatalf("created %+v, want 4 explicit %s shards", info, name)
			}
			subs := make([]*client.Subscription, 4)
			for i := range subs {
				if subs[i], err = c.Subscribe(ctx, st, client.SubscribeOptions{Shard: uint32(i)}); err != nil {
					t.Fatalf("subscribe shard %d: %v", i, err)
				}
			}
			r, _ := routing.Parse(name)
			keys := []string{"a", "order-17", "user:42", "zeta"}
			want := make([][]string, 4)
			for i := range 20 {
				k := keys[i%len(keys)]
				msg := fmt.Sprintf("%s-%d", k, i)
				if err := c.Publish(ctx, st, []byte(msg), client.PublishOptions{Key: []byte(k)}); err != nil {
					t.Fatalf("publish: %v", err)
				}
				s := r.ShardFor([]byte(k), 4)
				want[s] = append(want[s], msg)
			}
			if err := c.Publish(ctx, st, []byte("nokey"), client.PublishOptions{}); err != nil {
				t.Fatalf("publish without key: %v", err)
			}
			want[0] = append(want[0], "nokey")
			for s, msgs := range want {
				for _, m := range msgs {
					ev, err := subs[s].Next(ctx)
					if err != nil {
						t.Fatalf("shard %d: %v", s, err)
					}
					if string(ev.Payload) != m {
						t.Fatalf("shard %d got %q, want %q", s, ev.Payload, m)
					}
				}
			}
		})
	}
}

func TestStreamAdmin(t *testing.T) {
	cfg := brokertest.Config(t)
	b := brokertest.Start(t, cfg)
	c := brokertest.Dial(t, b, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st := client.Stream{Name: "admin"}
	if _, err := c.CreateStream(ctx, st, client.StreamConfig{Shards: 2}); err != nil {
		t.Fatalf("create: %v", err)
	}
	if _, err := c.CreateStream(ctx, st, client.StreamConfig{Shards: 2}); err != nil {
		t.Fatalf("create again with the same settings: %v, want success", err)
	}
	if _, err := c.CreateStream(ctx, st, client.StreamConfig{Shards: 3}); !errors.Is(err, wire.ErrInvalidRequest) {
		t.Fatalf("create again with other settings: %v, want invalid_request", err)
	}
	for _, bad := range []client.StreamConfig{{Shards: streams.MaxShards + 1}, {Shards: 1, Routing: "ring"}, {Shards: 1, RetentionBytes: -1}, {Shards: 1, RetentionAge: time.Hour}} {
		if _, err := c.CreateStream(ctx, client.Stream{Name: "bad"}, bad); !errors.Is(err, wire.ErrInvalidRequest) {
			t.Fatalf("create %+v: %v, want invalid_request", bad, err)
		}
	}
	if _, err := c.Subscribe(ctx, st, client.SubscribeOptions{Shard: 2}); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("subscribe to shard 2 of 2: %v, want not_found", err)
	}
	// An implicit stream cannot be re-created with more shards under its users.
	if err := c.Publish(ctx, client.Stream{Name: "implicit"}, []byte("x"), client.PublishOptions{}); err != nil {
		t.Fatalf("publish: %v", err)
	}
	if _, err := c.CreateStream(ctx, client.Stream{Name: "implicit"}, client.StreamConfig{Shards: 4}); !errors.Is(err, wire.ErrInvalidRequest) {
		t.Fatalf("create over an implicit stream: %v, want invalid_request", err)
	}
	list, err := c.ListStreams(ctx, "")
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if len(list) != 2 || list[0].Stream.Name != "admin" || list[1].Stream.Name != "implicit" || !list[1].Implicit {
		t.Fatalf("list = %+v, want admin (explicit) and implicit", list)
	}

	sub, err := c.Subscribe(ctx, st, client.SubscribeOptions{})
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	if err := c.DeleteStream(ctx, st); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := sub.Next(ctx); !errors.Is(err, client.ErrSubscriptionEnded) {
		t.Fatalf("subscription of a deleted stream: %v, want ErrSubscriptionEnded", err)
	}
	if _, err := c.StreamInfo(ctx, st); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("info of a deleted stream: %v, want not_found", err)
	}
	if err := c.DeleteStream(ctx, st); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("delete twice: %v, want not_found", err)
	}
}

// TestStreamDefinitionsSurviveRestart: explicit streams are stored in the
// data directory; implicit ones are not.
func TestStreamDefinitionsSurviveRestart(t *testing.T) {
	cfg := brokertest.Config(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b := brokertest.Start(t, cfg)
	c := brokertest.Dial(t, b, cfg)
	if _, err := c.CreateStream(ctx, client.Stream{Name: "kept"}, client.StreamConfig{Shards: 3, Routing: "jump"}); err != nil {
		t.Fatalf("create: %v", err)
	}
	if err := c.Publish(ctx, client.Stream{Name: "passing"}, []byte("x"), client.PublishOptions{}); err != nil {
		t.Fatalf("publish: %v", err)
	}
	_ = c.Close(ctx)
	if err := b.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	b2 := brokertest.Start(t, cfg)
	c2 := brokertest.Dial(t, b2, cfg)
	info, err := c2.StreamInfo(ctx, client.Stream{Name: "kept"})
	if err != nil {
		t.Fatalf("info after restart: %v", err)
	}
	if info.Shards != 3 || info.Routing != "jump" || info.Implicit {
		t.Fatalf("after restart: %+v, want 3 explicit jump shards", info)
	}
	if _, err := c2.StreamInfo(ctx, client.Stream{Name: "passing"}); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("implicit stream after restart: %v, want not_found", err)
	}
}
