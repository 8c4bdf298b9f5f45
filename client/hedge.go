package client

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/getfelix/felix-go/wire"
)

// A routed call left unanswered by its owner is watched, so that a call
// waiting on a member that died does not wait out the connection's idle
// timeout.
//
// A member killed with SIGKILL (or cut off) sends nothing, so QUIC gives
// its connection up only after Options.IdleTimeout, and quic-go up to one
// KeepAlive later: it counts the idle timeout from the first ack-eliciting
// packet sent after the last one received (RFC 9000 §10.1), and when both
// sides had acknowledged everything at the kill, that packet is the
// keep-alive PING sent KeepAlive after the last answer. Meanwhile the
// survivors of a replicated shard elect a new leader within raft's
// election timeout, and its owner record names it to every member within
// milliseconds. So a call not answered within hedgeAfter starts a watch of
// its connection and stream: every hedgeEvery it asks the owner it waits
// on, and the other members, who owns the shard. When the owner has left
// such a question unanswered for silentTicks × hedgeEvery while another
// member names a different owner, the connection is abandoned: closed,
// every call on it fails with a *ConnectionLostError (outcome unknown for
// a publish: a plain publish returns it, an idempotent producer sends its
// batch again with its sequence), and the next call goes to the owner
// named now.
//
// Both conditions are needed. An owner that answers the question is alive,
// however slow its answer to the call: it answers the call too, with
// not_leader or leadership_lost if it lost the shard, and its connection
// may carry subscriptions to other shards. An owner that answers nothing
// may only be slow or briefly cut off while no one else owns the shard:
// closing its connection would then only move the wait elsewhere.
//
// One watch serves every call waiting on the same connection for the same
// stream, so a thousand callers stuck on a dead member cost the others one
// question per hedgeEvery, not a thousand.
//
// Measured by BenchmarkReplicatedFailover (docs/BENCHMARKS.md): what the
// watch adds to a failover is the wait for its next question after the
// new owner's claim, up to hedgeEvery; a question is a lookup in the
// member's memory, so asking every 50 ms costs little.
const (
	hedgeAfter  = 200 * time.Millisecond
	hedgeEvery  = 50 * time.Millisecond
	silentTicks = 2
)

// overdueKey names a watch: the connection the calls wait on, and their
// stream.
type overdueKey struct {
	c     *Client
	scope wire.Scope
}

// overdue is the watch of one connection's overdue calls for one stream.
// The last call to leave ends it.
type overdue struct {
	cc     *ClusterClient
	key    overdueKey
	addr   string // where c is connected
	cancel context.CancelFunc

	mu struct {
		sync.Mutex
		// picks are the waiting calls' shard choices, one per call.
		picks map[*overdueCall]func(Topology) uint32
	}
}

// overdueCall is one routed call's hedge: a timer until it becomes
// overdue, then its place in a watch.
type overdueCall struct {
	cc    *ClusterClient
	key   overdueKey
	addr  string
	pick  func(Topology) uint32
	timer *time.Timer

	mu       sync.Mutex
	finished bool
	w        *overdue // the watch it joined; nil before hedgeAfter
}

// hedge starts the hedge of a call for scope's shard (pick chooses it)
// about to be made on c, connected to addr. Call the returned function
// when the call returns.
func (cc *ClusterClient) hedge(addr string, c *Client, scope wire.Scope, pick func(Topology) uint32) (finish func()) {
	oc := &overdueCall{cc: cc, key: overdueKey{c: c, scope: scope}, addr: addr, pick: pick}
	oc.timer = time.AfterFunc(hedgeAfter, oc.join)
	return oc.finish
}

// join puts the call in its connection's watch, starting one if there is
// none, unless the call already returned.
func (oc *overdueCall) join() {
	oc.mu.Lock()
	defer oc.mu.Unlock()
	if oc.finished {
		return
	}
	oc.w = oc.cc.watch(oc)
}

// finish ends the call's hedge: stops its timer, or leaves its watch.
func (oc *overdueCall) finish() {
	oc.timer.Stop()
	oc.mu.Lock()
	oc.finished = true
	w := oc.w
	oc.mu.Unlock()
	if w != nil {
		oc.cc.leave(w, oc)
	}
}

// watch adds oc to its key's watch, starting the watch when there is none;
// it returns nil when the ClusterClient is closed.
func (cc *ClusterClient) watch(oc *overdueCall) *overdue {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.mu.closed {
		return nil
	}
	w := cc.mu.overdue[oc.key]
	if w == nil {
		ctx, cancel := context.WithCancel(context.Background())
		w = &overdue{cc: cc, key: oc.key, addr: oc.addr, cancel: cancel}
		w.mu.picks = make(map[*overdueCall]func(Topology) uint32)
		cc.mu.overdue[oc.key] = w
		// Added under cc.mu while not closed: Close, which sets closed
		// under cc.mu before it waits, cannot be waiting yet.
		cc.watching.Add(1)
		go w.run(ctx)
	}
	w.mu.Lock()
	w.mu.picks[oc] = oc.pick
	w.mu.Unlock()
	return w
}

// leave takes oc out of w, ending w when it was the last call.
func (cc *ClusterClient) leave(w *overdue, oc *overdueCall) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	w.mu.Lock()
	delete(w.mu.picks, oc)
	last := len(w.mu.picks) == 0
	w.mu.Unlock()
	if last {
		if cc.mu.overdue[w.key] == w {
			delete(cc.mu.overdue, w.key)
		}
		w.cancel()
	}
}

// ownerAnswer is one member's answer to "who owns the stream's shards":
// from the owner the calls wait on (owner true) or another member.
type ownerAnswer struct {
	from  string
	owner bool
	top   Topology
	err   error
}

// run asks the questions (see hedgeAfter) at once and on every tick,
// until the watch ends or it abandons the connection.
func (w *overdue) run(ctx context.Context) {
	defer w.cc.watching.Done()
	c := w.key.c
	answers := make(chan ownerAnswer, maxAsked)
	var asking sync.WaitGroup
	defer asking.Wait() // every question is bounded, and cut short by the cancel below
	defer w.cancel()
	s := newSilence(w.addr)
	var ownerAsked time.Time
	ask := func() {
		owner, others := s.toAsk(w.cc.candidates())
		if owner {
			ownerAsked = time.Now()
			asking.Go(func() { answers <- w.ask(ctx, w.addr, c) })
		}
		for _, addr := range others {
			asking.Go(func() { answers <- w.askMember(ctx, addr) })
		}
	}
	tick := time.NewTicker(hedgeEvery)
	defer tick.Stop()
	ask()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.done:
			return // lost or closed: its calls are answered
		case a := <-answers:
			var to string
			if !a.owner {
				to = w.otherOwner(a)
			}
			s.answered(a.from, a.owner, to)
			if h := w.cc.testHookWatch; h != nil {
				h(a.from, a.owner, a.err, to)
			}
		case <-tick.C:
			s.tick()
			ask()
		}
		if from, to, ok := s.abandon(); ok {
			c.fail(fmt.Errorf("abandoned: %s answered nothing for %s while %s names %s the owner of %s",
				w.addr, time.Since(ownerAsked).Round(time.Millisecond), from, to, w.key.scope))
			return
		}
	}
}

// silence is a watch's account of its questions: who has one unanswered,
// the other owner each member named in its last answer, and the tick the
// owner's unanswered question went at. It decides when the connection is
// abandoned (see hedgeAfter); only the watch's run touches it.
type silence struct {
	owner     string            // the member the calls wait on
	ticks     int               // hedgeEvery ticks since the watch began
	ownerTick int               // the tick the owner's unanswered question went at
	pending   map[string]bool   // members with a question unanswered
	moved     map[string]string // member -> the other owner it names
}

func newSilence(owner string) *silence {
	return &silence{owner: owner, pending: make(map[string]bool), moved: make(map[string]string)}
}

// toAsk is who to ask now, marked asked: the owner unless its question is
// unanswered, and each other candidate without one, up to maxAsked
// unanswered in all. A question is not asked again while one is
// unanswered, so a silent owner's silence counts from its oldest question.
func (s *silence) toAsk(candidates []string) (owner bool, others []string) {
	if !s.pending[s.owner] {
		s.pending[s.owner], s.ownerTick, owner = true, s.ticks, true
	}
	for _, addr := range candidates {
		if addr != s.owner && !s.pending[addr] && len(s.pending) < maxAsked {
			s.pending[addr] = true
			others = append(others, addr)
		}
	}
	return owner, others
}

// answered takes a member's answer: from the owner (owner true), or from
// another member that names to the owner of a shard a call waits for (""
// when it names the owner the calls wait on, none, or did not answer).
// A member's newest answer replaces what it said before.
func (s *silence) answered(from string, owner bool, to string) {
	delete(s.pending, from)
	if owner {
		return
	}
	delete(s.moved, from)
	if to != "" {
		s.moved[from] = to
	}
}

// tick counts one hedgeEvery.
func (s *silence) tick() { s.ticks++ }

// abandon says whether the connection is to be given up, and on whose
// word: the owner has left a question unanswered for silentTicks while a
// member names another owner (the lowest address, when several do).
func (s *silence) abandon() (from, to string, ok bool) {
	if !s.pending[s.owner] || s.ticks-s.ownerTick < silentTicks || len(s.moved) == 0 {
		return "", "", false
	}
	from = slices.Min(slices.Collect(maps.Keys(s.moved)))
	return from, s.moved[from], true
}

// maxAsked bounds the questions one watch has unanswered: the owner and
// up to seven other members.
const maxAsked = 8

// ask asks the owner, on the connection the calls wait on.
func (w *overdue) ask(ctx context.Context, addr string, c *Client) ownerAnswer {
	top, err := c.ShardOwners(ctx, streamOf(w.key.scope))
	return ownerAnswer{from: addr, owner: true, top: top, err: err}
}

// askMember asks another member, on the ClusterClient's connection to it
// (dialed if need be: a dial cut short by the watch's end does not mark
// the member lost).
func (w *overdue) askMember(ctx context.Context, addr string) ownerAnswer {
	c, err := w.cc.connect(ctx, addr)
	if err != nil {
		return ownerAnswer{from: addr, err: err}
	}
	qctx, cancel := context.WithTimeout(ctx, w.cc.opts.DialTimeout)
	defer cancel()
	a := w.ask(qctx, addr, c)
	a.owner = false
	return a
}

// otherOwner is the owner a member's answer names, for a shard some call
// waits for, other than the one the calls wait on; "" when there is none.
func (w *overdue) otherOwner(a ownerAnswer) string {
	if a.err != nil {
		return ""
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, pick := range w.mu.picks {
		o, ok := a.top.Owner(pick(a.top))
		if !ok || !o.Available {
			continue
		}
		to := o.Owner.Addr
		if to == "" {
			to = a.from // the member that answered owns it
		}
		if to != w.addr {
			return to
		}
	}
	return ""
}

// lookup asks the members for scope's topology: those connected, then the
// seeds (candidates), each in turn when the one before failed or has not
// answered within hedgeAfter, and takes the first answer. Asked strictly
// in turn, a member that had died with its connection still open held
// the lookup for DialTimeout: a publish retried just after its owner died
// waited 3 s (by default) before asking the next member
// (BenchmarkReplicatedFailover). The questions still unanswered when one
// answers are cut short.
func (cc *ClusterClient) lookup(ctx context.Context, scope wire.Scope) (*knownTopology, error) {
	cands := cc.candidates()
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		kt  *knownTopology
		err error
	}
	results := make(chan result, len(cands)) // never blocks a question that lost the race
	next, running := 0, 0
	askNext := func() {
		addr := cands[next]
		next++
		running++
		go func() {
			kt, err := cc.lookupAt(lctx, scope, addr)
			results <- result{kt, err}
		}()
	}
	askNext()
	hedge := time.NewTicker(hedgeAfter)
	defer hedge.Stop()
	var last error
	for running > 0 {
		select {
		case r := <-results:
			running--
			if r.err == nil || ctx.Err() != nil || !cc.unreachable(r.err) {
				return r.kt, r.err
			}
			last = r.err
			if next < len(cands) {
				askNext()
			}
		case <-hedge.C:
			if next < len(cands) {
				askNext()
			}
		}
	}
	return nil, last
}

// lookupAt asks addr for scope's topology. A broker that cannot tell now,
// or does not answer within DialTimeout, is unreachable: the next is asked.
func (cc *ClusterClient) lookupAt(ctx context.Context, scope wire.Scope, addr string) (*knownTopology, error) {
	c, err := cc.connect(ctx, addr)
	if err != nil {
		return nil, err
	}
	// A member that died keeps its connection until the idle timeout:
	// asked there, the question would wait that long.
	qctx, cancel := context.WithTimeout(ctx, cc.opts.DialTimeout)
	top, err := c.ShardOwners(qctx, streamOf(scope))
	cancel()
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return nil, &unreachableError{err}
	}
	if err != nil && !final(err) {
		return nil, &unreachableError{err} // this broker cannot tell now: ask the next
	}
	return &knownTopology{top: top, err: err, from: addr}, nil
}
