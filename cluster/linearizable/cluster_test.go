package linearizable_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/clustertest"
	"github.com/getfelix/felix-go/wire"
)

// What a run is made of, and how a longer one is asked for.
const (
	// durationEnv is each workload's length as a Go duration (faults
	// cycle for that long); unset, each runs one round of every fault.
	durationEnv = "FELIXTEST_LINEARIZABLE_DURATION"
	// seedEnv seeds the faults' order and the clients' choices; unset, it
	// comes from the clock. Every run logs its seed.
	seedEnv = "FELIXTEST_LINEARIZABLE_SEED"
	// faultsEnv is a comma-separated list of the fault kinds to inject
	// (see faultKinds), or "none"; unset, all of them.
	faultsEnv = "FELIXTEST_LINEARIZABLE_FAULTS"

	// leaseTTL is the members' lease: the shortest etcd allows, so the
	// etcd fault outlasts it quickly.
	leaseTTL = 2 * time.Second
	// opTimeout bounds one client operation: an election (0.5-1 s) and
	// the client's retries fit in it; past it the outcome is unknown.
	opTimeout = 2 * time.Second
	// convergeTimeout bounds the wait, after the faults, for every
	// replica to hold the same log.
	convergeTimeout = 30 * time.Second
	// porcupineTimeout bounds the linearizability check, or the
	// workload's duration when that is longer (a longer history takes
	// longer); Unknown (the time ran out) fails the run as Illegal does.
	porcupineTimeout = 30 * time.Second
)

// settings are a run's parameters, from the environment.
type settings struct {
	duration time.Duration // 0: one round of faults
	seed     int64
	faults   []faultKind
}

func settingsFromEnv(t *testing.T) settings {
	t.Helper()
	s := settings{seed: time.Now().UnixNano(), faults: faultKinds}
	if v := os.Getenv(durationEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("%s=%q: want a positive Go duration such as 5m", durationEnv, v)
		}
		s.duration = d
	}
	if v := os.Getenv(seedEnv); v != "" {
		seed, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: want an integer", seedEnv, v)
		}
		s.seed = seed
	}
	if v := os.Getenv(faultsEnv); v != "" {
		s.faults = nil
		for _, name := range strings.Split(v, ",") {
			if name == "none" {
				continue
			}
			k := faultKind(strings.TrimSpace(name))
			if !slices.Contains(faultKinds, k) {
				t.Fatalf("%s: %q is not one of %v (or none)", faultsEnv, name, faultKinds)
			}
			s.faults = append(s.faults, k)
		}
	}
	t.Logf("seed %d (%s), faults %v, each workload %s", s.seed, seedEnv, s.faults, s.length())
	return s
}

func (s settings) length() string {
	if s.duration == 0 {
		return "one round of faults"
	}
	return s.duration.String()
}

// TestLinearizable runs each workload on one cluster: three members in
// network namespaces (the partition fault) on an etcd process (the etcd
// fault), durable_fsync on_commit, a stream of its own per workload.
func TestLinearizable(t *testing.T) {
	s := settingsFromEnv(t)
	c := clustertest.Start(t, clustertest.Options{
		Nodes: 3, LeaseTTL: leaseTTL, NetNS: true,
		ExtraArgs: []string{"--durable-fsync", "on_commit"},
	})
	c.WaitReady(t, 3)
	t.Run("cas", func(t *testing.T) { runCAS(t, newRun(t, c, s, "cas", 1, stoppedFor)) })
	t.Run("acknowledged", func(t *testing.T) { runAcknowledged(t, newRun(t, c, s, "acknowledged", 2, stoppedFor)) })
	t.Run("stale_reads", func(t *testing.T) { runStaleReads(t, newRun(t, c, s, "stale-reads", 3, stoppedLongFor)) })
	t.Run("cache", func(t *testing.T) { runCache(t, newRunOf(t, c, s, "cache", 4, stoppedFor, createCache)) })
}

// run is one workload's stream on the cluster, its clients' history
// clock, and the faults.
type run struct {
	c      *clustertest.Cluster
	stream client.Stream
	seed   int64
	ctx    context.Context
	h      *history
	nem    *nemesis
	// checkFor bounds the linearizability check (porcupineTimeout).
	checkFor time.Duration
	// stop is closed when the faults are over: the clients stop.
	stop     chan struct{}
	stopOnce sync.Once
}

// newRun creates the workload's stream (1 shard, 3 replicas) and waits
// for its leader; its leader-stop faults hold for stopFor.
func newRun(t *testing.T, c *clustertest.Cluster, s settings, name string, n int64, stopFor time.Duration) *run {
	t.Helper()
	return newRunOf(t, c, s, name, n, stopFor, func(ctx context.Context, cc *client.ClusterClient, st client.Stream) (uint32, error) {
		info, err := cc.CreateStream(ctx, st, client.StreamConfig{Durable: true, Replicas: 3, Shards: 1})
		return uint32(info.Replicas), err
	})
}

// createFunc makes a workload's stream (or cache) of 1 shard with 3
// replicas, and says how many replicas it has.
type createFunc func(ctx context.Context, cc *client.ClusterClient, s client.Stream) (replicas uint32, err error)

// newRunOf is newRun with the stream made by create.
func newRunOf(t *testing.T, c *clustertest.Cluster, s settings, name string, n int64, stopFor time.Duration, create createFunc) *run {
	t.Helper()
	limit := 3 * time.Minute
	if s.duration > 0 {
		limit += 2 * s.duration // the faults, then the check
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	t.Cleanup(cancel)
	r := &run{c: c, stream: client.Stream{Namespace: "jepsen", Name: name}, seed: s.seed + n, ctx: ctx, h: newHistory(), stop: make(chan struct{}),
		checkFor: max(porcupineTimeout, s.duration)}
	cc := r.dial(t)
	for {
		replicas, err := create(ctx, cc, r.stream)
		if err == nil && replicas == 3 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("create %s with 3 replicas: %d replicas, %v", name, replicas, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := r.leader(); err != nil {
		t.Fatal(err)
	}
	r.nem = newNemesis(r, s, stopFor)
	return r
}

// clientOptions trust the members (in namespaces they listen on addresses
// the shared certificate does not name) and notice a dead one quickly.
func (r *run) clientOptions() client.Options {
	o := r.c.ClientOptions()
	o.Insecure = r.c.InNetNS()
	o.DialTimeout = time.Second
	o.IdleTimeout, o.KeepAlive = 1500*time.Millisecond, 300*time.Millisecond
	return o
}

// readerOptions are clientOptions with a ClusterClient's default
// connection timing (5 s idle, 1 s keep-alive), as a reading application
// has: its connection to a leader stopped for less than that outlives the
// stop, and the reader's next reads go there when it resumes.
func (r *run) readerOptions() client.Options {
	o := r.clientOptions()
	o.IdleTimeout, o.KeepAlive = client.DefaultClusterIdleTimeout, client.DefaultClusterKeepAlive
	return o
}

// dial connects a ClusterClient of its own, seeded with every member.
func (r *run) dial(t *testing.T) *client.ClusterClient {
	t.Helper()
	return r.dialWith(t, r.clientOptions())
}

func (r *run) dialWith(t *testing.T, o client.Options) *client.ClusterClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(r.ctx, 10*time.Second)
	defer cancel()
	cc, err := client.DialCluster(ctx, r.c.Addrs(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close(context.Background()) })
	return cc
}

// halt stops the clients and waits for them; again, it only waits.
func (r *run) halt(clients *sync.WaitGroup) {
	r.stopOnce.Do(func() { close(r.stop) })
	clients.Wait()
}

// stopped says the faults are over.
func (r *run) stopped() bool {
	select {
	case <-r.stop:
		return true
	default:
		return false
	}
}

// opContext bounds one client operation.
func (r *run) opContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.ctx, opTimeout)
}

// onMember runs do with a fresh client to m, dialled within a second.
func (r *run) onMember(ctx context.Context, m *clustertest.Member, do func(*client.Client) error) error {
	dctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	cl, err := client.Dial(dctx, m.Addr, r.clientOptions())
	if err != nil {
		return err
	}
	defer func() { _ = cl.Close(context.Background()) }()
	return do(cl)
}

// leader is the member whose own view says it leads the shard, of the
// latest term such a claim names (a resumed old leader may still claim an
// earlier one); it waits up to 15 s for one.
func (r *run) leader() (*clustertest.Member, error) {
	deadline := time.Now().Add(15 * time.Second)
	for {
		var best *clustertest.Member
		var bestTerm uint64
		for _, m := range r.c.Members() {
			if !m.Running() || m.Frozen() {
				continue
			}
			_ = r.onMember(r.ctx, m, func(cl *client.Client) error {
				ctx, cancel := context.WithTimeout(r.ctx, time.Second)
				defer cancel()
				v, err := cl.Replication(ctx, r.stream)
				if err == nil && len(v.Shards) == 1 && v.Shards[0].Leader == m.NodeID && v.Shards[0].Term >= bestTerm {
					best, bestTerm = m, v.Shards[0].Term
				}
				return err
			})
		}
		if best != nil {
			return best, nil
		}
		if time.Now().After(deadline) || r.ctx.Err() != nil {
			return nil, fmt.Errorf("no member leads %s's shard", r.stream.Name)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// replicaLog reads m's whole replica of the shard, page by page: a
// follower read, since only the leader answers a plain one.
func (r *run) replicaLog(ctx context.Context, m *clustertest.Member) ([]client.Record, error) {
	var out []client.Record
	err := r.onMember(ctx, m, func(cl *client.Client) error {
		var err error
		out, err = readAll(ctx, cl, r.stream, client.ReadOptions{FollowerMaxLag: time.Minute})
		return err
	})
	return out, err
}

// readAll reads the shard from offset 0 to the committed end its last
// page names. Committed records never change, so the pages together are
// the log as it was at the last one.
func readAll(ctx context.Context, cl *client.Client, s client.Stream, opts client.ReadOptions) ([]client.Record, error) {
	var out []client.Record
	for from := uint64(0); ; {
		page, err := cl.Read(ctx, s, from, opts)
		if err != nil {
			return nil, err
		}
		out = append(out, page.Records...)
		if len(page.Records) == 0 || page.Next >= page.Committed {
			return out, nil
		}
		from = page.Next
	}
}

// converge waits until every member's replica holds the same log, and
// returns each; past convergeTimeout it returns the last ones read (the
// checks then say how they differ).
func (r *run) converge(t *testing.T) map[string][]client.Record {
	t.Helper()
	deadline := time.Now().Add(convergeTimeout)
	for {
		logs := map[string][]client.Record{}
		var lastErr error
		for _, m := range r.c.Members() {
			l, err := r.replicaLog(r.ctx, m)
			if err != nil {
				lastErr = fmt.Errorf("%s: %w", m.NodeID, err)
				continue
			}
			logs[m.NodeID] = l
		}
		if lastErr == nil && len(replicaDiffs(logs)) == 0 {
			return logs
		}
		if time.Now().After(deadline) {
			if len(logs) == 0 {
				t.Fatalf("no replica could be read: %v", lastErr)
			}
			t.Errorf("the replicas did not converge within %s (last error: %v)", convergeTimeout, lastErr)
			return logs
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// checkFinalLogs: every replica's offsets are contiguous from 0 and the
// replicas are identical; it returns one of the logs.
func checkFinalLogs(t *testing.T, logs map[string][]client.Record) []client.Record {
	t.Helper()
	var any []client.Record
	for node, l := range logs {
		report(t, "offsets not contiguous", offsetGaps(node, l))
		any = l
	}
	report(t, "replicas not identical", replicaDiffs(logs))
	for node, l := range logs {
		t.Logf("%s holds %d records", node, len(l))
	}
	return any
}

// answer is how an operation that wrote ended, by what its error says.
type answer uint8

const (
	answerOK      answer = iota
	answerRefused        // a conditional publish's offset_mismatch: nothing written
	answerFailed         // a refusal that says nothing was written (its retry class is not outcome-unknown)
	answerUnknown        // written or not: no answer, a lost connection, an outcome-unknown error
)

// classify reads a publish's error. A *wire.Error of a class other than
// RetryOutcomeUnknown was refused before anything was proposed, and the
// client's routing returns the last such refusal when it gives up; every
// other error (a deadline, a lost connection, a dial that failed) leaves
// the outcome unknown.
func classify(err error) (answer, *wire.RefusedError) {
	var ref *wire.RefusedError
	var we *wire.Error
	switch {
	case err == nil:
		return answerOK, nil
	case errors.As(err, &ref) && errors.Is(err, wire.ErrOffsetMismatch):
		return answerRefused, ref
	case errors.As(err, &ref):
		return answerFailed, ref
	case errors.As(err, &we) && we.Retry != wire.RetryOutcomeUnknown && we.Retry != wire.RetryUnknown:
		return answerFailed, nil
	}
	return answerUnknown, nil
}

// tally counts answers by kind, for the log.
type tally struct {
	mu     sync.Mutex
	counts map[string]int
}

func (ty *tally) add(what string) {
	ty.mu.Lock()
	defer ty.mu.Unlock()
	if ty.counts == nil {
		ty.counts = map[string]int{}
	}
	ty.counts[what]++
}

func (ty *tally) String() string {
	ty.mu.Lock()
	defer ty.mu.Unlock()
	keys := make([]string, 0, len(ty.counts))
	for k := range ty.counts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, ty.counts[k])
	}
	return strings.Join(parts, ", ")
}
