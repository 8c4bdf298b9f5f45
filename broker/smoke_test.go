package broker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/wire"
)

func TestSmokePubSub(t *testing.T) {
	cfg := brokertest.Config(t)
	b := brokertest.Start(t, cfg)
	pubc := brokertest.Dial(t, b, cfg)
	subc := brokertest.Dial(t, b, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st := client.Stream{Name: "orders"}
	sub, err := subc.Subscribe(ctx, st, client.SubscribeOptions{})
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	const n = 100
	for i := range n {
		if err := pubc.Publish(ctx, st, []byte(fmt.Sprint(i)), client.PublishOptions{Ack: wire.AckPerMessage}); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	for i := range n {
		ev, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if got, want := string(ev.Payload), fmt.Sprint(i); got != want {
			t.Fatalf("event %d = %q, want %q", i, got, want)
		}
	}
}
