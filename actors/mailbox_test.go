package actors_test

import (
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/goleak"

	"github.com/getfelix/felix-go/actors"
)

// TestMain checks for leaked goroutines, but for protoactor's dead-letter
// throttle, which outlives an actor system by up to a second after a dead
// letter (see broker/main_test.go).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"),
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewThrottle.func1.1"),
	)
}

// eventTimeout bounds every wait for something the actor or a sender does.
// It is generous because -race and a loaded machine slow everything down;
// a passing test never waits for it.
const eventTimeout = 10 * time.Second

// msg is a data message that weighs nothing.
type msg struct{ n int }

// sized is a data message that counts against a byte bound.
type sized struct {
	n     int
	bytes int64
}

func (s *sized) MailboxBytes() int64 { return s.bytes }

// ctl is control traffic: it bypasses bounds and Hold.
type ctl struct {
	actors.ControlMessage
	n int
}

func newSystem(t testing.TB) *actor.ActorSystem {
	t.Helper()
	system := actor.NewActorSystem(
		actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
			return slog.New(slog.DiscardHandler)
		}),
		// The dead-letter throttle holds a goroutine for one interval;
		// keep it short so goleak does not wait on it.
		actor.WithDeadLetterThrottleInterval(10*time.Millisecond),
	)
	t.Cleanup(system.Shutdown)
	return system
}

// gate lets a test park an actor inside Receive: the actor calls wait, which
// closes entered and blocks until the test calls open. Cleanup opens it so a
// failing test does not leak the actor's goroutine.
type gate struct {
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func newGate(t testing.TB) *gate {
	g := &gate{entered: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(g.open)
	return g
}

// wait is called by the actor.
func (g *gate) wait() {
	close(g.entered)
	<-g.release
}

func (g *gate) open() { g.once.Do(func() { close(g.release) }) }

// awaitEntered blocks until the actor is parked in wait.
func (g *gate) awaitEntered(t testing.TB) {
	t.Helper()
	select {
	case <-g.entered:
	case <-time.After(eventTimeout):
		t.Fatalf("actor did not enter its first message within %v", eventTimeout)
	}
}

// recv reads one value or fails the test after eventTimeout.
func recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(eventTimeout):
		t.Fatalf("timed out after %v waiting for %s", eventTimeout, what)
		panic("unreachable")
	}
}

// recvN reads n values in arrival order.
func recvN[T any](t testing.TB, ch <-chan T, n int, what string) []T {
	t.Helper()
	got := make([]T, 0, n)
	for i := 0; i < n; i++ {
		got = append(got, recv(t, ch, fmt.Sprintf("%s #%d of %d (got so far %v)", what, i+1, n, got)))
	}
	return got
}

// assertQuiet fails if ch holds anything right now.
func assertQuiet[T any](t testing.TB, ch <-chan T, what string) {
	t.Helper()
	select {
	case v := <-ch:
		t.Fatalf("%s: got unexpected %v, want nothing more", what, v)
	default:
	}
}

// stopActor stops pid and waits until it has terminated.
func stopActor(t testing.TB, system *actor.ActorSystem, pid *actor.PID) {
	t.Helper()
	if err := system.Root.StopFuture(pid).Wait(); err != nil {
		t.Errorf("stopping %v: %v", pid, err)
	}
}

// spawn starts an actor on a fresh policy mailbox and returns its PID and
// the mailbox handle. The actor is stopped at cleanup.
func spawn(t testing.TB, system *actor.ActorSystem, cfg actors.MailboxConfig, fn actor.ReceiveFunc) (*actor.PID, *actors.Mailbox) {
	t.Helper()
	var mb *actors.Mailbox
	props := actor.PropsFromFunc(fn, actor.WithMailbox(actors.Producer(cfg, func(m *actors.Mailbox) { mb = m })))
	pid := system.Root.Spawn(props)
	if mb == nil {
		t.Fatal("Producer did not hand over the mailbox during Spawn")
	}
	t.Cleanup(func() { stopActor(t, system, pid) })
	return pid, mb
}

// waitParked waits until some goroutine is parked inside Mailbox.post, that
// is a Block sender waiting for room. It polls the goroutine dump because the
// mailbox has no hook for "a sender went to sleep".
func waitParked(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(eventTimeout)
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		for _, g := range strings.Split(string(buf[:n]), "\n\n") {
			header, _, _ := strings.Cut(g, "\n")
			parked := strings.Contains(header, "[chan receive") || strings.Contains(header, "[select")
			if parked && strings.Contains(g, "actors.(*Mailbox).post") {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no sender parked in Mailbox.post within %v", eventTimeout)
		}
		time.Sleep(time.Millisecond)
	}
}

// probe is an actor that reports what it receives on got: "d<n>" for data,
// "c<n>" for control, and "started", "restarting", "stopping", "stopped". It
// parks in its gate on data message 0, panics on the data numbers in panicOn,
// and closes its mailbox when stopped, as owners do.
type probe struct {
	gate      *gate
	got       chan string
	panicOn   map[int]bool
	mailboxes atomic.Int32 // how many mailboxes the producer built
	mb        *actors.Mailbox
	pid       *actor.PID
}

func newProbe(t testing.TB, panicOn ...int) *probe {
	p := &probe{gate: newGate(t), got: make(chan string, 256), panicOn: map[int]bool{}}
	for _, n := range panicOn {
		p.panicOn[n] = true
	}
	return p
}

// props builds the probe's Props. The mailbox handle is stored during Spawn,
// before the actor's goroutine starts.
func (p *probe) props(cfg actors.MailboxConfig) *actor.Props {
	return actor.PropsFromFunc(p.receive, actor.WithMailbox(actors.Producer(cfg, func(m *actors.Mailbox) {
		p.mailboxes.Add(1)
		p.mb = m
	})))
}

func (p *probe) receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *actor.Started:
		p.got <- "started"
	case *actor.Restarting:
		p.got <- "restarting"
	case *actor.Stopping:
		p.got <- "stopping"
	case *actor.Stopped:
		p.mb.Close()
		p.got <- "stopped"
	case *msg:
		p.data(m.n)
	case *sized:
		p.data(m.n)
	case *ctl:
		p.got <- fmt.Sprintf("c%d", m.n)
	}
}

func (p *probe) data(n int) {
	if n == 0 {
		p.gate.wait()
	}
	if p.panicOn[n] {
		panic(fmt.Sprintf("probe: panic on d%d", n))
	}
	p.got <- fmt.Sprintf("d%d", n)
}

// startProbe spawns a probe under the root, waits for its Started and stops
// it at cleanup.
func startProbe(t testing.TB, system *actor.ActorSystem, cfg actors.MailboxConfig, panicOn ...int) *probe {
	t.Helper()
	p := newProbe(t, panicOn...)
	p.pid = system.Root.Spawn(p.props(cfg))
	t.Cleanup(func() { stopActor(t, system, p.pid) })
	p.expect(t, "started")
	return p
}

// startBusy starts a probe and parks it inside Receive on d0, so that
// everything posted afterwards queues.
func startBusy(t testing.TB, system *actor.ActorSystem, cfg actors.MailboxConfig) *probe {
	t.Helper()
	p := startProbe(t, system, cfg)
	system.Root.Send(p.pid, &msg{n: 0})
	p.gate.awaitEntered(t)
	return p
}

// expect reads len(want) events and compares them, in order, with want.
func (p *probe) expect(t testing.TB, want ...string) {
	t.Helper()
	got := recvN(t, p.got, len(want), "probe events")
	if !slices.Equal(got, want) {
		t.Errorf("probe received %q, want %q", got, want)
	}
}

// expectDrained checks the mailbox is empty and that nothing else is on its
// way: a data sentinel posted now must be the very next thing delivered.
func (p *probe) expectDrained(t testing.TB) {
	t.Helper()
	if n, c, b := p.mb.Len(), p.mb.UserMessageCount(), p.mb.Bytes(); n != 0 || c != 0 || b != 0 {
		t.Errorf("after drain Len() = %d, UserMessageCount() = %d, Bytes() = %d, want 0, 0, 0", n, c, b)
	}
	if r := p.mb.TryPost(&msg{n: 999}, 0); r != actors.Posted {
		t.Fatalf("TryPost(sentinel) into a drained mailbox = %s, want %s", resultName(r), resultName(actors.Posted))
	}
	p.expect(t, "d999")
}

// ds names data messages as the probe reports them.
func ds(ns ...int) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = fmt.Sprintf("d%d", n)
	}
	return out
}

func seq(from, to int) []int {
	var out []int
	for n := from; n <= to; n++ {
		out = append(out, n)
	}
	return out
}

func resultName(r actors.PostResult) string {
	switch r {
	case actors.Posted:
		return "Posted"
	case actors.PostedEvicting:
		return "PostedEvicting"
	case actors.Dropped:
		return "Dropped"
	case actors.TimedOut:
		return "TimedOut"
	case actors.Closed:
		return "Closed"
	}
	return fmt.Sprintf("PostResult(%d)", uint8(r))
}

// dropLog records OnDrop calls.
type dropLog struct {
	mu      sync.Mutex
	msgs    []int
	reasons []actors.DropReason
}

func (l *dropLog) onDrop(m any, reason actors.DropReason) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch m := m.(type) {
	case *msg:
		l.msgs = append(l.msgs, m.n)
	case *sized:
		l.msgs = append(l.msgs, m.n)
	default:
		l.msgs = append(l.msgs, -1)
	}
	l.reasons = append(l.reasons, reason)
}

func (l *dropLog) snapshot() ([]int, []actors.DropReason) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.msgs), slices.Clone(l.reasons)
}

func repeatReason(r actors.DropReason, n int) []actors.DropReason {
	out := make([]actors.DropReason, n)
	for i := range out {
		out[i] = r
	}
	return out
}

func TestMailboxDropNewKeepsFirstMessages(t *testing.T) {
	system := newSystem(t)
	var drops dropLog
	p := startBusy(t, system, actors.MailboxConfig{Capacity: 4, Policy: actors.DropNew, OnDrop: drops.onDrop})

	for n := 1; n <= 10; n++ {
		system.Root.Send(p.pid, &msg{n: n})
	}

	if got, want := p.mb.Dropped(), uint64(6); got != want {
		t.Errorf("capacity 4, 10 sends to a busy actor: Dropped() = %d, want %d", got, want)
	}
	if got := p.mb.Evicted(); got != 0 {
		t.Errorf("DropNew: Evicted() = %d, want 0", got)
	}
	if got, want := p.mb.UserMessageCount(), 4; got != want {
		t.Errorf("UserMessageCount() with a full queue = %d, want %d", got, want)
	}
	gotMsgs, gotReasons := drops.snapshot()
	if want := seq(5, 10); !slices.Equal(gotMsgs, want) {
		t.Errorf("OnDrop saw messages %v, want %v", gotMsgs, want)
	}
	if want := repeatReason(actors.DropFull, 6); !slices.Equal(gotReasons, want) {
		t.Errorf("OnDrop reasons %v, want %v (DropFull)", gotReasons, want)
	}

	p.gate.open()
	p.expect(t, ds(0, 1, 2, 3, 4)...)
	p.expectDrained(t)
}

func TestMailboxDropOldKeepsNewestMessages(t *testing.T) {
	system := newSystem(t)
	var drops dropLog
	p := startBusy(t, system, actors.MailboxConfig{Capacity: 4, Policy: actors.DropOld, OnDrop: drops.onDrop})

	for n := 1; n <= 10; n++ {
		system.Root.Send(p.pid, &msg{n: n})
	}

	if got, want := p.mb.Evicted(), uint64(6); got != want {
		t.Errorf("capacity 4, 10 sends to a busy actor: Evicted() = %d, want %d", got, want)
	}
	if got := p.mb.Dropped(); got != 0 {
		t.Errorf("DropOld: Dropped() = %d, want 0", got)
	}
	if got, want := p.mb.UserMessageCount(), 4; got != want {
		t.Errorf("UserMessageCount() with a full queue = %d, want %d", got, want)
	}
	gotMsgs, gotReasons := drops.snapshot()
	if want := seq(1, 6); !slices.Equal(gotMsgs, want) {
		t.Errorf("OnDrop saw messages %v, want %v (oldest first)", gotMsgs, want)
	}
	if want := repeatReason(actors.DropEvicted, 6); !slices.Equal(gotReasons, want) {
		t.Errorf("OnDrop reasons %v, want %v (DropEvicted)", gotReasons, want)
	}

	p.gate.open()
	p.expect(t, ds(0, 7, 8, 9, 10)...)
	p.expectDrained(t)
}

func TestMailboxBlockDeliversEverythingInOrder(t *testing.T) {
	system := newSystem(t)
	var drops dropLog
	p := startBusy(t, system, actors.MailboxConfig{Capacity: 4, Policy: actors.Block, OnDrop: drops.onDrop})

	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for n := 1; n <= 10; n++ {
			system.Root.Send(p.pid, &msg{n: n})
		}
	}()
	waitParked(t)

	select {
	case <-sent:
		t.Fatal("10 sends into a Block mailbox of 4 returned while the actor was busy, want the sender parked")
	default:
	}
	if got, want := p.mb.Len(), 4; got != want {
		t.Errorf("Len() with a parked sender = %d, want %d", got, want)
	}

	p.gate.open()
	p.expect(t, ds(seq(0, 10)...)...)
	recv(t, sent, "the Block sender to return")
	if d, e := p.mb.Dropped(), p.mb.Evicted(); d != 0 || e != 0 {
		t.Errorf("Block: Dropped() = %d, Evicted() = %d, want 0, 0", d, e)
	}
	if gotMsgs, _ := drops.snapshot(); len(gotMsgs) != 0 {
		t.Errorf("Block: OnDrop saw %v, want no calls", gotMsgs)
	}
	p.expectDrained(t)
}

// stressMsg is one sender's numbered message.
type stressMsg struct {
	sender, seq int
	bytes       int64
}

func (m *stressMsg) MailboxBytes() int64 { return m.bytes }

// expect tells a counting actor how many data messages will arrive in all.
type expect struct {
	actors.ControlMessage
	n int
}

// stressResult is what a stress run saw.
type stressResult struct {
	mb        *actors.Mailbox
	budget    *actors.ByteBudget
	delivered int
	accepted  uint64 // TryPost said Posted or PostedEvicting
	refused   uint64 // TryPost said Dropped
	hooked    uint64 // OnDrop calls
}

// stress has 4 goroutines post 10,000 sized messages each into one mailbox
// (two through Root.Send, two through TryPost) while the actor consumes, and
// waits until the actor has taken every message that was not lost. lost
// reads the mailbox's loss counter for the policy once the posting is over.
func stress(t *testing.T, policy actors.Policy, lost func(*actors.Mailbox) uint64) stressResult {
	t.Helper()
	const (
		senders   = 4
		perSender = 10_000
	)
	system := newSystem(t)
	var hooked atomic.Uint64
	budget := actors.NewByteBudget(1 << 20) // never binds; checks the bytes come back
	cfg := actors.MailboxConfig{
		Capacity: 64,
		MaxBytes: 48 * 8, // sizes average 8.5, so both the count and the byte bound refuse
		Policy:   policy,
		OnDrop:   func(any, actors.DropReason) { hooked.Add(1) },
		Budget:   budget,
	}
	done := make(chan struct{})
	var (
		delivered  int
		lastSeq    [senders]int
		orderError string
		target     = -1
	)
	for i := range lastSeq {
		lastSeq[i] = -1
	}
	pid, mb := spawn(t, system, cfg, func(c actor.Context) {
		switch m := c.Message().(type) {
		case *stressMsg:
			delivered++
			if m.seq <= lastSeq[m.sender] && orderError == "" {
				orderError = fmt.Sprintf("sender %d: got seq %d after %d, want each sender's messages in order", m.sender, m.seq, lastSeq[m.sender])
			}
			lastSeq[m.sender] = m.seq
		case *expect:
			target = m.n
		default:
			return
		}
		if delivered == target {
			close(done)
		}
	})

	msgs := make([][]*stressMsg, senders)
	for s := range msgs {
		msgs[s] = make([]*stressMsg, perSender)
		for i := range msgs[s] {
			msgs[s][i] = &stressMsg{sender: s, seq: i, bytes: int64(1 + (s*perSender+i)%16)}
		}
	}
	var (
		wg       sync.WaitGroup
		accepted atomic.Uint64
		refused  atomic.Uint64
	)
	for s := 0; s < senders; s++ {
		wg.Go(func() {
			for _, m := range msgs[s] {
				if s%2 == 0 {
					system.Root.Send(pid, m)
					continue
				}
				switch r := mb.TryPost(m, 0); {
				case r.Accepted():
					accepted.Add(1)
				case r == actors.Dropped:
					refused.Add(1)
				default:
					t.Errorf("TryPost(sender %d, seq %d) = %s, want Posted, PostedEvicting or Dropped", m.sender, m.seq, resultName(r))
				}
			}
		})
	}
	wg.Wait()

	// Control traffic is never refused, and the actor is single-threaded, so
	// it can compare its count with the target itself.
	n := lost(mb)
	mb.TryPost(&expect{n: senders*perSender - int(n)}, 0)
	recv(t, done, fmt.Sprintf("delivery of %d posted - %d lost messages", senders*perSender, n))
	if orderError != "" {
		t.Error(orderError)
	}
	if got := accepted.Load() + refused.Load(); got != senders/2*perSender {
		t.Errorf("TryPost results: accepted %d + dropped %d = %d, want %d", accepted.Load(), refused.Load(), got, senders/2*perSender)
	}
	return stressResult{
		mb:        mb,
		budget:    budget,
		delivered: delivered,
		accepted:  accepted.Load(),
		refused:   refused.Load(),
		hooked:    hooked.Load(),
	}
}

// checkSettled checks what every stress run must leave behind.
func (r stressResult) checkSettled(t *testing.T) {
	t.Helper()
	if got, want := r.hooked, r.mb.Dropped()+r.mb.Evicted(); got != want {
		t.Errorf("OnDrop calls = %d, want Dropped() + Evicted() = %d", got, want)
	}
	if got := r.mb.UserMessageCount(); got != 0 {
		t.Errorf("UserMessageCount() after drain = %d, want 0", got)
	}
	if got := r.mb.Len(); got != 0 {
		t.Errorf("Len() after drain = %d, want 0", got)
	}
	if got := r.mb.Bytes(); got != 0 {
		t.Errorf("Bytes() after drain = %d, want 0", got)
	}
	if got := r.budget.Used(); got != 0 {
		t.Errorf("budget Used() after drain = %d, want 0", got)
	}
}

func TestMailboxDropNewConcurrentPosters(t *testing.T) {
	r := stress(t, actors.DropNew, (*actors.Mailbox).Dropped)
	if got, want := uint64(r.delivered)+r.mb.Dropped(), uint64(40_000); got != want {
		t.Errorf("delivered %d + Dropped() %d = %d, want %d posted", r.delivered, r.mb.Dropped(), got, want)
	}
	if r.mb.Dropped() == 0 || r.mb.ByteDropped() == 0 {
		t.Errorf("Dropped() = %d, ByteDropped() = %d, want both > 0 (the run should overflow both bounds)", r.mb.Dropped(), r.mb.ByteDropped())
	}
	if got := r.mb.Evicted(); got != 0 {
		t.Errorf("DropNew: Evicted() = %d, want 0", got)
	}
	r.checkSettled(t)
}

func TestMailboxDropOldConcurrentPosters(t *testing.T) {
	r := stress(t, actors.DropOld, (*actors.Mailbox).Evicted)
	if got, want := uint64(r.delivered)+r.mb.Evicted(), uint64(40_000); got != want {
		t.Errorf("delivered %d + Evicted() %d = %d, want %d posted", r.delivered, r.mb.Evicted(), got, want)
	}
	if r.refused != 0 || r.mb.Dropped() != 0 {
		t.Errorf("DropOld: TryPost said Dropped %d times, Dropped() = %d, want 0, 0", r.refused, r.mb.Dropped())
	}
	r.checkSettled(t)
}

func TestMailboxByteBound(t *testing.T) {
	// A bare mailbox (no actor) keeps everything it accepts, so each row
	// reads as: post these sizes in order, then look at the counters.
	tests := []struct {
		name            string
		policy          actors.Policy
		capacity        int
		give            []int64
		want            []actors.PostResult
		wantBytes       int64
		wantLen         int
		wantDropped     uint64
		wantByteDropped uint64
		wantEvicted     uint64
	}{
		{
			name:   "fills to exactly MaxBytes",
			policy: actors.DropNew, capacity: 10,
			give:      []int64{60, 40},
			want:      []actors.PostResult{actors.Posted, actors.Posted},
			wantBytes: 100, wantLen: 2,
		},
		{
			name:   "refusal by bytes counts as a byte drop",
			policy: actors.DropNew, capacity: 10,
			give:      []int64{60, 50, 40, 1},
			want:      []actors.PostResult{actors.Posted, actors.Dropped, actors.Posted, actors.Dropped},
			wantBytes: 100, wantLen: 2, wantDropped: 2, wantByteDropped: 2,
		},
		{
			name:   "refusal by count is not a byte drop",
			policy: actors.DropNew, capacity: 2,
			give:      []int64{1, 1, 1},
			want:      []actors.PostResult{actors.Posted, actors.Posted, actors.Dropped},
			wantBytes: 2, wantLen: 2, wantDropped: 1,
		},
		{
			name:   "oversize enters an empty mailbox",
			policy: actors.DropNew, capacity: 10,
			give:      []int64{150},
			want:      []actors.PostResult{actors.Posted},
			wantBytes: 150, wantLen: 1,
		},
		{
			name:   "nothing follows an oversize message",
			policy: actors.DropNew, capacity: 10,
			give:      []int64{150, 1},
			want:      []actors.PostResult{actors.Posted, actors.Dropped},
			wantBytes: 150, wantLen: 1, wantDropped: 1, wantByteDropped: 1,
		},
		{
			name:   "oversize is refused by a non-empty mailbox",
			policy: actors.DropNew, capacity: 10,
			give:      []int64{10, 150},
			want:      []actors.PostResult{actors.Posted, actors.Dropped},
			wantBytes: 10, wantLen: 1, wantDropped: 1, wantByteDropped: 1,
		},
		{
			name:   "zero-byte messages ignore the byte bound",
			policy: actors.DropNew, capacity: 10,
			give:      []int64{100, 0, 0},
			want:      []actors.PostResult{actors.Posted, actors.Posted, actors.Posted},
			wantBytes: 100, wantLen: 3,
		},
		{
			name:   "drop_old evicts until the bytes fit",
			policy: actors.DropOld, capacity: 10,
			give:      []int64{40, 40, 40},
			want:      []actors.PostResult{actors.Posted, actors.Posted, actors.PostedEvicting},
			wantBytes: 80, wantLen: 2, wantEvicted: 1,
		},
		{
			name:   "drop_old empties the queue for an oversize message",
			policy: actors.DropOld, capacity: 10,
			give:      []int64{40, 40, 150},
			want:      []actors.PostResult{actors.Posted, actors.Posted, actors.PostedEvicting},
			wantBytes: 150, wantLen: 1, wantEvicted: 2,
		},
		{
			// A zero-wait Block post is a probe: TimedOut, not a drop.
			name:   "block without a wait refuses by bytes",
			policy: actors.Block, capacity: 10,
			give:      []int64{60, 50},
			want:      []actors.PostResult{actors.Posted, actors.TimedOut},
			wantBytes: 60, wantLen: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mb := actors.NewMailbox(actors.MailboxConfig{Capacity: tt.capacity, MaxBytes: 100, Policy: tt.policy})
			var got []actors.PostResult
			for i, size := range tt.give {
				got = append(got, mb.TryPost(&sized{n: i, bytes: size}, 0))
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("MaxBytes 100, %s, sizes %v: results %v, want %v", tt.policy, tt.give, resultNames(got), resultNames(tt.want))
			}
			if got := mb.Bytes(); got != tt.wantBytes {
				t.Errorf("sizes %v: Bytes() = %d, want %d", tt.give, got, tt.wantBytes)
			}
			if got := mb.Len(); got != tt.wantLen {
				t.Errorf("sizes %v: Len() = %d, want %d", tt.give, got, tt.wantLen)
			}
			if got := mb.Dropped(); got != tt.wantDropped {
				t.Errorf("sizes %v: Dropped() = %d, want %d", tt.give, got, tt.wantDropped)
			}
			if got := mb.ByteDropped(); got != tt.wantByteDropped {
				t.Errorf("sizes %v: ByteDropped() = %d, want %d", tt.give, got, tt.wantByteDropped)
			}
			if got := mb.Evicted(); got != tt.wantEvicted {
				t.Errorf("sizes %v: Evicted() = %d, want %d", tt.give, got, tt.wantEvicted)
			}
		})
	}
}

func resultNames(rs []actors.PostResult) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = resultName(r)
	}
	return out
}

func TestMailboxByteBoundWithActor(t *testing.T) {
	system := newSystem(t)
	var drops dropLog
	p := startBusy(t, system, actors.MailboxConfig{Capacity: 10, MaxBytes: 100, Policy: actors.DropNew, OnDrop: drops.onDrop})

	// d0 has left the queue (the actor is inside it), so the queue is empty
	// and the oversize d1 enters; d2 (oversize) and d3 (small) find it
	// non-empty and over the bound.
	system.Root.Send(p.pid, &sized{n: 1, bytes: 150})
	system.Root.Send(p.pid, &sized{n: 2, bytes: 150})
	system.Root.Send(p.pid, &sized{n: 3, bytes: 1})

	if got, want := p.mb.Bytes(), int64(150); got != want {
		t.Errorf("Bytes() after an oversize message = %d, want %d", got, want)
	}
	if got, want := p.mb.PeakBytes(), int64(150); got != want {
		t.Errorf("PeakBytes() = %d, want %d", got, want)
	}
	if d, bd := p.mb.Dropped(), p.mb.ByteDropped(); d != 2 || bd != 2 {
		t.Errorf("Dropped() = %d, ByteDropped() = %d, want 2, 2", d, bd)
	}
	gotMsgs, gotReasons := drops.snapshot()
	if want := []int{2, 3}; !slices.Equal(gotMsgs, want) {
		t.Errorf("OnDrop saw %v, want %v", gotMsgs, want)
	}
	if want := repeatReason(actors.DropBytes, 2); !slices.Equal(gotReasons, want) {
		t.Errorf("OnDrop reasons %v, want %v (DropBytes)", gotReasons, want)
	}

	p.gate.open()
	p.expect(t, ds(0, 1)...)
	p.expectDrained(t)
	if got, want := p.mb.PeakBytes(), int64(150); got != want {
		t.Errorf("PeakBytes() after drain = %d, want %d (it is a high-water mark)", got, want)
	}
}

// cpuTime is the CPU time (user + system) the whole process has used.
func cpuTime(t testing.TB) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func TestMailboxBlockParksWithoutSpinning(t *testing.T) {
	const window = 200 * time.Millisecond
	system := newSystem(t)
	p := startBusy(t, system, actors.MailboxConfig{Capacity: 1, Policy: actors.Block})
	system.Root.Send(p.pid, &msg{n: 1}) // fills the queue

	sent := make(chan struct{})
	go func() {
		defer close(sent)
		system.Root.Send(p.pid, &msg{n: 2})
	}()
	waitParked(t)

	before := cpuTime(t)
	start := time.Now()
	time.Sleep(window) // the measurement window, not synchronisation
	used, wall := cpuTime(t)-before, time.Since(start)

	select {
	case <-sent:
		t.Fatal("Send into a full Block mailbox returned while the actor was busy, want it parked")
	default:
	}
	// A spinning sender burns a whole core: used ≈ wall.
	if used >= wall/2 {
		t.Errorf("process used %v of CPU during %v with one sender parked, want < %v (a spinning sender uses ≈ 100%%)", used, wall, wall/2)
	}

	p.gate.open()
	p.expect(t, ds(0, 1, 2)...)
	recv(t, sent, "the parked sender to return")
	p.expectDrained(t)
}

func TestMailboxBlockTryPostTimesOut(t *testing.T) {
	const wait = 100 * time.Millisecond
	system := newSystem(t)
	var drops dropLog
	p := startBusy(t, system, actors.MailboxConfig{Capacity: 1, Policy: actors.Block, OnDrop: drops.onDrop})
	system.Root.Send(p.pid, &msg{n: 1}) // fills the queue

	start := time.Now()
	r := p.mb.TryPost(&msg{n: 2}, wait)
	elapsed := time.Since(start)
	if r != actors.TimedOut {
		t.Errorf("TryPost(full Block mailbox, %v) = %s, want TimedOut", wait, resultName(r))
	}
	if elapsed < wait {
		t.Errorf("TryPost(full Block mailbox, %v) returned after %v, want >= %v", wait, elapsed, wait)
	}
	if elapsed > 5*time.Second {
		t.Errorf("TryPost(full Block mailbox, %v) returned after %v, want about %v", wait, elapsed, wait)
	}

	start = time.Now()
	if r := p.mb.TryPost(&msg{n: 3}, 0); r != actors.TimedOut {
		t.Errorf("TryPost(full Block mailbox, 0) = %s, want TimedOut", resultName(r))
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Errorf("TryPost(full Block mailbox, 0) took %v, want no wait", elapsed)
	}

	// A Block timeout is reported to the caller, who counts it; the mailbox
	// does not call it a drop.
	if d, bd := p.mb.Dropped(), p.mb.ByteDropped(); d != 0 || bd != 0 {
		t.Errorf("Dropped() = %d, ByteDropped() = %d after two timed-out posts, want 0, 0", d, bd)
	}
	if gotMsgs, gotReasons := drops.snapshot(); len(gotMsgs) != 0 {
		t.Errorf("OnDrop saw %v with reasons %v after two timed-out posts, want no calls", gotMsgs, gotReasons)
	}

	p.gate.open()
	p.expect(t, ds(0, 1)...)
	p.expectDrained(t)
}

func TestMailboxBlockTryPostWakesWhenRoomAppears(t *testing.T) {
	system := newSystem(t)
	p := startBusy(t, system, actors.MailboxConfig{Capacity: 1, Policy: actors.Block})
	system.Root.Send(p.pid, &msg{n: 1}) // fills the queue

	res := make(chan actors.PostResult, 1)
	go func() { res <- p.mb.TryPost(&msg{n: 2}, eventTimeout) }()
	waitParked(t)
	p.gate.open() // the actor takes d1, which makes room for d2

	if r := recv(t, res, "the parked TryPost to return"); r != actors.Posted {
		t.Errorf("TryPost(full Block mailbox, %v) after the actor took a message = %s, want Posted", eventTimeout, resultName(r))
	}
	p.expect(t, ds(0, 1, 2)...)
	p.expectDrained(t)
}

func TestMailboxCloseReleasesParkedSender(t *testing.T) {
	system := newSystem(t)
	var drops dropLog
	p := startBusy(t, system, actors.MailboxConfig{Capacity: 1, Policy: actors.Block, OnDrop: drops.onDrop})
	system.Root.Send(p.pid, &msg{n: 1}) // fills the queue

	res := make(chan actors.PostResult, 1)
	go func() { res <- p.mb.TryPost(&msg{n: 2}, -1) }()
	waitParked(t)

	start := time.Now()
	p.mb.Close()
	r := recv(t, res, "the parked sender to return after Close")
	if elapsed := time.Since(start); elapsed > 2*time.Second {
		t.Errorf("parked sender returned %v after Close, want promptly", elapsed)
	}
	if r != actors.Closed {
		t.Errorf("TryPost(msg, -1) parked when Close ran = %s, want Closed", resultName(r))
	}
	if !p.mb.IsClosed() {
		t.Error("IsClosed() after Close = false, want true")
	}
	if n, c := p.mb.Len(), p.mb.UserMessageCount(); n != 0 || c != 0 {
		t.Errorf("after Close Len() = %d, UserMessageCount() = %d, want 0, 0 (queued data discarded)", n, c)
	}
	// The discarded d1 goes to OnDrop; the refused d2 is the sender's to handle.
	if gotMsgs, gotReasons := drops.snapshot(); !slices.Equal(gotMsgs, []int{1}) || !slices.Equal(gotReasons, []actors.DropReason{actors.DropClosed}) {
		t.Errorf("OnDrop after Close saw %v with reasons %v, want [1] with DropClosed", gotMsgs, gotReasons)
	}

	tests := []struct {
		name string
		give any
		wait time.Duration
	}{
		{name: "data, no wait", give: &msg{n: 3}, wait: 0},
		{name: "data, wait forever", give: &msg{n: 4}, wait: -1},
		{name: "data, timed wait", give: &msg{n: 5}, wait: eventTimeout},
		{name: "control", give: &ctl{n: 6}, wait: 0},
	}
	for _, tt := range tests {
		res := make(chan actors.PostResult, 1)
		go func() { res <- p.mb.TryPost(tt.give, tt.wait) }()
		if r := recv(t, res, "TryPost after Close ("+tt.name+")"); r != actors.Closed {
			t.Errorf("TryPost(%s) after Close = %s, want Closed", tt.name, resultName(r))
		}
	}
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		system.Root.Send(p.pid, &msg{n: 7})
	}()
	recv(t, sent, "Root.Send into a closed Block mailbox to return")

	p.gate.open()
	p.expect(t, "d0") // d1 was discarded by Close
}

func TestMailboxStoppedOwnerReleasesParkedSender(t *testing.T) {
	system := newSystem(t)
	p := startBusy(t, system, actors.MailboxConfig{Capacity: 1, Policy: actors.Block})
	system.Root.Send(p.pid, &msg{n: 1}) // fills the queue

	res := make(chan actors.PostResult, 1)
	go func() { res <- p.mb.TryPost(&msg{n: 2}, -1) }()
	waitParked(t)

	// Stop is a system message: it runs before d1 once d0 returns, and the
	// probe closes its mailbox from *actor.Stopped.
	system.Root.Stop(p.pid)
	p.gate.open()
	p.expect(t, "d0", "stopping", "stopped")
	if r := recv(t, res, "the parked sender to return after the owner stopped"); r != actors.Closed {
		t.Errorf("TryPost(msg, -1) parked while the owner stopped = %s, want Closed", resultName(r))
	}
	assertQuiet(t, p.got, "after Stopped")
}

func TestMailboxControlBypassesFullQueue(t *testing.T) {
	tests := []struct {
		policy   actors.Policy
		wantOver actors.PostResult // what the data message past capacity gets
		want     []string
	}{
		{policy: actors.DropNew, wantOver: actors.Dropped, want: []string{"d0", "c1", "c2", "d1", "d2"}},
		{policy: actors.DropOld, wantOver: actors.PostedEvicting, want: []string{"d0", "c1", "c2", "d2", "d3"}},
		{policy: actors.Block, wantOver: actors.TimedOut, want: []string{"d0", "c1", "c2", "d1", "d2"}},
	}
	for _, tt := range tests {
		t.Run(tt.policy.String(), func(t *testing.T) {
			system := newSystem(t)
			p := startBusy(t, system, actors.MailboxConfig{Capacity: 2, Policy: tt.policy})
			for n := 1; n <= 2; n++ {
				if r := p.mb.TryPost(&msg{n: n}, 0); r != actors.Posted {
					t.Fatalf("TryPost(d%d) into a queue with room = %s, want Posted", n, resultName(r))
				}
			}
			if r := p.mb.TryPost(&msg{n: 3}, 0); r != tt.wantOver {
				t.Errorf("TryPost(d3) into a full %s queue = %s, want %s", tt.policy, resultName(r), resultName(tt.wantOver))
			}
			if r := p.mb.TryPost(&ctl{n: 1}, 0); r != actors.Posted {
				t.Errorf("TryPost(c1) into a full %s queue = %s, want Posted", tt.policy, resultName(r))
			}
			// Through protoactor, in an envelope (a request carries its sender).
			system.Root.RequestWithCustomSender(p.pid, &ctl{n: 2}, p.pid)
			if got, want := p.mb.UserMessageCount(), 4; got != want {
				t.Errorf("UserMessageCount() with 2 data + 2 control queued = %d, want %d", got, want)
			}
			if got, want := p.mb.Len(), 2; got != want {
				t.Errorf("Len() with 2 data + 2 control queued = %d, want %d (data only)", got, want)
			}

			p.gate.open()
			p.expect(t, tt.want...)
			p.expectDrained(t)
		})
	}
}

func TestMailboxHoldStopsDataNotControl(t *testing.T) {
	system := newSystem(t)
	p := startProbe(t, system, actors.MailboxConfig{Capacity: 2, Policy: actors.DropNew})

	p.mb.Hold()
	give := []any{&msg{n: 1}, &msg{n: 2}, &msg{n: 3}, &ctl{n: 1}}
	want := []actors.PostResult{actors.Posted, actors.Posted, actors.Dropped, actors.Posted}
	var got []actors.PostResult
	for _, m := range give {
		got = append(got, p.mb.TryPost(m, 0))
	}
	if !slices.Equal(got, want) {
		t.Errorf("held mailbox of 2: TryPost(d1, d2, d3, c1) = %v, want %v", resultNames(got), resultNames(want))
	}
	// The idle actor was scheduled by d1 already; had Hold been ignored, d1
	// would be delivered before c1.
	p.expect(t, "c1")
	system.Root.Send(p.pid, &ctl{n: 2})
	p.expect(t, "c2")
	if got, want := p.mb.Len(), 2; got != want {
		t.Errorf("Len() while held = %d, want %d", got, want)
	}
	assertQuiet(t, p.got, "while held")

	p.mb.Release()
	p.expect(t, "d1", "d2")
	p.expectDrained(t)
}

func TestMailboxChildRestartsAfterPanic(t *testing.T) {
	system := newSystem(t)
	restarts := make(chan *actor.SupervisorEvent, 16)
	sub := system.EventStream.Subscribe(func(evt any) {
		if e, ok := evt.(*actor.SupervisorEvent); ok {
			restarts <- e
		}
	})
	t.Cleanup(func() { system.EventStream.Unsubscribe(sub) })

	child := newProbe(t, 3, 5)
	childPID := make(chan *actor.PID, 1)
	parent := actor.PropsFromFunc(func(c actor.Context) {
		if _, ok := c.Message().(*actor.Started); ok {
			childPID <- c.Spawn(child.props(actors.MailboxConfig{Capacity: 16, Policy: actors.Block}))
		}
	}, actor.WithSupervisor(actor.NewOneForOneStrategy(10, time.Second, actor.DefaultDecider)))
	parentPID := system.Root.Spawn(parent)
	t.Cleanup(func() { stopActor(t, system, parentPID) })
	child.pid = recv(t, childPID, "the child's PID")
	child.expect(t, "started")

	system.Root.Send(child.pid, &msg{n: 0})
	child.gate.awaitEntered(t)
	for n := 1; n <= 7; n++ {
		system.Root.Send(child.pid, &msg{n: n})
	}
	child.gate.open()

	// d3 and d5 panic and are lost. Suspend keeps d4 and d6 away from the
	// failed instance; Resume lets them reach the new one; the queue survives.
	child.expect(t,
		"d0", "d1", "d2",
		"restarting", "started", "d4",
		"restarting", "started", "d6", "d7")
	child.expectDrained(t)

	for i := 0; i < 2; i++ {
		e := recv(t, restarts, "a SupervisorEvent")
		if e.Directive != actor.RestartDirective || !e.Child.Equal(child.pid) {
			t.Errorf("SupervisorEvent #%d = {Child: %v, Directive: %v}, want {Child: %v, Directive: %v}",
				i+1, e.Child, e.Directive, child.pid, actor.RestartDirective)
		}
	}
	if got := child.mailboxes.Load(); got != 1 {
		t.Errorf("mailboxes built for the child = %d, want 1 (a restart keeps the mailbox)", got)
	}
}

func TestMailboxStopOvertakesQueuedData(t *testing.T) {
	system := newSystem(t)
	var drops dropLog
	p := startBusy(t, system, actors.MailboxConfig{Capacity: 8, Policy: actors.DropNew, OnDrop: drops.onDrop})
	for n := 1; n <= 5; n++ {
		system.Root.Send(p.pid, &msg{n: n})
	}

	system.Root.Stop(p.pid)
	p.gate.open()

	// Stop is a system message: it is processed as soon as d0 returns,
	// ahead of d1..d5, which are never delivered.
	p.expect(t, "d0", "stopping", "stopped")
	if n, c := p.mb.Len(), p.mb.UserMessageCount(); n != 0 || c != 0 {
		t.Errorf("after Stopped (which closes the mailbox) Len() = %d, UserMessageCount() = %d, want 0, 0", n, c)
	}
	gotMsgs, gotReasons := drops.snapshot()
	if want := seq(1, 5); !slices.Equal(gotMsgs, want) {
		t.Errorf("OnDrop after stop saw %v, want %v (the undelivered data)", gotMsgs, want)
	}
	if want := repeatReason(actors.DropClosed, 5); !slices.Equal(gotReasons, want) {
		t.Errorf("OnDrop reasons after stop %v, want %v (DropClosed)", gotReasons, want)
	}
	stopActor(t, system, p.pid) // already stopped: completes at once
	assertQuiet(t, p.got, "after Stopped")
}

// UserMessageCount and Bytes must describe the queue once everything has
// settled. Close racing in-flight posts leaves them non-zero on a closed,
// empty mailbox. Fails without -race too, usually within a few hundred trials.
func TestMailboxGaugesAfterCloseRacingPosts(t *testing.T) {
	const trials = 2000
	for trial := 0; trial < trials; trial++ {
		mb := actors.NewMailbox(actors.MailboxConfig{Capacity: 1 << 20, Policy: actors.DropOld})
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for mb.TryPost(&sized{bytes: 1}, 0) != actors.Closed {
				}
			})
		}
		for mb.Len() < 100 {
			runtime.Gosched()
		}
		mb.Close()
		wg.Wait()
		if n, c, b := mb.Len(), mb.UserMessageCount(), mb.Bytes(); n != 0 || c != 0 || b != 0 {
			t.Fatalf("trial %d of %d, 4 senders racing Close: Len() = %d, UserMessageCount() = %d, Bytes() = %d, want 0, 0, 0",
				trial+1, trials, n, c, b)
		}
	}
}

// Bytes must be 0 once every accepted message has been delivered. A sender
// storing its post-push total after the actor has already taken the message
// leaves a stale non-zero value. Shows up reliably under -race (the required
// mode); rarely without it.
func TestMailboxBytesAfterDeliveryRacingPosts(t *testing.T) {
	const rounds = 200_000
	system := newSystem(t)
	p := startProbe(t, system, actors.MailboxConfig{Capacity: 16})
	deadline := time.Now().Add(5 * time.Second)
	for round := 0; round < rounds && time.Now().Before(deadline); round++ {
		p.mb.TryPost(&sized{n: 1, bytes: 100}, 0)
		p.mb.TryPost(&sized{n: 2, bytes: 100}, 0)
		recvN(t, p.got, 2, "both messages")
		if b := p.mb.Bytes(); b != 0 {
			t.Fatalf("round %d: two 100-byte messages posted and both delivered: Bytes() = %d (Len() = %d), want 0", round+1, b, p.mb.Len())
		}
	}
}
