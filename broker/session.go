package broker

import (
	"errors"
	"fmt"
	"sync"

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
	writer *lanes.WriterRef

	mu     sync.Mutex
	shards map[shardKey]*streams.ShardRef
	subs   map[uint64]*subscription
	closed bool
}

type subscription struct {
	id     uint64
	feeder *actor.PID
	shard  *streams.ShardRef
}

// shard returns the shard for scope, asking the registry on a miss or when
// the cached shard has stopped.
func (s *session) shard(scope wire.Scope) (*streams.ShardRef, error) {
	key := shardKey{scope: scope}
	s.mu.Lock()
	ref, ok := s.shards[key]
	s.mu.Unlock()
	if ok && !ref.Mailbox.IsClosed() {
		return ref, nil
	}
	ref, err := streams.Lookup(s.b.system.Root, s.b.registry, scope, 0, requestTimeout)
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
func (s *session) Publish(p *wire.Publish, done func(error)) error {
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

func (s *session) admit(p *wire.Publish, done func(error)) error {
	for attempt := 0; ; attempt++ {
		ref, err := s.shard(p.Scope)
		if err != nil {
			return err
		}
		switch ref.Mailbox.TryPost(&streams.Publish{Payloads: p.Payloads, Done: done}, s.b.cfg.PublishQueueWaitTimeout) {
		case actors.Posted, actors.PostedEvicting:
			return nil
		case actors.Closed:
			if attempt == 0 {
				continue // the shard stopped; the registry makes a new one
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
func (s *session) Subscribe(req *wire.Subscribe, open func(uint64) (transport.EventSink, error)) (*wire.Subscribed, error) {
	scope := req.Scope()
	if err := scope.Validate(); err != nil {
		return nil, err
	}
	capacity := s.grantCapacity(req.QueueCapacity)
	ref, err := s.shard(scope)
	if err != nil {
		return nil, err
	}
	id := s.b.nextSubID.Add(1)
	sink, err := open(id)
	if err != nil {
		return nil, err
	}

	lane := s.b.lanes[s.b.selector.Select(id, s.info.ID)]
	var queue *actors.Mailbox
	props, egress := subscribers.Props(subscribers.Config{
		SubscriptionID: id,
		Batch:          s.b.feederBatch(),
		Lane:           lane,
		Writer:         s.writer,
		Root:           s.b.system.Root,
		Log:            s.b.log,
		Budget:         s.b.queueTotal,
	}, actors.MailboxConfig{
		Capacity:   capacity,
		MaxBytes:   s.b.cfg.SubscriberQueueMaxBytes,
		Policy:     s.b.policy,
		Budget:     s.b.queueTotal,
		KeepBudget: s.b.queueTotal != nil,
		OnDrop:     s.b.countSubQueueDrop,
	}, func(m *actors.Mailbox) {
		queue = m
		s.b.metrics.Mailboxes().Add(actors.KindFeeder, m)
	})

	root := s.b.system.Root
	if _, err := root.RequestFuture(s.writer.PID, &lanes.Register{SubscriptionID: id, Stream: sink, Egress: egress}, requestTimeout).Result(); err != nil {
		egress.Close()
		_ = sink.Close()
		return nil, wire.NewError(wire.CodeInternal, "register subscription with connection writer: %v", err)
	}
	feeder, err := actors.Spawn(root, s.b.subscribers, fmt.Sprintf("sub-%d", id), props, requestTimeout)
	if err != nil {
		root.Send(s.writer.PID, &lanes.Unregister{SubscriptionID: id})
		return nil, wire.NewError(wire.CodeInternal, "spawn feeder: %v", err)
	}
	if _, err := root.RequestFuture(ref.PID, &streams.AddSubscriber{ID: id, Feeder: queue}, requestTimeout).Result(); err != nil {
		root.Stop(feeder)
		root.Send(s.writer.PID, &lanes.Unregister{SubscriptionID: id})
		return nil, wire.NewError(wire.CodeShardUnavailable, "register with stream %s: %v", scope, err)
	}

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.end(&subscription{id: id, feeder: feeder, shard: ref}, true)
		return nil, wire.NewError(wire.CodeDraining, "connection closing")
	}
	s.subs[id] = &subscription{id: id, feeder: feeder, shard: ref}
	s.mu.Unlock()
	s.b.metrics.Subscriptions.Inc()
	return &wire.Subscribed{RequestID: req.RequestID, SubscriptionID: id, QueueCapacity: capacity}, nil
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
	s.mu.Lock()
	sub, ok := s.subs[id]
	delete(s.subs, id)
	s.mu.Unlock()
	if !ok {
		return wire.NewError(wire.CodeNotFound, "no subscription %d on this connection", id)
	}
	s.end(sub, true)
	return nil
}

// streamFailed is the connection writer telling us a subscription's stream
// broke (the client reset it). It runs on the writer's goroutine: no waiting.
func (s *session) streamFailed(id uint64, err error) {
	s.mu.Lock()
	sub, ok := s.subs[id]
	delete(s.subs, id)
	s.mu.Unlock()
	if ok {
		s.b.log.Debug().Uint64("subscription", id).Err(err).Msg("event stream failed; subscription ended")
		s.end(sub, false)
	}
}

// end tears a subscription down without waiting: the shard forgets it, the
// feeder stops (closing its queue), and the writer finishes its stream.
func (s *session) end(sub *subscription, unregister bool) {
	s.b.metrics.Subscriptions.Dec()
	root := s.b.system.Root
	root.Send(sub.shard.PID, &streams.RemoveSubscriber{ID: sub.id})
	root.Stop(sub.feeder)
	if unregister {
		root.Send(s.writer.PID, &lanes.Unregister{SubscriptionID: sub.id})
	}
}

// Close ends every subscription and stops the connection writer.
func (s *session) Close() {
	s.mu.Lock()
	s.closed = true
	subs := s.subs
	s.subs = nil
	s.mu.Unlock()
	for _, sub := range subs {
		s.end(sub, false)
	}
	_ = s.b.system.Root.StopFuture(s.writer.PID).Wait()
}
