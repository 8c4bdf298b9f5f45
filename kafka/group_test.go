package kafka_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/getfelix/felix-go/broker"
	"github.com/getfelix/felix-go/config"
)

// groupConsumer is a kgo group member of group on topic.
func groupConsumer(t *testing.T, b *broker.Broker, cfg config.Config, group string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	return kgoClient(t, b, cfg, append([]kgo.Opt{
		kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.FetchMaxWait(200 * time.Millisecond), kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	}, opts...)...)
}

// pollUntil polls cl until it holds n records, and fails on a fetch error
// or at the deadline.
func pollUntil(t *testing.T, cl *kgo.Client, n int) map[int32][]acked {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := make(map[int32][]acked)
	total := 0
	for total < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("group consumer read %d records, want %d: %v", total, n, ctx.Err())
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			got[r.Partition] = append(got[r.Partition], ackedOf(r))
			total++
		})
	}
	return got
}

// TestGroupConsumerAcrossRestart: a kgo group consumer reads everything
// and commits; after a broker restart a new member of the same group
// resumes at the commits: it reads exactly the records produced since,
// once each, in order per partition.
func TestGroupConsumerAcrossRestart(t *testing.T) {
	cfg := kafkaConfig(t)
	b := startBroker(t, cfg)
	createStream(t, b, cfg, 3)
	first := produce(t, kgoClient(t, b, cfg, kgo.RecordPartitioner(kgo.ManualPartitioner())), 0, 300, 3)

	cl := groupConsumer(t, b, cfg, "billing")
	checkOnceInOrder(t, first, pollUntil(t, cl, 300))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cl.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}
	cl.Close() // leaves the group

	stopBroker(t, b)
	b = startBroker(t, cfg)
	more := produce(t, kgoClient(t, b, cfg, kgo.RecordPartitioner(kgo.ManualPartitioner())), 300, 150, 3)
	checkSame(t, more, pollUntil(t, groupConsumer(t, b, cfg, "billing"), 150))
}

// TestGroupTwoMembers: two members of one group share the partitions
// (each ends with at least one) and together read every record.
func TestGroupTwoMembers(t *testing.T) {
	cfg := kafkaConfig(t)
	b := startBroker(t, cfg)
	createStream(t, b, cfg, 4)
	want := produce(t, kgoClient(t, b, cfg, kgo.RecordPartitioner(kgo.ManualPartitioner())), 0, 400, 4)

	var mu sync.Mutex
	assigned := map[string]map[int32]bool{}
	track := func(name string) kgo.Opt {
		return kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			mu.Lock()
			defer mu.Unlock()
			if assigned[name] == nil && len(m[topic]) > 0 {
				assigned[name] = map[int32]bool{}
			}
			for _, p := range m[topic] {
				assigned[name][p] = true
			}
		})
	}
	a := groupConsumer(t, b, cfg, "pair", track("a"))
	c := groupConsumer(t, b, cfg, "pair", track("c"))
	seen := map[int32]map[int64]bool{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	members := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(assigned)
	}
	for total := 0; total < 400 || members() < 2; {
		for _, cl := range []*kgo.Client{a, c} {
			pctx, pcancel := context.WithTimeout(ctx, 300*time.Millisecond)
			fs := cl.PollFetches(pctx)
			pcancel()
			fs.EachRecord(func(r *kgo.Record) {
				if seen[r.Partition] == nil {
					seen[r.Partition] = map[int64]bool{}
				}
				if !seen[r.Partition][r.Offset] {
					seen[r.Partition][r.Offset] = true
					total++
				}
			})
		}
		if ctx.Err() != nil {
			t.Fatalf("read %d distinct records of 400; members with partitions: %d", total, members())
		}
	}
	for p, recs := range want {
		if len(seen[p]) != len(recs) {
			t.Fatalf("partition %d: the members read %d distinct records, want %d", p, len(seen[p]), len(recs))
		}
	}
}
