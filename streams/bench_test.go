package streams

import (
	"fmt"
	"sync"
	"testing"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/getfelix/felix-go/actors"
)

// BenchmarkShardPublish measures the shard's part of a publish: a batch of
// 64 × 128 B from its mailbox to F subscribers' mailboxes (whose actors
// only count), answered once; allocations per publish show what the hop
// costs the collector.
//
//	go test -run '^$' -bench ShardPublish -benchmem ./streams/
func BenchmarkShardPublish(b *testing.B) {
	for _, fanout := range []int{1, 10} {
		b.Run(fmt.Sprintf("fanout=%d", fanout), func(b *testing.B) { benchShardPublish(b, fanout) })
	}
}

// countingFeeder counts the envelopes it receives and says when it has n.
type countingFeeder struct {
	want, got int
	done      *sync.WaitGroup
}

func (f *countingFeeder) Receive(ctx actor.Context) {
	if _, ok := ctx.Message().(*Envelope); ok {
		if f.got++; f.got == f.want {
			f.done.Done()
		}
	}
}

func benchShardPublish(b *testing.B, fanout int) {
	ts := spawnTestShard(b, ShardConfig{SubscriberPolicy: actors.Block, RingRecords: 1024}, nil, false, nil)
	var delivered sync.WaitGroup
	delivered.Add(fanout)
	for i := range fanout {
		var mb *actors.Mailbox
		ts.sys.Root.Spawn(actors.Props(func() actor.Actor { return &countingFeeder{want: b.N, done: &delivered} },
			actors.MailboxConfig{Capacity: 4096, Policy: actors.Block}, func(m *actors.Mailbox) { mb = m }))
		if _, err := ts.sys.Root.RequestFuture(ts.ref.PID, &AddSubscriber{ID: uint64(i + 1), Feeder: mb}, eventTimeout).Result(); err != nil {
			b.Fatal(err)
		}
	}
	payloads := make([][]byte, 64)
	for i := range payloads {
		payloads[i] = make([]byte, 128)
	}
	var answered sync.WaitGroup
	answered.Add(b.N)
	done := func(PublishResult) { answered.Done() }
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		p := &Publish{Payloads: payloads, Done: done}
		if r := ts.ref.Mailbox.TryPost(p, eventTimeout); !r.Accepted() {
			b.Fatalf("publish not admitted: %v", r)
		}
	}
	answered.Wait()
	delivered.Wait()
}
