package actors

import (
	"context"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// Request asks the actor at pid and waits for its answer of type T. It is
// the one way code outside the actor system (a client's goroutine, the
// broker's start) asks an actor. It waits at most timeout, less when ctx's
// deadline is sooner, and stops waiting when ctx is cancelled (a long poll
// whose client left); pass Detached(ctx) when the caller must learn the
// outcome whatever its client does. An answer that is an error is returned
// as one; a timeout (actor.ErrTimeout), an unreachable pid
// (actor.ErrDeadLetter) and ctx's cancellation are wrapped. Never call it
// inside a Receive: the actor would wait on a peer that may wait on it;
// actors use ctx.Request or ctx.ReenterAfter.
//
// The answer comes to a process of its own (as a protoactor future's
// does) that hands it over on a channel: RequestFuture's Result cannot be
// given up when ctx ends, and waiting for it in a second goroutine would
// leave that goroutine behind until the timeout.
func Request[T any](ctx context.Context, root *actor.RootContext, pid *actor.PID, msg any, timeout time.Duration) (T, error) {
	var zero T
	if dl, ok := ctx.Deadline(); ok {
		timeout = max(time.Millisecond, min(timeout, time.Until(dl)))
	}
	registry := root.ActorSystem().ProcessRegistry
	r := &replyProcess{answer: make(chan any, 1)}
	self, _ := registry.Add(r, ReplyIDPrefix+registry.NextId())
	defer registry.Remove(self)
	root.RequestWithCustomSender(pid, msg, self)
	t := time.NewTimer(timeout)
	defer t.Stop()
	var res any
	select {
	case res = <-r.answer:
	case <-t.C:
		return zero, fmt.Errorf("actors: ask %s (%T): %w", pid.Id, msg, actor.ErrTimeout)
	case <-ctx.Done():
		return zero, fmt.Errorf("actors: ask %s (%T): %w", pid.Id, msg, ctx.Err())
	}
	switch a := res.(type) {
	case *actor.DeadLetterResponse:
		return zero, fmt.Errorf("actors: ask %s (%T): %w", pid.Id, msg, actor.ErrDeadLetter)
	case error:
		return zero, a
	case T:
		return a, nil
	}
	return zero, fmt.Errorf("actors: %s answered %T to %T", pid.Id, res, msg)
}

// ReplyIDPrefix starts the id of every Request's reply process; the
// registry's own part starts with "$". The cluster's actor remote lets
// answers through to these ids only.
const ReplyIDPrefix = "request"

// replyProcess takes a Request's answer: the first message only, without
// blocking (a second answer, which no actor should send, is dropped).
type replyProcess struct{ answer chan any }

func (p *replyProcess) SendUserMessage(_ *actor.PID, message any) {
	_, msg, _ := actor.UnwrapEnvelope(message)
	select {
	case p.answer <- msg:
	default:
	}
}

func (p *replyProcess) SendSystemMessage(pid *actor.PID, message any) {
	p.SendUserMessage(pid, message)
}

func (p *replyProcess) Stop(*actor.PID) {}

// Detached is ctx's deadline and values without its cancellation: for a
// Request whose outcome the caller must learn to keep or undo its own part
// (a spawn, a subscription's adoption or registration) even once its
// client left. Abandoned, such an answer would leave the actor's part
// done and the caller's undone: an actor nobody owns, a count released
// twice.
func Detached(ctx context.Context) context.Context {
	return detached{Context: context.WithoutCancel(ctx), parent: ctx}
}

type detached struct {
	context.Context // context.WithoutCancel(parent)
	parent          context.Context
}

func (d detached) Deadline() (time.Time, bool) { return d.parent.Deadline() }
