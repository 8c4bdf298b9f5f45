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

// TestReplicatedReadsAreLinearizable runs three broker processes with a
// replicated stream and checks what a read and a refusal promise:
//
//  1. compare-and-set: writers race publish_if at the tail they last saw;
//     a refusal's tail is visible to a read of the leader that starts
//     after the refusal (a refusal never reports a tail no read can see);
//  2. a follower refuses a read, a time lookup and a subscribe with
//     not_leader naming the leader, and serves a follower read with its
//     applied end;
//  3. a leader frozen by SIGSTOP, while the others elect a new leader
//     and acknowledge more, never answers a read with the records it had:
//     a read sent to it while frozen is refused or sees every
//     acknowledged record.
func TestReplicatedReadsAreLinearizable(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{Nodes: 3, LeaseTTL: leaseTTL})
	c.WaitReady(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cc := dialAll(t, c)
	createReplicated(ctx, t, cc)
	leader := leaderOf(ctx, t, c)
	direct := dialDirect(ctx, t, c, leader)

	t.Run("refused tail is readable", func(t *testing.T) { checkRefusalsReadable(ctx, t, c, leader) })
	t.Run("follower reads", func(t *testing.T) { checkFollowerReads(ctx, t, c, leader) })
	t.Run("frozen leader reads nothing stale", func(t *testing.T) { checkFrozenLeaderReads(ctx, t, c, cc, leader, direct) })
}

// checkRefusalsReadable: casWriters writers, each with its own
// connection to the leader, publish_if at the tail they last saw for
// casOps operations each; after every offset_mismatch the writer reads
// the shard's committed end from the leader, which must reach the
// refusal's tail.
func checkRefusalsReadable(ctx context.Context, t *testing.T, c *clustertest.Cluster, leader *clustertest.Member) {
	const casWriters, casOps = 6, 60
	var wg sync.WaitGroup
	var mu sync.Mutex
	refusals, violations := 0, 0
	for w := range casWriters {
		cl := dialDirect(ctx, t, c, leader)
		wg.Add(1)
		go func() {
			defer wg.Done()
			tail := uint64(0)
			for i := range casOps {
				_, err := cl.PublishIf(ctx, replicatedStream, [][]byte{fmt.Appendf(nil, "cas-%d-%d", w, i)}, tail, client.PublishOptions{})
				var refused *wire.RefusedError
				switch {
				case err == nil:
					tail++
					continue
				case !errors.As(err, &refused):
					t.Errorf("writer %d: publish_if at %d: %v", w, tail, err)
					return
				}
				page, err := cl.Read(ctx, replicatedStream, 0, client.ReadOptions{MaxRecords: 1})
				if err != nil {
					t.Errorf("writer %d: read after a refusal: %v", w, err)
					return
				}
				mu.Lock()
				refusals++
				if page.Committed < refused.Tail {
					violations++
					if violations <= 3 {
						t.Errorf("writer %d: publish_if at %d refused with tail %d, and a read after it sees committed end %d", w, tail, refused.Tail, page.Committed)
					}
				}
				mu.Unlock()
				tail = refused.Tail
			}
		}()
	}
	wg.Wait()
	t.Logf("%d refusals, %d with a tail no later read saw", refusals, violations)
	if refusals == 0 {
		t.Fatal("no publish_if was refused: the writers never raced")
	}
}

// checkFollowerReads: a follower refuses a plain read, a time lookup and
// a subscribe, naming the leader; a follower read is served there, marked, with the follower's
// applied end, which reaches the leader's committed end once the
// follower caught up.
func checkFollowerReads(ctx context.Context, t *testing.T, c *clustertest.Cluster, leader *clustertest.Member) {
	var end uint64
	if err := onMember(ctx, c, leader, func(cl *client.Client) error {
		p, err := cl.Read(ctx, replicatedStream, 0, client.ReadOptions{MaxRecords: 1})
		end = p.Committed
		return err
	}); err != nil {
		t.Fatalf("read at the leader %s: %v", leader.NodeID, err)
	}
	var follower *clustertest.Member
	for _, m := range c.Members() {
		if m != leader {
			follower = m
			break
		}
	}
	err := onMember(ctx, c, follower, func(cl *client.Client) error {
		notLeader := func(what string, err error) {
			var we *wire.Error
			if !errors.As(err, &we) || we.Code != wire.CodeNotLeader || we.Owner == nil || we.Owner.NodeID != leader.NodeID {
				t.Errorf("%s at follower %s: %v; want not_leader naming %s", what, follower.NodeID, err, leader.NodeID)
			}
		}
		_, err := cl.Read(ctx, replicatedStream, 0, client.ReadOptions{})
		notLeader("a plain read", err)
		_, err = cl.OffsetForTime(ctx, replicatedStream, time.Now(), 0)
		notLeader("a time lookup", err)
		sub, err := cl.Subscribe(ctx, replicatedStream, client.SubscribeOptions{})
		if err == nil {
			_ = sub.Close(ctx)
		}
		notLeader("a subscribe", err)
		for {
			p, err := cl.Read(ctx, replicatedStream, 0, client.ReadOptions{FollowerMaxLag: 5 * time.Second, MaxRecords: 1})
			switch {
			case err != nil && ctx.Err() != nil:
				return err
			case err != nil:
				// Refused while it is behind what its leader told it.
			case !p.Follower:
				return fmt.Errorf("a follower read at %s is not marked as a follower's", follower.NodeID)
			case p.Committed == end:
				return nil
			case p.Committed > end:
				return fmt.Errorf("follower %s reports applied end %d past the leader's committed end %d", follower.NodeID, p.Committed, end)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
}

// checkFrozenLeaderReads freezes the leader, has the others acknowledge
// more through cc, sends reads through direct (connected to the frozen
// leader) and resumes it: none may answer with fewer records than were
// acknowledged before it was sent.
func checkFrozenLeaderReads(ctx context.Context, t *testing.T, c *clustertest.Cluster, cc *client.ClusterClient, leader *clustertest.Member, direct *client.Client) {
	page, err := direct.Read(ctx, replicatedStream, 0, client.ReadOptions{MaxRecords: 1})
	if err != nil {
		t.Fatalf("read at the leader before the freeze: %v", err)
	}
	before := page.Committed
	leader.Freeze(t)
	thawed := false
	defer func() {
		if !thawed {
			leader.Thaw(t)
		}
	}()
	const more = 50
	for i := range more {
		if err := publishRetrying(ctx, cc, fmt.Sprintf("after-freeze-%d", i)); err != nil {
			t.Fatalf("publish %d while the leader is frozen: %v", i, err)
		}
	}
	acked := before + more
	const reads = 8
	type outcome struct {
		page client.Page
		err  error
	}
	results := make(chan outcome, reads)
	for range reads {
		go func() {
			rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			p, err := direct.Read(rctx, replicatedStream, 0, client.ReadOptions{MaxRecords: 1})
			results <- outcome{p, err}
		}()
	}
	leader.Thaw(t)
	thawed = true
	refused := map[string]int{}
	for range reads {
		switch o := <-results; {
		case o.err == nil && o.page.Committed < acked:
			t.Errorf("stale read at the resumed old leader: committed end %d, while %d records were acknowledged before it was sent", o.page.Committed, acked)
		case o.err == nil:
			refused["served, up to date"]++
		case !isRefusal(o.err):
			t.Errorf("read at the resumed old leader refused with an untyped error: %v", o.err)
		default:
			refused[o.err.Error()]++
		}
	}
	t.Logf("reads sent to the frozen leader: %v", refused)
}

// publishRetrying publishes one record through cc, trying again on the
// retryable errors a leader change gives.
func publishRetrying(ctx context.Context, cc *client.ClusterClient, payload string) error {
	for {
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		err := cc.Publish(pctx, replicatedStream, []byte(payload), client.PublishOptions{})
		cancel()
		if err == nil || ctx.Err() != nil {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// isRefusal: err is a typed refusal (a wire error) or the connection
// ending, never a silent wrong answer.
func isRefusal(err error) bool {
	var we *wire.Error
	var lost *client.ConnectionLostError
	return errors.As(err, &we) || errors.As(err, &lost)
}
