package broker

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/auth"
	"github.com/getfelix/felix-go/lanes"
	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/sessions"
	"github.com/getfelix/felix-go/streams"
	"github.com/getfelix/felix-go/subscribers"
	"github.com/getfelix/felix-go/wire"
)

// Subscribe implements service.Session with the subscribe handshake, in steps:
// the sink opens and is registered with the connection writer, the feeder
// is spawned (its queue held), the session adopts the subscription, the
// shard registers the feeder, and only then is the answer given: every
// publish the shard handles after that reaches the queue. Last, the feeder
// is told where to start; it writes the history, then lets the queue flow.
// Until adoption this goroutine tears down what it built; after it, only
// the session ends the subscription.
func (c *conn) Subscribe(ctx context.Context, req *service.Subscribe, open service.OpenSink) (*service.Subscribed, error) {
	if err := req.Scope.Validate(); err != nil {
		return nil, err
	}
	if err := c.authorize(auth.ActionStreamSubscribe, req.Scope); err != nil {
		return nil, err
	}
	release, err := c.b.tenants.AcquireSubscription(req.Scope.Tenant)
	if err != nil {
		return nil, err
	}
	sub, queue, ref, err := c.build(ctx, req, open)
	if err != nil {
		release()
		return nil, err
	}
	if err := c.adopt(ctx, sub, release); err != nil {
		return nil, err
	}
	id := sub.ID
	added, err := actors.Request[*streams.SubscriberAdded](actors.Detached(ctx), c.b.system.Root, ref.PID, &streams.AddSubscriber{ID: id, Feeder: queue, Backlog: !ref.Durable && req.Start != service.StartLatest}, requestTimeout)
	if err != nil {
		c.b.system.Root.Send(c.session, &sessions.EndSubscription{ID: id, Abort: true})
		return nil, wire.NewError(wire.CodeShardUnavailable, "register with stream %s: %v", req.Scope, err)
	}
	start, err := c.startFrom(req, ref, added)
	if err != nil {
		c.b.system.Root.Send(c.session, &sessions.EndSubscription{ID: id})
		return nil, err
	}
	c.b.system.Root.Send(sub.Feeder, start)
	res := &service.Subscribed{ID: id, QueueCapacity: queue.Config().Capacity}
	if ref.Durable {
		res.Durable, res.StartOffset, res.LiveOffset = true, start.From, added.Live
	}
	return res, nil
}

// build resolves the shard, opens the sink and spawns the feeder: the parts
// of a subscription before the session adopts it.
func (c *conn) build(ctx context.Context, req *service.Subscribe, open service.OpenSink) (*sessions.Subscription, *actors.Mailbox, *streams.ShardRef, error) {
	ref, err := c.subscribeShard(ctx, req)
	if err != nil {
		return nil, nil, nil, err
	}
	writer, err := actors.Request[*lanes.WriterRef](actors.Detached(ctx), c.b.system.Root, c.session, &sessions.GetWriter{}, requestTimeout)
	if err != nil {
		return nil, nil, nil, err
	}
	id := c.b.nextSubID.Add(1)
	sink, err := open(id)
	if err != nil {
		return nil, nil, nil, err
	}
	sub, queue, err := c.spawnFeeder(ctx, id, req.Scope, req.Shard, ref, writer, sink, c.grantCapacity(req.QueueCapacity), nil)
	return sub, queue, ref, err
}

// adopt hands sub to the connection's session, with release, its tenant
// slot. Refused, it tears down what the subscribe built: the feeder, the
// writer's stream, the egress share and the slot.
func (c *conn) adopt(ctx context.Context, sub *sessions.Subscription, release func()) error {
	sub.Release = release
	res, err := actors.Request[*sessions.Adopted](actors.Detached(ctx), c.b.system.Root, c.session, &sessions.Adopt{Sub: sub}, requestTimeout)
	if err == nil && res.Err == nil {
		return nil
	}
	c.b.system.Root.Stop(sub.Feeder)
	c.b.system.Root.Send(sub.Writer.PID, &lanes.Unregister{SubscriptionID: sub.ID, Abort: true})
	sub.Egress.Close()
	release()
	return errors.Join(err, adoptErr(res))
}

func adoptErr(a *sessions.Adopted) error {
	if a == nil {
		return nil
	}
	return a.Err
}

// subscribeShard resolves the shard a subscription is for.
func (c *conn) subscribeShard(ctx context.Context, req *service.Subscribe) (*streams.ShardRef, error) {
	def, err := c.stream(ctx, req.Scope)
	if err != nil {
		return nil, err
	}
	if def.Cache != nil {
		return nil, wire.NewError(wire.CodeInvalidRequest, "%s is a cache: read it by key (its records are key writes, not events)", req.Scope)
	}
	ref, err := c.shard(ctx, req.Scope, req.Shard)
	if err != nil && errors.Is(err, wire.ErrNotFound) {
		c.forgetStream(req.Scope) // the stream may have been recreated with more shards
		ref, err = c.shard(ctx, req.Scope, req.Shard)
	}
	if err == nil && ref.Durable {
		// A durable shard opens its log after it starts: a log that will
		// not open refuses the subscription before anything is spawned.
		_, err = ref.Log(ctx)
	}
	if err == nil {
		// A replicated shard's start (latest, or the bound an offset is
		// checked against) is its applied end when it registers the
		// feeder, which comes after this: once the read is confirmed, that
		// end holds everything acknowledged before the subscribe began.
		_, err = c.confirmRead(ctx, ref, 0)
	}
	return ref, err
}

// grantCapacity clamps a requested queue capacity to [1, max]; zero (or
// negative: never trusted) asks for the stream's default.
func (c *conn) grantCapacity(requested int64) int {
	if requested <= 0 {
		return c.b.cfg.SubscriberQueueCapacity
	}
	return int(min(requested, int64(c.b.cfg.SubscriberQueueCapacityMax)))
}

// spawnFeeder registers the sink with the writer and spawns the feeder,
// its queue held until Start. On an error nothing is left behind. w is
// the watch a cache watch's feeder serves (nil for a subscription); a
// watch's queue drops new changes when full whatever the stream's policy
// (its shard then ends it lagged) and stays out of the broker-wide queue
// budget: what it holds is bounded by its own queue.
func (c *conn) spawnFeeder(ctx context.Context, id uint64, scope wire.Scope, shard uint32, ref *streams.ShardRef, writer *lanes.WriterRef, sink service.Sink, capacity int, w *service.CacheWatch) (*sessions.Subscription, *actors.Mailbox, error) {
	b := c.b
	watch := w != nil
	policy, budget := b.policy, b.queueTotal
	if watch {
		policy, budget = actors.DropNew, nil
	}
	lane, err := b.lane(ctx, b.selector.Select(id, c.client.ID))
	if err != nil {
		_ = sink.Close()
		return nil, nil, wire.NewError(wire.CodeInternal, "writer lane: %v", err)
	}
	var queue *actors.Mailbox
	props, egress := subscribers.Props(subscribers.Config{
		SubscriptionID: id,
		Batch:          b.feederBatch(),
		Lane:           lane,
		Writer:         writer,
		Session:        c.session,
		Root:           b.system.Root,
		Log:            b.log,
		Shard:          ref.PID,
		Offsets:        ref.Durable && c.client.Offsets && !watch,
		Durable:        ref.Durable && !watch,
		Watch:          watch,
		Budget:         budget,
	}, actors.MailboxConfig{
		Capacity:   capacity,
		MaxBytes:   b.cfg.SubscriberQueueMaxBytes,
		Policy:     policy,
		Budget:     budget,
		KeepBudget: budget != nil,
		OnDrop:     b.countSubQueueDrop,
	}, func(m *actors.Mailbox) { queue = m })
	if _, err := actors.Request[*lanes.Registered](actors.Detached(ctx), c.b.system.Root, writer.PID, &lanes.Register{SubscriptionID: id, Stream: sink, Egress: egress}, requestTimeout); err != nil {
		egress.Close()
		_ = sink.Close()
		return nil, nil, wire.NewError(wire.CodeInternal, "register subscription with connection writer: %v", err)
	}
	feeder, err := actors.Spawn(ctx, b.system.Root, b.subscribers, fmt.Sprintf("sub-%d", id), props, requestTimeout)
	if err != nil {
		b.system.Root.Send(writer.PID, &lanes.Unregister{SubscriptionID: id, Abort: true})
		egress.Close()
		return nil, nil, wire.NewError(wire.CodeInternal, "spawn feeder: %v", err)
	}
	labels := map[string]string{
		"stream": scope.String(), "shard": fmt.Sprint(shard), "subscription": fmt.Sprint(id), "conn": fmt.Sprint(c.client.ID),
		"lane": fmt.Sprint(lane.Index), "policy": policy.String(),
	}
	if watch {
		delete(labels, "stream")
		labels["cache"], labels["watch"] = scope.String(), watchLabel(w)
	}
	b.dir.Add(feeder, actors.KindFeeder, queue, labels)
	return &sessions.Subscription{ID: id, Feeder: feeder, Shard: ref.PID, Writer: writer, Egress: egress, Watch: watch}, queue, nil
}

// watchLabel names what a watch covers in the tree: "key K" or "prefix
// P", cut at maxWatchLabel bytes (a key may be a kilobyte).
func watchLabel(w *service.CacheWatch) string {
	what := "key "
	if w.Prefix {
		what = "prefix "
	}
	if len(w.Key) > maxWatchLabel {
		return what + strings.ToValidUTF8(w.Key[:maxWatchLabel], "") + "…"
	}
	return what + w.Key
}

const maxWatchLabel = 64

// startFrom resolves where a subscription starts against what its shard
// answered. A durable stream starts at latest (the live offset), earliest
// (the oldest retention kept) or an offset between them. An in-memory
// stream's history is its replay ring: earliest is the ring's oldest batch,
// an offset one the ring still holds. Out of range is a cursor error with
// the nearest usable offset.
func (c *conn) startFrom(req *service.Subscribe, ref *streams.ShardRef, added *streams.SubscriberAdded) (*subscribers.Start, error) {
	oldest, backlog := added.Start, added.Backlog
	if !ref.Durable {
		oldest = added.Live
		if len(backlog) > 0 {
			oldest = backlog[0].Base
		}
	}
	from := added.Live
	switch req.Start {
	case service.StartEarliest:
		from = oldest
	case service.StartOffset:
		switch {
		case req.Offset > added.Live:
			return nil, &wire.CursorError{Reason: "in_future", Requested: req.Offset, Available: added.Live}
		case req.Offset < oldest:
			return nil, &wire.CursorError{Reason: "too_old", Requested: req.Offset, Available: oldest}
		}
		from = req.Offset
	}
	if ref.Durable {
		log, err := ref.Log(context.Background()) // open: subscribeShard waited for it
		if err != nil {
			return nil, err
		}
		return &subscribers.Start{Log: log, From: from, Live: added.Live}, nil
	}
	// The ring holds whole batches: start at the one holding from.
	for len(backlog) > 0 && backlog[0].Base+uint64(backlog[0].Len()) <= from {
		backlog = backlog[1:]
	}
	return &subscribers.Start{Backlog: backlog, From: added.Live, Live: added.Live}, nil
}

// Unsubscribe implements service.Session.
func (c *conn) Unsubscribe(ctx context.Context, id uint64) error {
	res, err := actors.Request[*sessions.Ended](actors.Detached(ctx), c.b.system.Root, c.session, &sessions.Unsubscribe{ID: id}, requestTimeout)
	if err != nil {
		return err
	}
	return res.Err
}
