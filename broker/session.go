package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/lanes"
	"github.com/getfelix/felix-go/streams"
	"github.com/getfelix/felix-go/subscribers"
	"github.com/getfelix/felix-go/transport"
	"github.com/getfelix/felix-go/wire"
)

type shardKey struct {
	scope wire.Scope
	shard uint32
}

// session serves one connection. Its methods run on the connection's stream
// goroutines; mu guards the fields grouped under it.
type session struct {
	b      *Broker
	info   transport.ConnInfo
	writer *lanes.WriterRef // guarded by mu once the session serves

	// writerMu serialises replacing a stopped writer; never held with mu
	// held first.
	writerMu  sync.Mutex
	writerGen int

	mu     sync.Mutex
	defs   map[wire.Scope]streams.Def
	shards map[shardKey]*streams.ShardRef
	subs   map[uint64]*subscription
	closed bool
}

type subscription struct {
	id     uint64
	feeder *actor.PID
	shard  *streams.ShardRef
	writer *lanes.WriterRef
}

// liveWriter returns the connection's writer, replacing it first if it was
// stopped (its subscriptions ended with it; new ones need a writer).
func (s *session) liveWriter() (*lanes.WriterRef, error) {
	s.mu.Lock()
	w := s.writer
	s.mu.Unlock()
	if !w.Mailbox.IsClosed() {
		return w, nil
	}
	s.writerMu.Lock()
	defer s.writerMu.Unlock()
	s.mu.Lock()
	w = s.writer
	s.mu.Unlock()
	if !w.Mailbox.IsClosed() {
		return w, nil // another subscribe replaced it first
	}
	s.writerGen++
	nw, err := s.spawnWriter(s.writerGen)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.writer = nw
	s.mu.Unlock()
	return nw, nil
}

// How a subscription ends, which decides what is left to tear down.
type endReason int

const (
	endUnsubscribe  endReason = iota // the client asked: finish the stream cleanly
	endStreamFailed                  // the writer saw the stream fail: it already let go
	endFeederGone                    // the feeder stopped: reset the stream with an error
	endWriterGone                    // the writer stopped: it already reset the streams
	endConnClosed                    // the connection is gone
)

// stream returns scope's definition, from the session's cache or the
// registry (which makes an implicit in-memory stream on first use).
func (s *session) stream(scope wire.Scope) (streams.Def, error) {
	s.mu.Lock()
	d, ok := s.defs[scope]
	s.mu.Unlock()
	if ok {
		return d, nil
	}
	res, err := streams.Request[*streams.StreamResult](s.b.system.Root, s.b.registry, &streams.GetStream{Scope: scope, Create: true}, requestTimeout)
	if err != nil {
		return streams.Def{}, err
	}
	if res.Err != nil {
		return streams.Def{}, res.Err
	}
	s.mu.Lock()
	s.defs[scope] = res.Def
	s.mu.Unlock()
	return res.Def, nil
}

// forgetStream drops what the session cached about a stream that was
// created, changed or deleted.
func (s *session) forgetStream(scope wire.Scope) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.defs, scope)
	for k := range s.shards {
		if k.scope == scope {
			delete(s.shards, k)
		}
	}
}

// shard returns shard n of scope, asking the registry on a miss or when the
// cached shard has stopped.
func (s *session) shard(scope wire.Scope, n uint32) (*streams.ShardRef, error) {
	key := shardKey{scope: scope, shard: n}
	s.mu.Lock()
	ref, ok := s.shards[key]
	s.mu.Unlock()
	if ok && !ref.Mailbox.IsClosed() {
		return ref, nil
	}
	ref, err := streams.Lookup(s.b.system.Root, s.b.registry, scope, n, requestTimeout)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.shards[key] = ref
	s.mu.Unlock()
	return ref, nil
}

// Publish admits p to its shard's mailbox, waiting at most
// publish_queue_wait_timeout_ms for room.
func (s *session) Publish(p *wire.Publish, done transport.PublishDone) error {
	m := s.b.metrics
	err := s.admit(p, done)
	switch {
	case err == nil:
		m.PublishRequests.WithLabelValues(p.Scope.Tenant, "ok").Inc()
		m.PublishedMessages.WithLabelValues(p.Scope.Tenant).Add(float64(len(p.Payloads)))
		m.PublishedBytes.WithLabelValues(p.Scope.Tenant).Add(float64(p.Bytes()))
	case errors.Is(err, wire.ErrOverloaded):
		m.PublishRequests.WithLabelValues(p.Scope.Tenant, "overloaded").Inc()
		m.PublishOverloaded.WithLabelValues(p.Scope.Tenant).Inc()
	default:
		m.PublishRequests.WithLabelValues(p.Scope.Tenant, "error").Inc()
	}
	return err
}

func (s *session) admit(p *wire.Publish, done transport.PublishDone) error {
	for attempt := 0; ; attempt++ {
		def, err := s.stream(p.Scope)
		if err != nil {
			return err
		}
		ref, err := s.shard(p.Scope, def.Routing.ShardFor(p.Key, def.Shards))
		if err != nil {
			return err
		}
		var shardDone func(streams.PublishResult)
		if done != nil {
			shardDone = func(r streams.PublishResult) { done(r.Base, r.Durable, r.Err) }
		}
		switch ref.Mailbox.TryPost(&streams.Publish{Payloads: p.Payloads, Done: shardDone}, s.b.cfg.PublishQueueWaitTimeout) {
		case actors.Posted, actors.PostedEvicting:
			return nil
		case actors.Closed:
			if attempt == 0 {
				// The shard stopped (or its stream was deleted): look again;
				// the registry makes a new one.
				s.forgetStream(p.Scope)
				continue
			}
			if _, err := ref.Log(context.Background()); ref.Durable && err != nil {
				return err // its log did not open (stopped shards have finished opening)
			}
			return wire.NewError(wire.CodeShardUnavailable, "stream %s is not available", p.Scope)
		default:
			return wire.NewError(wire.CodeOverloaded, "publish_queue_full: stream %s did not take the publish within %s", p.Scope, s.b.cfg.PublishQueueWaitTimeout)
		}
	}
}

// Subscribe follows the spec's handshake: the event stream opens with its
// hello, the feeder exists and is bound to a lane and the connection writer,
// and only then is the subscriber registered with the shard; Subscribed goes
// back once the shard has it, so every publish after Subscribed is seen.
func (s *session) Subscribe(req *wire.Subscribe, open func(uint64) (transport.EventSink, error)) (*wire.Subscribed, func(), error) {
	scope := req.Scope()
	if err := scope.Validate(); err != nil {
		return nil, nil, err
	}
	capacity := s.grantCapacity(req.QueueCapacity)
	if _, err := s.stream(scope); err != nil {
		return nil, nil, err
	}
	ref, err := s.shard(scope, req.Shard)
	if err != nil && errors.Is(err, wire.ErrNotFound) {
		s.forgetStream(scope) // the stream may have been recreated with more shards
		ref, err = s.shard(scope, req.Shard)
	}
	if err != nil {
		return nil, nil, err
	}
	if ref.Durable {
		// The shard opens its log after it started; a log that will not
		// open refuses the subscription here, before anything is spawned.
		ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
		_, err = ref.Log(ctx)
		cancel()
		if err != nil {
			return nil, nil, err
		}
	}
	// An in-memory stream's history is its replay ring, and its offsets are
	// not shown to clients: it can start at the latest record, or at the
	// earliest the ring still holds.
	ringBacklog := !ref.Durable && req.Start == "earliest"
	if !ref.Durable && req.Start != "" && req.Start != "latest" && !ringBacklog {
		return nil, nil, wire.NewError(wire.CodeInvalidRequest, "stream %s is in memory: a subscription starts at latest or earliest (the replay ring); offsets need a durable stream", scope)
	}
	id := s.b.nextSubID.Add(1)
	sink, err := open(id)
	if err != nil {
		return nil, nil, err
	}

	lane, err := s.b.lane(s.b.selector.Select(id, s.info.ID))
	if err != nil {
		_ = sink.Close()
		return nil, nil, wire.NewError(wire.CodeInternal, "writer lane: %v", err)
	}
	writer, err := s.liveWriter()
	if err != nil {
		_ = sink.Close()
		return nil, nil, wire.NewError(wire.CodeInternal, "connection writer: %v", err)
	}
	var queue *actors.Mailbox
	var feederGone atomic.Bool // set before feederStopped runs; read under mu below
	props, egress := subscribers.Props(subscribers.Config{
		SubscriptionID: id,
		Batch:          s.b.feederBatch(),
		Lane:           lane,
		Writer:         writer,
		Root:           s.b.system.Root,
		Log:            s.b.log,
		Shard:          ref.PID,
		Offsets:        ref.Durable && s.info.Flags&wire.FlagEventBatchOffsets != 0,
		Durable:        ref.Durable,
		Held:           ringBacklog,
		OnLagged:       func(from uint64) { s.lagged(id, from) },
		OnStopped:      func() { feederGone.Store(true); s.feederStopped(id) },
		Budget:         s.b.queueTotal,
	}, actors.MailboxConfig{
		Capacity:   capacity,
		MaxBytes:   s.b.cfg.SubscriberQueueMaxBytes,
		Policy:     s.b.policy,
		Budget:     s.b.queueTotal,
		KeepBudget: s.b.queueTotal != nil,
		OnDrop:     s.b.countSubQueueDrop,
	}, func(m *actors.Mailbox) { queue = m })

	root := s.b.system.Root
	register := func(next uint64) error {
		if _, err := root.RequestFuture(writer.PID, &lanes.Register{SubscriptionID: id, Stream: sink, Egress: egress, Next: next}, requestTimeout).Result(); err != nil {
			egress.Close()
			_ = sink.Close()
			return wire.NewError(wire.CodeInternal, "register subscription with connection writer: %v", err)
		}
		return nil
	}
	// An in-memory subscription registers with the writer now. A durable
	// one replays its history into the stream first, so it registers
	// after (see resume).
	if !ref.Durable && !ringBacklog {
		if err := register(0); err != nil {
			return nil, nil, err
		}
	}
	feeder, err := actors.Spawn(root, s.b.subscribers, fmt.Sprintf("sub-%d", id), props, requestTimeout)
	if err == nil {
		s.b.dir.Add(feeder, actors.KindFeeder, queue, map[string]string{
			"stream": scope.String(), "subscription": fmt.Sprint(id), "conn": fmt.Sprint(s.info.ID),
			"lane": fmt.Sprint(lane.Index), "policy": s.b.policy.String(),
		})
	}
	if err != nil {
		root.Send(writer.PID, &lanes.Unregister{SubscriptionID: id})
		return nil, nil, wire.NewError(wire.CodeInternal, "spawn feeder: %v", err)
	}
	res, err := root.RequestFuture(ref.PID, &streams.AddSubscriber{ID: id, Feeder: queue, Backlog: ringBacklog}, requestTimeout).Result()
	if err != nil {
		root.Stop(feeder)
		root.Send(writer.PID, &lanes.Unregister{SubscriptionID: id})
		return nil, nil, wire.NewError(wire.CodeShardUnavailable, "register with stream %s: %v", scope, err)
	}
	added := res.(*streams.SubscriberAdded)
	answer := &wire.Subscribed{RequestID: req.RequestID, SubscriptionID: id, QueueCapacity: capacity}
	var then func()
	if ref.Durable {
		from, cerr := startOffset(req, added)
		if cerr != nil {
			root.Send(ref.PID, &streams.RemoveSubscriber{ID: id})
			root.Stop(feeder)
			egress.Close()
			_ = sink.Close()
			return nil, nil, cerr
		}
		answer.StartOffset, answer.LiveOffset, answer.Durable = from, added.Live, true
		offsets := s.info.Flags&wire.FlagEventBatchOffsets != 0
		then = func() { s.resume(id, ref, sink, feeder, queue, offsets, from, added.Live, register) }
	}
	if ringBacklog {
		then = func() { s.replayRing(id, sink, feeder, added.Backlog, register) }
	}

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.end(&subscription{id: id, feeder: feeder, shard: ref, writer: writer}, endUnsubscribe)
		return nil, nil, wire.NewError(wire.CodeDraining, "connection closing")
	}
	if feederGone.Load() {
		// The feeder stopped (chaos, its shard or lane stopping) before the
		// subscription was in subs, so feederStopped found nothing to end:
		// refuse, or the client would wait on a stream nothing feeds.
		s.mu.Unlock()
		root.Send(ref.PID, &streams.RemoveSubscriber{ID: id})
		root.Send(writer.PID, &lanes.Unregister{SubscriptionID: id, Abort: true})
		return nil, nil, wire.NewError(wire.CodeShardUnavailable, "the subscription's feeder stopped while subscribing; subscribe again")
	}
	s.subs[id] = &subscription{id: id, feeder: feeder, shard: ref, writer: writer}
	s.mu.Unlock()
	s.b.metrics.Subscriptions.Inc()
	return answer, then, nil
}

// grantCapacity clamps a requested queue capacity to [1, max]; zero (or
// negative: never trusted) asks for the stream's default.
func (s *session) grantCapacity(requested int64) int {
	if requested <= 0 {
		return s.b.cfg.SubscriberQueueCapacity
	}
	return int(min(requested, int64(s.b.cfg.SubscriberQueueCapacityMax)))
}

// Unsubscribe ends one of this connection's subscriptions.
func (s *session) Unsubscribe(id uint64) error {
	sub := s.take(id)
	if sub == nil {
		return wire.NewError(wire.CodeNotFound, "no subscription %d on this connection", id)
	}
	s.end(sub, endUnsubscribe)
	return nil
}

// take removes a subscription from the session; nil if it is already gone.
func (s *session) take(id uint64) *subscription {
	s.mu.Lock()
	defer s.mu.Unlock()
	sub, ok := s.subs[id]
	if !ok {
		return nil
	}
	delete(s.subs, id)
	return sub
}

// streamFailed is the connection writer telling us a subscription's stream
// broke (the client reset it). It runs on the writer's goroutine: no waiting.
func (s *session) streamFailed(id uint64, err error) {
	if sub := s.take(id); sub != nil {
		s.b.log.Debug().Uint64("subscription", id).Err(err).Msg("event stream failed; subscription ended")
		s.end(sub, endStreamFailed)
	}
}

// feederStopped is a feeder telling us it stopped. After an Unsubscribe the
// subscription is already gone; otherwise the feeder was stopped (chaos,
// its shard or lane stopped, a crash loop) and the client is told.
func (s *session) feederStopped(id uint64) {
	if sub := s.take(id); sub != nil {
		s.b.log.Warn().Uint64("subscription", id).Msg("feeder stopped; subscription ended with an error to the client")
		s.end(sub, endFeederGone)
	}
}

// writerStopped is a connection writer telling us it stopped. It has reset
// every stream it owned; end the subscriptions it carried. A later
// Subscribe gets a new writer (liveWriter).
func (s *session) writerStopped(w *lanes.WriterRef) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	var gone []*subscription
	for id, sub := range s.subs {
		if sub.writer == w {
			gone = append(gone, sub)
			delete(s.subs, id)
		}
	}
	s.mu.Unlock()
	if len(gone) > 0 {
		s.b.log.Warn().Uint64("conn", s.info.ID).Int("subscriptions", len(gone)).Msg("connection writer stopped; its subscriptions ended with an error to the client")
	}
	for _, sub := range gone {
		s.end(sub, endWriterGone)
	}
}

// end tears a subscription down without waiting: the shard forgets it, the
// feeder stops (closing its queue), and the writer finishes its stream.
func (s *session) end(sub *subscription, why endReason) {
	s.b.metrics.Subscriptions.Dec()
	root := s.b.system.Root
	root.Send(sub.shard.PID, &streams.RemoveSubscriber{ID: sub.id})
	if why != endFeederGone {
		root.Stop(sub.feeder)
	}
	switch why {
	case endUnsubscribe:
		root.Send(sub.writer.PID, &lanes.Unregister{SubscriptionID: sub.id})
	case endFeederGone:
		root.Send(sub.writer.PID, &lanes.Unregister{SubscriptionID: sub.id, Abort: true})
	}
}

// Close ends every subscription and stops the connection writer.
func (s *session) Close() {
	s.mu.Lock()
	s.closed = true
	subs := s.subs
	s.subs = nil
	w := s.writer
	s.mu.Unlock()
	for _, sub := range subs {
		s.end(sub, endConnClosed)
	}
	_ = s.b.system.Root.StopFuture(w.PID).Wait()
}

// startOffset resolves a durable subscription's start against the shard:
// latest is the live offset, earliest the oldest kept; an offset must lie
// between them, or the answer is a cursor error with the nearest usable one.
func startOffset(req *wire.Subscribe, added *streams.SubscriberAdded) (uint64, error) {
	switch req.Start {
	case "", "latest":
		return added.Live, nil
	case "earliest":
		return added.Start, nil
	case "offset":
		switch {
		case req.StartOffset > added.Live:
			return 0, &wire.CursorError{Reason: "in_future", Requested: req.StartOffset, Available: added.Live}
		case req.StartOffset < added.Start:
			return 0, &wire.CursorError{Reason: "too_old", Requested: req.StartOffset, Available: added.Start}
		}
		return req.StartOffset, nil
	}
	return 0, wire.NewError(wire.CodeInvalidRequest, "start %q is not latest, earliest or offset", req.Start)
}

// replayPageRecords bounds one page of history: the replay holds one page
// in memory and writes it before reading the next, so a slow client slows
// the reading instead of growing a buffer.
const replayPageRecords = 1024

// maxCatchUpPasses bounds the catch-up after a replay: each pass drains
// what queued meanwhile and reads any hole from the log; more keeps
// arriving while it runs, so it stops after a few and hands over to live.
const maxCatchUpPasses = 4

// resume runs after Subscribed went out. It writes the history [from, live)
// from the log straight into the event stream, page by page (one page in
// memory, so a slow client slows the reading). Then the catch-up: the
// feeder's queue (held since registration) has collected live batches, and
// under drop_new it may have dropped some; each pass takes what is queued,
// reads whatever hole precedes a batch from the log, and writes both. After
// at most maxCatchUpPasses it hands the stream to the connection writer and
// releases the feeder at the next offset; a gap after that ends the
// subscription as lagged. History below live is never dropped.
func (s *session) resume(id uint64, ref *streams.ShardRef, sink transport.EventSink, feeder *actor.PID, queue *actors.Mailbox, offsets bool, from, live uint64, register func(next uint64) error) {
	log, err := ref.Log(context.Background()) // open: Subscribe waited for it
	next := from
	if err == nil {
		next, err = s.replay(sink, log, offsets, from, live)
	}
	for pass := 0; err == nil && pass < maxCatchUpPasses; pass++ {
		took := 0
		for err == nil {
			msg, ok := queue.TakeData()
			if !ok {
				break
			}
			env, isEnv := msg.(*streams.Envelope)
			if !isEnv {
				continue
			}
			end := env.Base + uint64(env.Len())
			if end <= next {
				continue // already written from the log
			}
			if env.Base > next { // a hole: the queue dropped these
				if next, err = s.replay(sink, log, offsets, next, env.Base); err != nil {
					break
				}
			}
			shape := streams.ShapePlain
			if offsets {
				shape = streams.ShapeOffsets
			}
			if _, err = sink.Write(env.Frame(shape)); err == nil {
				next, took = end, took+1
			}
		}
		// Batches dropped after the last one queued leave a hole no queued
		// batch reveals: read up to the log's committed end too. Batches
		// read here and delivered to the queue later are skipped by the
		// feeder as already seen.
		if c := log.Committed(); err == nil && c > next {
			next, err = s.replay(sink, log, offsets, next, c)
			took++
		}
		if took == 0 {
			break
		}
	}
	if err != nil {
		s.b.log.Debug().Err(err).Uint64("subscription", id).Msg("replay ended; subscription ended")
		s.abandon(id, sink)
		return
	}
	s.handOver(id, sink, feeder, register, next)
}

// handOver ends a replay: the stream goes to the connection writer and the
// feeder is released at next (0 for an in-memory stream), unless the
// subscription ended meanwhile.
func (s *session) handOver(id uint64, sink transport.EventSink, feeder *actor.PID, register func(next uint64) error, next uint64) {
	s.mu.Lock()
	_, alive := s.subs[id]
	s.mu.Unlock()
	if !alive {
		_ = sink.Close() // unsubscribed during the replay
		return
	}
	if err := register(next); err != nil {
		s.abandon(id, sink)
		return
	}
	s.b.system.Root.Send(feeder, &subscribers.StartFrom{Offset: next})
}

// replay writes the log's records [from, to) into sink, one page at a time,
// and returns the offset after the last one written.
func (s *session) replay(sink transport.EventSink, log streams.Log, offsets bool, from, to uint64) (uint64, error) {
	for from < to {
		page, err := log.Read(from, int(min(to-from, replayPageRecords)), 1<<20)
		if err == nil && len(page.Records) == 0 {
			err = fmt.Errorf("no records at %d below %d", from, to)
		}
		if err != nil {
			return from, err
		}
		payloads := make([][]byte, len(page.Records))
		for i, r := range page.Records {
			payloads[i] = r.Value
		}
		var frame []byte
		if offsets {
			frame = wire.AppendEventBatchOffsets(nil, page.Records[0].Offset, payloads)
		} else {
			frame = wire.AppendEventBatch(nil, payloads)
		}
		if _, err := sink.Write(frame); err != nil {
			return from, err
		}
		from = page.Next
	}
	return from, nil
}

// abandon ends a subscription whose replay failed.
func (s *session) abandon(id uint64, sink transport.EventSink) {
	if a, ok := sink.(lanes.Aborter); ok {
		a.Abort()
	} else {
		_ = sink.Close()
	}
	if sub := s.take(id); sub != nil {
		s.end(sub, endStreamFailed)
	}
}

// writerLagged is the connection writer reporting that it ended a durable
// subscription as lagged (a lane dropped one of its batches, or its feeder
// found a gap). Drop what is left of it; nothing waits.
func (s *session) writerLagged(id uint64) {
	sub := s.take(id)
	if sub == nil {
		return
	}
	s.b.metrics.Subscriptions.Dec()
	root := s.b.system.Root
	root.Send(sub.shard.PID, &streams.RemoveSubscriber{ID: id})
	root.Stop(sub.feeder)
}

// lagged is a durable subscription's feeder reporting its first gap: the
// subscription ends with SubscriptionLagged and the offset to resume from.
func (s *session) lagged(id uint64, resumeFrom uint64) {
	s.mu.Lock()
	sub, ok := s.subs[id]
	s.mu.Unlock()
	if !ok {
		return
	}
	// The writer queues the lag frame and reports back (writerLagged),
	// which removes the subscription; the feeder stops itself.
	s.b.system.Root.Send(sub.writer.PID, &lanes.Unregister{SubscriptionID: id, Lagged: true, ResumeFrom: resumeFrom})
}

// replayRing writes an in-memory subscription's backlog (the ring's
// batches, each one's shared frame) into its event stream, then hands the
// stream to the writer and releases the feeder, whose queue has collected
// what was published meanwhile. The ring and the queue meet exactly: the
// shard took the backlog and registered the feeder in one Receive.
func (s *session) replayRing(id uint64, sink transport.EventSink, feeder *actor.PID, backlog []*streams.Envelope, register func(next uint64) error) {
	for _, env := range backlog {
		if _, err := sink.Write(env.Frame(streams.ShapePlain)); err != nil {
			s.abandon(id, sink)
			return
		}
	}
	s.handOver(id, sink, feeder, register, 0)
}
