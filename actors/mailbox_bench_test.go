package actors_test

import (
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/getfelix/felix-go/actors"
)

type benchMsg struct{ n int }

// BenchmarkMailbox sends b.N pre-allocated pointer messages with Root.Send to
// one actor that counts them, and stops the clock when the last one arrives.
// Run it as
//
//	go test -run '^$' -bench Mailbox -benchtime 1000000x -count 3 ./actors/
func BenchmarkMailbox(b *testing.B) {
	ours := func(policy actors.Policy) func(func(*actors.Mailbox)) actor.MailboxProducer {
		return func(created func(*actors.Mailbox)) actor.MailboxProducer {
			return actors.Producer(actors.MailboxConfig{Capacity: 1024, Policy: policy}, created)
		}
	}
	unbounded := func(func(*actors.Mailbox)) actor.MailboxProducer { return actor.Unbounded() }

	benchmarks := []struct {
		name    string
		senders int
		mailbox func(created func(*actors.Mailbox)) actor.MailboxProducer
	}{
		{name: "ours-block", senders: 1, mailbox: ours(actors.Block)},
		{name: "ours-dropnew", senders: 1, mailbox: ours(actors.DropNew)},
		{name: "protoactor-unbounded", senders: 1, mailbox: unbounded},
		{name: "ours-block-2senders", senders: 2, mailbox: ours(actors.Block)},
		{name: "ours-dropnew-2senders", senders: 2, mailbox: ours(actors.DropNew)},
		{name: "protoactor-unbounded-2senders", senders: 2, mailbox: unbounded},
	}
	for _, bm := range benchmarks {
		b.Run(bm.name, func(b *testing.B) {
			benchmarkMailbox(b, bm.senders, bm.mailbox)
		})
	}
}

func benchmarkMailbox(b *testing.B, senders int, mailbox func(created func(*actors.Mailbox)) actor.MailboxProducer) {
	system := newSystem(b)
	msgs := make([]*benchMsg, b.N)
	for i := range msgs {
		msgs[i] = &benchMsg{n: i}
	}

	// The actor closes done when it has counted every message that was
	// accepted: b.N, unless the mailbox dropped some, in which case an expect
	// (control traffic, never dropped) sent after the last post lowers the
	// target.
	done := make(chan struct{})
	var (
		count, target = 0, b.N
		finished      bool
		mb            *actors.Mailbox // nil for protoactor's mailbox
	)
	props := actor.PropsFromFunc(func(c actor.Context) {
		switch m := c.Message().(type) {
		case *benchMsg:
			count++
		case *expect:
			target = m.n
		default:
			return
		}
		if count == target && !finished {
			finished = true
			close(done)
		}
	}, actor.WithMailbox(mailbox(func(m *actors.Mailbox) { mb = m })))
	pid := system.Root.Spawn(props)
	b.Cleanup(func() { stopActor(b, system, pid) })

	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	per := b.N / senders
	for s := 0; s < senders; s++ {
		part := msgs[s*per : (s+1)*per]
		if s == senders-1 {
			part = msgs[s*per:]
		}
		wg.Go(func() {
			for _, m := range part {
				system.Root.Send(pid, m)
			}
		})
	}
	wg.Wait()
	var dropped uint64
	if mb != nil {
		dropped = mb.Dropped()
	}
	system.Root.Send(pid, &expect{n: b.N - int(dropped)})
	select {
	case <-done:
	case <-time.After(time.Minute):
		b.Fatalf("%d messages sent, %d dropped: the rest did not arrive within a minute", b.N, dropped)
	}
	b.StopTimer()

	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	if mb != nil {
		b.ReportMetric(float64(dropped)/float64(b.N), "drops/op")
		b.ReportMetric(float64(uint64(b.N)-dropped)/b.Elapsed().Seconds(), "delivered/s")
	}
}
