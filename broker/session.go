package broker

import (
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/lanes"
	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/streams"
	"github.com/getfelix/felix-go/wire"
)

// The session actor owns one connection's subscriptions: it adopts each new
// one, and it alone ends them, whatever ends them. It learns of ended
// feeders and stopped writers by watching them, and of failed streams and
// lag from the writer, feeders and lanes as messages. It owns the
// connection's writer too, and replaces it when it stops. It never waits in
// Receive: what needs an answer from another actor (a replacement writer)
// comes back as a message.
//
// Messages it accepts: getWriter, adopt, unsubscribe, endSubscription and
// closeSession from the connection's goroutines (the service methods);
// lanes.StreamFailed, lanes.Lagged and lanes.LagQueued; *actor.Terminated
// of a watched feeder or writer; *actors.ChildSpawned for a writer it asked
// for.

// getWriter asks for the connection's writer; the session answers
// *lanes.WriterRef once it has a live one, or an error once closing.
type getWriter struct{ actors.ControlMessage }

// adopt hands the session a subscription whose feeder is spawned and whose
// stream is registered with the writer. The session answers *adopted.
type adopt struct {
	actors.ControlMessage
	sub *subscription
}

// adopted answers adopt; on an error the caller tears the parts down itself.
type adopted struct{ err error }

// unsubscribe is the client ending a subscription; the answer is *ended.
type unsubscribe struct {
	actors.ControlMessage
	id uint64
}

type ended struct{ err error }

// endSubscription ends a subscription whose subscribe failed after it was
// adopted (the shard refused it, or its start offset is out of range).
type endSubscription struct {
	actors.ControlMessage
	id    uint64
	abort bool
}

// watchExpiry tells the session when the connection's credential expires:
// its subscriptions end then, unless a re-authentication moves it.
type watchExpiry struct {
	actors.ControlMessage
	at time.Time
}

// tokenExpired is the expiry timer firing for the watch of generation gen.
type tokenExpired struct {
	actors.ControlMessage
	gen uint64
}

// closeSession ends every subscription; the answer is the writer to stop.
type closeSession struct{ actors.ControlMessage }

type sessionClosed struct{ writer *actor.PID }

// subscription is one live subscription, as its session keeps it.
type subscription struct {
	id     uint64
	feeder *actor.PID
	shard  *actor.PID
	writer *lanes.WriterRef
	egress *lanes.Egress
	// release gives the subscription's place in its tenant's
	// tenant_max_subscriptions back.
	release func()
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
)

// session is the actor; every field is owned by Receive.
type session struct {
	b      *Broker
	client service.Client

	writer    *lanes.WriterRef // nil while a writer is being spawned
	spawning  *lanes.WriterRef // the writer asked for, until it is spawned
	writerGen int
	// waiting are getWriter requests that arrived while a writer was being
	// spawned; they are answered when it is.
	waiting []*actor.PID

	subs     map[uint64]*subscription
	byFeeder map[string]uint64 // feeder PID id -> subscription id
	closed   bool

	// expiry ends every subscription when the credential expires;
	// expiryGen tells a stale timer from the current one.
	expiry    *time.Timer
	expiryGen uint64
}

func newSession(b *Broker, c service.Client) *session {
	return &session{b: b, client: c, subs: make(map[uint64]*subscription), byFeeder: make(map[string]uint64)}
}

func (s *session) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		s.handleStarted(ctx)
	case *actor.Stopped:
		s.handleStopped(ctx)
	case *actor.Terminated:
		s.handleTerminated(ctx, msg)
	case *getWriter:
		s.handleGetWriter(ctx)
	case *actors.ChildSpawned:
		s.handleWriterSpawned(ctx, msg)
	case *adopt:
		s.handleAdopt(ctx, msg)
	case *unsubscribe:
		s.handleUnsubscribe(ctx, msg)
	case *endSubscription:
		s.handleEndSubscription(ctx, msg)
	case *lanes.StreamFailed:
		s.handleStreamFailed(ctx, msg)
	case *lanes.Lagged:
		s.handleLagged(ctx, msg)
	case *lanes.LagQueued:
		s.endByID(ctx, msg.SubscriptionID, endLagged)
	case *watchExpiry:
		s.handleWatchExpiry(ctx, msg)
	case *tokenExpired:
		s.handleTokenExpired(ctx, msg)
	case *closeSession:
		s.handleClose(ctx)
	default:
		s.b.log.Debug().Type("message", msg).Msg("session ignored message")
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
		s.end(ctx, sub, endFeederGone)
	}
	s.answerWaiting(ctx)
}

// spawnWriter asks the connections supervisor for a writer; the answer
// comes back as *actors.ChildSpawned. A replacement gets a new name: the
// old one's death may not be final in protoactor's registry yet.
func (s *session) spawnWriter(ctx actor.Context) {
	ref := &lanes.WriterRef{ConnID: s.client.ID, Budget: lanes.NewConnBudget(s.b.cfg.SubscriberEgressMaxBytes)}
	props := lanes.WriterProps(lanes.WriterConfig{
		Log:       s.b.log,
		Root:      s.b.system.Root,
		Session:   ctx.Self(),
		OnWritten: s.b.countWritten,
	}, func(m *actors.Mailbox) { ref.Mailbox = m })
	name := fmt.Sprintf("conn-%d", s.client.ID)
	if s.writerGen > 0 {
		name = fmt.Sprintf("conn-%d.%d", s.client.ID, s.writerGen)
	}
	s.writerGen++
	s.writer = nil
	s.spawning = ref
	ctx.Request(s.b.connections, &actors.SpawnChild{Name: name, Props: props})
}

func (s *session) handleWriterSpawned(ctx actor.Context, msg *actors.ChildSpawned) {
	ref := s.spawning
	s.spawning = nil
	if ref == nil {
		return
	}
	if msg.Err != nil {
		s.b.log.Error().Err(msg.Err).Uint64("conn", s.client.ID).Msg("spawn connection writer")
		s.answerWaiting(ctx)
		return
	}
	ref.PID = msg.PID
	s.b.dir.Add(ref.PID, actors.KindConnWriter, ref.Mailbox, map[string]string{"conn": fmt.Sprint(s.client.ID), "remote": s.client.Remote.String(), "tenant": s.client.Tenant})
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
// subscription ends with an error to the client; a writer's subscriptions
// all end (it reset their streams), and a new writer takes its place.
func (s *session) handleTerminated(ctx actor.Context, msg *actor.Terminated) {
	if id, ok := s.byFeeder[msg.Who.Id]; ok {
		if sub := s.subs[id]; sub != nil {
			s.b.log.Warn().Uint64("subscription", id).Msg("feeder stopped; subscription ended with an error to the client")
			s.end(ctx, sub, endFeederGone)
		}
		return
	}
	if s.writer == nil || !msg.Who.Equal(s.writer.PID) || s.closed {
		return
	}
	gone := 0
	for _, sub := range s.subs {
		if sub.writer == s.writer {
			s.end(ctx, sub, endWriterGone)
			gone++
		}
	}
	s.b.log.Warn().Uint64("conn", s.client.ID).Int("subscriptions", gone).Msg("connection writer stopped; its subscriptions ended with an error to the client; replacing it")
	s.spawnWriter(ctx)
}

func (s *session) handleAdopt(ctx actor.Context, msg *adopt) {
	if s.closed {
		ctx.Respond(&adopted{err: wire.NewError(wire.CodeDraining, "connection closing")})
		return
	}
	if s.writer != msg.sub.writer {
		// The writer it registered with stopped meanwhile and took the
		// stream with it.
		ctx.Respond(&adopted{err: wire.NewError(wire.CodeShardUnavailable, "the connection's writer stopped while subscribing; subscribe again")})
		return
	}
	sub := msg.sub
	s.subs[sub.id] = sub
	s.byFeeder[sub.feeder.Id] = sub.id
	s.b.metrics.Subscriptions.Inc()
	// Watching a feeder that already stopped yields Terminated at once, so
	// one that died while subscribing is not missed.
	ctx.Watch(sub.feeder)
	ctx.Respond(&adopted{})
}

func (s *session) handleUnsubscribe(ctx actor.Context, msg *unsubscribe) {
	sub := s.subs[msg.id]
	if sub == nil {
		ctx.Respond(&ended{err: wire.NewError(wire.CodeNotFound, "no subscription %d on this connection", msg.id)})
		return
	}
	s.end(ctx, sub, endUnsubscribe)
	ctx.Respond(&ended{})
}

func (s *session) handleEndSubscription(ctx actor.Context, msg *endSubscription) {
	why := endRefused
	if msg.abort {
		why = endFeederGone
	}
	s.endByID(ctx, msg.id, why)
}

func (s *session) handleStreamFailed(ctx actor.Context, msg *lanes.StreamFailed) {
	if sub := s.subs[msg.SubscriptionID]; sub != nil {
		s.b.log.Debug().Uint64("subscription", sub.id).Err(msg.Err).Msg("event stream failed; subscription ended")
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
	s.b.metrics.SubscriptionsLagged.Inc()
	ctx.Send(sub.writer.PID, &lanes.Unregister{SubscriptionID: sub.id, Lagged: true, ResumeFrom: msg.ResumeFrom})
}

// handleWatchExpiry (re)arms the expiry timer; the timer's goroutine only
// sends a message, so the expiry is handled here like everything else.
func (s *session) handleWatchExpiry(ctx actor.Context, msg *watchExpiry) {
	s.stopExpiry()
	gen, self, root := s.expiryGen, ctx.Self(), s.b.system.Root
	s.expiry = time.AfterFunc(time.Until(msg.at), func() { root.Send(self, &tokenExpired{gen: gen}) })
}

// handleTokenExpired ends every subscription with an error that says the
// token expired; new operations are refused by the service until the
// client re-authenticates.
func (s *session) handleTokenExpired(ctx actor.Context, msg *tokenExpired) {
	if msg.gen != s.expiryGen || s.closed {
		return
	}
	if len(s.subs) > 0 {
		s.b.log.Info().Uint64("conn", s.client.ID).Int("subscriptions", len(s.subs)).Msg("token expired; ending the connection's subscriptions")
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
	ctx.Respond(&sessionClosed{writer: w})
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
func (s *session) end(ctx actor.Context, sub *subscription, why endReason) {
	delete(s.subs, sub.id)
	delete(s.byFeeder, sub.feeder.Id)
	s.b.metrics.Subscriptions.Dec()
	ctx.Send(sub.shard, &streams.RemoveSubscriber{ID: sub.id})
	if why != endFeederGone {
		ctx.Stop(sub.feeder)
	}
	switch why {
	case endUnsubscribe, endRefused:
		ctx.Send(sub.writer.PID, &lanes.Unregister{SubscriptionID: sub.id})
	case endFeederGone:
		ctx.Send(sub.writer.PID, &lanes.Unregister{SubscriptionID: sub.id, Abort: true})
	case endExpired:
		ctx.Send(sub.writer.PID, &lanes.Unregister{SubscriptionID: sub.id, Abort: true, AbortCode: wire.StreamCodeUnauthenticated})
	}
	sub.egress.Close()
	if sub.release != nil {
		sub.release()
	}
}
