package actors

import (
	"runtime"
	"slices"
	"sync"
	"time"
	"weak"

	"github.com/asynkron/protoactor-go/actor"
)

// A mailbox with work runs it on a goroutine of its own until the queue is
// empty, then lets the goroutine go. protoactor's default dispatcher starts
// a new goroutine for every such wake, and on the data path a wake is a
// batch or less: each new goroutine starts on a small stack and grows it
// (runtime.newstack, copystack) through the actor's Receive, the frame
// encode and the QUIC write, every time. The broker's profiles put that
// growth at 6-8 % of its CPU. UseWorkerPool gives the mailboxes of one
// actor system a pool instead: a finished run parks its goroutine, stack
// kept, for the next wake of any of them. A goroutine parked for
// idleWorkerLife exits, and at most maxIdleWorkers park, so a burst does
// not leave thousands behind.
//
// The pool is the system owner's choice (the broker makes one for the
// system it owns), not a default: a parked goroutine outlives the work it
// ran by up to idleWorkerLife, which a system in a testing/synctest bubble
// cannot have at the bubble's end, and the owner retires the pool when it
// stops the system, so none is left behind.

const (
	idleWorkerLife = 100 * time.Millisecond
	maxIdleWorkers = 256
)

// workerPool is an actor.Dispatcher whose goroutines run one scheduled
// function after another.
type workerPool struct {
	throughput int
	mu         sync.Mutex
	idle       []*worker // parked, the most recently parked last
	retired    bool      // once set, every wake gets a goroutine of its own
}

type worker struct {
	// work hands the next function to the parked worker; buffered, so a
	// Schedule never waits for the worker to wake.
	work chan func()
}

var _ actor.Dispatcher = (*workerPool)(nil)

// Throughput is how many messages a mailbox handles before it yields the
// processor (actor.Dispatcher).
func (p *workerPool) Throughput() int { return p.throughput }

// Schedule runs fn on a parked worker, or on a new one when none is parked.
func (p *workerPool) Schedule(fn func()) {
	p.mu.Lock()
	if p.retired {
		p.mu.Unlock()
		go fn()
		return
	}
	if n := len(p.idle); n > 0 {
		w := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		w.work <- fn
		return
	}
	p.mu.Unlock()
	go p.run(fn)
}

func (p *workerPool) run(fn func()) {
	w := &worker{work: make(chan func(), 1)}
	idle := time.NewTimer(idleWorkerLife)
	defer idle.Stop()
	for {
		fn()
		fn = nil // a parked worker holds no mailbox
		p.mu.Lock()
		if p.retired || len(p.idle) >= maxIdleWorkers {
			p.mu.Unlock()
			return
		}
		p.idle = append(p.idle, w)
		p.mu.Unlock()
		idle.Reset(idleWorkerLife)
		select {
		case fn = <-w.work:
			if fn == nil {
				return // retired
			}
		case <-idle.C:
			if p.retire(w) {
				return
			}
			// Taken off the idle list before it could leave: the
			// function it was handed (nil: retired) is on its way.
			if fn = <-w.work; fn == nil {
				return
			}
		}
	}
}

// retire takes a parked worker off the idle list and reports whether it
// was still there.
func (p *workerPool) retire(w *worker) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, x := range p.idle {
		if x == w {
			p.idle = slices.Delete(p.idle, i, i+1)
			return true
		}
	}
	return false
}

// retire makes every parked worker exit and every later wake start a
// goroutine of its own.
func (p *workerPool) retireAll() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.retired = true
	p.mu.Unlock()
	for _, w := range idle {
		w.work <- nil
	}
}

// pools: the worker pool of each actor system given one, keyed weakly so
// a system dropped without its pool retired can still be collected.
var pools sync.Map // weak.Pointer[actor.ActorSystem] → *workerPool

// poolThroughput is protoactor's default dispatcher's: messages a mailbox
// handles before it yields the processor.
const poolThroughput = 300

// UseWorkerPool makes the mailboxes (Props) spawned on sys from now on run
// on a pool of reused goroutines in place of protoactor's default
// dispatcher, a new goroutine per wake; a mailbox given another dispatcher
// keeps it. The returned function retires the pool: its parked goroutines
// exit and later wakes each get a goroutine of their own. Call it when the
// system is shut down.
func UseWorkerPool(sys *actor.ActorSystem) (retire func()) {
	key := weak.Make(sys)
	p := &workerPool{throughput: poolThroughput}
	pools.Store(key, p)
	runtime.AddCleanup(sys, func(k weak.Pointer[actor.ActorSystem]) { pools.Delete(k) }, key)
	return func() {
		pools.CompareAndDelete(key, p)
		p.retireAll()
	}
}

// dispatcherFor returns the dispatcher a mailbox of invoker's system runs
// on: the system's pool in place of protoactor's default dispatcher, when
// the system has one; otherwise the one given.
func dispatcherFor(invoker actor.MessageInvoker, given actor.Dispatcher) actor.Dispatcher {
	if given == nil || given != actor.NewDefaultDispatcher(poolThroughput) {
		return given
	}
	ctx, ok := invoker.(interface{ ActorSystem() *actor.ActorSystem })
	if !ok || ctx.ActorSystem() == nil {
		return given
	}
	if p, ok := pools.Load(weak.Make(ctx.ActorSystem())); ok {
		return p.(*workerPool)
	}
	return given
}
