package broker_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getfelix/felix-go/broker"
	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/config"
	"github.com/getfelix/felix-go/wire"
)

// Chaos tests: actors crashed (panic: their supervisor restarts them) or
// stopped (for good) through Broker.Kill and POST /debug/chaos/kill, on a
// real broker over QUIC. A restart must lose nothing published after it; a
// stop must end the subscriptions it served with ErrSubscriptionEnded, and
// leave the broker serving new ones.

// errShardUnavailable matches a wire error with code shard_unavailable
// (wire has no sentinel for it).
var errShardUnavailable = &wire.Error{Code: wire.CodeShardUnavailable}

// chaosConfig is a broker config with the admin endpoint and chaos on.
func chaosConfig(t *testing.T) config.Config {
	cfg := brokertest.Config(t)
	cfg.Admin = "127.0.0.1:0"
	cfg.Chaos = true
	return cfg
}

// losslessChaosConfig also makes every queue block rather than drop, so a
// test may demand every publish after a restart.
func losslessChaosConfig(t *testing.T) config.Config {
	cfg := chaosConfig(t)
	cfg.SubscriberQueuePolicy = "block"
	cfg.SubscriberLaneQueuePolicy = "block"
	return cfg
}

func feederPath(sub *client.Subscription) string {
	return fmt.Sprintf("felix/subscribers/sub-%d", sub.ID())
}

// feederLabel is one label of sub's feeder.
func feederLabel(t *testing.T, b *broker.Broker, sub *client.Subscription, label string) string {
	t.Helper()
	a, ok := brokertest.ActorAt(b, feederPath(sub))
	if !ok {
		t.Fatalf("feeder %s not listed:\n%s", feederPath(sub), treeDump(b.Actors()))
	}
	v, ok := a.Labels[label]
	if !ok {
		t.Fatalf("feeder %s has no %s label: %v", a.Path, label, a.Labels)
	}
	return v
}

// mustKill kills one actor by path and checks the result names it.
func mustKill(t *testing.T, b *broker.Broker, path, mode string) {
	t.Helper()
	res, err := b.Kill(broker.KillRequest{Path: path, Mode: mode})
	if err != nil {
		t.Fatalf("kill %s (%s): %v", path, mode, err)
	}
	if res.Mode != mode || !slices.Equal(res.Killed, []string{path}) {
		t.Fatalf("kill %s (%s) = %+v, want mode %s killing just %s", path, mode, res, mode, path)
	}
}

// awaitRestarts waits for path's restart count to reach n. The count is
// recorded from protoactor's event stream when the supervisor decides, and
// no event reaches the test, so this polls (2 ms, under a deadline).
func awaitRestarts(t *testing.T, b *broker.Broker, path string, n int64) broker.ActorInfo {
	t.Helper()
	var a broker.ActorInfo
	pollFor(t, 10*time.Second, fmt.Sprintf("%s to show %d restart(s)", path, n), func() bool {
		var ok bool
		a, ok = brokertest.ActorAt(b, path)
		return ok && a.Restarts >= n
	})
	return a
}

// awaitGone waits until path is no longer listed. The directory prunes an
// actor once its mailbox closes, which happens on the actor's goroutine with
// no event to the test, so this polls (2 ms, under a deadline).
func awaitGone(t *testing.T, b *broker.Broker, path string) {
	t.Helper()
	pollFor(t, 10*time.Second, path+" to leave the tree", func() bool {
		_, ok := brokertest.ActorAt(b, path)
		return !ok
	})
}

// drainToEnd reads sub until it ends and returns why and how many events
// came before.
func drainToEnd(ctx context.Context, sub *client.Subscription) (int, error) {
	n := 0
	for {
		if _, err := sub.Next(ctx); err != nil {
			return n, err
		}
		n++
	}
}

// expectEnded fails unless sub ends with ErrSubscriptionEnded within d.
func expectEnded(t *testing.T, ctx context.Context, who string, sub *client.Subscription, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	n, err := drainToEnd(ctx, sub)
	if !errors.Is(err, client.ErrSubscriptionEnded) {
		t.Fatalf("%s: after %d events Next returned %v, want ErrSubscriptionEnded within %s", who, n, err, d)
	}
	if !errors.Is(sub.Err(), client.ErrSubscriptionEnded) {
		t.Errorf("%s: Err() = %v, want ErrSubscriptionEnded", who, sub.Err())
	}
}

// seqIndex reads seq(i) back.
func seqIndex(payload []byte) (int, bool) {
	if len(payload) < 2 || payload[0] != 'm' {
		return 0, false
	}
	i, err := strconv.Atoi(string(payload[1:]))
	return i, err == nil
}

// seqPublisher publishes seq(0), seq(1), ... acked, one at a time, until
// its limit or ctx's end.
type seqPublisher struct {
	mu     sync.Mutex
	next   int
	limit  int
	failed map[int]error
	done   chan struct{}
	err    error // the first error that is not a failed publish (ctx ended)
}

func startSeqPublisher(ctx context.Context, c *client.Client, st client.Stream) *seqPublisher {
	p := &seqPublisher{limit: 1 << 30, failed: map[int]error{}, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for {
			p.mu.Lock()
			i := p.next
			if i >= p.limit {
				p.mu.Unlock()
				return
			}
			p.next++
			p.mu.Unlock()
			err := c.Publish(ctx, st, []byte(seq(i)), client.PublishOptions{})
			if ctx.Err() != nil {
				p.mu.Lock()
				p.err = ctx.Err()
				p.mu.Unlock()
				return
			}
			if err != nil {
				p.mu.Lock()
				p.failed[i] = err
				p.mu.Unlock()
			}
		}
	}()
	return p
}

// stopAfter lets n more publishes start and returns the first of them:
// every publish numbered from mark on starts after this call.
func (p *seqPublisher) stopAfter(n int) (mark, limit int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.limit = p.next + n
	return p.next, p.limit
}

// wait waits for the publisher to reach its limit and returns its failures.
func (p *seqPublisher) wait(t *testing.T, ctx context.Context) map[int]error {
	t.Helper()
	select {
	case <-p.done:
	case <-ctx.Done():
		t.Fatalf("publisher still running: %v", ctx.Err())
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		t.Fatalf("publisher: %v", p.err)
	}
	return p.failed
}

// seqReader reads seq payloads from a subscription in the background.
type seqReader struct {
	mu      sync.Mutex
	got     []int
	err     error
	changed chan struct{} // closed and replaced on every event and at the end
	done    chan struct{}
}

func startSeqReader(ctx context.Context, sub *client.Subscription) *seqReader {
	r := &seqReader{changed: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for {
			ev, err := sub.Next(ctx)
			r.mu.Lock()
			if err != nil {
				r.err = err
			} else if i, ok := seqIndex(ev.Payload); ok {
				r.got = append(r.got, i)
			} else {
				r.err = fmt.Errorf("unexpected payload %q", ev.Payload)
			}
			close(r.changed)
			r.changed = make(chan struct{})
			stop := r.err != nil
			r.mu.Unlock()
			if stop {
				return
			}
		}
	}()
	return r
}

// await waits until cond holds on what was read so far (awaited, not
// polled: every event wakes it).
func (r *seqReader) await(t *testing.T, ctx context.Context, what string, cond func(got []int) bool) []int {
	t.Helper()
	for {
		r.mu.Lock()
		got, err, changed := slices.Clone(r.got), r.err, r.changed
		r.mu.Unlock()
		if cond(got) {
			return got
		}
		if err != nil {
			t.Fatalf("subscription ended (%v) before %s; read %d events", err, what, len(got))
		}
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatalf("no %s: %v; read %d events, last %v", what, ctx.Err(), len(got), got[max(0, len(got)-5):])
		}
	}
}

func lastAtLeast(i int) func([]int) bool {
	return func(got []int) bool { return len(got) > 0 && got[len(got)-1] >= i }
}

// checkIncreasing fails unless got is strictly increasing (no reordering,
// no duplicates) and holds every index in [from, to).
func checkIncreasing(t *testing.T, who string, got []int, from, to int) {
	t.Helper()
	for i := 1; i < len(got); i++ {
		if got[i] <= got[i-1] {
			t.Errorf("%s: event %d is %d after %d: reordered or duplicated", who, i, got[i], got[i-1])
			return
		}
	}
	k, _ := slices.BinarySearch(got, from)
	for want := from; want < to; want, k = want+1, k+1 {
		if k >= len(got) || got[k] != want {
			t.Errorf("%s: publish %d (acked after the restart showed) was not delivered; delivered %d events", who, want, len(got))
			return
		}
	}
}

// TestChaosKillRefusals: every request the chaos route refuses kills
// nothing; with chaos off even a well-formed one is refused.
func TestChaosKillRefusals(t *testing.T) {
	// rig: a broker with one subscription, and a barrier that proves any
	// crash sent so far has been handled: a publish that reaches the
	// subscriber went through its shard, feeder, lane and writer, each of
	// which would have handled a ChaosPanic (control traffic, ahead of data)
	// and been restarted, with the restart recorded, before passing it on.
	type rig struct {
		b       *broker.Broker
		barrier func(t *testing.T)
		before  []string
	}
	newRig := func(t *testing.T, chaos bool) *rig {
		cfg := chaosConfig(t)
		cfg.Chaos = chaos
		b := brokertest.Start(t, cfg)
		c := brokertest.Dial(t, b, cfg)
		ctx := testCtx(t, 30*time.Second)
		st := client.Stream{Name: "refusals"}
		sub, err := c.Subscribe(ctx, st, client.SubscribeOptions{})
		if err != nil {
			t.Fatalf("subscribe: %v", err)
		}
		n := 0
		r := &rig{b: b, barrier: func(t *testing.T) {
			t.Helper()
			n++
			if err := c.Publish(ctx, st, []byte(seq(n)), client.PublishOptions{}); err != nil {
				t.Fatalf("publish: %v", err)
			}
			expectNext(t, ctx, "subscriber", sub, seq(n))
		}}
		r.barrier(t)
		for _, a := range b.Actors() {
			r.before = append(r.before, a.Path)
		}
		return r
	}
	nothingKilled := func(t *testing.T, r *rig) {
		t.Helper()
		r.barrier(t)
		var after []string
		for _, a := range r.b.Actors() {
			after = append(after, a.Path)
			if a.Restarts != 0 || a.LastFailure != nil {
				t.Errorf("%s: restarts %d, last failure %+v after a refused kill", a.Path, a.Restarts, a.LastFailure)
			}
		}
		if !slices.Equal(after, r.before) {
			t.Errorf("actors before the refused kills:\n%v\nafter:\n%v", r.before, after)
		}
		if v := metricSum(t, r.b, "felix_actor_restarts_total"); v != 0 {
			t.Errorf("felix_actor_restarts_total = %v after refused kills, want 0", v)
		}
	}
	ctx := testCtx(t, 30*time.Second)

	t.Run("chaos off", func(t *testing.T) {
		r := newRig(t, false)
		for _, req := range []broker.KillRequest{{Kind: "feeder"}, {Kind: "shard", Mode: "stop"}, {Path: r.before[len(r.before)-1]}} {
			if _, err := r.b.Kill(req); !errors.Is(err, broker.ErrChaosOff) {
				t.Errorf("Kill(%+v) = %v, want ErrChaosOff", req, err)
			}
			status, res := adminPost(t, ctx, r.b, "/debug/chaos/kill", req)
			if msg, _ := res["error"].(string); status != http.StatusForbidden || !strings.Contains(msg, "--chaos") {
				t.Errorf("POST %+v: %d %v, want 403 with an error naming --chaos", req, status, res)
			}
		}
		nothingKilled(t, r)
	})

	// A request for each of Kill's errors, two of them at the real tree's
	// supervisors. Which requests Kill refuses, and with what, is
	// actors.Kill's and tested there (TestKillChooses); here, that the
	// broker and the route refuse them, answer each error with its status,
	// and kill nothing.
	t.Run("bad requests", func(t *testing.T) {
		r := newRig(t, true)
		var feeder string
		for _, p := range r.before {
			if strings.HasPrefix(p, "felix/subscribers/") {
				feeder = p
			}
		}
		for _, tt := range []struct {
			name   string
			req    broker.KillRequest
			want   error
			status int
		}{
			{"unknown path", broker.KillRequest{Path: "felix/subscribers/sub-999999"}, broker.ErrNoSuchActor, http.StatusNotFound},
			{"unknown mode with a path", broker.KillRequest{Path: feeder, Mode: "Panic"}, broker.ErrBadKillRequest, http.StatusBadRequest},
			{"path and kind", broker.KillRequest{Path: feeder, Kind: "feeder"}, broker.ErrBadKillRequest, http.StatusBadRequest},
			{"supervisor path", broker.KillRequest{Path: "felix/subscribers"}, broker.ErrNotKillable, http.StatusBadRequest},
			{"supervisor path, stop", broker.KillRequest{Path: "felix/streams", Mode: "stop"}, broker.ErrNotKillable, http.StatusBadRequest},
		} {
			t.Run(tt.name, func(t *testing.T) {
				if res, err := r.b.Kill(tt.req); !errors.Is(err, tt.want) || len(res.Killed) != 0 {
					t.Errorf("Kill(%+v) = %+v, %v; want %v and nothing killed", tt.req, res, err, tt.want)
				}
				status, res := adminPost(t, ctx, r.b, "/debug/chaos/kill", tt.req)
				if _, hasErr := res["error"].(string); status != tt.status || !hasErr || res["killed"] != nil {
					t.Errorf("POST %+v: %d %v, want %d with an error", tt.req, status, res, tt.status)
				}
			})
		}
		for _, body := range []string{"", "{", `{"path": 7}`, `[]`} {
			if status, res := adminPost(t, ctx, r.b, "/debug/chaos/kill", body); status != http.StatusBadRequest || res["error"] == nil {
				t.Errorf("POST %q: %d %v, want 400 with an error", body, status, res)
			}
		}
		nothingKilled(t, r)
	})
}

// TestChaosPanic: a panic in a feeder, lane, connection writer or shard in
// the middle of a publish stream restarts that actor, and the subscriber
// receives every publish made after the restart, in order. A crashed shard
// may fail the publish it had in hand (shard_unavailable), nothing more.
func TestChaosPanic(t *testing.T) {
	for _, kind := range []string{"feeder", "lane", "connection_writer", "shard"} {
		t.Run(kind, func(t *testing.T) {
			cfg := losslessChaosConfig(t)
			b := brokertest.Start(t, cfg)
			ctx := testCtx(t, 60*time.Second)
			pubc := brokertest.Dial(t, b, cfg)
			subc := brokertest.Dial(t, b, cfg)
			st := client.Stream{Name: "panic-" + kind}
			sub, err := subc.Subscribe(ctx, st, client.SubscribeOptions{})
			if err != nil {
				t.Fatalf("subscribe: %v", err)
			}
			path := map[string]string{
				"feeder":            feederPath(sub),
				"lane":              "felix/lanes/lane-" + feederLabel(t, b, sub, "lane"),
				"connection_writer": "felix/connections/conn-" + feederLabel(t, b, sub, "conn"),
				"shard":             "felix/streams/default:default:" + st.Name + ":0",
			}[kind]
			if _, ok := brokertest.ActorAt(b, path); !ok {
				t.Fatalf("%s not listed:\n%s", path, treeDump(b.Actors()))
			}

			r := startSeqReader(ctx, sub)
			p := startSeqPublisher(ctx, pubc, st)
			r.await(t, ctx, "50 events before the crash", func(got []int) bool { return len(got) >= 50 })
			mustKill(t, b, path, "panic")
			a := awaitRestarts(t, b, path, 1)
			mark, limit := p.stopAfter(200)
			failed := p.wait(t, ctx)
			got := r.await(t, ctx, fmt.Sprintf("publish %d", limit-1), lastAtLeast(limit-1))

			checkIncreasing(t, "subscriber", got, mark, limit)
			if kind == "shard" {
				// A crash with a publish in hand fails that one publish.
				// (ChaosPanic is control traffic, so it usually lands
				// between publishes and fails none.)
				if len(failed) > 1 {
					t.Errorf("%d publishes failed around the shard's crash, want at most 1: %v", len(failed), failed)
				}
				for i, err := range failed {
					if !errors.Is(err, errShardUnavailable) {
						t.Errorf("publish %d failed with %v, want shard_unavailable", i, err)
					}
					if i >= mark {
						t.Errorf("publish %d, made after the restart showed, failed: %v", i, err)
					}
				}
			} else if len(failed) > 0 {
				t.Errorf("publishes failed though only a %s crashed: %v", kind, failed)
			}

			// The restart is recorded: once on the actor, once in the metric.
			if a, _ = brokertest.ActorAt(b, path); a.Restarts != 1 || a.LastFailure == nil || !strings.Contains(a.LastFailure.Reason, "chaos") {
				t.Errorf("%s: restarts %d, last failure %+v; want 1 and a failure naming chaos", path, a.Restarts, a.LastFailure)
			}
			if v := metricSum(t, b, "felix_actor_restarts_total", "kind", kind, "directive", "RestartDirective"); v != 1 {
				t.Errorf(`felix_actor_restarts_total{kind=%q,directive="RestartDirective"} = %v, want 1`, kind, v)
			}
			if v := metricSum(t, b, "felix_actor_restarts_total"); v != 1 {
				t.Errorf("felix_actor_restarts_total (all kinds) = %v, want 1", v)
			}
			for _, other := range b.Actors() {
				if other.Path != path && (other.Restarts != 0 || other.LastFailure != nil) {
					t.Errorf("%s: restarts %d, last failure %+v; only %s crashed", other.Path, other.Restarts, other.LastFailure, path)
				}
			}
			t.Logf("%s crashed after %d events; %d events in all, publishes %d..%d all delivered", path, 50, len(got), mark, limit-1)
		})
	}
}

// TestChaosStopFeeder: a stopped feeder ends its subscription with
// ErrSubscriptionEnded at once; another subscription on the same connection
// keeps receiving, and a new one works.
func TestChaosStopFeeder(t *testing.T) {
	cfg := losslessChaosConfig(t)
	b := brokertest.Start(t, cfg)
	ctx := testCtx(t, 30*time.Second)
	c := brokertest.Dial(t, b, cfg)
	pubc := brokertest.Dial(t, b, cfg)
	st := client.Stream{Name: "stop-feeder"}
	a, err := c.Subscribe(ctx, st, client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	other, err := c.Subscribe(ctx, st, client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	publish := func(msg string) {
		t.Helper()
		if err := pubc.Publish(ctx, st, []byte(msg), client.PublishOptions{}); err != nil {
			t.Fatalf("publish %q: %v", msg, err)
		}
	}
	publish("before")
	expectNext(t, ctx, "a", a, "before")
	expectNext(t, ctx, "other", other, "before")

	mustKill(t, b, feederPath(a), "stop")
	expectEnded(t, ctx, "a", a, 5*time.Second)
	awaitGone(t, b, feederPath(a))

	publish("after")
	expectNext(t, ctx, "other", other, "after")
	again, err := c.Subscribe(ctx, st, client.SubscribeOptions{})
	if err != nil {
		t.Fatalf("subscribe after the stop: %v", err)
	}
	publish("again")
	expectNext(t, ctx, "other", other, "again")
	expectNext(t, ctx, "new subscription", again, "again")
	if v := metricSum(t, b, "felix_actor_restarts_total"); v != 0 {
		t.Errorf("felix_actor_restarts_total = %v after a stop, want 0 (a stop is no restart)", v)
	}
}

// TestChaosStopLane: a stopped lane ends the subscriptions it carried when
// they next have something to send; subscriptions on other lanes carry on,
// and a new subscription on that lane gets a replacement lane-<i>.<gen>.
func TestChaosStopLane(t *testing.T) {
	cfg := losslessChaosConfig(t)
	cfg.SubscriberWriterLanes = 2
	cfg.SubscriberLaneShard = "round_robin_pin" // subscriptions take lanes 0, 1, 0, ...
	b := brokertest.Start(t, cfg)
	ctx := testCtx(t, 30*time.Second)
	c := brokertest.Dial(t, b, cfg)
	pubc := brokertest.Dial(t, b, cfg)
	st := client.Stream{Name: "stop-lane"}
	onLane0, err := c.Subscribe(ctx, st, client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	onLane1, err := c.Subscribe(ctx, st, client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l0, l1 := feederLabel(t, b, onLane0, "lane"), feederLabel(t, b, onLane1, "lane"); l0 != "0" || l1 != "1" {
		t.Fatalf("round robin put the subscriptions on lanes %s and %s, want 0 and 1", l0, l1)
	}
	publish := func(msg string) {
		t.Helper()
		if err := pubc.Publish(ctx, st, []byte(msg), client.PublishOptions{}); err != nil {
			t.Fatalf("publish %q: %v", msg, err)
		}
	}
	publish("before")
	expectNext(t, ctx, "lane 0", onLane0, "before")
	expectNext(t, ctx, "lane 1", onLane1, "before")

	mustKill(t, b, "felix/lanes/lane-0", "stop")
	// The feeder learns its lane is gone when it next posts to it; publish
	// only once the lane has stopped, or the batch would still go through.
	awaitGone(t, b, "felix/lanes/lane-0")
	publish("after")
	expectNext(t, ctx, "lane 1", onLane1, "after")
	ctx5, cancel := context.WithTimeout(ctx, 5*time.Second)
	n, err := drainToEnd(ctx5, onLane0)
	cancel()
	if !errors.Is(err, client.ErrSubscriptionEnded) || n != 0 {
		t.Fatalf("lane 0 subscription: %d more events, then %v; want none, then ErrSubscriptionEnded", n, err)
	}
	awaitGone(t, b, feederPath(onLane0))

	replaced, err := c.Subscribe(ctx, st, client.SubscribeOptions{})
	if err != nil {
		t.Fatalf("subscribe after the lane stopped: %v", err)
	}
	if l := feederLabel(t, b, replaced, "lane"); l != "0" {
		t.Fatalf("the third subscription is on lane %s, want 0 (round robin)", l)
	}
	lane, ok := brokertest.ActorAt(b, "felix/lanes/lane-0.1")
	if !ok || lane.Kind != "lane" || lane.Parent != "felix/lanes" || lane.Labels["lane"] != "0" || lane.Capacity != cfg.SubscriberLaneQueueDepth {
		t.Fatalf("replacement lane felix/lanes/lane-0.1 = %+v (listed %v); tree:\n%s", lane, ok, treeDump(b.Actors()))
	}
	publish("again")
	expectNext(t, ctx, "lane 1", onLane1, "again")
	expectNext(t, ctx, "replacement lane", replaced, "again")
}

// TestChaosStopConnectionWriter: a stopped connection writer ends every
// subscription of its connection; another connection's carries on; the
// same connection can subscribe again (a new writer conn-<id>.1) and
// publish.
func TestChaosStopConnectionWriter(t *testing.T) {
	cfg := losslessChaosConfig(t)
	b := brokertest.Start(t, cfg)
	ctx := testCtx(t, 30*time.Second)
	c := brokertest.Dial(t, b, cfg)
	bystander := brokertest.Dial(t, b, cfg)
	st := client.Stream{Name: "stop-writer"}
	var subs []*client.Subscription
	for range 2 {
		s, err := c.Subscribe(ctx, st, client.SubscribeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, s)
	}
	other, err := bystander.Subscribe(ctx, st, client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Publishes go through c itself: its writer only carries events.
	publish := func(msg string) {
		t.Helper()
		if err := c.Publish(ctx, st, []byte(msg), client.PublishOptions{}); err != nil {
			t.Fatalf("publish %q on the connection whose writer stopped: %v", msg, err)
		}
	}
	publish("before")
	for i, s := range subs {
		expectNext(t, ctx, fmt.Sprint("subscription ", i), s, "before")
	}
	expectNext(t, ctx, "other connection", other, "before")

	conn := feederLabel(t, b, subs[0], "conn")
	if feederLabel(t, b, subs[1], "conn") != conn || feederLabel(t, b, other, "conn") == conn {
		t.Fatal("the feeders' conn labels do not tell the two connections apart")
	}
	writer := "felix/connections/conn-" + conn
	mustKill(t, b, writer, "stop")
	for i, s := range subs {
		expectEnded(t, ctx, fmt.Sprint("subscription ", i), s, 5*time.Second)
	}
	awaitGone(t, b, writer)

	publish("after")
	expectNext(t, ctx, "other connection", other, "after")
	again, err := c.Subscribe(ctx, st, client.SubscribeOptions{})
	if err != nil {
		t.Fatalf("subscribe on the same connection after its writer stopped: %v", err)
	}
	if got := feederLabel(t, b, again, "conn"); got != conn {
		t.Fatalf("new subscription's conn = %s, want %s", got, conn)
	}
	if w, ok := brokertest.ActorAt(b, writer+".1"); !ok || w.Kind != "connection_writer" || w.Labels["conn"] != conn {
		t.Fatalf("replacement writer %s.1 = %+v (listed %v); tree:\n%s", writer, w, ok, treeDump(b.Actors()))
	}
	publish("again")
	expectNext(t, ctx, "other connection", other, "again")
	expectNext(t, ctx, "new subscription", again, "again")
}

// TestChaosStopShard: a stopped shard ends its subscriptions; publishing to
// the stream again makes a new shard, and a new subscription receives.
func TestChaosStopShard(t *testing.T) {
	cfg := losslessChaosConfig(t)
	b := brokertest.Start(t, cfg)
	ctx := testCtx(t, 30*time.Second)
	c1 := brokertest.Dial(t, b, cfg)
	c2 := brokertest.Dial(t, b, cfg)
	pubc := brokertest.Dial(t, b, cfg)
	st := client.Stream{Name: "stop-shard"}
	s1, err := c1.Subscribe(ctx, st, client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s2, err := c2.Subscribe(ctx, st, client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	publish := func(msg string) {
		t.Helper()
		if err := pubc.Publish(ctx, st, []byte(msg), client.PublishOptions{}); err != nil {
			t.Fatalf("publish %q: %v", msg, err)
		}
	}
	publish("before")
	expectNext(t, ctx, "subscriber 1", s1, "before")
	expectNext(t, ctx, "subscriber 2", s2, "before")

	shard := "felix/streams/default:default:stop-shard:0"
	mustKill(t, b, shard, "stop")
	expectEnded(t, ctx, "subscriber 1", s1, 5*time.Second)
	expectEnded(t, ctx, "subscriber 2", s2, 5*time.Second)

	publish("after") // to a new shard, with no subscribers yet
	// The replacement is named with a generation suffix (the old name may
	// not be free yet in protoactor's registry).
	if a, ok := brokertest.ActorAt(b, shard+".1"); !ok || a.Kind != "shard" || a.Restarts != 0 {
		t.Fatalf("new shard %s.1 = %+v (listed %v)", shard, a, ok)
	}
	s3, err := c1.Subscribe(ctx, st, client.SubscribeOptions{})
	if err != nil {
		t.Fatalf("subscribe after the shard stopped: %v", err)
	}
	publish("again")
	expectNext(t, ctx, "new subscription", s3, "again")
	for _, f := range []*client.Subscription{s1, s2} {
		if _, ok := brokertest.ActorAt(b, feederPath(f)); ok {
			t.Errorf("feeder %s of an ended subscription is still listed", feederPath(f))
		}
	}
}

// TestChaosRun kills a random feeder, lane, connection writer or shard every
// ~50 ms for ~3 s, alternating panic and stop, while two publishers publish
// acked batches and three subscribers read, subscribing again whenever the
// broker ends their subscription. Loss is allowed (default drop_new queues,
// crashed and stopped actors); disorder and duplicates are not. Afterwards
// every subscriber receives again and the broker serves a fresh client
// exactly.
func TestChaosRun(t *testing.T) {
	const (
		publishers  = 2
		subscribers = 3
		batch       = 5
		chaosFor    = 3 * time.Second
		killEvery   = 50 * time.Millisecond
	)
	rng := brokertest.ChaosRand(t)
	cfg := chaosConfig(t)
	b := brokertest.Start(t, cfg)
	ctx := testCtx(t, 120*time.Second)
	st := client.Stream{Name: "chaos"}
	payload := func(pub, n int) []byte { return fmt.Appendf(nil, "p%d-%09d", pub, n) }
	parse := func(p []byte) (pub, n int, ok bool) {
		_, err := fmt.Sscanf(string(p), "p%d-%d", &pub, &n)
		return pub, n, err == nil && pub >= 0 && pub < publishers
	}

	// Publishers: acked batches, one at a time; a failed batch is not
	// retried, so no number is ever published twice.
	type pubStats struct {
		mu       sync.Mutex
		next     int // the next number to publish
		okB      int // batches acked OK
		failedB  int
		errs     map[string]int // failure code -> count
		unwanted []error        // failures that are not shard_unavailable or overloaded
	}
	pubs := make([]*pubStats, publishers)
	pubStop := make(chan struct{})
	var pubWG sync.WaitGroup
	for k := range publishers {
		ps := &pubStats{errs: map[string]int{}}
		pubs[k] = ps
		c := brokertest.Dial(t, b, cfg)
		pubWG.Go(func() {
			for {
				select {
				case <-pubStop:
					return
				default:
				}
				ps.mu.Lock()
				first := ps.next
				ps.next += batch
				ps.mu.Unlock()
				msgs := make([][]byte, batch)
				for i := range msgs {
					msgs[i] = payload(k, first+i)
				}
				err := c.PublishBatch(ctx, st, msgs, client.PublishOptions{})
				if ctx.Err() != nil {
					return
				}
				ps.mu.Lock()
				if err == nil {
					ps.okB++
				} else {
					ps.failedB++
					var we *wire.Error
					code := "not a wire error"
					if errors.As(err, &we) {
						code = we.Code.String()
					}
					ps.errs[code]++
					if !errors.Is(err, errShardUnavailable) && !errors.Is(err, wire.ErrOverloaded) {
						ps.unwanted = append(ps.unwanted, err)
					}
				}
				ps.mu.Unlock()
			}
		})
	}

	// Subscribers: each checks that per publisher the numbers it receives
	// only go up, across its resubscriptions too (a new subscription only
	// sees publishes the shard handles after it, all later than anything
	// the ended one delivered).
	type subStats struct {
		mu          sync.Mutex
		last        [publishers]int
		received    int
		ended       int // subscriptions the broker ended
		subscribeEr int // Subscribe calls that failed (an actor they needed was just killed)
		violations  []string
		unexpected  []error       // a subscription that ended other than with ErrSubscriptionEnded; a Subscribe that hung
		recovered   chan struct{} // closed on the first event numbered from recoverFrom on
		recoverFrom [publishers]int
		recovering  bool
	}
	subCtx, subCancel := context.WithCancel(ctx)
	defer subCancel()
	subs := make([]*subStats, subscribers)
	var subWG sync.WaitGroup
	for i := range subscribers {
		ss := &subStats{recovered: make(chan struct{})}
		for k := range ss.last {
			ss.last[k] = -1
		}
		subs[i] = ss
		c := brokertest.Dial(t, b, cfg)
		subWG.Go(func() {
			for subCtx.Err() == nil {
				// Bounded, so a Subscribe that never returns is reported
				// rather than hanging the subscriber until the test's end.
				// (The broker answers within its 5 s request timeout.)
				callCtx, cancel := context.WithTimeout(subCtx, 10*time.Second)
				sub, err := c.Subscribe(callCtx, st, client.SubscribeOptions{})
				hung := callCtx.Err() != nil && subCtx.Err() == nil
				cancel()
				if err != nil {
					if subCtx.Err() != nil {
						return
					}
					ss.mu.Lock()
					ss.subscribeEr++
					if hung {
						ss.unexpected = append(ss.unexpected, fmt.Errorf("Subscribe did not return within 10 s: %w", err))
					}
					ss.mu.Unlock()
					// Chaos just killed something the subscribe needed; the
					// next attempt gets a replacement. Back off a little.
					select {
					case <-time.After(5 * time.Millisecond):
					case <-subCtx.Done():
						return
					}
					continue
				}
				for {
					ev, err := sub.Next(subCtx)
					if err != nil {
						ss.mu.Lock()
						switch {
						case errors.Is(err, client.ErrSubscriptionEnded):
							ss.ended++
						case subCtx.Err() == nil:
							ss.unexpected = append(ss.unexpected, fmt.Errorf("a subscription ended with %w", err))
						}
						ss.mu.Unlock()
						_ = sub.Close(subCtx)
						break
					}
					k, n, ok := parse(ev.Payload)
					ss.mu.Lock()
					ss.received++
					switch {
					case !ok:
						ss.violations = append(ss.violations, fmt.Sprintf("unexpected payload %q", ev.Payload))
					case n <= ss.last[k]:
						ss.violations = append(ss.violations, fmt.Sprintf("publisher %d: %d after %d", k, n, ss.last[k]))
					default:
						ss.last[k] = n
						if ss.recovering && n >= ss.recoverFrom[k] {
							ss.recovering = false
							close(ss.recovered)
						}
					}
					ss.mu.Unlock()
				}
			}
		})
	}

	// Chaos.
	kinds := []string{"feeder", "lane", "connection_writer", "shard"}
	kills := map[string]int{}
	var killErrs []error
	chaosEnd := time.Now().Add(chaosFor)
	tick := time.NewTicker(killEvery)
	for i := 0; time.Now().Before(chaosEnd); i++ {
		<-tick.C
		mode := "panic"
		if i%2 == 1 {
			mode = "stop"
		}
		kind := kinds[rng.IntN(len(kinds))]
		res, err := b.Kill(broker.KillRequest{Kind: kind, Mode: mode})
		if err != nil {
			killErrs = append(killErrs, err)
			continue
		}
		kills[kind+" "+mode] += len(res.Killed)
	}
	tick.Stop()
	if len(killErrs) > 0 {
		t.Errorf("kills refused: %v", killErrs)
	}

	// Recovery: every subscriber must receive something published after
	// the chaos ended, whatever it was doing when it ended.
	for _, ss := range subs {
		ss.mu.Lock()
		for k, ps := range pubs {
			ps.mu.Lock()
			ss.recoverFrom[k] = ps.next
			ps.mu.Unlock()
		}
		ss.recovering = true
		ss.mu.Unlock()
	}
	recoverCtx, cancelRecover := context.WithTimeout(ctx, 30*time.Second)
	for i, ss := range subs {
		select {
		case <-ss.recovered:
		case <-recoverCtx.Done():
			ss.mu.Lock()
			t.Errorf("subscriber %d received nothing published after the chaos within 30 s (received %d, ended %d, last %v)", i, ss.received, ss.ended, ss.last)
			ss.mu.Unlock()
		}
	}
	cancelRecover()
	close(pubStop)
	pubWG.Wait()
	subCancel()
	subWG.Wait()

	var okB, failedB int
	for k, ps := range pubs {
		okB += ps.okB
		failedB += ps.failedB
		t.Logf("publisher %d: %d batches acked OK, %d failed %v", k, ps.okB, ps.failedB, ps.errs)
		for _, err := range ps.unwanted {
			t.Errorf("publisher %d: a publish failed with %v; want only shard_unavailable or overloaded", k, err)
		}
	}
	for i, ss := range subs {
		t.Logf("subscriber %d: received %d events over %d subscriptions (%d ended by the broker, %d subscribes refused)",
			i, ss.received, ss.ended+1, ss.ended, ss.subscribeEr)
		for _, v := range ss.violations {
			t.Errorf("subscriber %d: %s", i, v)
		}
		for _, err := range ss.unexpected {
			t.Errorf("subscriber %d: %v (want every subscription to end with ErrSubscriptionEnded, every Subscribe to return)", i, err)
		}
	}
	restarts := metricSum(t, b, "felix_actor_restarts_total")
	t.Logf("kills: %v; felix_actor_restarts_total %v; %d batches acked OK, %d failed", kills, restarts, okB, failedB)
	if okB == 0 {
		t.Error("no publish succeeded during the chaos")
	}
	if restarts <= 0 {
		t.Error("felix_actor_restarts_total = 0 after the chaos; the panics restarted nothing?")
	}

	// The broker still serves the stream that went through the chaos: a
	// fresh client (nothing cached in its session) subscribes, publishes
	// and gets everything, in order. Every earlier publish has been
	// answered, so nothing else arrives.
	fresh := brokertest.Dial(t, b, cfg)
	sub, err := fresh.Subscribe(ctx, st, client.SubscribeOptions{})
	if err != nil {
		t.Fatalf("subscribe after the chaos: %v", err)
	}
	const n = 100
	for i := range n {
		if err := fresh.Publish(ctx, st, []byte(seq(i)), client.PublishOptions{}); err != nil {
			t.Fatalf("publish %d after the chaos: %v", i, err)
		}
	}
	got, err := collect(ctx, sub, n)
	if err != nil {
		t.Fatalf("after the chaos: %v", err)
	}
	checkSeq(t, "fresh subscriber", got, n)
}
