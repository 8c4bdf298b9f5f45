package broker_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/getfelix/felix-go/broker"
	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/config"
	"github.com/getfelix/felix-go/wire"
)

// TestFrozenSubscriberMemoryIsReleased: what a subscriber that stopped
// reading made the broker hold (its queue, its egress share, the frames
// queued for its connection) is garbage once it leaves. The stream's
// replay ring is full before the first measure, so it weighs the same in
// both.
func TestFrozenSubscriberMemoryIsReleased(t *testing.T) {
	if testing.Short() {
		t.Skip("publishes 2 x 48 MiB twice; -short skips it")
	}
	// goodbye: the client closes (Unsubscribe, then the connection);
	// unsubscribe: the subscription ends and its connection stays;
	// connection: the connection closes with nothing said, as when the
	// client's process dies and its kernel closes the socket.
	for _, leave := range []string{"goodbye", "unsubscribe", "connection"} {
		t.Run(leave, func(t *testing.T) { testFrozenRelease(t, leave) })
	}
}

func testFrozenRelease(t *testing.T, how string) {
	cfg := brokertest.Config(t)
	cfg.SubscriberQueuePolicy = "drop_new"
	b := brokertest.Start(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st := client.Stream{Name: "frozen"}
	pub := brokertest.Dial(t, b, cfg)
	payload := make([]byte, 1<<10)
	batch := make([][]byte, 64)
	for i := range batch {
		batch[i] = payload
	}
	publish := func() {
		for range 768 { // 48 MiB
			if err := pub.PublishBatch(ctx, st, batch, client.PublishOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}

	publish() // the replay ring to its bound
	before := heap()
	leave := subscribeFrozen(t, ctx, b, cfg, st, how)
	publish()
	held := heap()
	leave()
	waitGauge(t, b, "felix_subscriptions", 0)
	if how != "unsubscribe" {
		waitGauge(t, b, "felix_connections_open", 1) // the publisher's
	}
	after := heap()
	t.Logf("heap: %d MiB with the ring full, %d MiB with a frozen subscriber, %d MiB after it left", before>>20, held>>20, after>>20)
	if held < before+16<<20 {
		t.Fatalf("the frozen subscriber held only %d MiB more: the test no longer makes the broker hold anything", (held-before)>>20)
	}
	if after > before+8<<20 {
		t.Errorf("after the frozen subscriber left the heap is %d MiB, %d MiB over the %d MiB before it came: still held",
			after>>20, (after-before)>>20, before>>20)
	}
}

// subscribeFrozen subscribes to st on a connection of its own that never
// reads its events, and returns how it leaves (how: see the test).
func subscribeFrozen(t *testing.T, ctx context.Context, b *broker.Broker, cfg config.Config, st client.Stream, how string) (leave func()) {
	t.Helper()
	if how == "connection" {
		rc := brokertest.DialRaw(t, b, cfg)
		ctrl, _ := rc.MustHandshake(t, ctx)
		if err := ctrl.Send(&wire.Subscribe{RequestID: 1, Tenant: "default", Namespace: "default", Stream: st.Name}); err != nil {
			t.Fatal(err)
		}
		if msg, err := ctrl.ReadMessage(ctx); err != nil {
			t.Fatalf("subscribe: %v", err)
		} else if _, ok := msg.(*wire.Subscribed); !ok {
			t.Fatalf("subscribe answered %T, want Subscribed", msg)
		}
		return func() { _ = rc.Conn.CloseWithError(0, "gone") }
	}
	// Not brokertest.Dial: its cleanup would keep the client (and what its
	// connection buffered, in this same process) until the test ends.
	token := brokertest.Token(t, cfg, "default")
	frozen, err := client.Dial(ctx, b.Addr().String(), client.Options{CAFile: cfg.DataDir + "/cert.pem", Token: token, SubscriptionBuffer: 1})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := frozen.Subscribe(ctx, st, client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if how == "unsubscribe" {
		t.Cleanup(func() { _ = frozen.Close(context.Background()) })
		return func() {
			if err := sub.Close(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	return func() {
		if err := frozen.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
