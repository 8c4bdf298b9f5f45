package linearizable_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/getfelix/felix-go/clustertest"
)

// faultKind is one fault the nemesis injects and then heals.
type faultKind string

const (
	leaderKill      faultKind = "leader-kill"      // SIGKILL the shard's raft leader, restart it
	leaderStop      faultKind = "leader-stop"      // SIGSTOP the leader, then SIGCONT
	followerKill    faultKind = "follower-kill"    // SIGKILL a follower, restart it
	leaderPartition faultKind = "leader-partition" // cut the leader off from the other members (etcd and clients still reach it), heal
	etcdStop        faultKind = "etcd-stop"        // SIGSTOP etcd past the members' lease, then SIGCONT
)

// faultKinds are every kind, in the order a round starts from before it
// is shuffled.
var faultKinds = []faultKind{leaderKill, leaderStop, followerKill, leaderPartition, etcdStop}

// How long a fault lasts and the quiet between faults. A stopped or cut
// off leader is held past raft's election timeout (0.5-1 s), so the
// others elect a new one while it still believes it leads; etcd past the
// lease, so every member's lease and owner records expire.
const (
	killedFor  = 500 * time.Millisecond // then Restart, which waits for the member to serve
	stoppedFor = 1500 * time.Millisecond
	// stoppedLongFor, in stale_reads, outlasts the election timeout
	// by far but not the readers' connections' idle timeout (5 s): they
	// still hold their connections to the old leader when it resumes.
	stoppedLongFor = 3500 * time.Millisecond
	cutOffFor      = 1500 * time.Millisecond
	etcdFor        = leaseTTL + 500*time.Millisecond
	quietAtLeast   = 500 * time.Millisecond
	quietAtMost    = 1000 * time.Millisecond
)

// nemesis injects one fault at a time, on the run's cluster, into its
// stream's shard, and keeps a record of each.
type nemesis struct {
	r        *run
	rng      *rand.Rand
	kinds    []faultKind
	duration time.Duration
	stopFor  time.Duration // how long leader-stop holds

	mu struct {
		sync.Mutex
		done []injected
	}
}

// injected is one fault as it happened, on the history's clock.
type injected struct {
	kind       faultKind
	node       string
	start, end int64
}

func newNemesis(r *run, s settings, stopFor time.Duration) *nemesis {
	return &nemesis{r: r, rng: rand.New(rand.NewPCG(uint64(r.seed), 0x6e656d)), kinds: s.faults, duration: s.duration, stopFor: stopFor}
}

// run injects faults until the workload's time is up: with no duration,
// one round (each kind once, in a shuffled order); with one, rounds until
// it has passed. Each fault is healed before the next, and before run
// returns, even when the test fails in the middle of one.
func (n *nemesis) run(t *testing.T) {
	t.Helper()
	start := time.Now()
	for round := 0; ; round++ {
		if n.duration == 0 && round == 1 || n.duration > 0 && time.Since(start) >= n.duration {
			return
		}
		order := append([]faultKind(nil), n.kinds...)
		n.rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		n.quiet()
		for _, k := range order {
			n.inject(t, k)
			n.quiet()
		}
		if len(order) == 0 {
			// No faults: the workload still runs for its time (or
			// for as long as a round would take).
			time.Sleep(max(n.duration, 5*time.Second))
			return
		}
	}
}

func (n *nemesis) quiet() {
	time.Sleep(quietAtLeast + time.Duration(n.rng.Int64N(int64(quietAtMost-quietAtLeast))))
}

// inject applies one fault, holds it, and heals it.
func (n *nemesis) inject(t *testing.T, k faultKind) {
	t.Helper()
	r := n.r
	leader, err := r.leader()
	if err != nil {
		t.Fatalf("before %s: %v", k, err)
	}
	target := leader
	if k == followerKill {
		target = n.follower(leader)
	}
	f := injected{kind: k, node: target.NodeID, start: r.h.now()}
	if k == etcdStop {
		f.node = "etcd"
	}
	defer func() {
		f.end = r.h.now()
		n.mu.Lock()
		n.mu.done = append(n.mu.done, f)
		n.mu.Unlock()
	}()
	switch k {
	case leaderKill, followerKill:
		target.Kill()
		time.Sleep(killedFor)
		target.Restart(t)
	case leaderStop:
		target.Freeze(t)
		defer target.Thaw(t)
		time.Sleep(n.stopFor)
	case leaderPartition:
		r.c.Partition(t, target)
		defer r.c.Heal(t, target)
		time.Sleep(cutOffFor)
	case etcdStop:
		r.c.Etcd().Freeze(t)
		defer r.c.Etcd().Thaw(t)
		time.Sleep(etcdFor)
	}
}

// follower picks a member other than the leader.
func (n *nemesis) follower(leader *clustertest.Member) *clustertest.Member {
	var others []*clustertest.Member
	for _, m := range n.r.c.Members() {
		if m != leader {
			others = append(others, m)
		}
	}
	return others[n.rng.IntN(len(others))]
}

// String lists the faults injected, on the history's clock.
func (n *nemesis) String() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	parts := make([]string, len(n.mu.done))
	for i, f := range n.mu.done {
		parts[i] = fmt.Sprintf("%s %s %s-%s", f.kind, f.node, at(f.start), at(f.end))
	}
	return strings.Join(parts, "; ")
}

// annotations are the faults, for porcupine's visualization.
func (n *nemesis) annotations() []porcupine.Annotation {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]porcupine.Annotation, len(n.mu.done))
	for i, f := range n.mu.done {
		out[i] = porcupine.Annotation{Tag: "faults", Start: f.start, End: f.end,
			Description: fmt.Sprintf("%s %s", f.kind, f.node), BackgroundColor: "#f6c6c6"}
	}
	return out
}
