package kafka_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestEagerRebalanceCommitsInRevoke: an application with an eager
// assignor commits what it processed in its revoke callback, which runs
// after the coordinator started a rebalance and before the member joins
// again. The coordinator must accept that commit; when it refused it
// (REBALANCE_IN_PROGRESS, as a heartbeat is), the partitions' next owner
// started at the older commit and processed those records again. Here a
// reads part of the stream alone, b joins, a's partitions are revoked and
// committed, and a and b then read the rest: every record is processed
// once across the rebalance.
func TestEagerRebalanceCommitsInRevoke(t *testing.T) {
	const total = 400
	cfg := kafkaConfig(t)
	b := startBroker(t, cfg)
	createStream(t, b, cfg, 4)
	produce(t, kgoClient(t, b, cfg, kgo.RecordPartitioner(kgo.ManualPartitioner())), 0, total, 4)

	var mu sync.Mutex
	processed := map[int32]map[int64]string{} // partition, offset → the member that processed it
	var dups []string
	revokes := map[string]int{} // revoke callbacks with partitions, by member
	var commitErrs []error
	assigned := map[string]bool{} // members that were given partitions
	member := func(name string) *kgo.Client {
		return groupConsumer(t, b, cfg, "eager",
			kgo.Balancers(kgo.RangeBalancer()),
			// Poll and process, then let a rebalance in: what the revoke
			// callback commits is exactly what was processed.
			kgo.BlockRebalanceOnPoll(),
			kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
				if len(revoked[topic]) == 0 {
					return
				}
				err := cl.CommitUncommittedOffsets(ctx)
				mu.Lock()
				defer mu.Unlock()
				revokes[name]++
				if err != nil {
					commitErrs = append(commitErrs, err)
				}
			}),
			kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
				mu.Lock()
				defer mu.Unlock()
				if len(m[topic]) > 0 {
					assigned[name] = true
				}
			}),
		)
	}
	// poll processes at most 25 records of cl's and reports how many
	// distinct records have been processed in all.
	poll := func(ctx context.Context, name string, cl *kgo.Client) int {
		pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		fs := cl.PollRecords(pctx, 25)
		cancel()
		defer cl.AllowRebalance()
		mu.Lock()
		defer mu.Unlock()
		fs.EachRecord(func(r *kgo.Record) {
			if processed[r.Partition] == nil {
				processed[r.Partition] = map[int64]string{}
			}
			if first, ok := processed[r.Partition][r.Offset]; ok {
				dups = append(dups, fmt.Sprintf("partition %d offset %d: by %s, then by %s", r.Partition, r.Offset, first, name))
				return
			}
			processed[r.Partition][r.Offset] = name
		})
		n := 0
		for _, offs := range processed {
			n += len(offs)
		}
		return n
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	a := member("a")
	for poll(ctx, "a", a) < total/4 {
		if ctx.Err() != nil {
			t.Fatalf("a alone did not process %d records: %v", total/4, ctx.Err())
		}
	}
	bm := member("b")
	members := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(assigned)
	}
	for n := 0; n < total || members() < 2; {
		n = max(poll(ctx, "a", a), poll(ctx, "b", bm))
		if ctx.Err() != nil {
			t.Fatalf("processed %d distinct records of %d; members with partitions: %d", n, total, members())
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if revokes["a"] == 0 {
		t.Fatalf("a's partitions were never revoked: no rebalance happened (revokes %v)", revokes)
	}
	if len(commitErrs) > 0 {
		t.Errorf("commits in the revoke callback failed: %v", commitErrs)
	}
	if len(dups) > 0 {
		t.Errorf("%d records processed twice across the rebalance, first: %s", len(dups), dups[0])
	}
}
