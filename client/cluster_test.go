package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/getfelix/felix-go/broker"
	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/config"
	"github.com/getfelix/felix-go/internal/quicconf"
	"github.com/getfelix/felix-go/routing"
	"github.com/getfelix/felix-go/wire"
)

// clusterOptions trusts cfg's broker and carries a token with every right
// on tenant default.
func clusterOptions(t *testing.T, cfg config.Config) client.Options {
	return client.Options{CAFile: filepath.Join(cfg.DataDir, quicconf.CertFile), Token: brokertest.Token(t, cfg, "default")}
}

// dialCluster connects a ClusterClient to seeds and closes it when t ends.
func dialCluster(t *testing.T, seeds []string, o client.Options) *client.ClusterClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cc, err := client.DialCluster(ctx, seeds, o)
	if err != nil {
		t.Fatalf("DialCluster(%q): %v", seeds, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = cc.Close(ctx)
	})
	return cc
}

// deadAddr is a loopback UDP address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := pc.LocalAddr().String()
	_ = pc.Close()
	return addr
}

// TestShardOwnersSingleBroker: a single broker owns every shard and says
// so with an empty address, "the broker you asked", through the Client and
// the ClusterClient alike.
func TestShardOwnersSingleBroker(t *testing.T) {
	cfg := brokertest.Config(t)
	b := brokertest.Start(t, cfg)
	c := brokertest.Dial(t, b, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := client.Stream{Name: "three"}
	if _, err := c.CreateStream(ctx, st, client.StreamConfig{Shards: 3, Routing: "jump", Durable: true}); err != nil {
		t.Fatal(err)
	}
	cc := dialCluster(t, []string{b.Addr().String()}, clusterOptions(t, cfg))
	for name, ask := range map[string]func(context.Context, client.Stream) (client.Topology, error){
		"Client": c.ShardOwners, "ClusterClient": cc.ShardOwners,
	} {
		top, err := ask(ctx, st)
		if err != nil {
			t.Fatalf("%s.ShardOwners: %v", name, err)
		}
		want := client.Stream{Tenant: "default", Namespace: "default", Name: "three"}
		if top.Stream != want || top.Shards != 3 || top.Routing != routing.RouteJump || !top.Durable || len(top.Owners) != 3 {
			t.Fatalf("%s.ShardOwners = %+v, want 3 durable jump shards of %+v, one owner each", name, top, want)
		}
		for i, o := range top.Owners {
			if o != (client.ShardOwner{Shard: uint32(i), Available: true}) {
				t.Errorf("%s: owner %d = %+v, want shard %d available at the broker asked (empty owner)", name, i, o, i)
			}
		}
	}
}

// TestClusterClientRoutesKeys: against one broker, a keyed publish lands on
// the shard the stream's routing gives its key, and each shard's
// subscription sees exactly its keys.
func TestClusterClientRoutesKeys(t *testing.T) {
	cfg := brokertest.Config(t)
	b := brokertest.Start(t, cfg)
	cc := dialCluster(t, []string{b.Addr().String()}, clusterOptions(t, cfg))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := client.Stream{Name: "keyed"}
	const shards = 4
	if _, err := cc.CreateStream(ctx, st, client.StreamConfig{Shards: shards}); err != nil {
		t.Fatal(err)
	}
	subs := make([]*client.ClusterSubscription, shards)
	for i := range subs {
		sub, err := cc.Subscribe(ctx, st, client.SubscribeOptions{Shard: uint32(i)})
		if err != nil {
			t.Fatalf("subscribe to shard %d: %v", i, err)
		}
		defer sub.Close(ctx)
		subs[i] = sub
	}
	want := make([][]string, shards)
	for i := range 40 {
		key := fmt.Sprintf("user-%d", i)
		if err := cc.Publish(ctx, st, []byte(key), client.PublishOptions{Key: []byte(key)}); err != nil {
			t.Fatalf("publish %s: %v", key, err)
		}
		shard := routing.RouteModulo.ShardFor([]byte(key), shards)
		want[shard] = append(want[shard], key)
	}
	for shard, keys := range want {
		for _, key := range keys {
			ev, err := subs[shard].Next(ctx)
			if err != nil || string(ev.Payload) != key {
				t.Fatalf("shard %d: got %q (%v), want %q", shard, ev.Payload, err, key)
			}
		}
		if n := subs[shard].Buffered(); n != 0 {
			t.Errorf("shard %d holds %d events more than its keys", shard, n)
		}
	}
}

// TestClusterClientPublishes: the ClusterClient's other publishes against
// one broker: a batch's offset, fire-and-forget, a conditional publish
// written and then refused (refusals are answers, not retried), and the
// owner's own connection for what needs one.
func TestClusterClientPublishes(t *testing.T) {
	cfg := brokertest.Config(t)
	b := brokertest.Start(t, cfg)
	cc := dialCluster(t, []string{b.Addr().String()}, clusterOptions(t, cfg))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := client.Stream{Name: "ledger"}
	if _, err := cc.CreateStream(ctx, st, client.StreamConfig{Durable: true}); err != nil {
		t.Fatal(err)
	}
	res, err := cc.PublishResult(ctx, st, [][]byte{[]byte("a"), []byte("b")}, client.PublishOptions{})
	if err != nil || !res.HasOffset || res.Offset != 0 {
		t.Fatalf("PublishResult = %+v, %v; want offset 0", res, err)
	}
	if err := cc.PublishBatch(ctx, st, [][]byte{[]byte("c")}, client.PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cc.Publish(ctx, st, []byte("d"), client.PublishOptions{FireAndForget: true}); err != nil {
		t.Fatal(err)
	}
	c, err := cc.ClientFor(ctx, st, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if off, err := cc.PublishIf(ctx, st, [][]byte{[]byte("e")}, 4, client.PublishOptions{}); err != nil || off != 4 {
		t.Fatalf("PublishIf at 4 = %d, %v; want written at 4", off, err)
	}
	_, err = cc.PublishIf(ctx, st, [][]byte{[]byte("f")}, 4, client.PublishOptions{})
	if !errors.Is(err, wire.ErrOffsetMismatch) {
		t.Fatalf("PublishIf at 4 again = %v, want an offset mismatch", err)
	}
	page, err := c.Read(ctx, st, 0, client.ReadOptions{})
	if err != nil || len(page.Records) != 5 || string(page.Records[4].Payload) != "e" {
		t.Fatalf("Read = %+v, %v; want a..e", page, err)
	}
	infos, err := cc.ListStreams(ctx, "default")
	if err != nil || len(infos) != 1 || infos[0].Stream.Name != "ledger" {
		t.Fatalf("ListStreams = %+v, %v; want ledger", infos, err)
	}
}

// TestDialClusterSkipsDeadSeeds: a seed nothing answers costs one
// DialTimeout, then the next is tried; with no live seed DialCluster
// fails naming each.
func TestDialClusterSkipsDeadSeeds(t *testing.T) {
	cfg := brokertest.Config(t)
	b := brokertest.Start(t, cfg)
	o := clusterOptions(t, cfg)
	o.DialTimeout = time.Second
	dead := deadAddr(t)
	cc := dialCluster(t, []string{dead, b.Addr().String()}, o)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cc.Publish(ctx, client.Stream{Name: "s"}, []byte("x"), client.PublishOptions{}); err != nil {
		t.Fatalf("publish through the live seed: %v", err)
	}

	start := time.Now()
	other := deadAddr(t)
	_, err := client.DialCluster(ctx, []string{dead, other}, o)
	if err == nil {
		t.Fatal("DialCluster with no live seed succeeded")
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("DialCluster with two dead seeds took %s, want about two DialTimeouts of 1s", took)
	}
}

// TestClusterClientFollowsRedirect: a not_leader naming another broker is
// followed there. Two single brokers stand in for a cluster; a route hook
// makes the first answer not_leader, as a member that lost the shard would.
func TestClusterClientFollowsRedirect(t *testing.T) {
	first, second, o := twoBrokers(t)
	cc := dialCluster(t, []string{first.Addr().String()}, o)
	moved := &wire.Owner{NodeID: "second", Addr: second.Addr().String(), Generation: 2}
	client.SetRouteHook(cc, func(addr string) error {
		if addr == first.Addr().String() {
			return &wire.Error{Code: wire.CodeNotLeader, Retry: wire.RetryRedirect, Message: "moved", Owner: moved}
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := client.Stream{Name: "moved"}
	subs := make(map[*broker.Broker]*client.Subscription)
	for _, b := range []*broker.Broker{first, second} {
		c := dialPlain(t, b, o)
		sub, err := c.Subscribe(ctx, st, client.SubscribeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		subs[b] = sub
		defer c.Publish(ctx, st, []byte("marker"), client.PublishOptions{})
	}
	if err := cc.Publish(ctx, st, []byte("hello"), client.PublishOptions{}); err != nil {
		t.Fatalf("publish: %v", err)
	}
	if ev, err := subs[second].Next(ctx); err != nil || string(ev.Payload) != "hello" {
		t.Fatalf("the owner's subscription got %q (%v), want hello", ev.Payload, err)
	}
	c := dialPlain(t, first, o)
	if err := c.Publish(ctx, st, []byte("marker"), client.PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	if ev, err := subs[first].Next(ctx); err != nil || string(ev.Payload) != "marker" {
		t.Fatalf("the redirecting broker's subscription got %q (%v) first, want only the marker", ev.Payload, err)
	}
}

// twoBrokers starts two brokers with auth off that share one certificate,
// so one CA file trusts both.
func twoBrokers(t *testing.T) (*broker.Broker, *broker.Broker, client.Options) {
	t.Helper()
	cfg := brokertest.Config(t)
	cfg.Auth = "none"
	first := brokertest.Start(t, cfg)
	cfg2 := brokertest.Config(t)
	cfg2.Auth = "none"
	cfg2.TLSCert = filepath.Join(cfg.DataDir, quicconf.CertFile)
	cfg2.TLSKey = filepath.Join(cfg.DataDir, quicconf.KeyFile)
	second := brokertest.Start(t, cfg2)
	return first, second, client.Options{CAFile: cfg2.TLSCert}
}

// dialPlain dials a Client to b with o, closed when t ends.
func dialPlain(t *testing.T, b *broker.Broker, o client.Options) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, b.Addr().String(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	return c
}

// TestClusterClientAnswers: what a routed publish does with each kind of
// answer, the broker's answers played by the route hook: redirects followed
// at most three times, retryable ones retried with backoff until they pass
// or ctx ends, outcome-unknown and fatal ones returned after one attempt.
func TestClusterClientAnswers(t *testing.T) {
	cfg := brokertest.Config(t)
	b := brokertest.Start(t, cfg)
	o := clusterOptions(t, cfg)
	nowhere := &wire.Owner{NodeID: "gone", Addr: "192.0.2.1:5000"} // never dialed: the hook answers first
	here := &wire.Owner{NodeID: "here", Addr: b.Addr().String()}
	tests := []struct {
		name     string
		answers  []error // the hook's answers in turn; past the end, the call is made
		timeout  time.Duration
		wantErr  error // nil: the publish succeeds
		attempts int
	}{
		{name: "not_leader four times: backs off, asks again", attempts: 5, answers: []error{
			redirect(nowhere), redirect(nowhere), redirect(nowhere), redirect(nowhere)}},
		{name: "redirected until the deadline", timeout: 300 * time.Millisecond, wantErr: context.DeadlineExceeded, answers: manyRedirects(nowhere, 1000)},
		{name: "not_leader three times, then the owner", attempts: 4, answers: []error{
			redirect(nowhere), redirect(nowhere), redirect(here)}},
		{name: "not_leader without an owner is asked again", attempts: 2, answers: []error{
			wire.NewError(wire.CodeNotLeader, "no owner known")}},
		{name: "shard_unavailable twice", attempts: 3, answers: []error{
			wire.NewError(wire.CodeShardUnavailable, "moving"), wire.NewError(wire.CodeShardUnavailable, "moving")}},
		{name: "overloaded", attempts: 2, answers: []error{wire.NewError(wire.CodeOverloaded, "busy")}},
		{name: "leadership_lost is not retried", attempts: 1, wantErr: &wire.Error{Code: wire.CodeLeadershipLost}, answers: []error{
			wire.NewError(wire.CodeLeadershipLost, "outcome unknown")}},
		{name: "forbidden is not retried", attempts: 1, wantErr: wire.ErrForbidden, answers: []error{
			wire.NewError(wire.CodeForbidden, "no")}},
		{name: "not_found is not retried", attempts: 1, wantErr: wire.ErrNotFound, answers: []error{
			wire.NewError(wire.CodeNotFound, "no shard 3")}},
		{name: "a lost connection is not retried", attempts: 1, wantErr: &client.ConnectionLostError{}, answers: []error{
			&client.ConnectionLostError{Cause: errors.New("gone")}}},
		{name: "unavailable until the deadline", timeout: 300 * time.Millisecond, wantErr: context.DeadlineExceeded, answers: manyUnavailable(100)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cc := dialCluster(t, []string{b.Addr().String()}, o)
			var attempts atomic.Int32
			client.SetRouteHook(cc, func(string) error {
				if n := int(attempts.Add(1)); n <= len(tt.answers) {
					return tt.answers[n-1]
				}
				return nil
			})
			timeout := cmp(tt.timeout, 10*time.Second)
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			err := cc.Publish(ctx, client.Stream{Name: "answers"}, []byte("x"), client.PublishOptions{})
			switch lost := (*client.ConnectionLostError)(nil); {
			case tt.wantErr == nil && err != nil:
				t.Fatalf("publish: %v", err)
			case errors.As(tt.wantErr, &lost):
				if !errors.As(err, &lost) {
					t.Fatalf("publish = %v, want the lost connection", err)
				}
			case tt.wantErr != nil && !errors.Is(err, tt.wantErr):
				t.Fatalf("publish = %v, want %v", err, tt.wantErr)
			}
			if errors.Is(tt.wantErr, context.DeadlineExceeded) && !errors.Is(err, wire.ErrUnavailable) && !errors.Is(err, wire.ErrNotLeader) {
				t.Fatalf("publish = %v, want the deadline with the last attempt's shard_unavailable", err)
			}
			if tt.attempts > 0 && int(attempts.Load()) != tt.attempts {
				t.Errorf("%d attempts, want %d", attempts.Load(), tt.attempts)
			}
		})
	}
}

func redirect(to *wire.Owner) error {
	return &wire.Error{Code: wire.CodeNotLeader, Retry: wire.RetryRedirect, Message: "moved", Owner: to}
}

// manyRedirects is n not_leader answers naming owner.
func manyRedirects(owner *wire.Owner, n int) []error {
	out := make([]error, n)
	for i := range out {
		out[i] = redirect(owner)
	}
	return out
}

func manyUnavailable(n int) []error {
	out := make([]error, n)
	for i := range out {
		out[i] = wire.NewError(wire.CodeShardUnavailable, "moving")
	}
	return out
}

func cmp(d, otherwise time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return otherwise
}

// expectOffsets reads events from..to-1 of a durable stream published by
// publishRun, in order.
func expectOffsets(t *testing.T, ctx context.Context, sub *client.ClusterSubscription, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		ev, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if want := fmt.Sprintf("m%05d", i); string(ev.Payload) != want || !ev.HasOffset || ev.Offset != uint64(i) {
			t.Fatalf("event %d = %q at offset %d, want %q at %d", i, ev.Payload, ev.Offset, want, i)
		}
	}
}

func publishRun(t *testing.T, ctx context.Context, cc *client.ClusterClient, st client.Stream, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		if err := cc.Publish(ctx, st, []byte(fmt.Sprintf("m%05d", i)), client.PublishOptions{}); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
}

// TestClusterSubscriptionResumesEnded: a durable subscription the broker
// ends (its feeder stopped, as when its shard moves away) is made again
// after the last event returned: nothing skipped, nothing twice.
func TestClusterSubscriptionResumesEnded(t *testing.T) {
	cfg := brokertest.Config(t)
	cfg.Chaos = true
	b := brokertest.Start(t, cfg)
	cc := dialCluster(t, []string{b.Addr().String()}, clusterOptions(t, cfg))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, sub := durableClusterSub(t, ctx, cc, "ends")
	var causes []error
	sub.OnResubscribe = func(cause error) { causes = append(causes, cause) }
	publishRun(t, ctx, cc, st, 0, 3)
	expectOffsets(t, ctx, sub, 0, 2)
	if _, err := b.Kill(broker.KillRequest{Kind: "feeder", Mode: "stop"}); err != nil {
		t.Fatal(err)
	}
	publishRun(t, ctx, cc, st, 3, 6)
	expectOffsets(t, ctx, sub, 2, 6)
	if sub.Resubscribes() != 1 || len(causes) != 1 || !errors.Is(causes[0], client.ErrSubscriptionEnded) {
		t.Fatalf("%d resubscriptions for %v, want 1 for ErrSubscriptionEnded", sub.Resubscribes(), causes)
	}
}

// TestClusterSubscriptionResumesAfterRestart: the broker stops and comes
// back on the same address with its data; the durable subscription
// reconnects and carries on where it was, even after a Next gave up
// while the broker was down.
func TestClusterSubscriptionResumesAfterRestart(t *testing.T) {
	cfg := brokertest.Config(t)
	b := brokertest.Start(t, cfg)
	addr := b.Addr().String()
	cc := dialCluster(t, []string{addr}, clusterOptions(t, cfg))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, sub := durableClusterSub(t, ctx, cc, "restart")
	publishRun(t, ctx, cc, st, 0, 3)
	expectOffsets(t, ctx, sub, 0, 3)
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	// A Next that gives up while there is no broker leaves the
	// resubscription to the next one.
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	if ev, err := sub.Next(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next with the broker down = %q, %v; want the deadline", ev.Payload, err)
	}
	cfg.Listen = addr
	restart(t, ctx, cfg)
	publishRun(t, ctx, cc, st, 3, 5)
	expectOffsets(t, ctx, sub, 3, 5)
	if sub.Resubscribes() != 1 {
		t.Fatalf("%d resubscriptions, want 1", sub.Resubscribes())
	}
}

// restart starts a broker with cfg, waiting while its address is still
// held by the one stopped before (quic-go lets the socket go after Stop
// returns), and stops it when t ends.
func restart(t *testing.T, ctx context.Context, cfg config.Config) {
	t.Helper()
	for {
		b, err := broker.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err = b.Start(); err == nil {
			t.Cleanup(func() { _ = b.Stop(context.Background()) })
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("restart on %s: %v", cfg.Listen, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestClusterSubscriptionResumesLagged: a durable subscription that falls
// behind its queue resumes from the offset the lag names.
func TestClusterSubscriptionResumesLagged(t *testing.T) {
	cfg := brokertest.Config(t)
	cfg.SubscriberQueueCapacity = 4
	cfg.SubscriberEgressMaxBytes = 4 << 10
	b := brokertest.Start(t, cfg)
	o := clusterOptions(t, cfg)
	pub := dialCluster(t, []string{b.Addr().String()}, o)
	o.SubscriptionBuffer = 1
	slow := dialCluster(t, []string{b.Addr().String()}, o)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st := client.Stream{Name: "lag"}
	if _, err := pub.CreateStream(ctx, st, client.StreamConfig{Durable: true}); err != nil {
		t.Fatal(err)
	}
	sub, err := slow.Subscribe(ctx, st, client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close(ctx)
	const n = 2000
	publishRun(t, ctx, pub, st, 0, n)
	expectOffsets(t, ctx, sub, 0, n)
	if sub.Resubscribes() == 0 {
		t.Fatalf("no resubscription: the subscription never lagged, so this test tested nothing")
	}
}

// TestClusterSubscriptionInMemoryResumesLatest: an in-memory subscription
// the broker ends is made again from the latest record.
func TestClusterSubscriptionInMemoryResumesLatest(t *testing.T) {
	cfg := brokertest.Config(t)
	cfg.Chaos = true
	b := brokertest.Start(t, cfg)
	cc := dialCluster(t, []string{b.Addr().String()}, clusterOptions(t, cfg))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := client.Stream{Name: "memory"}
	sub, err := cc.Subscribe(ctx, st, client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close(ctx)
	if _, err := b.Kill(broker.KillRequest{Kind: "feeder", Mode: "stop"}); err != nil {
		t.Fatal(err)
	}
	// What is published before the new subscription exists is not seen:
	// keep publishing until something is.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			_ = cc.Publish(ctx, st, []byte(fmt.Sprintf("after-%d", i)), client.PublishOptions{})
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
	ev, err := sub.Next(ctx)
	close(stop)
	wg.Wait()
	if err != nil || ev.HasOffset || len(ev.Payload) < 6 || string(ev.Payload[:6]) != "after-" {
		t.Fatalf("Next = %q (offset shown %v), %v; want a record published after the end", ev.Payload, ev.HasOffset, err)
	}
	if sub.Resubscribes() != 1 {
		t.Fatalf("%d resubscriptions, want 1", sub.Resubscribes())
	}
}

// TestClusterSubscriptionDeletedStream: a deleted stream ends its
// subscriptions for good; resubscribing would make it again.
func TestClusterSubscriptionDeletedStream(t *testing.T) {
	cfg := brokertest.Config(t)
	b := brokertest.Start(t, cfg)
	cc := dialCluster(t, []string{b.Addr().String()}, clusterOptions(t, cfg))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, sub := durableClusterSub(t, ctx, cc, "doomed")
	if err := cc.DeleteStream(ctx, st); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.Next(ctx); !errors.Is(err, client.ErrSubscriptionEnded) {
		t.Fatalf("Next after the stream's deletion = %v, want ErrSubscriptionEnded", err)
	}
	if _, err := cc.StreamInfo(ctx, st); !errors.Is(err, wire.ErrNotFound) || sub.Resubscribes() != 0 {
		t.Fatalf("after the deletion: StreamInfo %v, %d resubscriptions; want not_found and none", err, sub.Resubscribes())
	}
}

// TestClusterSubscriptionClose: Close ends a Next that is waiting.
func TestClusterSubscriptionClose(t *testing.T) {
	cfg := brokertest.Config(t)
	b := brokertest.Start(t, cfg)
	cc := dialCluster(t, []string{b.Addr().String()}, clusterOptions(t, cfg))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sub, err := cc.Subscribe(ctx, client.Stream{Name: "quiet"}, client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := sub.Next(ctx)
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	if err := sub.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, client.ErrClosed) {
		t.Fatalf("Next after Close = %v, want ErrClosed", err)
	}
}

// durableClusterSub creates durable stream name and subscribes to it from
// the start; the subscription closes when the test ends.
func durableClusterSub(t *testing.T, ctx context.Context, cc *client.ClusterClient, name string) (client.Stream, *client.ClusterSubscription) {
	t.Helper()
	st := client.Stream{Name: name}
	if _, err := cc.CreateStream(ctx, st, client.StreamConfig{Durable: true}); err != nil {
		t.Fatal(err)
	}
	sub, err := cc.Subscribe(ctx, st, client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close(context.Background()) })
	return st, sub
}

// TestClusterIdempotentProducer: a producer made by a ClusterClient sends
// each batch to its shard's owner; batches whose attempts were redirected
// or refused for now are sent again with their sequence, and every batch
// is written once, in order.
func TestClusterIdempotentProducer(t *testing.T) {
	cfg := brokertest.Config(t)
	b := brokertest.Start(t, cfg)
	cc := dialCluster(t, []string{b.Addr().String()}, clusterOptions(t, cfg))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := client.Stream{Name: "idem"}
	if _, err := cc.CreateStream(ctx, st, client.StreamConfig{Durable: true}); err != nil {
		t.Fatal(err)
	}
	p, err := cc.NewIdempotentProducer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	here := &wire.Owner{NodeID: "here", Addr: b.Addr().String()}
	var attempts atomic.Int32
	client.SetRouteHook(cc, func(string) error {
		switch attempts.Add(1) % 4 {
		case 1:
			return redirect(here)
		case 2:
			return wire.NewError(wire.CodeShardUnavailable, "moving")
		}
		return nil
	})
	const batches = 12
	for i := range batches {
		res, err := p.Publish(ctx, st, [][]byte{[]byte(fmt.Sprint(i))}, nil)
		if err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
		if !res.HasOffset || res.Offset != uint64(i) {
			t.Fatalf("batch %d at offset %d (has %t), want %d", i, res.Offset, res.HasOffset, i)
		}
	}
	c, err := cc.ClientFor(ctx, st, 0)
	if err != nil {
		t.Fatal(err)
	}
	page, err := c.Read(ctx, st, 0, client.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Records) != batches {
		t.Fatalf("%d records in the stream, want %d", len(page.Records), batches)
	}
	for i, r := range page.Records {
		if string(r.Payload) != fmt.Sprint(i) {
			t.Fatalf("record %d = %q", i, r.Payload)
		}
	}
}

// TestClusterClientSkipsALostAddress: a not_leader naming a member that
// cannot be reached costs one dial; named again a moment later (a stale
// owner record, a follower that has not noticed the death), it is not
// dialed again: the client asks who owns the shard instead.
func TestClusterClientSkipsALostAddress(t *testing.T) {
	first, _, o := twoBrokers(t)
	o.DialTimeout = 100 * time.Millisecond
	cc := dialCluster(t, []string{first.Addr().String()}, o)
	dead := deadAddr(t)
	redirects := 0
	client.SetRouteHook(cc, func(addr string) error {
		if addr == first.Addr().String() && redirects < 2 {
			redirects++
			e := wire.NewError(wire.CodeNotLeader, "owned by the dead member")
			e.Owner = &wire.Owner{NodeID: "dead", Addr: dead}
			return e
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	before := client.Dials(cc)
	if err := cc.Publish(ctx, client.Stream{Name: "s"}, []byte("x"), client.PublishOptions{}); err != nil {
		t.Fatalf("publish: %v", err)
	}
	if redirects != 2 {
		t.Fatalf("%d redirects; want 2", redirects)
	}
	if dials := client.Dials(cc) - before; dials != 1 {
		t.Fatalf("%d dials of the dead member for two redirects to it; want 1", dials)
	}
}

// TestShardOwnersWaitsForABroker: with no broker able to answer, ShardOwners
// asks again until its context ends (members may be electing a leader, or
// one was just lost), and says so.
func TestShardOwnersWaitsForABroker(t *testing.T) {
	first, _, o := twoBrokers(t)
	o.DialTimeout = 100 * time.Millisecond
	cc := dialCluster(t, []string{first.Addr().String()}, o)
	stop, cancelStop := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelStop()
	if err := first.Stop(stop); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := cc.ShardOwners(ctx, client.Stream{Name: "s"})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ShardOwners with no broker: %v; want it to keep asking until its deadline", err)
	}
}

// TestClusterClientReportsRetries: a routed call that finds no owner to
// answer tells Options.Retrying of each retry, with the stream, the time
// waited so far and the last answer, and succeeds once the owner answers.
func TestClusterClientReportsRetries(t *testing.T) {
	cfg := brokertest.Config(t)
	b := brokertest.Start(t, cfg)
	var (
		mu      sync.Mutex
		retries []client.Retry
	)
	o := clusterOptions(t, cfg)
	o.Retrying = func(r client.Retry) {
		mu.Lock()
		defer mu.Unlock()
		retries = append(retries, r)
	}
	cc := dialCluster(t, []string{b.Addr().String()}, o)
	var refusals atomic.Int32
	client.SetRouteHook(cc, func(string) error {
		if refusals.Add(1) <= 4 {
			return wire.NewError(wire.CodeShardUnavailable, "fenced: no leader")
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cc.Publish(ctx, client.Stream{Name: "waiting"}, []byte("x"), client.PublishOptions{}); err != nil {
		t.Fatalf("publish after 4 refusals: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(retries) != 4 {
		t.Fatalf("Retrying was called %d times, want once per refusal (4): %+v", len(retries), retries)
	}
	for i, r := range retries {
		if r.Stream.Name != "waiting" || !errors.Is(r.Err, wire.ErrUnavailable) {
			t.Errorf("retry %d: %+v, want stream waiting and the shard_unavailable answer", i, r)
		}
		if i > 0 && r.Waited <= retries[i-1].Waited {
			t.Errorf("retry %d waited %s, not more than retry %d's %s", i, r.Waited, i-1, retries[i-1].Waited)
		}
	}
}

// TestClusterClientReadFollowsRedirect: ClusterClient.Read and
// OffsetForTime go where not_leader sends them, and are retried after an
// answer whose outcome is unknown (a read changes nothing).
func TestClusterClientReadFollowsRedirect(t *testing.T) {
	first, second, o := twoBrokers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := client.Stream{Name: "ledger"}
	owner := dialPlain(t, second, o)
	if _, err := owner.CreateStream(ctx, st, client.StreamConfig{Durable: true}); err != nil {
		t.Fatal(err)
	}
	if err := owner.PublishBatch(ctx, st, [][]byte{[]byte("a"), []byte("b"), []byte("c")}, client.PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	cc := dialCluster(t, []string{first.Addr().String()}, o)
	moved := &wire.Owner{NodeID: "second", Addr: second.Addr().String(), Generation: 2}
	var unknownOnce atomic.Bool
	client.SetRouteHook(cc, func(addr string) error {
		switch {
		case addr == first.Addr().String():
			return &wire.Error{Code: wire.CodeNotLeader, Retry: wire.RetryRedirect, Message: "moved", Owner: moved}
		case unknownOnce.CompareAndSwap(false, true):
			return &wire.Error{Code: wire.CodeLeadershipLost, Retry: wire.RetryOutcomeUnknown, Message: "deposed"}
		}
		return nil
	})
	page, err := cc.Read(ctx, st, 1, client.ReadOptions{})
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if len(page.Records) != 2 || string(page.Records[0].Payload) != "b" || page.Records[0].Offset != 1 || page.Committed != 3 {
		t.Fatalf("read from 1 = %+v, want b and c of the owner's 3 records", page)
	}
	off, err := cc.OffsetForTime(ctx, st, time.Now().Add(time.Hour), 0)
	if err != nil || off != 3 {
		t.Fatalf("offset for a time after every record = %d (%v), want the committed end 3", off, err)
	}
}
