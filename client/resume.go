package client

import (
	"context"
	"errors"
)

// ResumingSubscription is a durable stream subscription that resumes
// itself: when the broker ends it as lagged, it subscribes again from the
// offset the broker named (or after the last event it returned, whichever
// is further), so the caller sees every record once, in order, with no gap.
type ResumingSubscription struct {
	c    *Client
	st   Stream
	o    SubscribeOptions
	sub  *Subscription
	next uint64 // offset after the last event returned
	seen bool
}

// SubscribeResuming subscribes to a durable stream and resumes after lags.
func (c *Client) SubscribeResuming(ctx context.Context, st Stream, o SubscribeOptions) (*ResumingSubscription, error) {
	sub, err := c.Subscribe(ctx, st, o)
	if err != nil {
		return nil, err
	}
	return &ResumingSubscription{c: c, st: st, o: o, sub: sub}, nil
}

// Next returns the next event, resubscribing transparently after a lag.
func (r *ResumingSubscription) Next(ctx context.Context) (Event, error) {
	for {
		ev, err := r.sub.Next(ctx)
		if err == nil {
			r.next, r.seen = ev.Offset+1, true
			return ev, nil
		}
		var lag *LaggedError
		if !errors.As(err, &lag) {
			return Event{}, err
		}
		from := lag.ResumeFrom
		if r.seen && r.next > from {
			from = r.next
		}
		_ = r.sub.Close(ctx)
		o := r.o
		o.From, o.FromOffset = FromOffset, from
		if r.sub, err = r.c.Subscribe(ctx, r.st, o); err != nil {
			return Event{}, err
		}
	}
}

// Close ends the subscription.
func (r *ResumingSubscription) Close(ctx context.Context) error { return r.sub.Close(ctx) }
