package kafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/kafka"
	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/wire"
)

// watchedService is a member's service whose sessions report each commit
// watch a Fetch registers (its after): the test then knows the Fetch read,
// found nothing and waits.
type watchedService struct {
	service.Service
	watching chan uint64
}

func (s watchedService) Open(ctx context.Context, c service.Client) (service.Session, error) {
	sess, err := s.Service.Open(ctx, c)
	if err != nil {
		return nil, err
	}
	return watchedSession{Session: sess, watching: s.watching}, nil
}

type watchedSession struct {
	service.Session
	watching chan uint64
}

func (s watchedSession) WatchCommitted(ctx context.Context, scope wire.Scope, shard uint32, after uint64, wake chan<- struct{}) (func(), error) {
	cancel, err := s.Session.(service.CommitWatcher).WatchCommitted(ctx, scope, shard, after, wake)
	if err == nil {
		s.watching <- after
	}
	return cancel, err
}

// TestFetchOnAFollowerWokenByItsApply: a Fetch long-polling a replicated
// shard at a follower is answered when the follower applies the leader's
// next entry, through the shard's own commit watch: the record reaches
// the follower by raft, never by a publish there, and nothing in the
// Fetch reads again on a timer, so without the watch it would wait out
// its max wait.
func TestFetchOnAFollowerWokenByItsApply(t *testing.T) {
	members := startKafkaMembers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	owners := placedStream(ctx, t, members["a"], client.StreamConfig{Shards: 1, Durable: true, Replicas: 3}, 1)
	leader := members[owners[0]]
	follower := map[string]string{"a": "b", "b": "c", "c": "a"}[owners[0]]

	// The follower's service behind a listener of the test's own, so the
	// test sees the Fetch begin to wait.
	watching := make(chan uint64, 16)
	ln, err := kafka.Listen(watchedService{Service: members[follower], watching: watching}, kafka.Config{Addr: "127.0.0.1:0", AnonymousTenant: "t", Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close(context.Background()) })
	cl, err := kgo.NewClient(kgo.SeedBrokers(ln.Addr().String()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	at := cl.SeedBrokers()[0]

	c, err := client.Dial(ctx, leader.Addr().String(), client.Options{Insecure: true, Tenant: "t"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close(context.Background()) }()

	const maxWait = 30_000 // ms, the listener's cap
	for off := int64(0); off < 3; off++ {
		answered := make(chan kmsg.Response, 1)
		go func() {
			req := kmsg.NewPtrFetchRequest()
			req.MaxWaitMillis, req.MinBytes, req.MaxBytes = maxWait, 1, 1<<20
			rt := kmsg.NewFetchRequestTopic()
			rt.Topic = clusterTopic
			rp := kmsg.NewFetchRequestTopicPartition()
			rp.FetchOffset, rp.PartitionMaxBytes = off, 1<<20
			rt.Partitions = append(rt.Partitions, rp)
			req.Topics = append(req.Topics, rt)
			resp, err := at.Request(ctx, req)
			if err != nil {
				resp = nil
			}
			answered <- resp
		}()
		select {
		case after := <-watching:
			if after != uint64(off) {
				t.Fatalf("the Fetch at %d watches from %d", off, after)
			}
		case <-ctx.Done():
			t.Fatalf("the Fetch at %d at follower %s never waited", off, follower)
		}
		start := time.Now()
		if err := c.Publish(ctx, clusterStream, []byte("wake"), client.PublishOptions{}); err != nil {
			t.Fatalf("publish at the leader %s: %v", owners[0], err)
		}
		resp := <-answered
		if resp == nil {
			t.Fatalf("the Fetch at %d at follower %s failed", off, follower)
		}
		if took := time.Since(start); took > maxWait*time.Millisecond/3 {
			t.Fatalf("the Fetch at %d at follower %s answered %s after the publish; its max wait is %dms", off, follower, took, maxWait)
		}
		p := resp.(*kmsg.FetchResponse).Topics[0].Partitions[0]
		if n, first := batchRecords(t, p.RecordBatches); p.ErrorCode != 0 || n != 1 || first != off {
			t.Fatalf("the Fetch at %d at follower %s: error %d, %d records from %d; want the one at %d", off, follower, p.ErrorCode, n, first, off)
		}
	}
}
