package sessions

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/cockroachdb/datadriven"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/lanes"
	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/streams"
	"github.com/getfelix/felix-go/wire"
)

// TestSessionTrace runs testdata/session_*.txt against the session actor,
// its Receive called directly with a context that records what it does:
// every way a subscription ends, and what each end tells the shard, the
// feeder and the writer (teardown). Each command delivers one message and
// prints the message log, then the subscriptions left and the shares
// given back. The expiry timer is not run: token-expired delivers what it
// would send. Regenerate with -rewrite; only commit the changes if you
// understand what caused them.
//
//	start                           the session starts (asks for a writer)
//	writer-spawned [err]            the connections supervisor's answer
//	get-writer                      a subscriber asks for the writer
//	adopt id=N [writer=K]           a subscription, registered with the
//	                                current writer (or writer-K)
//	unsubscribe id=N                the client ends it
//	end-subscription id=N [abort]   its subscribe failed late
//	stream-failed id=N              the writer saw its stream fail
//	lagged id=N resume=OFF          it fell behind
//	lag-queued id=N                 the writer queued its lag frame
//	feeder-stopped id=N             its feeder terminated
//	writer-stopped writer=K         writer-K terminated
//	watch-expiry                    the credential's expiry is armed
//	token-expired [stale]           the expiry timer fires
//	close                           the connection closes
//	stopped                         the session actor stopped
func TestSessionTrace(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		tr := newSessionTrace()
		t.Cleanup(tr.s.stopExpiry)
		datadriven.RunTest(t, path, tr.run)
	})
}

type sessionTrace struct {
	s       *session
	ctx     *recordingContext
	writers []*lanes.WriterRef // every writer the session got, in order
	subs    map[uint64]*Subscription
	budget  *lanes.ConnBudget // the shares of the subscriptions adopted
	release []uint64          // tenant slots given back, in order
}

func newSessionTrace() *sessionTrace {
	s := New(Config{
		Client:  service.Client{ID: 7, Remote: &net.UDPAddr{}, Tenant: "t"},
		Writers: actor.NewPID("test", "connections"), Log: zerolog.Nop(),
		OnWriterSpawned: func(*lanes.WriterRef, service.Client) {},
		Subscriptions:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "subscriptions"}),
		Lagged:          prometheus.NewCounter(prometheus.CounterOpts{Name: "lagged"}),
		Watches:         prometheus.NewGauge(prometheus.GaugeOpts{Name: "watches"}),
		WatchesLagged:   prometheus.NewCounter(prometheus.CounterOpts{Name: "watches_lagged"}),
	}).(*session)
	return &sessionTrace{s: s, ctx: &recordingContext{self: actor.NewPID("test", "session")},
		subs: make(map[uint64]*Subscription), budget: lanes.NewConnBudget(1 << 20)}
}

func (tr *sessionTrace) run(t *testing.T, d *datadriven.TestData) string {
	var msg any
	var id uint64
	if d.HasArg("id") {
		d.ScanArgs(t, "id", &id)
	}
	// What needs an answer comes from the connection's goroutines.
	tr.ctx.sender = actor.NewPID("test", "conn")
	switch d.Cmd {
	case "start":
		msg = &actor.Started{}
	case "writer-spawned":
		pid := actor.NewPID("test", fmt.Sprintf("writer-%d", len(tr.writers)+1))
		var err error
		if d.HasArg("err") {
			err = errors.New("spawn failed")
		}
		msg = &actors.ChildSpawned{PID: pid, Err: err}
	case "get-writer":
		msg = &GetWriter{}
	case "adopt":
		w := tr.s.writer
		if d.HasArg("writer") {
			w = tr.writer(t, d)
		}
		sub := &Subscription{
			ID: id, Writer: w,
			Feeder: actor.NewPID("test", fmt.Sprintf("feeder-%d", id)),
			Shard:  actor.NewPID("test", fmt.Sprintf("shard-%d", id)),
			Egress: tr.budget.NewEgress(func() {}),
		}
		sub.Release = func() { tr.release = append(tr.release, id) }
		tr.subs[id] = sub
		msg = &Adopt{Sub: sub}
	case "unsubscribe":
		msg = &Unsubscribe{ID: id}
	case "end-subscription":
		msg = &EndSubscription{ID: id, Abort: d.HasArg("abort")}
	case "stream-failed":
		msg = &lanes.StreamFailed{SubscriptionID: id, Err: errors.New("stream reset")}
	case "lagged":
		var resume uint64
		d.ScanArgs(t, "resume", &resume)
		msg = &lanes.Lagged{SubscriptionID: id, ResumeFrom: resume}
	case "lag-queued":
		msg = &lanes.LagQueued{SubscriptionID: id}
	case "feeder-stopped":
		msg = &actor.Terminated{Who: actor.NewPID("test", fmt.Sprintf("feeder-%d", id))}
	case "writer-stopped":
		msg = &actor.Terminated{Who: tr.writer(t, d).PID}
	case "watch-expiry":
		// Far off: the timer must not fire (it would send through the
		// actor system, which there is none of); token-expired stands
		// in for it.
		msg = &WatchExpiry{At: time.Now().Add(time.Hour)}
	case "token-expired":
		gen := tr.s.expiryGen
		if d.HasArg("stale") {
			gen--
		}
		msg = &tokenExpired{gen: gen}
	case "close":
		msg = &Close{}
	case "stopped":
		msg = &actor.Stopped{}
	default:
		d.Fatalf(t, "unknown command %q", d.Cmd)
	}
	tr.ctx.msg = msg
	tr.s.Receive(tr.ctx)
	if w := tr.s.writer; w != nil && (len(tr.writers) == 0 || tr.writers[len(tr.writers)-1] != w) {
		tr.writers = append(tr.writers, w)
	}
	var b strings.Builder
	// The session ends several subscriptions in map order: the log is
	// by subscription, each one's messages in the order sent, and what
	// concerns none comes last.
	slices.SortStableFunc(tr.ctx.log, func(x, y logEntry) int { return cmp.Compare(x.sub, y.sub) })
	for _, e := range tr.ctx.log {
		b.WriteString(e.text + "\n")
	}
	tr.ctx.log = nil
	if a, ok := msg.(*Adopt); ok && tr.s.subs[a.Sub.ID] != a.Sub {
		// Refused: the subscribe tears down what it built itself, its
		// share and slot too (conn.Subscribe).
		a.Sub.Egress.Close()
		fmt.Fprintf(&b, "the subscribe tears subscription %d down\n", a.Sub.ID)
	}
	fmt.Fprintf(&b, "subscriptions %v, egress shares %d, released %v\n",
		slices.Sorted(maps.Keys(tr.s.subs)), tr.budget.Subscriptions(), slices.Sorted(slices.Values(tr.release)))
	return b.String()
}

// writer is the writer=K argument: the K-th writer spawned (writer-K).
func (tr *sessionTrace) writer(t *testing.T, d *datadriven.TestData) *lanes.WriterRef {
	var k int
	d.ScanArgs(t, "writer", &k)
	if k < 1 || k > len(tr.writers) {
		d.Fatalf(t, "writer-%d was never spawned", k)
	}
	return tr.writers[k-1]
}

// recordingContext is the actor.Context a session's Receive gets: it
// logs each send, request, answer, stop and watch. Anything else the
// session called would panic on the nil embedded Context.
type recordingContext struct {
	actor.Context
	self, sender *actor.PID
	msg          any
	log          []logEntry
}

// logEntry is one thing the session did, and the subscription it
// concerns (math.MaxUint64: none).
type logEntry struct {
	sub  uint64
	text string
}

func (c *recordingContext) Message() any         { return c.msg }
func (c *recordingContext) Self() *actor.PID     { return c.self }
func (c *recordingContext) Sender() *actor.PID   { return c.sender }
func (c *recordingContext) Stop(pid *actor.PID)  { c.add(subOf(pid, nil), "stop %s", pid.Id) }
func (c *recordingContext) Watch(pid *actor.PID) { c.add(subOf(pid, nil), "watch %s", pid.Id) }
func (c *recordingContext) Respond(answer any) {
	c.add(math.MaxUint64, "answer %s: %s", c.sender.Id, describe(answer))
}

func (c *recordingContext) Send(pid *actor.PID, msg any) {
	c.add(subOf(pid, msg), "send %s: %s", pid.Id, describe(msg))
}

func (c *recordingContext) Request(pid *actor.PID, msg any) {
	c.add(subOf(pid, msg), "request %s: %s", pid.Id, describe(msg))
}

func (c *recordingContext) add(sub uint64, f string, a ...any) {
	c.log = append(c.log, logEntry{sub, fmt.Sprintf(f, a...)})
}

// subOf is the subscription a message or its target names: a feeder's
// or shard's PID (feeder-N, shard-N), or an Unregister.
func subOf(pid *actor.PID, msg any) uint64 {
	if u, ok := msg.(*lanes.Unregister); ok {
		return u.SubscriptionID
	}
	for _, prefix := range []string{"feeder-", "shard-"} {
		if n, ok := strings.CutPrefix(pid.Id, prefix); ok {
			if id, err := strconv.ParseUint(n, 10, 64); err == nil {
				return id
			}
		}
	}
	return math.MaxUint64
}

// describe names a message the session sends, with what matters in it.
func describe(msg any) string {
	switch m := msg.(type) {
	case *streams.RemoveSubscriber:
		return fmt.Sprintf("RemoveSubscriber %d", m.ID)
	case *lanes.Unregister:
		s := fmt.Sprintf("Unregister %d", m.SubscriptionID)
		switch {
		case m.Abort && m.AbortCode == wire.StreamCodeUnauthenticated:
			s += " reset unauthenticated"
		case m.Abort:
			s += " reset"
		}
		if m.Lagged {
			s += fmt.Sprintf(" lagged, resume from %d", m.ResumeFrom)
		}
		return s
	case *actors.SpawnChild:
		return "SpawnChild " + m.Name
	case *lanes.WriterRef:
		return "writer " + m.PID.Id
	case *Adopted:
		return fmt.Sprintf("adopted (err %v)", m.Err)
	case *Ended:
		return fmt.Sprintf("ended (err %v)", m.Err)
	case *Closed:
		if m.Writer == nil {
			return "sessionClosed, no writer to stop"
		}
		return "sessionClosed, stop writer " + m.Writer.Id
	case error:
		return "error " + m.Error()
	}
	return fmt.Sprintf("%T", msg)
}
