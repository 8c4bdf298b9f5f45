package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/clustertest"
	"github.com/getfelix/felix-go/wire"
)

// Replicated streams over three broker processes: the faults.
// Every check compares the replicas' own logs, read from each member
// directly with follower reads (a member of a shard's replica set serves
// them from what it applied).

// replicatedStream is a durable stream with three replicas and one shard,
// so every fault lands on one raft group.
var replicatedStream = client.Stream{Namespace: "e2e", Name: "replicated"}

// clientOptions trusts the members; in network namespaces they listen on
// addresses their shared certificate does not name.
func clientOptions(c *clustertest.Cluster) client.Options {
	o := c.ClientOptions()
	o.Insecure = c.InNetNS()
	return o
}

// dialAll connects a ClusterClient seeded with every member, so it finds
// the cluster whichever member is down.
func dialAll(t testing.TB, c *clustertest.Cluster) *client.ClusterClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	o := clientOptions(c)
	o.DialTimeout = time.Second
	o.IdleTimeout, o.KeepAlive = 1500*time.Millisecond, 300*time.Millisecond
	cc, err := client.DialCluster(ctx, c.Addrs(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close(context.Background()) })
	return cc
}

func createReplicated(ctx context.Context, t *testing.T, cc *client.ClusterClient) {
	t.Helper()
	for {
		info, err := cc.CreateStream(ctx, replicatedStream, client.StreamConfig{Durable: true, Replicas: 3})
		if err == nil {
			if info.Replicas != 3 {
				t.Fatalf("created with %d replicas; want 3", info.Replicas)
			}
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("create the replicated stream: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// onMember runs do with a fresh client to m (members restart under the
// tests, so no connection is kept).
func onMember(ctx context.Context, c *clustertest.Cluster, m *clustertest.Member, do func(*client.Client) error) error {
	dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	cl, err := client.Dial(dctx, m.Addr, clientOptions(c))
	if err != nil {
		return err
	}
	defer func() { _ = cl.Close(context.Background()) }()
	return do(cl)
}

// leaderOf waits for the member whose replica leads the shard, by its
// own view.
func leaderOf(ctx context.Context, t *testing.T, c *clustertest.Cluster) *clustertest.Member {
	t.Helper()
	for {
		for _, m := range c.Members() {
			if !m.Running() || m.Frozen() {
				continue
			}
			var leads bool
			_ = onMember(ctx, c, m, func(cl *client.Client) error {
				v, err := cl.Replication(ctx, replicatedStream)
				leads = err == nil && len(v.Shards) == 1 && v.Shards[0].Leader == m.NodeID && len(v.Shards[0].Replicas) == 3
				return err
			})
			if leads {
				return m
			}
		}
		if ctx.Err() != nil {
			t.Fatal("no member leads the replicated shard")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// replicaLog reads m's whole replica of the shard.
func replicaLog(ctx context.Context, c *clustertest.Cluster, m *clustertest.Member) ([]client.Record, error) {
	var out []client.Record
	err := onMember(ctx, c, m, func(cl *client.Client) error {
		for from := uint64(0); ; {
			page, err := cl.Read(ctx, replicatedStream, from, client.ReadOptions{FollowerMaxLag: time.Minute})
			if err != nil {
				return err
			}
			out = append(out, page.Records...)
			if len(page.Records) == 0 || page.Next >= page.Committed {
				return nil
			}
			from = page.Next
		}
	})
	return out, err
}

// converged waits until every member's replica holds the same records,
// at least min of them, and returns them.
func converged(ctx context.Context, t *testing.T, c *clustertest.Cluster, min int) []client.Record {
	t.Helper()
	for {
		logs := make([][]client.Record, 0, len(c.Members()))
		var err error
		for _, m := range c.Members() {
			var l []client.Record
			if l, err = replicaLog(ctx, c, m); err != nil {
				break
			}
			logs = append(logs, l)
		}
		if err == nil && len(logs[0]) >= min && sameRecords(logs) {
			return logs[0]
		}
		if ctx.Err() != nil {
			for i, l := range logs {
				t.Logf("member %s holds %d records", c.Members()[i].NodeID, len(l))
			}
			t.Fatalf("the replicas did not converge (last error %v)", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func sameRecords(logs [][]client.Record) bool {
	for _, l := range logs[1:] {
		if len(l) != len(logs[0]) {
			return false
		}
		for i := range l {
			if l[i].Offset != logs[0][i].Offset || string(l[i].Payload) != string(logs[0][i].Payload) {
				return false
			}
		}
	}
	return true
}

// ackLog is what idempotent publishers were acknowledged: payload to offset.
type ackLog struct {
	mu    sync.Mutex
	acked map[string]uint64
}

func (a *ackLog) add(payload string, offset uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.acked[payload] = offset
}

func (a *ackLog) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.acked)
}

// publishIdempotently runs n idempotent producers, each publishing
// one-record batches until stop closes; every acknowledgement goes in
// acks. A final refusal fails the test.
func publishIdempotently(ctx context.Context, t *testing.T, cc *client.ClusterClient, n int, acks *ackLog, stop <-chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	for w := range n {
		p, err := cc.NewIdempotentProducer(ctx)
		if err != nil {
			t.Fatal(err)
		}
		p.AckTimeout = 3 * time.Second
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { _ = p.Close(context.Background()) }()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				payload := fmt.Sprintf("w%d-%06d", w, i)
				res, err := p.Publish(ctx, replicatedStream, [][]byte{[]byte(payload)}, nil)
				if err != nil {
					t.Errorf("producer %d: %s: %v", w, payload, err)
					return
				}
				acks.add(payload, res.Offset)
			}
		}()
	}
	return &wg
}

// checkExactlyOnce: the log's offsets are contiguous from 0, no payload is
// in it twice, and every acknowledged payload is in it at its
// acknowledged offset.
func checkExactlyOnce(t *testing.T, log []client.Record, acks *ackLog) {
	t.Helper()
	at := map[string]uint64{}
	for i, r := range log {
		if r.Offset != uint64(i) {
			t.Fatalf("record %d has offset %d: offsets are not contiguous", i, r.Offset)
		}
		if prev, dup := at[string(r.Payload)]; dup {
			t.Fatalf("%q is in the log twice, at %d and %d", r.Payload, prev, r.Offset)
		}
		at[string(r.Payload)] = r.Offset
	}
	acks.mu.Lock()
	defer acks.mu.Unlock()
	for p, off := range acks.acked {
		got, ok := at[p]
		switch {
		case !ok:
			t.Errorf("acknowledged %q (offset %d) is not in the log", p, off)
		case got != off:
			t.Errorf("acknowledged %q at offset %d is at %d", p, off, got)
		}
	}
}

// waitAcks waits until acks holds at least n acknowledgements.
func waitAcks(ctx context.Context, t *testing.T, acks *ackLog, n int, what string) {
	t.Helper()
	for acks.count() < n {
		if ctx.Err() != nil {
			t.Fatalf("%s: %d acknowledgements, want %d", what, acks.count(), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// faultRun is a replicated stream on a running cluster with idempotent
// producers publishing to it, for one fault test.
type faultRun struct {
	c     *clustertest.Cluster
	cc    *client.ClusterClient
	ctx   context.Context
	acks  *ackLog
	stop  chan struct{}
	wg    *sync.WaitGroup
	start int // acknowledgements before the fault
}

// startFaultRun starts opts' cluster (three members), creates the
// replicated stream and n producers, and waits for first acknowledgements.
func startFaultRun(t *testing.T, opts clustertest.Options, n, first int, limit time.Duration) *faultRun {
	t.Helper()
	opts.Nodes, opts.LeaseTTL = 3, leaseTTL
	c := clustertest.Start(t, opts)
	c.WaitReady(t, 3)
	r := &faultRun{c: c, cc: dialAll(t, c), acks: &ackLog{acked: map[string]uint64{}}, stop: make(chan struct{})}
	var cancel context.CancelFunc
	r.ctx, cancel = context.WithTimeout(context.Background(), limit)
	t.Cleanup(cancel)
	createReplicated(r.ctx, t, r.cc)
	r.wg = publishIdempotently(r.ctx, t, r.cc, n, r.acks, r.stop)
	waitAcks(r.ctx, t, r.acks, first, "before the fault")
	return r
}

// progress waits for n more acknowledgements than now.
func (r *faultRun) progress(t *testing.T, n int, what string) {
	t.Helper()
	waitAcks(r.ctx, t, r.acks, r.acks.count()+n, what)
}

// finish stops the producers, waits for the replicas to converge, checks
// every acknowledged record is in the one history once, and returns it.
func (r *faultRun) finish(t *testing.T) []client.Record {
	t.Helper()
	close(r.stop)
	r.wg.Wait()
	log := converged(r.ctx, t, r.c, r.acks.count())
	checkExactlyOnce(t, log, r.acks)
	return log
}

// TestReplicatedLeaderKilledTenTimes: the shard's leader is SIGKILLed ten
// times (and restarted) while 8 idempotent producers publish; every
// acknowledged record is in every replica exactly once, at its
// acknowledged offset, offsets contiguous, and the replicas are identical.
func TestReplicatedLeaderKilledTenTimes(t *testing.T) {
	r := startFaultRun(t, clustertest.Options{}, 8, 50, 4*time.Minute)
	for kill := range 10 {
		leader := leaderOf(r.ctx, t, r.c)
		leader.Kill()
		// A new leader takes publishes: the producers move on.
		r.progress(t, 40, fmt.Sprintf("after kill %d of %s", kill+1, leader.NodeID))
		leader.Restart(t)
	}
	log := r.finish(t)
	t.Logf("%d records acknowledged, %d in each replica, after 10 leader kills", r.acks.count(), len(log))
}

// TestReplicatedLeaderFrozenAcknowledgesNothing: the leader is stopped
// with SIGSTOP for 10 s. The others elect a new leader and go on; the old
// one, resumed with publishes sent straight to it in flight, acknowledges
// none of them, and its replica converges to the new leader's log.
func TestReplicatedLeaderFrozenAcknowledgesNothing(t *testing.T) {
	r := startFaultRun(t, clustertest.Options{}, 2, 20, 2*time.Minute)
	old := leaderOf(r.ctx, t, r.c)
	direct := dialDirect(r.ctx, t, r.c, old)
	frozenAt := time.Now()
	old.Freeze(t)
	r.progress(t, 40, "while the old leader is frozen")
	// Publishes straight to the frozen leader, queued while it sleeps.
	results, sent := publishStale(r.ctx, direct, 20)
	time.Sleep(10*time.Second - time.Since(frozenAt)) // the fault: frozen for 10 s
	old.Thaw(t)
	sent.Wait()
	close(results)
	checkRefused(t, results)
	checkNoStale(t, r.finish(t))
}

// dialDirect connects a plain client to m, whose connection outlives a
// freeze or a partition, and checks m takes a publish now.
func dialDirect(ctx context.Context, t *testing.T, c *clustertest.Cluster, m *clustertest.Member) *client.Client {
	t.Helper()
	o := clientOptions(c)
	o.IdleTimeout = 30 * time.Second
	direct, err := client.Dial(ctx, m.Addr, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = direct.Close(context.Background()) })
	if err := direct.Publish(ctx, replicatedStream, []byte("before"), client.PublishOptions{}); err != nil {
		t.Fatalf("publish to the leader %s before the fault: %v", m.NodeID, err)
	}
	return direct
}

// publishStale sends n publishes of "stale" through direct, each waiting
// up to 20 s; their results come on the channel.
func publishStale(ctx context.Context, direct *client.Client, n int) (chan error, *sync.WaitGroup) {
	results := make(chan error, n)
	var sent sync.WaitGroup
	for range n {
		sent.Add(1)
		go func() {
			defer sent.Done()
			pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			results <- direct.Publish(pctx, replicatedStream, []byte("stale"), client.PublishOptions{})
		}()
	}
	return results, &sent
}

// checkRefused: none of results is an acknowledgement, and each refusal
// is typed.
func checkRefused(t *testing.T, results chan error) {
	t.Helper()
	refusals := map[string]int{}
	for err := range results {
		var we *wire.Error
		var lost *client.ConnectionLostError
		switch {
		case err == nil:
			t.Error("the resumed old leader acknowledged a publish")
		case errors.As(err, &we):
			refusals[we.Code.String()]++
		case errors.As(err, &lost):
			refusals["connection lost"]++
		default:
			t.Errorf("refusal is not typed: %v", err)
		}
	}
	t.Logf("publishes sent to the old leader: %v", refusals)
}

func checkNoStale(t *testing.T, log []client.Record) {
	t.Helper()
	for _, r := range log {
		if string(r.Payload) == "stale" {
			t.Fatalf("a publish sent to the old leader is in the log at %d", r.Offset)
		}
	}
}

// TestReplicatedLeaderPartitionedAcknowledgesNothing: the leader is cut
// off from the other members (network namespaces, blackhole routes both
// ways) while etcd and clients still reach it. The majority elects a new
// leader and goes on; publishes sent straight to the old leader are
// acknowledged by nobody; after healing there is one history, every
// acknowledged record once.
func TestReplicatedLeaderPartitionedAcknowledgesNothing(t *testing.T) {
	r := startFaultRun(t, clustertest.Options{NetNS: true}, 2, 20, 2*time.Minute)
	old := leaderOf(r.ctx, t, r.c)
	direct := dialDirect(r.ctx, t, r.c, old)
	r.c.Partition(t, old)
	results, sent := publishStale(r.ctx, direct, 20)
	r.progress(t, 40, "while the old leader is cut off")
	r.c.Heal(t, old)
	sent.Wait()
	close(results)
	checkRefused(t, results)
	checkNoStale(t, r.finish(t))
}

// TestReplicatedFollowerDiskFails: one follower's disk fails every write
// (the broker's chaos disk). The shard keeps serving from the quorum; the
// failed replica is reported (felix_replica_failures_total on its member,
// a lag in the leader's view); once its disk works again it catches up,
// and the three logs are one history.
func TestReplicatedFollowerDiskFails(t *testing.T) {
	r := startFaultRun(t, clustertest.Options{ExtraArgs: []string{"--chaos"}}, 2, 20, 2*time.Minute)
	leader := leaderOf(r.ctx, t, r.c)
	var failed *clustertest.Member
	for _, m := range r.c.Members() {
		if m != leader {
			failed = m
			break
		}
	}
	r.c.FailDisk(t, failed, true)
	r.progress(t, 100, "with a follower's disk failing")
	for r.c.Metric(t, failed, "felix_replica_failures_total") < 1 {
		if r.ctx.Err() != nil {
			t.Fatalf("%s never reported its replica failed", failed.NodeID)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The leader's view is refreshed every 200 ms.
	for lagOf(r.ctx, t, r.c, leader, failed.NodeID) == 0 {
		if r.ctx.Err() != nil {
			t.Fatalf("the leader %s never saw %s, whose disk fails, lag", leader.NodeID, failed.NodeID)
		}
		time.Sleep(100 * time.Millisecond)
	}
	r.c.FailDisk(t, failed, false)
	r.finish(t)
}

// lagOf is how many records the leader says node lacks.
func lagOf(ctx context.Context, t *testing.T, c *clustertest.Cluster, leader *clustertest.Member, node string) uint64 {
	t.Helper()
	var lag uint64
	err := onMember(ctx, c, leader, func(cl *client.Client) error {
		v, err := cl.Replication(ctx, replicatedStream)
		if err != nil {
			return err
		}
		for _, s := range v.Shards {
			for _, p := range s.Replicas {
				if p.Node == node {
					lag = p.LagRecords
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return lag
}
