package client

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/getfelix/felix-go/wire"
)

// ClusterSubscription is a subscription to one shard that follows the
// shard: when the broker ends it (the shard moved away: ErrSubscriptionEnded),
// its connection is lost, or it lags (LaggedError, durable streams), Next
// asks for the topology again and subscribes at the shard's owner, backing
// off between attempts, until its ctx ends. A durable stream resumes after
// the last event Next returned, so no record is skipped or repeated; an
// in-memory one resumes from the latest (what was published meanwhile is
// not seen). On a durable stream the offsets Next returns only go up: an
// event below the next offset, which a member behind the one left could
// deliver again, is skipped (Skipped counts them).
//
// Next is for one goroutine; Close may be called from another.
type ClusterSubscription struct {
	cc     *ClusterClient
	stream Stream
	scope  wire.Scope
	o      SubscribeOptions
	// OnResubscribe, when set before the first Next, is called by Next
	// with what ended the subscription, before it subscribes again.
	OnResubscribe func(cause error)

	// Next's own: whether the stream is durable, the offset after the
	// last event returned, and the pause between resubscriptions (reset
	// by an event).
	durable bool
	next    uint64
	pause   backoff

	resubscribes atomic.Int64
	// skipped counts events below the next offset a resubscription
	// delivered again, and Next did not return.
	skipped atomic.Int64
	// life ends at Close, stopping a resubscription under way.
	life context.Context
	end  context.CancelFunc

	mu struct {
		sync.Mutex
		sub    *Subscription
		closed bool
	}
}

// Subscribe subscribes to shard o.Shard of s at its owner (retrying as a
// routed call does: a subscribe is always safe to repeat).
func (cc *ClusterClient) Subscribe(ctx context.Context, s Stream, o SubscribeOptions) (*ClusterSubscription, error) {
	cs := &ClusterSubscription{cc: cc, stream: s, scope: cc.scope(s), o: o}
	sub, err := cc.subscribeOwner(ctx, cs.scope, s, o)
	if err != nil {
		return nil, err
	}
	start, _, durable := sub.Offsets()
	cs.durable, cs.next = durable, start
	cs.mu.sub = sub
	cs.life, cs.end = context.WithCancel(context.Background())
	return cs, nil
}

func (cc *ClusterClient) subscribeOwner(ctx context.Context, scope wire.Scope, s Stream, o SubscribeOptions) (*Subscription, error) {
	var sub *Subscription
	err := cc.route(ctx, scope, fixedShard(o.Shard), true, func(c *Client) error {
		var err error
		sub, err = c.Subscribe(ctx, s, o)
		return err
	})
	return sub, err
}

// Next waits for the next event, subscribing again where the shard went
// when the subscription ends for a reason a resubscription cures. It
// returns ErrClosed after Close, and the subscription's own error for any
// other end (io.EOF, ErrTokenExpired, a deleted stream's
// ErrSubscriptionEnded). A Next whose ctx ends while it resubscribes
// leaves the resubscription to the next call.
func (cs *ClusterSubscription) Next(ctx context.Context) (Event, error) {
	for {
		sub, err := cs.current()
		if err != nil {
			return Event{}, err
		}
		if sub == nil {
			if err := cs.resubscribe(ctx); err != nil {
				return Event{}, err
			}
			continue
		}
		ev, err := sub.Next(ctx)
		if err == nil {
			if ev.HasOffset && cs.durable && ev.Offset < cs.next {
				// Returned already: the member subscribed at after a
				// failover started below where this subscription was (a
				// replica behind the one it left). Offsets never go back.
				cs.skipped.Add(1)
				continue
			}
			if ev.HasOffset {
				cs.next = ev.Offset + 1
			}
			cs.pause = backoff{}
			return ev, nil
		}
		if ctx.Err() != nil || !cs.resumable(ctx, sub, err) {
			return Event{}, err
		}
		cs.drop(ctx, sub, err)
	}
}

// current is the live subscription, nil between an end and the
// resubscription, or ErrClosed.
func (cs *ClusterSubscription) current() (*Subscription, error) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.mu.closed {
		return nil, ErrClosed
	}
	return cs.mu.sub, nil
}

// resumable says whether a subscription that ended with err is worth
// making again.
func (cs *ClusterSubscription) resumable(ctx context.Context, sub *Subscription, err error) bool {
	var lag *LaggedError
	var lost *ConnectionLostError
	switch {
	case errors.As(err, &lag):
		cs.next = max(cs.next, lag.ResumeFrom)
		return true
	case errors.As(err, &lost):
		return true
	case errors.Is(err, ErrClosed):
		// The member's client went (not this subscription's Close, nor the
		// ClusterClient's).
		return sub.c.gone() && !cs.cc.isClosed()
	case errors.Is(err, ErrSubscriptionEnded):
		// A deleted stream ends its subscriptions the same way a moved
		// shard does; subscribing again would make it anew, implicitly.
		_, serr := cs.cc.StreamInfo(ctx, cs.stream)
		return !errors.Is(serr, wire.ErrNotFound)
	}
	return false
}

// drop lets go of old, which ended with cause: the broker ended it
// already (or its connection went), so closing it only forgets it here.
func (cs *ClusterSubscription) drop(ctx context.Context, old *Subscription, cause error) {
	_ = old.Close(ctx)
	cs.mu.Lock()
	if cs.mu.sub == old {
		cs.mu.sub = nil
	}
	cs.mu.Unlock()
	cs.cc.forget(cs.scope)
	if cs.OnResubscribe != nil {
		cs.OnResubscribe(cause)
	}
}

// resubscribe subscribes at the shard's owner now, after a pause: a
// durable stream from the offset after the last event returned, an
// in-memory one from the latest.
func (cs *ClusterSubscription) resubscribe(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(cs.life, cancel)()
	o := cs.o
	o.From, o.FromOffset = FromLatest, 0
	if cs.durable {
		o.From, o.FromOffset = FromOffset, cs.next
	}
	err := cs.pause.sleep(ctx)
	var sub *Subscription
	if err == nil {
		sub, err = cs.cc.subscribeOwner(ctx, cs.scope, cs.stream, o)
	}
	if cs.life.Err() != nil {
		err = ErrClosed
	}
	if err != nil {
		if sub != nil {
			_ = sub.Close(ctx)
		}
		return err
	}
	return cs.install(ctx, sub)
}

// install makes sub the current subscription, unless Close came first.
func (cs *ClusterSubscription) install(ctx context.Context, sub *Subscription) error {
	cs.mu.Lock()
	closed := cs.mu.closed
	if !closed {
		cs.mu.sub = sub
	}
	cs.mu.Unlock()
	if closed {
		_ = sub.Close(ctx)
		return ErrClosed
	}
	cs.resubscribes.Add(1)
	return nil
}

// Resubscribes counts the times Next subscribed again.
func (cs *ClusterSubscription) Resubscribes() int { return int(cs.resubscribes.Load()) }

// Skipped counts the events of a durable stream a resubscription delivered
// again below the offset Next had reached, which Next did not return.
func (cs *ClusterSubscription) Skipped() int { return int(cs.skipped.Load()) }

// QueueCapacity is the subscriber queue capacity the broker granted the
// current subscription (0 between an end and the resubscription).
func (cs *ClusterSubscription) QueueCapacity() int {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.mu.sub == nil {
		return 0
	}
	return cs.mu.sub.capacity
}

// Buffered is how many events the current subscription holds that Next
// has not returned yet.
func (cs *ClusterSubscription) Buffered() int {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.mu.sub == nil {
		return 0
	}
	return len(cs.mu.sub.events)
}

// Close ends the subscription; a Next waiting or resubscribing returns
// ErrClosed.
func (cs *ClusterSubscription) Close(ctx context.Context) error {
	cs.mu.Lock()
	if cs.mu.closed {
		cs.mu.Unlock()
		return nil
	}
	cs.mu.closed = true
	sub := cs.mu.sub
	cs.mu.Unlock()
	cs.end()
	if sub == nil {
		return nil
	}
	return sub.Close(ctx)
}
