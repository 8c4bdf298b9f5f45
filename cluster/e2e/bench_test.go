package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/clustertest"
	"github.com/getfelix/felix-go/loadgen"
	"github.com/getfelix/felix-go/wire"
)

// Benchmarks of the cluster against one broker on the same machine, in
// the same run (docs/BENCHMARKS.md has the numbers and the command):
//
//	go test ./cluster/e2e/ -run '^$' -bench . -benchtime 200000x -count 3

// noCluster are the flags that make the harness's one member a plain
// broker: no etcd, and no peer link (which only a cluster member has).
var noCluster = []string{"--cluster-etcd=", "--cluster-tls-ca=", "--cluster-tls-cert=", "--cluster-tls-key="}

const (
	benchStreams = 12
	benchPayload = 128
	benchBatch   = 32
)

// BenchmarkThroughput publishes b.N records over 12 in-memory streams
// (one pipelining publisher each, batches of 32 × 128 B, at each stream's
// owner) with F subscribers per stream, on one broker and on a 3-member
// cluster whose streams are spread over all three.
func BenchmarkThroughput(b *testing.B) {
	for _, topo := range []string{"single", "cluster3"} {
		for _, fanout := range []int{1, 4} {
			b.Run(fmt.Sprintf("%s/fanout=%d", topo, fanout), func(b *testing.B) {
				benchThroughput(b, topo, fanout)
			})
		}
	}
}

func benchThroughput(b *testing.B, topo string, fanout int) {
	opts := clustertest.Options{Nodes: 3}
	if topo == "single" {
		opts = clustertest.Options{Nodes: 1, ExtraArgs: noCluster}
	}
	_, cc, ctx := startBench(b, opts, topo != "single")
	streams := make([]client.Stream, benchStreams)
	owners := map[string]bool{}
	for i := range streams {
		streams[i] = client.Stream{Namespace: "bench", Name: fmt.Sprintf("%s-%d", topo, i)}
		top, err := cc.ShardOwners(ctx, streams[i])
		if err != nil {
			b.Fatal(err)
		}
		owners[top.Owners[0].Owner.NodeID] = true
	}
	if topo != "single" && len(owners) != 3 {
		b.Fatalf("streams on %d members, want 3", len(owners))
	}
	perStream := max(b.N/benchStreams/benchBatch, 1) * benchBatch
	var subs sync.WaitGroup
	subErr := make(chan error, benchStreams*fanout)
	for _, st := range streams {
		for range fanout {
			sub, err := cc.Subscribe(ctx, st, client.SubscribeOptions{QueueCapacity: 4096})
			if err != nil {
				b.Fatal(err)
			}
			subs.Add(1)
			go func() {
				defer subs.Done()
				defer sub.Close(context.Background())
				for range perStream {
					if _, err := sub.Next(ctx); err != nil {
						subErr <- err
						return
					}
				}
			}()
		}
	}
	payloads := make([][]byte, benchBatch)
	for i := range payloads {
		payloads[i] = make([]byte, benchPayload)
	}
	b.ResetTimer()
	start := time.Now()
	var pubs sync.WaitGroup
	pubErr := make(chan error, benchStreams)
	for _, st := range streams {
		pubs.Add(1)
		go func() {
			defer pubs.Done()
			owner, err := cc.ClientFor(ctx, st, 0)
			if err != nil {
				pubErr <- err
				return
			}
			for sent := 0; sent < perStream; sent += benchBatch {
				if err := owner.Produce(ctx, st, payloads, client.PublishOptions{}, func(_ client.PublishResult, err error) {
					if err != nil {
						select {
						case pubErr <- err:
						default:
						}
					}
				}); err != nil {
					pubErr <- err
					return
				}
			}
			if err := owner.Flush(ctx); err != nil {
				pubErr <- err
			}
		}()
	}
	pubs.Wait()
	published := time.Since(start)
	subs.Wait()
	delivered := time.Since(start)
	b.StopTimer()
	select {
	case err := <-pubErr:
		b.Fatal(err)
	case err := <-subErr:
		b.Fatal(err)
	default:
	}
	total := float64(perStream * benchStreams)
	b.ReportMetric(total/published.Seconds(), "published/s")
	b.ReportMetric(total*float64(fanout)/delivered.Seconds(), "delivered/s")
	b.ReportMetric(0, "ns/op")
}

// startBench starts the members opts asks for, waits for them to form a
// cluster when cluster says so, and dials a ClusterClient seeded with
// all; the client and the context (5 minutes) end with the benchmark.
func startBench(b *testing.B, opts clustertest.Options, cluster bool) (*clustertest.Cluster, *client.ClusterClient, context.Context) {
	b.Helper()
	c := clustertest.Start(b, opts)
	if cluster {
		c.WaitReady(b, opts.Nodes)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	b.Cleanup(cancel)
	cc, err := client.DialCluster(ctx, c.Addrs(), c.ClientOptions())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cc.Close(context.Background()) })
	return c, cc, ctx
}

// BenchmarkFailover measures unavailability: SIGKILL of a stream's owner
// to the first successful publish to that stream on its new owner, over
// 10 kills (the member is restarted between kills): with a 2 s lease and a
// client that gives up a silent connection after 1.5 s, and with the
// defaults (5 s lease; the ClusterClient's 5 s idle timeout). Run with
// -benchtime 1x.
func BenchmarkFailover(b *testing.B) {
	b.Run("lease=2s", func(b *testing.B) { benchFailover(b, leaseTTL, 1500*time.Millisecond) })
	b.Run("lease=5s-defaults", func(b *testing.B) { benchFailover(b, 0, 0) })
}

func benchFailover(b *testing.B, lease, idle time.Duration) {
	c := clustertest.Start(b, clustertest.Options{Nodes: 3, LeaseTTL: lease})
	c.WaitReady(b, 3)
	seed := c.Members()[0]
	o := c.ClientOptions()
	o.DialTimeout = time.Second
	if idle > 0 {
		o.IdleTimeout, o.KeepAlive = idle, idle/5
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cc, err := client.DialCluster(ctx, []string{seed.Addr}, o)
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Close(context.Background())
	const kills = 10
	var took []time.Duration
	for round := 0; len(took) < kills; round++ {
		st := client.Stream{Namespace: "failover", Name: fmt.Sprintf("r%d", round)}
		top, err := cc.ShardOwners(ctx, st)
		if err != nil {
			b.Fatal(err)
		}
		victim := c.Member(top.Owners[0].Owner.NodeID)
		if victim == nil || victim == seed {
			continue // the seed stays up: the client learns the new owner from it
		}
		if err := cc.Publish(ctx, st, []byte("before"), client.PublishOptions{}); err != nil {
			b.Fatal(err)
		}
		killed := time.Now()
		victim.Kill()
		for {
			pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
			err := cc.Publish(pctx, st, []byte("after"), client.PublishOptions{})
			pcancel()
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				b.Fatal(err)
			}
			time.Sleep(5 * time.Millisecond)
		}
		took = append(took, time.Since(killed))
		victim.Restart(b)
		c.WaitReady(b, 3)
	}
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	b.ReportMetric(float64(took[len(took)/2].Milliseconds()), "p50-ms")
	b.ReportMetric(float64(took[len(took)*99/100].Milliseconds()), "p99-ms")
	b.ReportMetric(0, "ns/op")
	b.Logf("SIGKILL to first publish on the new owner, %d kills: %v", kills, took)
}

// Replicated streams. One durable stream with one shard, so
// every record goes through one log (one broker) or one raft group (three
// replicas); both acknowledge under on_commit: one broker after its fsync,
// three replicas once a quorum has the batch fsynced.
var benchReplicatedStream = client.Stream{Namespace: "bench", Name: "replicated"}

const replBatch = 64

// BenchmarkReplicatedThroughput publishes b.N records of 128 B in batches
// of 64, acknowledged per batch under --durable-fsync on_commit, pipelined
// with Produce (the client's publish window) at the shard's leader: to a
// durable stream on one broker, and to a stream with three replicas on a
// 3-member cluster. -count repeats each before the next, so alternate
// them with a loop (docs/BENCHMARKS.md, "Replication"):
//
//	for i in 1 2 3; do go test ./cluster/e2e/ -run '^$' -bench ReplicatedThroughput -benchtime 200000x; done
func BenchmarkReplicatedThroughput(b *testing.B) {
	b.Run("single", func(b *testing.B) { benchReplicated(b, 1) })
	b.Run("replicas=3", func(b *testing.B) { benchReplicated(b, 3) })
}

func benchReplicated(b *testing.B, replicas int) {
	fsync := []string{"--durable-fsync", "on_commit"}
	opts := clustertest.Options{Nodes: 3, LeaseTTL: leaseTTL, ExtraArgs: fsync}
	if replicas == 1 {
		opts = clustertest.Options{Nodes: 1, ExtraArgs: append(slices.Clone(noCluster), fsync...)}
	}
	c, cc, ctx := startBench(b, opts, replicas > 1)
	leader := replicatedLeader(ctx, b, c, cc, replicas)
	payloads := make([][]byte, replBatch)
	for i := range payloads {
		payloads[i] = make([]byte, benchPayload)
	}
	batches := max(b.N/replBatch, 1)
	var failed atomic.Pointer[error]
	promise := func(_ client.PublishResult, err error) {
		if err != nil {
			failed.CompareAndSwap(nil, &err)
		}
	}
	b.ResetTimer()
	start := time.Now()
	for range batches {
		if err := leader.Produce(ctx, benchReplicatedStream, payloads, client.PublishOptions{}, promise); err != nil {
			b.Fatal(err)
		}
	}
	if err := leader.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	took := time.Since(start)
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatalf("a publish failed: %v", *err)
	}
	b.ReportMetric(float64(batches*replBatch)/took.Seconds(), "records/s")
	b.ReportMetric(0, "ns/op")
	if replicas > 1 {
		// What explains a slow run: raft messages the peer link dropped
		// (raft sends again after a heartbeat), leader changes.
		var dropped, changes float64
		for _, m := range c.Members() {
			dropped += c.Metric(b, m, "felix_replication_messages_dropped_total")
			changes += c.Metric(b, m, "felix_replication_leader_changes_total")
		}
		b.ReportMetric(dropped, "raft-dropped")
		b.ReportMetric(changes, "leader-changes")
	}
}

// replicatedLeader creates the durable stream with replicas, waits until
// a batch routed by the ClusterClient is acknowledged (the first waits out
// the election), and returns a connection to the shard's leader.
func replicatedLeader(ctx context.Context, b *testing.B, c *clustertest.Cluster, cc *client.ClusterClient, replicas int) *client.Client {
	b.Helper()
	for {
		_, err := cc.CreateStream(ctx, benchReplicatedStream, client.StreamConfig{Durable: true, Replicas: replicas})
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			b.Fatalf("create the stream: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := cc.PublishBatch(ctx, benchReplicatedStream, [][]byte{make([]byte, benchPayload)}, client.PublishOptions{}); err != nil {
		b.Fatalf("first publish: %v", err)
	}
	m := c.Members()[0]
	if replicas > 1 {
		m = waitLeader(ctx, b, c, benchReplicatedStream)
	}
	leader, err := client.Dial(ctx, m.Addr, c.ClientOptions())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = leader.Close(context.Background()) })
	return leader
}

// waitLeader returns the running member whose replica leads st's shard by
// its own view, once its replicas have (nearly) what it has.
func waitLeader(ctx context.Context, b testing.TB, c *clustertest.Cluster, st client.Stream) *clustertest.Member {
	b.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var last []wire.ShardReplication
	for {
		for _, m := range c.Members() {
			if !m.Running() {
				continue
			}
			var v client.ReplicationView
			err := onMember(ctx, c, m, func(cl *client.Client) (err error) {
				v, err = cl.Replication(ctx, st)
				return err
			})
			if err != nil || len(v.Shards) != 1 || v.Shards[0].Leader != m.NodeID {
				continue
			}
			if caughtUp(v.Shards[0].Replicas, len(c.Members())) {
				return m
			}
			last = v.Shards
		}
		if ctx.Err() != nil {
			b.Fatalf("no member leads %s with every replica caught up; the leader's view: %+v", st.Name, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// caughtUp: the leader sees n replicas, none more than a few records
// behind (publishing goes on during the failover benchmark). Not Active:
// the leader's CheckQuorum clears it every election timeout, which is also
// how often the status view is refreshed.
func caughtUp(replicas []wire.ReplicaProgress, n int) bool {
	if len(replicas) != n {
		return false
	}
	for _, r := range replicas {
		if r.LagRecords > caughtUpLag {
			return false
		}
	}
	return true
}

// caughtUpLag is how far behind the leader a replica may be and count as
// caught up: the records in flight.
const caughtUpLag = 100

// BenchmarkReplicatedFailover measures a replicated shard's unavailability:
// from SIGKILL of its raft leader to the first acknowledgement of a
// publish sent after the kill, over 10 kills (the member restarted and
// caught up between kills). Two idempotent producers publish one-record
// batches continuously through a ClusterClient seeded with every member.
// Each kill's time is split by the members' logs: a follower campaigns
// (its raft lost the leader), the new leader is elected, it claims the
// owner record, and the client's publish gets through. Two settings: the
// e2e tests' (2 s lease; client idle timeout 1.5 s, 1 s dial timeout, 3 s
// ack timeout) and the defaults (5 s lease; 5 s idle, 3 s dial, 10 s ack).
// Run with -benchtime 1x.
func BenchmarkReplicatedFailover(b *testing.B) {
	b.Run("lease=2s-idle=1.5s", func(b *testing.B) {
		benchReplicatedFailover(b, failoverSettings{lease: leaseTTL, idle: 1500 * time.Millisecond, dial: time.Second, ack: 3 * time.Second})
	})
	b.Run("defaults", func(b *testing.B) { benchReplicatedFailover(b, failoverSettings{}) })
}

// failoverSettings are the cluster's lease and the client's timeouts; zero
// keeps the default.
type failoverSettings struct{ lease, idle, dial, ack time.Duration }

var failoverStream = client.Stream{Namespace: "bench", Name: "failover"}

func benchReplicatedFailover(b *testing.B, s failoverSettings) {
	c := clustertest.Start(b, clustertest.Options{Nodes: 3, LeaseTTL: s.lease})
	c.WaitReady(b, 3)
	o := c.ClientOptions()
	o.DialTimeout = s.dial
	if s.idle > 0 {
		o.IdleTimeout, o.KeepAlive = s.idle, s.idle/5
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cc, err := client.DialCluster(ctx, c.Addrs(), o)
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Close(context.Background())
	if _, err := cc.CreateStream(ctx, failoverStream, client.StreamConfig{Durable: true, Replicas: 3}); err != nil {
		b.Fatal(err)
	}
	clock := &ackClock{}
	stop := make(chan struct{})
	errs := make(chan error, 2)
	var wg sync.WaitGroup
	for range 2 {
		p, err := cc.NewIdempotentProducer(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if s.ack > 0 {
			p.AckTimeout = s.ack
		}
		wg.Go(func() { errs <- publishTimed(ctx, p, clock, stop) })
	}
	const kills = 10
	var took []time.Duration
	var phases []failoverPhases
	for range kills {
		victim := waitLeader(ctx, b, c, failoverStream)
		killed := time.Now()
		first := clock.arm(killed)
		victim.Kill()
		var acked time.Time
		select {
		case acked = <-first:
		case err := <-errs:
			b.Fatalf("a producer stopped: %v", err)
		case <-ctx.Done():
			b.Fatal("no publish acknowledged after the kill")
		}
		took = append(took, acked.Sub(killed))
		phases = append(phases, phasesOf(b, c, victim, killed, acked))
		victim.Restart(b)
		c.WaitReady(b, 3)
	}
	close(stop)
	wg.Wait()
	reportFailover(b, took, phases)
}

// ackClock tells, once armed at t, when the first publish sent after t was
// acknowledged.
type ackClock struct {
	mu    sync.Mutex
	after time.Time
	first chan time.Time // nil when not armed
}

func (a *ackClock) arm(t time.Time) <-chan time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.after, a.first = t, make(chan time.Time, 1)
	return a.first
}

func (a *ackClock) acked(sent, at time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.first != nil && sent.After(a.after) {
		a.first <- at
		a.first = nil
	}
}

// publishTimed publishes one-record batches with p until stop closes,
// telling clock when each was sent and acknowledged.
func publishTimed(ctx context.Context, p *client.IdempotentProducer, clock *ackClock, stop <-chan struct{}) error {
	defer func() { _ = p.Close(context.Background()) }()
	payload := [][]byte{make([]byte, benchPayload)}
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		sent := time.Now()
		if _, err := p.Publish(ctx, failoverStream, payload, nil); err != nil {
			return err
		}
		clock.acked(sent, time.Now())
	}
}

// failoverPhases splits one kill's unavailability, from the members' logs
// (millisecond stamps): kill to a follower campaigning, to the new leader
// elected, to its owner record claimed, to the client's first ack.
// A phase a log did not show is -1.
type failoverPhases struct{ campaign, elect, claim, client time.Duration }

// phasesOf reads the survivors' logs for the first events after killed.
func phasesOf(b *testing.B, c *clustertest.Cluster, victim *clustertest.Member, killed, acked time.Time) failoverPhases {
	b.Helper()
	since := killed.Truncate(time.Millisecond)
	var campaign, elected, claimed time.Time
	earliest := func(t *time.Time, at time.Time) {
		if t.IsZero() || at.Before(*t) {
			*t = at
		}
	}
	for _, m := range c.Members() {
		if m == victim {
			continue
		}
		for _, e := range readLog(b, m.LogFile) {
			switch {
			case e.Time.Before(since):
			case e.Message == "shard leader changed" && e.To == "":
				earliest(&campaign, e.Time)
			case e.Message == "shard leader changed" && e.To != victim.NodeID:
				earliest(&elected, e.Time)
			case strings.HasPrefix(e.Message, "replica is the shard's leader"):
				earliest(&claimed, e.Time)
			}
		}
	}
	between := func(from, to time.Time) time.Duration {
		if from.IsZero() || to.IsZero() {
			return -1
		}
		return to.Sub(from)
	}
	return failoverPhases{
		campaign: between(killed, campaign), elect: between(campaign, elected),
		claim: between(elected, claimed), client: between(claimed, acked),
	}
}

// logEvent is the part of a member's JSON log line phasesOf reads.
type logEvent struct {
	Time    time.Time `json:"time"`
	Message string    `json:"message"`
	To      string    `json:"to"`
}

func readLog(b *testing.B, path string) []logEvent {
	b.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	var out []logEvent
	for line := range bytes.Lines(data) {
		var e logEvent
		if bytes.HasPrefix(line, []byte("{")) && json.Unmarshal(line, &e) == nil {
			out = append(out, e)
		}
	}
	return out
}

// reportFailover reports p50 and p99 (of 10, the slowest) of the kills'
// unavailability, and each phase's median.
func reportFailover(b *testing.B, took []time.Duration, phases []failoverPhases) {
	for i, p := range phases {
		b.Logf("kill %d: %4d ms = campaign %d + elect %d + claim %d + client %d", i+1, took[i].Milliseconds(),
			p.campaign.Milliseconds(), p.elect.Milliseconds(), p.claim.Milliseconds(), p.client.Milliseconds())
	}
	median := func(get func(failoverPhases) time.Duration) float64 {
		ds := make([]time.Duration, len(phases))
		for i, p := range phases {
			ds[i] = get(p)
		}
		slices.Sort(ds)
		return float64(ds[len(ds)/2].Milliseconds())
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Milliseconds()), "p50-ms")
	b.ReportMetric(float64(took[len(took)*99/100].Milliseconds()), "p99-ms")
	b.ReportMetric(median(func(p failoverPhases) time.Duration { return p.campaign }), "campaign-ms")
	b.ReportMetric(median(func(p failoverPhases) time.Duration { return p.elect }), "elect-ms")
	b.ReportMetric(median(func(p failoverPhases) time.Duration { return p.claim }), "claim-ms")
	b.ReportMetric(median(func(p failoverPhases) time.Duration { return p.client }), "client-ms")
	b.ReportMetric(0, "ns/op")
}

// TestBenchPublishesAtTheLeader: loadgen (felix bench --durable --replicas
// 3) given a member that does not lead the replicated shard it creates
// publishes at the one that does, and every acked record is in the log.
func TestBenchPublishesAtTheLeader(t *testing.T) {
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st := client.Stream{Name: "bench-leader"}
	cfg := loadgen.Config{
		Client: c.ClientOptions(), Stream: st.Name, Durable: true, Replicas: 3,
		Batch: 64, Ack: wire.AckPerBatch, Inflight: 4, Count: 6400,
	}
	// Each member in turn until one does not lead: the stream is made by
	// the first run, so later runs find its leader already elected.
	for _, m := range c.Members() {
		cfg.Addr = m.Addr
		res, err := loadgen.Run(ctx, cfg)
		if err != nil {
			t.Fatalf("bench at %s: %v", m.NodeID, err)
		}
		if res.Published != int64(cfg.Count) {
			t.Fatalf("bench at %s published %d, want %d", m.NodeID, res.Published, cfg.Count)
		}
		leader := waitLeader(ctx, t, c, st)
		if res.Target != leader.Addr {
			t.Fatalf("bench given %s published at %s; the leader is at %s", m.Addr, res.Target, leader.Addr)
		}
	}
	var page client.Page
	err := onMember(ctx, c, waitLeader(ctx, t, c, st), func(cl *client.Client) (err error) {
		page, err = cl.Read(ctx, st, 0, client.ReadOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := uint64(3 * cfg.Count); page.Committed != want {
		t.Fatalf("the log holds %d records, want %d", page.Committed, want)
	}
}
