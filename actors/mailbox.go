// Package actors holds the mechanisms every Felix actor shares: the bounded
// policy mailbox that turns backpressure into an overflow behaviour, the
// supervision strategies and guardians, and the bridge from protoactor's slog
// output to zerolog. It also owns what is known of live actors without
// asking them: the Directory, the supervision tree listed from it
// (Directory.Tree), and chaos kills chosen from it (Kill).
//
// protoactor-go's own Bounded mailbox busy-spins a blocked sender and its
// BoundedDropping mailbox livelocks after its first drop
// (https://github.com/asynkron/protoactor-go/issues/403), so neither is used
// anywhere in Felix.
//
// Non-obvious behaviour of protoactor and of this package:
//
//   - protoactor keeps a stopped watcher's PID, and the whole stopped actor,
//     in the watched actor's set: a feeder unwatches its shard when it stops.
//   - A mailbox's gauges must be written under its lock: written after
//     unlocking, a stale total overwrote a newer one and stuck.
package actors

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// Policy says what a full mailbox does with the message that does not fit.
type Policy uint8

const (
	// DropNew refuses the arriving message and counts it. The sender never waits.
	DropNew Policy = iota
	// DropOld evicts the oldest queued messages until the arriving one fits,
	// and counts each eviction. The sender never waits.
	DropOld
	// Block parks the sender (no spinning) until the message fits, the wait
	// times out, or the mailbox closes. Nothing is dropped.
	Block
)

// String returns the policy's configuration name.
func (p Policy) String() string {
	switch p {
	case DropNew:
		return "drop_new"
	case DropOld:
		return "drop_old"
	case Block:
		return "block"
	}
	return fmt.Sprintf("policy(%d)", uint8(p))
}

// ParsePolicy reads a policy's configuration name.
func ParsePolicy(s string) (Policy, error) {
	switch s {
	case "drop_new", "":
		return DropNew, nil
	case "drop_old":
		return DropOld, nil
	case "block":
		return Block, nil
	}
	return DropNew, fmt.Errorf("actors: unknown overflow policy %q (want drop_new, drop_old or block)", s)
}

// Sized is implemented by messages that count against a mailbox's byte bound.
// Messages that do not implement it weigh zero bytes.
type Sized interface {
	MailboxBytes() int64
}

// Control marks a message that bypasses the data bound: it is never dropped,
// never waits, and is delivered ahead of queued data even while the owner
// holds the data queue. Registration, credits, timers and inspection are
// control traffic; they are few and small, and losing one would wedge the
// actor that waits for it.
type Control interface {
	controlMessage()
}

// ControlMessage is embedded by message types that are control traffic.
type ControlMessage struct{}

func (ControlMessage) controlMessage() {}

// PostResult says what became of a posted message.
type PostResult uint8

const (
	// Posted means the message was queued.
	Posted PostResult = iota
	// PostedEvicting means the message was queued after evicting older ones (DropOld).
	PostedEvicting
	// Dropped means the message was refused because the mailbox was full (DropNew).
	Dropped
	// TimedOut means a Block wait ran out before there was room.
	TimedOut
	// Closed means the mailbox's actor has stopped; the message was not queued.
	Closed
)

// Accepted reports whether the message entered the queue.
func (r PostResult) Accepted() bool { return r == Posted || r == PostedEvicting }

// DropReason says why a message was discarded.
type DropReason uint8

const (
	// DropFull is a refusal by the count bound.
	DropFull DropReason = iota
	// DropBytes is a refusal by the byte bound.
	DropBytes
	// DropEvicted is an eviction of an old message under DropOld.
	DropEvicted
	// DropClosed is queued data discarded because the actor stopped.
	DropClosed
)

// ErrMailboxClosed is returned by Post when the mailbox's actor has stopped.
var ErrMailboxClosed = errors.New("actors: mailbox closed")

// MailboxConfig bounds a mailbox. The zero value is an unbounded-in-bytes
// mailbox of DefaultCapacity messages under DropNew.
type MailboxConfig struct {
	// Capacity bounds queued data messages. Zero means DefaultCapacity.
	Capacity int
	// MaxBytes bounds the summed MailboxBytes of queued data messages. Zero
	// means no byte bound. A message larger than MaxBytes still enters an
	// empty mailbox, so an oversize message waits instead of never going.
	MaxBytes int64
	// Policy applies when a message does not fit.
	Policy Policy
	// OnDrop, when set, is called for every refused or evicted message, on the
	// sender's goroutine and outside the mailbox lock. Keep it cheap.
	OnDrop func(msg any, reason DropReason)
	// Budget, when set, is a byte budget shared with other mailboxes: a data
	// message must also fit in it, and the overflow policy applies when it does
	// not. The mailbox returns a message's bytes when it is delivered or
	// evicted.
	Budget *ByteBudget
	// KeepBudget, with Budget, hands a delivered message's budget bytes to
	// the actor instead of releasing them, so the budget keeps covering the
	// message after it leaves the queue (the subscriber total covers a batch
	// through the lanes until it is written). The actor must release them.
	KeepBudget bool
}

// DefaultCapacity is the mailbox capacity when MailboxConfig.Capacity is zero.
// It is subscriber_queue_capacity's default too.
const DefaultCapacity = 512

type entry struct {
	msg   any
	bytes int64
}

// Mailbox is a bounded actor.Mailbox with a count bound, a byte bound and an
// overflow policy. System messages always enter and go first; Control
// messages always enter and go before data.
//
// Lock order: Mailbox.mu is a leaf; OnDrop, the invoker and the dispatcher are
// always called without it.
type Mailbox struct {
	cfg MailboxConfig

	mu struct {
		sync.Mutex
		data      ring
		bytes     int64
		control   []any
		system    []any
		suspended bool // by supervision: SuspendMailbox/ResumeMailbox
		held      bool // by the owner: data stays queued, control still flows
		closed    bool
		// spaceFreed is closed (and replaced) when data leaves the queue, so
		// parked Block senders wake and re-check. Nil while nobody waits.
		spaceFreed chan struct{}
	}

	invoker    actor.MessageInvoker
	dispatcher actor.Dispatcher
	scheduled  atomic.Bool
	// processFn is m.process, made once: a method value passed to Schedule
	// escapes, so taking it there allocated on every wake of every mailbox
	// on the data path.
	processFn func()

	queued    atomic.Int64 // data + control messages, for UserMessageCount
	queuedB   atomic.Int64
	dropped   atomic.Uint64
	byteDrops atomic.Uint64
	evicted   atomic.Uint64
	peakBytes atomic.Int64
}

var _ actor.Mailbox = (*Mailbox)(nil)

// NewMailbox builds a mailbox. Use Producer to hand one to protoactor Props.
func NewMailbox(cfg MailboxConfig) *Mailbox {
	if cfg.Capacity <= 0 {
		cfg.Capacity = DefaultCapacity
	}
	m := &Mailbox{cfg: cfg}
	m.mu.data.max = cfg.Capacity
	m.processFn = m.process
	return m
}

// Producer returns an actor.MailboxProducer that builds a fresh mailbox per
// spawn and hands it to created, so the owner keeps a handle for TryPost,
// metrics and inspection (protoactor offers no way to reach a PID's mailbox).
func Producer(cfg MailboxConfig, created func(*Mailbox)) actor.MailboxProducer {
	return func() actor.Mailbox {
		m := NewMailbox(cfg)
		if created != nil {
			created(m)
		}
		return m
	}
}

// Config returns the mailbox's bounds.
func (m *Mailbox) Config() MailboxConfig { return m.cfg }

// PostUserMessage is protoactor's entry point (ctx.Send, Root.Send). Under
// Block it parks until there is room or the mailbox closes.
func (m *Mailbox) PostUserMessage(msg any) {
	m.post(msg, -1)
}

// TryPost posts msg and reports what became of it. Under Block it waits at
// most wait for room (a negative wait waits until there is room or the
// mailbox closes); under DropNew and DropOld it never waits.
func (m *Mailbox) TryPost(msg any, wait time.Duration) PostResult {
	return m.post(msg, wait)
}

// PostSystemMessage queues a protoactor system message; they are never bounded.
func (m *Mailbox) PostSystemMessage(msg any) {
	m.mu.Lock()
	m.mu.system = append(m.mu.system, msg)
	m.mu.Unlock()
	m.schedule()
}

// RegisterHandlers is called by protoactor before Start.
func (m *Mailbox) RegisterHandlers(invoker actor.MessageInvoker, dispatcher actor.Dispatcher) {
	m.invoker = invoker
	m.dispatcher = dispatcher
}

// Start is called by protoactor once the actor is registered.
func (m *Mailbox) Start() {}

// UserMessageCount counts queued data and control messages.
func (m *Mailbox) UserMessageCount() int { return int(m.queued.Load()) }

// Len counts queued data messages.
func (m *Mailbox) Len() int {
	m.mu.Lock()
	n := m.mu.data.n
	m.mu.Unlock()
	return n
}

// Bytes is the summed size of queued data messages.
func (m *Mailbox) Bytes() int64 { return m.queuedB.Load() }

// PeakBytes is the largest Bytes seen since the mailbox was built.
func (m *Mailbox) PeakBytes() int64 { return m.peakBytes.Load() }

// Dropped counts messages refused under DropNew (by count or by bytes). A
// Block wait that times out is not counted here: TryPost reports it, and the
// caller (which may retry, or fail a publish as overloaded) counts it.
func (m *Mailbox) Dropped() uint64 { return m.dropped.Load() }

// ByteDropped counts the subset of Dropped refused by the byte bound.
func (m *Mailbox) ByteDropped() uint64 { return m.byteDrops.Load() }

// Evicted counts messages evicted under DropOld.
func (m *Mailbox) Evicted() uint64 { return m.evicted.Load() }

// Hold stops delivery of data messages until Release; control and system
// messages still flow. An owner holds its mailbox when it cannot take more
// work (no egress credit), so the queue fills and the overflow policy applies
// here rather than in an unbounded buffer inside the actor.
func (m *Mailbox) Hold() {
	m.mu.Lock()
	m.mu.held = true
	m.mu.Unlock()
}

// Release undoes Hold and schedules delivery of what queued meanwhile.
func (m *Mailbox) Release() {
	m.mu.Lock()
	m.mu.held = false
	m.mu.Unlock()
	m.schedule()
}

// Close marks the actor gone: parked senders are released with Closed, later
// posts are refused with Closed, and queued data is discarded (its budget
// bytes returned, each message passed to OnDrop with DropClosed). Props
// arranges for it to be called when the actor stops.
func (m *Mailbox) Close() {
	m.mu.Lock()
	if m.mu.closed {
		m.mu.Unlock()
		return
	}
	m.mu.closed = true
	var freed int64
	var discarded []any
	for m.mu.data.n > 0 {
		e := m.mu.data.pop()
		freed += e.bytes
		discarded = append(discarded, e.msg)
	}
	m.mu.bytes = 0
	// Control messages are discarded too, and told to the hook: one may be
	// an answer someone waits for (a shard's fsync completion).
	discarded = append(discarded, m.mu.control...)
	m.mu.control = nil
	m.queued.Store(0)
	m.queuedB.Store(0)
	m.wakeSendersLocked()
	m.mu.Unlock()
	m.cfg.Budget.Release(freed)
	// Tell the hook, so a message that promised an answer (a publish waiting
	// for its ack) can be failed instead of forgotten.
	if m.cfg.OnDrop != nil {
		for _, msg := range discarded {
			m.cfg.OnDrop(msg, DropClosed)
		}
	}
}

// IsClosed reports whether Close was called.
func (m *Mailbox) IsClosed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mu.closed
}

func sizeOf(msg any) int64 {
	if env, ok := msg.(*actor.MessageEnvelope); ok {
		msg = env.Message
	}
	if s, ok := msg.(Sized); ok {
		return s.MailboxBytes()
	}
	return 0
}

func isControl(msg any) bool {
	if env, ok := msg.(*actor.MessageEnvelope); ok {
		msg = env.Message
	}
	switch msg.(type) {
	case Control, *actor.PoisonPill, actor.AutoReceiveMessage:
		return true
	}
	return false
}

// postControl queues a control message: never bounded, never waits.
func (m *Mailbox) postControl(msg any) PostResult {
	m.mu.Lock()
	if m.mu.closed {
		m.mu.Unlock()
		return Closed
	}
	m.mu.control = append(m.mu.control, msg)
	m.queued.Add(1)
	m.mu.Unlock()
	m.schedule()
	return Posted
}

func (m *Mailbox) post(msg any, wait time.Duration) PostResult {
	if isControl(msg) {
		return m.postControl(msg)
	}
	size := sizeOf(msg)
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()

	// A Block sender refused by the shared budget waits for any mailbox to
	// release budget bytes, not only for this one to deliver. The budget's
	// wake channel is taken before the check so a release in between is seen.
	var budgetFreed <-chan struct{}
	waitBudget := m.cfg.Policy == Block && m.cfg.Budget != nil
	defer func() {
		if budgetFreed != nil {
			m.cfg.Budget.stopWaiting()
		}
	}()
	m.mu.Lock()
	for {
		if m.mu.closed {
			m.mu.Unlock()
			return Closed
		}
		if waitBudget {
			if budgetFreed != nil {
				m.cfg.Budget.stopWaiting()
			}
			budgetFreed = m.cfg.Budget.waitFreed()
		}
		reason, fits := m.fitsLocked(size)
		if fits {
			return m.pushLocked(msg, size, nil)
		}
		switch m.cfg.Policy {
		case DropOld:
			victims := m.evictForLocked(size)
			return m.pushLocked(msg, size, victims)
		case Block:
			if wait == 0 {
				// A zero wait is a probe (the shard's first fanout pass under
				// block), not a drop: the caller decides what happens next.
				m.mu.Unlock()
				return TimedOut
			}
			if m.mu.spaceFreed == nil {
				m.mu.spaceFreed = make(chan struct{})
			}
			freed := m.mu.spaceFreed
			m.mu.Unlock()
			var expired <-chan time.Time
			if wait > 0 {
				if timer == nil {
					timer = time.NewTimer(wait)
				}
				expired = timer.C
			}
			select {
			case <-freed:
			case <-budgetFreed: // nil (never ready) without a shared budget
			case <-expired: // nil (never ready) when waiting without a limit
				return TimedOut
			}
			m.mu.Lock()
		default: // DropNew
			m.mu.Unlock()
			m.countDrop(msg, reason)
			return Dropped
		}
	}
}

// fitsLocked reports whether a message of size bytes fits now, and if not,
// which bound refused it. An empty queue takes any size (the oversize rule).
//
// REQUIRES: m.mu is held.
func (m *Mailbox) fitsLocked(size int64) (DropReason, bool) {
	if m.mu.data.n >= m.cfg.Capacity {
		return DropFull, false
	}
	if m.mu.data.n == 0 {
		// The oversize rule also covers the shared budget: an empty queue
		// always takes one batch, so no subscriber starves forever.
		m.cfg.Budget.ForceAcquire(size)
		return 0, true
	}
	if m.cfg.MaxBytes > 0 && m.mu.bytes+size > m.cfg.MaxBytes {
		return DropBytes, false
	}
	if !m.cfg.Budget.TryAcquire(size) {
		return DropBytes, false
	}
	return 0, true
}

// evictForLocked drops the oldest data until a message of size bytes fits,
// and returns the victims so their drop hooks run outside the lock.
//
// REQUIRES: m.mu is held.
func (m *Mailbox) evictForLocked(size int64) []entry {
	var victims []entry
	for {
		if _, fits := m.fitsLocked(size); fits {
			return victims
		}
		e := m.mu.data.pop()
		m.mu.bytes -= e.bytes
		m.cfg.Budget.Release(e.bytes)
		victims = append(victims, e)
	}
}

// pushLocked queues msg, unlocks, runs drop hooks for victims and schedules.
//
// REQUIRES: m.mu is held; it is released on return.
func (m *Mailbox) pushLocked(msg any, size int64, victims []entry) PostResult {
	m.mu.data.push(entry{msg: msg, bytes: size})
	m.mu.bytes += size
	// The gauges are atomics so readers need no lock, but they are written
	// under it: written after unlocking, a stale total could overwrite a
	// newer one and stick.
	m.queued.Add(int64(1 - len(victims)))
	m.queuedB.Store(m.mu.bytes)
	if m.mu.bytes > m.peakBytes.Load() {
		m.peakBytes.Store(m.mu.bytes)
	}
	m.mu.Unlock()
	for _, v := range victims {
		m.evicted.Add(1)
		if m.cfg.OnDrop != nil {
			m.cfg.OnDrop(v.msg, DropEvicted)
		}
	}
	m.schedule()
	if len(victims) > 0 {
		return PostedEvicting
	}
	return Posted
}

func (m *Mailbox) countDrop(msg any, reason DropReason) {
	m.dropped.Add(1)
	if reason == DropBytes {
		m.byteDrops.Add(1)
	}
	if m.cfg.OnDrop != nil {
		m.cfg.OnDrop(msg, reason)
	}
}

// REQUIRES: m.mu is held.
func (m *Mailbox) wakeSendersLocked() {
	if m.mu.spaceFreed != nil {
		close(m.mu.spaceFreed)
		m.mu.spaceFreed = nil
	}
}

func (m *Mailbox) schedule() {
	if m.dispatcher == nil {
		return // not started yet; Start-time scheduling picks the work up
	}
	if m.scheduled.CompareAndSwap(false, true) {
		m.dispatcher.Schedule(m.processFn)
	}
}

func (m *Mailbox) process() {
	for {
		m.run()
		m.scheduled.Store(false)
		// Re-check the real queues, not a counter, so a wake-up is never lost
		// and a drifted count can never spin (protoactor's BoundedDropping
		// counts, and spins once its count drifts).
		if !m.hasWork() || !m.scheduled.CompareAndSwap(false, true) {
			return
		}
	}
}

func (m *Mailbox) hasWork() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.mu.system) > 0 {
		return true
	}
	if m.mu.suspended {
		return false
	}
	return len(m.mu.control) > 0 || (!m.mu.held && m.mu.data.n > 0)
}

func (m *Mailbox) run() {
	var msg any
	defer func() {
		if r := recover(); r != nil {
			m.invoker.EscalateFailure(r, msg)
		}
	}()

	throughput := m.dispatcher.Throughput()
	for i := 0; ; i++ {
		if throughput > 0 && i >= throughput {
			i = 0
			runtime.Gosched()
		}
		m.mu.Lock()
		if len(m.mu.system) > 0 {
			msg = m.mu.system[0]
			m.mu.system[0] = nil
			m.mu.system = m.mu.system[1:]
			switch msg.(type) {
			case *actor.SuspendMailbox:
				m.mu.suspended = true
				m.mu.Unlock()
			case *actor.ResumeMailbox:
				m.mu.suspended = false
				m.mu.Unlock()
			default:
				m.mu.Unlock()
				m.invoker.InvokeSystemMessage(msg)
			}
			continue
		}
		if m.mu.suspended {
			m.mu.Unlock()
			return
		}
		if len(m.mu.control) > 0 {
			msg = m.mu.control[0]
			m.mu.control[0] = nil
			if len(m.mu.control) == 1 {
				// Emptied: keep the array from its start, so the next post
				// does not allocate one (a control message per write on the
				// data path).
				m.mu.control = m.mu.control[:0]
			} else {
				m.mu.control = m.mu.control[1:]
			}
			m.queued.Add(-1)
			m.mu.Unlock()
			m.invoker.InvokeUserMessage(msg)
			continue
		}
		if m.mu.held || m.mu.data.n == 0 {
			m.mu.Unlock()
			return
		}
		e := m.mu.data.pop()
		m.mu.bytes -= e.bytes
		m.queued.Add(-1)
		m.queuedB.Store(m.mu.bytes)
		m.wakeSendersLocked()
		m.mu.Unlock()
		if !m.cfg.KeepBudget {
			m.cfg.Budget.Release(e.bytes)
		}
		msg = e.msg
		m.invoker.InvokeUserMessage(msg)
	}
}

// ring is a FIFO of entries that grows on demand up to max, so an idle
// subscriber with a 4096-deep queue does not pin 64 KiB of empty slots.
type ring struct {
	buf  []entry
	head int
	n    int
	max  int
}

func (r *ring) push(e entry) {
	if r.n == len(r.buf) {
		size := max(8, 2*len(r.buf))
		size = min(size, max(r.max, r.n+1))
		nb := make([]entry, size)
		for i := 0; i < r.n; i++ {
			nb[i] = r.buf[(r.head+i)%len(r.buf)]
		}
		r.buf, r.head = nb, 0
	}
	r.buf[(r.head+r.n)%len(r.buf)] = e
	r.n++
}

func (r *ring) pop() entry {
	e := r.buf[r.head]
	r.buf[r.head] = entry{}
	r.head = (r.head + 1) % len(r.buf)
	r.n--
	return e
}
