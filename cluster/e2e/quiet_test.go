package e2e_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/clustertest"
)

// publishAfter publishes n records one by one with a new idempotent
// producer, under payloads of their own, and notes each acknowledgement.
func publishAfter(ctx context.Context, t *testing.T, cc *client.ClusterClient, n int, acks *ackLog) {
	t.Helper()
	p, err := cc.NewIdempotentProducer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Close(context.Background()) }()
	p.AckTimeout = 3 * time.Second
	for i := range n {
		payload := fmt.Sprintf("after-%06d", i)
		res, err := p.Publish(ctx, replicatedStream, [][]byte{[]byte(payload)}, nil)
		if err != nil {
			t.Fatalf("%s: %v", payload, err)
		}
		acks.add(payload, res.Offset)
	}
}

// waitQuiet waits until every running member's replica of the shard says
// its group is quiet: no heartbeats, no election timer.
func waitQuiet(ctx context.Context, t *testing.T, c *clustertest.Cluster, what string) {
	t.Helper()
	for {
		quiet, running := 0, 0
		for _, m := range c.Members() {
			if !m.Running() {
				continue
			}
			running++
			_ = onMember(ctx, c, m, func(cl *client.Client) error {
				v, err := cl.Replication(ctx, replicatedStream)
				if err == nil && len(v.Shards) == 1 && v.Shards[0].Quiet {
					quiet++
				}
				return err
			})
		}
		if quiet == running {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("%s: %d of %d running replicas quiet", what, quiet, running)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestReplicatedQuietGroupFailsOver: an idle replicated shard goes quiet
// on all three members. Its leader SIGKILLed, the followers, which hear
// no heartbeats either way, learn of it from the peer link's beats and
// elect a new leader; producers go on, the two go quiet without the dead
// member, the old leader restarts and catches up, every acknowledged record is in every replica once, and the
// group goes quiet again.
func TestReplicatedQuietGroupFailsOver(t *testing.T) {
	r := startFaultRun(t, clustertest.Options{}, 2, 20, 2*time.Minute)
	close(r.stop)
	r.wg.Wait()
	waitQuiet(r.ctx, t, r.c, "idle after the first records")

	leader := leaderOf(r.ctx, t, r.c)
	killed := time.Now()
	leader.Kill()
	next := leaderOf(r.ctx, t, r.c)
	took := time.Since(killed)
	t.Logf("%s led again %v after %s, the quiet leader, was killed (lease %v)", next.NodeID, took.Round(time.Millisecond), leader.NodeID, leaseTTL)
	// The members' beats, not the lease's expiry, tell the quiet
	// followers their leader is gone.
	if took >= leaseTTL {
		t.Errorf("a quiet group was led again %v after its leader died, want within the lease (%v)", took, leaseTTL)
	}

	publishAfter(r.ctx, t, r.cc, 20, r.acks)
	// The dead member's replica keeps nobody awake.
	waitQuiet(r.ctx, t, r.c, "idle with the old leader down")
	leader.Restart(t)
	log := converged(r.ctx, t, r.c, r.acks.count())
	checkExactlyOnce(t, log, r.acks)
	waitQuiet(r.ctx, t, r.c, "idle after the old leader returned")
	t.Logf("%d records acknowledged, %d in each replica", r.acks.count(), len(log))
}
