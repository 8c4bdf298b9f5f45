package actors

import (
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

func (p *workerPool) parked() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}

// A finished run parks its goroutine, the next Schedule reuses it, a
// worker parked for idleWorkerLife exits, and retiring the pool makes the
// parked ones exit at once (synctest fails the test if a goroutine of the
// bubble is left at its end).
func TestWorkerPoolReusesAndRetires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &workerPool{throughput: 300}
		ran := make(chan int, 2)
		p.Schedule(func() { ran <- 1 })
		<-ran
		synctest.Wait()
		if n := p.parked(); n != 1 {
			t.Fatalf("after one run %d workers parked, want 1", n)
		}
		p.Schedule(func() { ran <- 2 })
		<-ran
		synctest.Wait()
		if n := p.parked(); n != 1 {
			t.Fatalf("after a second run %d workers parked, want the same 1 (reused, not a second goroutine)", n)
		}
		time.Sleep(idleWorkerLife + time.Millisecond)
		synctest.Wait()
		if n := p.parked(); n != 0 {
			t.Fatalf("%d workers still parked after %s idle, want 0", n, idleWorkerLife)
		}
		// A pool whose workers all left starts a new one.
		p.Schedule(func() { ran <- 3 })
		if got := <-ran; got != 3 {
			t.Fatalf("ran %d", got)
		}
		synctest.Wait()
		p.retireAll()
		synctest.Wait()
		if n := p.parked(); n != 0 {
			t.Fatalf("%d workers parked after the pool retired", n)
		}
		// A retired pool still runs what it is given.
		p.Schedule(func() { ran <- 4 })
		if got := <-ran; got != 4 {
			t.Fatalf("ran %d", got)
		}
	})
}

// A burst of concurrent runs leaves at most maxIdleWorkers parked.
func TestWorkerPoolBoundsParkedWorkers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &workerPool{throughput: 300}
		gate := make(chan struct{})
		var started sync.WaitGroup
		const burst = maxIdleWorkers + 50
		started.Add(burst)
		for range burst {
			p.Schedule(func() { started.Done(); <-gate })
		}
		started.Wait()
		close(gate)
		synctest.Wait()
		if n := p.parked(); n != maxIdleWorkers {
			t.Fatalf("%d workers parked after a burst of %d, want the bound %d", n, burst, maxIdleWorkers)
		}
		p.retireAll()
	})
}

// Every scheduled function runs exactly once, with Schedules from many
// goroutines racing the workers' parking and retiring.
func TestWorkerPoolRunsEachOnce(t *testing.T) {
	p := &workerPool{throughput: 300}
	const senders, each = 8, 5000
	var runs atomic.Int64
	var done sync.WaitGroup
	done.Add(senders * each)
	for range senders {
		go func() {
			for range each {
				p.Schedule(func() { runs.Add(1); done.Done() })
			}
		}()
	}
	done.Wait()
	if got := runs.Load(); got != senders*each {
		t.Fatalf("%d runs, want %d", got, senders*each)
	}
	p.retireAll()
}

// Mailboxes of a system given a pool share it; a system without one, and
// a mailbox given a dispatcher other than protoactor's default, keep
// protoactor's; once retired, new mailboxes of the system no longer use it.
func TestUseWorkerPool(t *testing.T) {
	got := make(chan string, 1)
	var firstPID *actor.PID
	spawn := func(sys *actor.ActorSystem, opts ...actor.PropsOption) *Mailbox {
		var mb *Mailbox
		props := Props(func() actor.Actor {
			return actor.ReceiveFunc(func(c actor.Context) {
				if s, ok := c.Message().(string); ok {
					got <- s
				}
			})
		}, MailboxConfig{Capacity: 8}, func(m *Mailbox) { mb = m }, opts...)
		pid := sys.Root.Spawn(props)
		if firstPID == nil {
			firstPID = pid
		}
		t.Cleanup(func() { _ = sys.Root.StopFuture(pid).Wait() })
		return mb
	}
	pooled, plain := actor.NewActorSystem(), actor.NewActorSystem()
	retire := UseWorkerPool(pooled)
	first, second := spawn(pooled), spawn(pooled)
	pooled.Root.Send(firstPID, "before")
	if s := <-got; s != "before" {
		t.Fatalf("got %q", s)
	}
	pool, ok := first.dispatcher.(*workerPool)
	if !ok {
		t.Fatalf("a mailbox of a system with a pool runs on %T, want the pool", first.dispatcher)
	}
	if second.dispatcher != pool {
		t.Error("two mailboxes of one system run on different dispatchers")
	}
	if d := spawn(plain).dispatcher; d != actor.NewDefaultDispatcher(poolThroughput) {
		t.Errorf("a mailbox of a system without a pool runs on %v, want protoactor's default", d)
	}
	if _, ok := spawn(pooled, actor.WithDispatcher(actor.NewSynchronizedDispatcher(poolThroughput))).dispatcher.(*workerPool); ok {
		t.Error("a mailbox given a synchronized dispatcher runs on the pool")
	}
	retire()
	if _, ok := spawn(pooled).dispatcher.(*workerPool); ok {
		t.Error("a mailbox spawned after the pool retired runs on it")
	}
	// The retired pool still runs its mailboxes' wakes.
	pooled.Root.Send(firstPID, "after")
	if s := <-got; s != "after" {
		t.Fatalf("got %q", s)
	}
	if first.dispatcher != pool {
		t.Error("a mailbox's dispatcher changed after the pool retired")
	}
}
