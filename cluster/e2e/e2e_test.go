package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/clustertest"
	"github.com/getfelix/felix-go/wire"
)

// The cluster as a user runs it: broker processes on loopback, an etcd
// process, and the Go ClusterClient.

func TestMain(m *testing.M) { clustertest.Main(m) }

const leaseTTL = 2 * time.Second

func startCluster(t *testing.T) *clustertest.Cluster {
	t.Helper()
	c := clustertest.Start(t, clustertest.Options{Nodes: 3, LeaseTTL: leaseTTL})
	c.WaitReady(t, 3)
	return c
}

// dial connects a ClusterClient seeded with ONE member's address.
func dial(t *testing.T, c *clustertest.Cluster, seed string) *client.ClusterClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	o := c.ClientOptions()
	o.DialTimeout = time.Second
	// The lease is 2 s here: notice a killed member as fast.
	o.IdleTimeout, o.KeepAlive = 1500*time.Millisecond, 300*time.Millisecond
	cc, err := client.DialCluster(ctx, []string{seed}, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close(context.Background()) })
	return cc
}

func stream(i int) client.Stream {
	return client.Stream{Namespace: "e2e", Name: fmt.Sprintf("s%02d", i)}
}

// owners maps each stream (shard 0) to the member that owns it.
func owners(ctx context.Context, t *testing.T, cc *client.ClusterClient, n int) map[int]string {
	t.Helper()
	out := map[int]string{}
	for i := range n {
		for {
			top, err := cc.ShardOwners(ctx, stream(i))
			if err != nil {
				t.Fatalf("shard_owners %s: %v", stream(i).Name, err)
			}
			if top.Owners[0].Available {
				out[i] = top.Owners[0].Owner.NodeID
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("stream %d never placed", i)
			}
		}
	}
	return out
}

// TestThirtyStreamsThroughOneSeed: three members, 30 streams spread over
// them; one ClusterClient seeded with one address publishes to and
// subscribes to all of them, every message arrives.
func TestThirtyStreamsThroughOneSeed(t *testing.T) {
	c := startCluster(t)
	cc := dial(t, c, c.Members()[0].Addr)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const streams, perStream = 30, 20
	own := owners(ctx, t, cc, streams)
	spread := map[string]int{}
	for _, m := range own {
		spread[m]++
	}
	if len(spread) != 3 {
		t.Fatalf("30 streams on %d members: %v", len(spread), spread)
	}
	subs := make([]*client.ClusterSubscription, streams)
	for i := range streams {
		sub, err := cc.Subscribe(ctx, stream(i), client.SubscribeOptions{})
		if err != nil {
			t.Fatalf("subscribe %d: %v", i, err)
		}
		subs[i] = sub
		t.Cleanup(func() { _ = sub.Close(context.Background()) })
	}
	for i := range streams {
		for j := range perStream {
			if err := cc.Publish(ctx, stream(i), []byte(fmt.Sprintf("%d/%d", i, j)), client.PublishOptions{}); err != nil {
				t.Fatalf("publish %d/%d: %v", i, j, err)
			}
		}
	}
	for i, sub := range subs {
		for j := range perStream {
			ev, err := sub.Next(ctx)
			if err != nil {
				t.Fatalf("stream %d event %d: %v", i, j, err)
			}
			if want := fmt.Sprintf("%d/%d", i, j); string(ev.Payload) != want {
				t.Fatalf("stream %d got %q, want %q", i, ev.Payload, want)
			}
		}
	}
}

// publisher publishes to one stream in a loop and records when each
// publish succeeded or failed.
type publisher struct {
	st       client.Stream
	ok, fail atomic.Int64
	mu       sync.Mutex
	lastOK   time.Time
	// lastOKSent is when the last successful publish was sent: a publish
	// the killed member acked just before dying completes after the kill,
	// but was sent before it.
	lastOKSent time.Time
	maxGap     time.Duration
	firstErr   error
}

func (p *publisher) run(ctx context.Context, cc *client.ClusterClient) {
	for i := 0; ctx.Err() == nil; i++ {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		sent := time.Now()
		err := cc.Publish(pctx, p.st, []byte(fmt.Sprint(i)), client.PublishOptions{})
		cancel()
		now := time.Now()
		p.mu.Lock()
		if err == nil {
			p.ok.Add(1)
			if !p.lastOK.IsZero() {
				p.maxGap = max(p.maxGap, now.Sub(p.lastOK))
			}
			p.lastOK, p.lastOKSent = now, sent
		} else if ctx.Err() == nil {
			p.fail.Add(1)
			if p.firstErr == nil {
				p.firstErr = err
			}
		}
		p.mu.Unlock()
		time.Sleep(5 * time.Millisecond)
	}
}

// startPublishers runs a publisher on each of the first n streams; stop
// ends them and waits.
func startPublishers(ctx context.Context, cc *client.ClusterClient, n int) (pubs []*publisher, stop func()) {
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	pubs = make([]*publisher, n)
	for i := range n {
		pubs[i] = &publisher{st: stream(i)}
		wg.Add(1)
		go func() { defer wg.Done(); pubs[i].run(runCtx, cc) }()
	}
	return pubs, func() { cancel(); wg.Wait() }
}

// gap is the longest time between two successful publishes.
func (p *publisher) gap() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.maxGap
}

// since reports whether a publish sent after t has succeeded.
func (p *publisher) since(t time.Time) (ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastOKSent.After(t)
}

// TestKillMemberWhilePublishing: SIGKILL the owner of some in-memory
// streams while publishing to every stream. Its streams have a new owner
// and publishing resumes within the lease TTL plus 2 s; their subscribers
// resubscribe and receive again; the other members' streams never fail.
func TestKillMemberWhilePublishing(t *testing.T) {
	c := startCluster(t)
	cc := dial(t, c, c.Members()[0].Addr)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const streams = 12
	own := owners(ctx, t, cc, streams)
	victim := own[0]
	if victim == c.Members()[0].NodeID {
		// Keep the seed alive: the client must learn the new owners from it.
		for i := range streams {
			if own[i] != victim {
				victim = own[i]
				break
			}
		}
	}
	pubs, stopPublishing := startPublishers(ctx, cc, streams)
	// One subscriber on a stream of the victim.
	var victimStream int
	for i := range streams {
		if own[i] == victim {
			victimStream = i
			break
		}
	}
	sub, err := cc.Subscribe(ctx, stream(victimStream), client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close(context.Background())
	var resubscribed atomic.Int64
	sub.OnResubscribe = func(error) { resubscribed.Add(1) }
	if _, err := sub.Next(ctx); err != nil {
		t.Fatal(err)
	}

	killed := time.Now()
	c.Member(victim).Kill()
	deadline := killed.Add(leaseTTL + 2*time.Second)
	for i := range streams {
		if own[i] != victim {
			continue
		}
		for !pubs[i].since(killed) {
			if time.Now().After(deadline) {
				t.Fatalf("stream %d (on %s, killed) did not resume publishing within TTL+2s", i, victim)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	resumed := time.Since(killed)
	// The subscriber resubscribed at the new owner and receives again.
	for {
		if _, err := sub.Next(ctx); err != nil {
			t.Fatalf("subscriber after the kill: %v", err)
		}
		if resubscribed.Load() > 0 {
			break
		}
	}
	stopPublishing()
	for i := range streams {
		if own[i] == victim {
			continue
		}
		if n := pubs[i].fail.Load(); n > 0 {
			t.Errorf("stream %d on %s (alive) had %d failed publishes (first: %v)", i, own[i], n, pubs[i].firstErr)
		}
		// Never paused: no gap between successes as long as the lease
		// the killed member's streams waited out.
		if gap := pubs[i].gap(); gap >= leaseTTL {
			t.Errorf("stream %d on %s (alive) paused %s during the failover", i, own[i], gap)
		}
	}
	newOwners := owners(ctx, t, cc, streams)
	for i := range streams {
		if newOwners[i] == victim {
			t.Errorf("stream %d still owned by the killed member", i)
		}
		if own[i] != victim && newOwners[i] != own[i] {
			t.Errorf("stream %d moved from %s to %s though its member lives", i, own[i], newOwners[i])
		}
	}
	t.Logf("publishing resumed %s after SIGKILL (lease TTL %s)", resumed.Round(time.Millisecond), leaseTTL)
}

// TestFrozenOwnerAcknowledgesNothing: an owner frozen (SIGSTOP) past its
// lease TTL loses its shards to the others; resumed, it acknowledges no
// publish for the shards it lost: every publish sent straight to it fails.
func TestFrozenOwnerAcknowledgesNothing(t *testing.T) {
	c := startCluster(t)
	seed := c.Members()[0]
	cc := dial(t, c, seed.Addr)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const streams = 9
	own := owners(ctx, t, cc, streams)
	var frozen *clustertest.Member
	var lost []int
	for _, m := range c.Members()[1:] {
		for i := range streams {
			if own[i] == m.NodeID {
				lost = append(lost, i)
			}
		}
		if len(lost) > 0 {
			frozen = m
			break
		}
	}
	if frozen == nil {
		t.Fatal("no stream on members 2 and 3")
	}
	// A plain client straight to the member that will be frozen.
	o := c.ClientOptions()
	direct, err := client.Dial(ctx, frozen.Addr, o)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close(context.Background())
	if err := direct.Publish(ctx, stream(lost[0]), []byte("before"), client.PublishOptions{}); err != nil {
		t.Fatalf("publish to the owner before the freeze: %v", err)
	}

	frozen.Freeze(t)
	// The others take its shards once its lease expires.
	for {
		now := owners(ctx, t, cc, streams)
		if now[lost[0]] != frozen.NodeID {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := cc.Publish(ctx, stream(lost[0]), []byte("new owner"), client.PublishOptions{}); err != nil {
		t.Fatalf("publish at the new owner: %v", err)
	}
	// Publishes straight to the frozen member, in flight while it wakes.
	results := make(chan error, 50)
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			results <- direct.Publish(pctx, stream(lost[i%len(lost)]), []byte("stale"), client.PublishOptions{})
		}()
	}
	frozen.Thaw(t)
	wg.Wait()
	close(results)
	acked := 0
	for err := range results {
		if err == nil {
			acked++
			continue
		}
		var we *wire.Error
		var lostConn *client.ConnectionLostError
		if !errors.As(err, &we) && !errors.As(err, &lostConn) {
			t.Errorf("refusal is not typed: %v", err)
		}
	}
	if acked > 0 {
		t.Fatalf("the resumed member acknowledged %d publishes for shards it had lost", acked)
	}
}

// TestDrainMovesEveryShard: drain a member while a ClusterClient publishes
// to every stream: all its shards move away, and no publish fails.
func TestDrainMovesEveryShard(t *testing.T) {
	c := startCluster(t)
	cc := dial(t, c, c.Members()[0].Addr)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const streams = 12
	own := owners(ctx, t, cc, streams)
	target := c.Members()[1]
	had := 0
	for _, m := range own {
		if m == target.NodeID {
			had++
		}
	}
	if had == 0 {
		t.Fatal("the member to drain owns no stream")
	}
	pubs, stopPublishing := startPublishers(ctx, cc, streams)
	for _, p := range pubs { // traffic on every stream before the drain
		for p.ok.Load() == 0 && ctx.Err() == nil {
			time.Sleep(10 * time.Millisecond)
		}
	}
	c.Drain(t, c.Members()[0], target.NodeID)
	for {
		st := c.Status(t, c.Members()[0])
		var left int
		for _, m := range st.Members {
			if m.NodeID == target.NodeID {
				left = m.ShardsOwned - m.DurableShardsOwned
			}
		}
		if left == 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("drain did not finish: %d shards left", left)
		}
		time.Sleep(50 * time.Millisecond)
	}
	drained := time.Now()
	for i := range streams {
		for !pubs[i].since(drained) {
			if ctx.Err() != nil {
				t.Fatalf("stream %d did not publish after the drain", i)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	stopPublishing()
	var failed []string
	for i, p := range pubs {
		if n := p.fail.Load(); n > 0 {
			failed = append(failed, fmt.Sprintf("stream %d: %d (first %v)", i, n, p.firstErr))
		}
	}
	sort.Strings(failed)
	if len(failed) > 0 {
		t.Fatalf("publishes failed during the drain: %v", failed)
	}
	for i, m := range owners(ctx, t, cc, streams) {
		if m == target.NodeID {
			t.Errorf("stream %d still on the drained member", i)
		}
	}
}
