// Package sessions is the session actor, one per client connection
// (felix/sessions/conn-<id>), spawned by the broker when a connection
// authenticates.
//
// The session actor owns one connection's subscriptions: it adopts each new
// one, and it alone ends them, whatever ends them. It learns of ended
// feeders and stopped writers by watching them, and of failed streams and
// lag from the writer, feeders and lanes as messages. It owns the
// connection's writer too, and replaces it when it stops. It never waits in
// Receive: what needs an answer from another actor (a replacement writer)
// comes back as a message.
//
// What a restart keeps: the same instance, so its subscriptions and writer
// (what it watches stays watched); the message in hand is lost (a subscribe
// waiting on it times out, an end is not applied until the connection
// closes). Chaos never kills a session; one stopped anyway ends every
// subscription it had with an error.
//
// Messages it accepts: GetWriter, Adopt, Unsubscribe, EndSubscription,
// WatchExpiry and Close from the connection's goroutines (the service methods);
// lanes.StreamFailed, lanes.Lagged and lanes.LagQueued; *actor.Terminated
// of a watched feeder or writer; *actors.ChildSpawned for a writer it asked
// for.
package sessions

import (
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/lanes"
	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/streams"
	"github.com/getfelix/felix-go/wire"
)

// GetWriter asks for the connection's writer; the session answers
// *lanes.WriterRef once it has a live one, or an error once closing.
type GetWriter struct{ actors.ControlMessage }

// Adopt hands the session a subscription whose feeder is spawned and whose
// stream is registered with the writer. The session answers *Adopted.
type Adopt struct {
	actors.ControlMessage
	Sub *Subscription
}

// Adopted answers adopt; on an error the caller tears the parts down itself.
type Adopted struct{ Err error }

// Unsubscribe is the client ending a subscription; the answer is *Ended.
type Unsubscribe struct {
	actors.ControlMessage
	ID uint64
}

type Ended struct{ Err error }

// EndSubscription ends a subscription whose subscribe failed after it was
// Adopted (the shard refused it, or its start offset is out of range).
type EndSubscription struct {
	actors.ControlMessage
	ID    uint64
	Abort bool
}

// WatchExpiry tells the session when the connection's credential expires:
// its subscriptions end then, unless a re-authentication moves it.
type WatchExpiry struct {
	actors.ControlMessage
	At time.Time
}

// tokenExpired is the expiry timer firing for the watch of generation gen.
type tokenExpired struct {
	actors.ControlMessage
	gen uint64
}

// Close ends every subscription; the answer is the writer to stop.
type Close struct{ actors.ControlMessage }

type Closed struct{ Writer *actor.PID }

// Subscription is one live subscription, as its session keeps it.
type Subscription struct {
	ID     uint64
	Feeder *actor.PID
	Shard  *actor.PID
	Writer *lanes.WriterRef
	Egress *lanes.Egress
	// Release gives the subscription's place in its tenant's
	// tenant_max_subscriptions back.
	Release func()
	// Watch: a cache watch, counted apart from stream subscriptions.
	Watch   bool
	lagging bool // the writer was asked to end it lagged
}

// How a subscription ends, which decides what is left to tear down.
type endReason int

const (
	endUnsubscribe  endReason = iota // the client asked: finish the stream cleanly
	endRefused                       // the subscribe failed late: finish the stream cleanly
	endStreamFailed                  // the writer saw the stream fail: it already let go
	endFeederGone                    // the feeder stopped: reset the stream with an error
	endWriterGone                    // the writer stopped: it already reset the streams
	endLagged                        // the writer queued the lag frame and finishes the stream
	endExpired                       // the connection's token expired: reset the stream saying so
	endConnClosed                    // the connection is gone
	endSessionGone                   // the session stopped: its feeders must not outlive it
)

// Config is what a session needs of the broker that spawns it.
type Config struct {
	// Client is the connection's.
	Client service.Client
	Root   *actor.RootContext
	// Writers is the connections supervisor, which spawns the
	// connection's writer (actors.SpawnChild).
	Writers *actor.PID
	// EgressMaxBytes is subscriber_egress_max_bytes: the connection's
	// egress budget, shared among its subscriptions.
	EgressMaxBytes int64
	// OnWritten is each writer's delivery hook (lanes.WriterConfig).
	OnWritten func(records int, bytes int64, published int64)
	// OnWriterSpawned is told of each writer the session got (the
	// broker's directory lists it).
	OnWriterSpawned func(ref *lanes.WriterRef, c service.Client)
	// Subscriptions counts live subscriptions; Lagged those ended lagged.
	// Watches and WatchesLagged count cache watches among them.
	Subscriptions prometheus.Gauge
	Lagged        prometheus.Counter
	Watches       prometheus.Gauge
	WatchesLagged prometheus.Counter
	Log           zerolog.Logger
}

// MailboxDepth bounds a session's mailbox. Everything it receives is
// control traffic of one connection (subscribes, ends, lag), which
// bypasses the count bound anyway; Block parks a sender rather than lose
// an end.
const MailboxDepth = 1024

// session is the actor; every field is owned by Receive.
type session struct {
	cfg Config

	writer    *lanes.WriterRef // nil while a writer is being spawned
	spawning  *lanes.WriterRef // the writer asked for, until it is spawned
	writerGen int
	// waiting are GetWriter requests that arrived while a writer was being
	// spawned; they are answered when it is.
	waiting []*actor.PID

	subs     map[uint64]*Subscription
	byFeeder map[string]uint64 // feeder PID id -> subscription id
	closed   bool

	// expiry ends every subscription when the credential expires;
	// expiryGen tells a stale timer from the current one.
	expiry    *time.Timer
	expiryGen uint64
}

// New is a session actor for cfg.Client's connection.
func New(cfg Config) actor.Actor {
	return &session{cfg: cfg, subs: make(map[uint64]*Subscription), byFeeder: make(map[string]uint64)}
}

func (s *session) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		s.handleStarted(ctx)
	case *actor.Stopped:
		s.handleStopped(ctx)
	case *actor.Terminated:
		s.handleTerminated(ctx, msg)
	case *GetWriter:
		s.handleGetWriter(ctx)
	case *actors.ChildSpawned:
		s.handleWriterSpawned(ctx, msg)
	case *Adopt:
		s.handleAdopt(ctx, msg)
	case *Unsubscribe:
		s.handleUnsubscribe(ctx, msg)
	case *EndSubscription:
		s.handleEndSubscription(ctx, msg)
	case *lanes.StreamFailed:
		s.handleStreamFailed(ctx, msg)
	case *lanes.Lagged:
		s.handleLagged(ctx, msg)
	case *lanes.LagQueued:
		s.endByID(ctx, msg.SubscriptionID, endLagged)
	case *WatchExpiry:
		s.handleWatchExpiry(ctx, msg)
	case *tokenExpired:
		s.handleTokenExpired(ctx, msg)
	case *Close:
		s.handleClose(ctx)
	default:
		s.cfg.Log.Debug().Type("message", msg).Msg("session ignored message")
	}
}

// handleStarted asks for the first writer. After a restart (the same
// instance) the writer and subscriptions are kept.
func (s *session) handleStarted(ctx actor.Context) {
	if s.writer == nil && !s.closed {
		s.spawnWriter(ctx)
	}
}

// handleStopped ends whatever is left: a session stopped by anything but
// Close must not leave feeders running for a connection nobody tracks.
func (s *session) handleStopped(ctx actor.Context) {
	s.stopExpiry()
	for _, sub := range s.subs {
		s.end(ctx, sub, endSessionGone)
	}
	s.answerWaiting(ctx)
}

// spawnWriter asks the connections supervisor for a writer; the answer
// comes back as *actors.ChildSpawned. A replacement gets a new name: the
// old one's death may not be final in protoactor's registry yet.
func (s *session) spawnWriter(ctx actor.Context) {
	ref := &lanes.WriterRef{ConnID: s.cfg.Client.ID, Budget: lanes.NewConnBudget(s.cfg.EgressMaxBytes)}
	props := lanes.WriterProps(lanes.WriterConfig{
		Log:       s.cfg.Log,
		Root:      s.cfg.Root,
		Session:   ctx.Self(),
		OnWritten: s.cfg.OnWritten,
	}, func(m *actors.Mailbox) { ref.Mailbox = m })
	name := fmt.Sprintf("conn-%d", s.cfg.Client.ID)
	if s.writerGen > 0 {
		name = fmt.Sprintf("conn-%d.%d", s.cfg.Client.ID, s.writerGen)
	}
	s.writerGen++
	s.writer = nil
	s.spawning = ref
	ctx.Request(s.cfg.Writers, &actors.SpawnChild{Name: name, Props: props})
}

func (s *session) handleWriterSpawned(ctx actor.Context, msg *actors.ChildSpawned) {
	ref := s.spawning
	s.spawning = nil
	if ref == nil {
		return
	}
	if msg.Err != nil {
		s.cfg.Log.Error().Err(msg.Err).Uint64("conn", s.cfg.Client.ID).Msg("spawn connection writer")
		s.answerWaiting(ctx)
		return
	}
	ref.PID = msg.PID
	s.cfg.OnWriterSpawned(ref, s.cfg.Client)
	ctx.Watch(ref.PID)
	if s.closed {
		ctx.Stop(ref.PID)
		return
	}
	s.writer = ref
	s.answerWaiting(ctx)
}

// answerWaiting answers the getWriter requests that waited for a writer:
// with it, or with an error if there is none.
func (s *session) answerWaiting(ctx actor.Context) {
	for _, who := range s.waiting {
		ctx.Send(who, s.writerAnswer())
	}
	s.waiting = nil
}

func (s *session) writerAnswer() any {
	switch {
	case s.closed:
		return wire.NewError(wire.CodeDraining, "connection closing")
	case s.writer == nil:
		return wire.NewError(wire.CodeInternal, "this connection has no writer; subscribe again")
	}
	return s.writer
}

func (s *session) handleGetWriter(ctx actor.Context) {
	if s.writer == nil && s.spawning != nil && !s.closed {
		s.waiting = append(s.waiting, ctx.Sender())
		return
	}
	if s.writer == nil && !s.closed {
		// The last spawn failed: try again for this subscriber.
		s.waiting = append(s.waiting, ctx.Sender())
		s.spawnWriter(ctx)
		return
	}
	ctx.Respond(s.writerAnswer())
}

// handleTerminated: a watched feeder or writer stopped. A feeder's
// Subscription ends with an error to the client; a writer's subscriptions
// all end (it reset their streams), and a new writer takes its place.
func (s *session) handleTerminated(ctx actor.Context, msg *actor.Terminated) {
	if id, ok := s.byFeeder[msg.Who.Id]; ok {
		if sub := s.subs[id]; sub != nil {
			s.cfg.Log.Warn().Uint64("subscription", id).Msg("feeder stopped; subscription ended with an error to the client")
			s.end(ctx, sub, endFeederGone)
		}
		return
	}
	if s.writer == nil || !msg.Who.Equal(s.writer.PID) || s.closed {
		return
	}
	gone := 0
	for _, sub := range s.subs {
		if sub.Writer == s.writer {
			s.end(ctx, sub, endWriterGone)
			gone++
		}
	}
	s.cfg.Log.Warn().Uint64("conn", s.cfg.Client.ID).Int("subscriptions", gone).Msg("connection writer stopped; its subscriptions ended with an error to the client; replacing it")
	s.spawnWriter(ctx)
}

func (s *session) handleAdopt(ctx actor.Context, msg *Adopt) {
	if s.closed {
		ctx.Respond(&Adopted{Err: wire.NewError(wire.CodeDraining, "connection closing")})
		return
	}
	if s.writer != msg.Sub.Writer {
		// The writer it registered with stopped meanwhile and took the
		// stream with it.
		ctx.Respond(&Adopted{Err: wire.NewError(wire.CodeShardUnavailable, "the connection's writer stopped while subscribing; subscribe again")})
		return
	}
	sub := msg.Sub
	s.subs[sub.ID] = sub
	s.byFeeder[sub.Feeder.Id] = sub.ID
	s.cfg.Subscriptions.Inc()
	if sub.Watch {
		s.cfg.Watches.Inc()
	}
	// Watching a feeder that already stopped yields Terminated at once, so
	// one that died while subscribing is not missed.
	ctx.Watch(sub.Feeder)
	ctx.Respond(&Adopted{})
}

func (s *session) handleUnsubscribe(ctx actor.Context, msg *Unsubscribe) {
	sub := s.subs[msg.ID]
	if sub == nil {
		ctx.Respond(&Ended{Err: wire.NewError(wire.CodeNotFound, "no subscription %d on this connection", msg.ID)})
		return
	}
	s.end(ctx, sub, endUnsubscribe)
	ctx.Respond(&Ended{})
}

func (s *session) handleEndSubscription(ctx actor.Context, msg *EndSubscription) {
	why := endRefused
	if msg.Abort {
		why = endFeederGone
	}
	s.endByID(ctx, msg.ID, why)
}

func (s *session) handleStreamFailed(ctx actor.Context, msg *lanes.StreamFailed) {
	if sub := s.subs[msg.SubscriptionID]; sub != nil {
		s.cfg.Log.Debug().Uint64("subscription", sub.ID).Err(msg.Err).Msg("event stream failed; subscription ended")
		s.end(ctx, sub, endStreamFailed)
	}
}

// handleLagged is the one place lag is handled: whether a lane dropped a
// durable subscription's batch, its feeder found a gap, or its shard gave
// up waiting on it, the writer queues SubscriptionLagged after what it
// really has, names the offset to resume from, and reports LagQueued.
func (s *session) handleLagged(ctx actor.Context, msg *lanes.Lagged) {
	sub := s.subs[msg.SubscriptionID]
	if sub == nil || sub.lagging {
		return
	}
	sub.lagging = true
	if sub.Watch {
		s.cfg.WatchesLagged.Inc()
	} else {
		s.cfg.Lagged.Inc()
	}
	ctx.Send(sub.Writer.PID, &lanes.Unregister{SubscriptionID: sub.ID, Lagged: true, ResumeFrom: msg.ResumeFrom})
}

// handleWatchExpiry (re)arms the expiry timer; the timer's goroutine only
// sends a message, so the expiry is handled here like everything else.
func (s *session) handleWatchExpiry(ctx actor.Context, msg *WatchExpiry) {
	s.stopExpiry()
	gen, self, root := s.expiryGen, ctx.Self(), s.cfg.Root
	s.expiry = time.AfterFunc(time.Until(msg.At), func() { root.Send(self, &tokenExpired{gen: gen}) })
}

// handleTokenExpired ends every subscription with an error that says the
// token expired; new operations are refused by the service until the
// client re-authenticates.
func (s *session) handleTokenExpired(ctx actor.Context, msg *tokenExpired) {
	if msg.gen != s.expiryGen || s.closed {
		return
	}
	if len(s.subs) > 0 {
		s.cfg.Log.Info().Uint64("conn", s.cfg.Client.ID).Int("subscriptions", len(s.subs)).Msg("token expired; ending the connection's subscriptions")
	}
	for _, sub := range s.subs {
		s.end(ctx, sub, endExpired)
	}
}

func (s *session) stopExpiry() {
	if s.expiry != nil {
		s.expiry.Stop()
		s.expiry = nil
	}
	s.expiryGen++
}

func (s *session) handleClose(ctx actor.Context) {
	s.stopExpiry()
	s.closed = true
	for _, sub := range s.subs {
		s.end(ctx, sub, endConnClosed)
	}
	s.answerWaiting(ctx)
	var w *actor.PID
	if s.writer != nil {
		w = s.writer.PID
	}
	ctx.Respond(&Closed{Writer: w})
}

func (s *session) endByID(ctx actor.Context, id uint64, why endReason) {
	if sub := s.subs[id]; sub != nil {
		s.end(ctx, sub, why)
	}
}

// end tears a subscription down without waiting: the shard forgets it, the
// feeder stops (closing its queue), the writer finishes or resets its
// stream, and its share of the connection's egress budget is given back.
// Every end goes through here.
func (s *session) end(ctx actor.Context, sub *Subscription, why endReason) {
	delete(s.subs, sub.ID)
	delete(s.byFeeder, sub.Feeder.Id)
	s.cfg.Subscriptions.Dec()
	if sub.Watch {
		s.cfg.Watches.Dec()
	}
	ctx.Send(sub.Shard, &streams.RemoveSubscriber{ID: sub.ID})
	stopFeeder, unregister := teardown(sub.ID, why)
	if stopFeeder {
		ctx.Stop(sub.Feeder)
	}
	if unregister != nil {
		ctx.Send(sub.Writer.PID, unregister)
	}
	sub.Egress.Close()
	if sub.Release != nil {
		sub.Release()
	}
}

// teardown is what ending subscription id for why leaves to do besides
// forgetting it (here and at its shard) and giving its shares back:
// whether its feeder is to be stopped (one that stopped is not), and what
// its writer is told, nil when nothing: the writer already let the stream
// go (it failed, or the writer is finishing it lagged), the writer itself
// stopped, or the connection is gone with it.
func teardown(id uint64, why endReason) (stopFeeder bool, unregister *lanes.Unregister) {
	switch why {
	case endUnsubscribe, endRefused:
		unregister = &lanes.Unregister{SubscriptionID: id}
	case endFeederGone, endSessionGone:
		unregister = &lanes.Unregister{SubscriptionID: id, Abort: true}
	case endExpired:
		unregister = &lanes.Unregister{SubscriptionID: id, Abort: true, AbortCode: wire.StreamCodeUnauthenticated}
	}
	return why != endFeederGone, unregister
}
