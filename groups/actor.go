package groups

import (
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/streams"
	"github.com/getfelix/felix-go/wire"
)

// The group actor owns one group's state on one shard of a durable
// stream (core): its cursor, its dead letters and the claims in flight.
// The broker asks it Poll and Settle through its bounded mailbox (a full
// one drops the request and answers it overloaded, never waits) and Admin
// as a control message (actors.Request); the actor answers each to its
// sender, *PollResult, *SettleResult and *AdminResult, or an error, and
// never blocks on an answer. It reads the data shard's log up to the
// committed end; while polls are parked it watches that end
// (Handles.WatchData: the data shard posts dataMoved when it moves), and
// writes its durable state as records of the internal state stream
// through that stream's shard (Handles.Write), so the state goes wherever
// the shard's records go. On every start (the first, or after a panic) it
// forgets its memory and replays its records: claims in flight are handed
// out again.

// Poll asks for records (service.GroupPoll's limits, already checked).
type Poll struct {
	Max, MaxBytes    int
	Wait, Visibility time.Duration
	Consumer         string
	// Gone, when set, closes when the caller stops waiting (its
	// connection closed): a parked poll is then dropped, not handed
	// records nobody reads.
	Gone <-chan struct{}
}

// PollResult answers Poll.
type PollResult struct {
	Records []service.GroupRecord
	Err     error
}

// Settle settles claims.
type Settle struct {
	Op                service.SettleOp
	Claims            []service.Claim
	Delay, Visibility time.Duration
}

// SettleResult answers Settle.
type SettleResult struct {
	Failures []service.ClaimFailure
	Err      error
}

// AdminOp is an administrative operation on the group.
type AdminOp uint8

// The administrative operations.
const (
	OpCreate AdminOp = iota + 1
	OpSeek
	OpDescribe
	OpDelete
	OpDeadLetters
	OpRedrive
	OpDiscard
)

// Admin asks for an administrative operation; it is answered once what it
// changed is written.
type Admin struct {
	actors.ControlMessage
	Op AdminOp
	// Offset: create's and seek's start; Offsets and All: redrive's and
	// discard's; From and Max: dead letters'.
	Offset  uint64
	Offsets []uint64
	All     bool
	From    uint64
	Max     int
}

// AdminResult answers Admin.
type AdminResult struct {
	Info  service.GroupShardInfo
	Dead  service.DeadLetters
	Count int
	Err   error
}

// tick wakes the actor for deadlines, parked polls and checkpoints.
type tick struct{ actors.ControlMessage }

var tickMessage = &tick{}

// dataMoved tells the actor the data shard's committed end moved (its
// commit watch, held while polls are parked).
type dataMoved struct{ actors.ControlMessage }

var dataMovedMessage = &dataMoved{}

// Handles are what a group actor works with, resolved by the broker.
type Handles struct {
	// Data is the data shard's log; State the state shard's, replayed at
	// start.
	Data, State Log
	// Write posts one state record to the state shard without waiting;
	// done is called once, on any goroutine, when it is written or failed.
	Write func(rec []byte, done func(error)) error
	// WatchData registers w with the data shard, which wakes it (on the
	// shard's goroutine) at once when its committed end is past after,
	// then at every advance, until cancel or until w reports itself gone
	// (streams.WatchCommitted). Nil: parked polls wait out their wait.
	WatchData func(w streams.CommitWaker, after uint64) (cancel func())
	// Live says whether this actor may still serve: nil while both
	// shards serve with these logs and (in a cluster) this member serves
	// the group. Else the error a request gets (shard_unavailable when the
	// stream was deleted or a shard stopped; not_leader naming the member
	// that serves the group now); the actor then stops, and the next
	// request resolves anew.
	Live func() error
}

// Hooks count what the actor does (metrics); nil fields are skipped.
type Hooks struct {
	Polled       func(records int)
	Settled      func(op service.SettleOp, n int)
	Redelivered  func(n int)
	DeadLettered func(n int)
	Lag          func(lag uint64)
}

// Config configures one group actor.
type Config struct {
	Scope   wire.Scope
	Group   string
	Shard   uint32
	Limits  Limits
	Handles Handles
	Hooks   Hooks
	Log     zerolog.Logger
}

// Bounds of the actor's own work.
const (
	// maxParked bounds the polls waiting for records; past it a poll is
	// answered at once with nothing.
	maxParked = 256
	// checkpointEvery and checkpointAfter bound how far the cursor moves
	// before it is written: what a crash makes redeliver.
	checkpointEvery = 1000
	checkpointAfter = 100 * time.Millisecond
	// stopWriteWait bounds how long a stopping group waits for its last
	// cursor write (the only wait in its Receive besides room in the state
	// shard's mailbox).
	stopWriteWait = 2 * time.Second
	// idleAfter stops a group actor that served no request for this long
	// and holds nothing only memory keeps (no claim in flight or owed, no
	// parked poll, its cursor written): its state is in the state stream,
	// and the next request starts it again. Without it, every group ever
	// used would keep an actor and up to readAheadBytes of records.
	idleAfter = 10 * time.Minute
)

// group is the actor. Only Receive touches it.
type group struct {
	cfg    Config
	core   *core
	self   *actor.PID
	system *actor.ActorSystem
	root   *actor.RootContext // answers requests (Props)
	// loadErr is why the state could not be replayed; every request gets it.
	loadErr error
	parked  []*parked
	// seen is the data log's committed end as the last poll read it:
	// the watch starts from it, so a commit after that read wakes it.
	seen uint64
	// watch, while polls are parked, cancels the data shard's watch.
	watch  func()
	waker  *dataWaker
	timer  *time.Timer
	wakeAt time.Time
	// savedAt is when the cursor was last written.
	savedAt time.Time
	// broken is set when a log read or a state write failed: the logs
	// this actor was given are gone (the stream was deleted, a shard
	// stopped), so it stops after the message, and the next request
	// resolves them again in a new one.
	broken bool
	// deadCounted is core.deadLettered as last told to the hooks.
	deadCounted uint64
	// usedAt is when the actor last served a request (idleAfter).
	usedAt time.Time
}

type parked struct {
	req      *Poll
	to       *actor.PID // where its answer goes
	deadline time.Time
}

// Props returns the props of a group actor, with its bounded mailbox; the
// same instance serves every restart (its Started replays the state).
// root answers requests, from the actor and from the mailbox's drop hook.
func Props(cfg Config, depth int, root *actor.RootContext, created func(*actors.Mailbox)) *actor.Props {
	g := &group{cfg: cfg, root: root, waker: &dataWaker{}}
	onDrop := func(msg any, reason actors.DropReason) { dropped(root, msg, reason) }
	return actors.Props(func() actor.Actor { return g },
		actors.MailboxConfig{Capacity: depth, Policy: actors.DropNew, OnDrop: onDrop}, func(m *actors.Mailbox) {
			g.waker.mailbox = m
			if created != nil {
				created(m)
			}
		})
}

// dataWaker is the group's streams.CommitWaker: the data shard calls Wake
// on its own goroutine, and it posts dataMoved into the group's mailbox
// (control traffic: it never waits), at most one at a time, so a busy
// shard cannot flood a slow group. The flag is the only state the two
// actors share; the group clears it when it takes the message.
type dataWaker struct {
	mailbox *actors.Mailbox
	queued  atomic.Bool
}

// Wake implements streams.CommitWaker: the group is gone once its mailbox
// closed.
func (w *dataWaker) Wake() bool {
	if !w.queued.CompareAndSwap(false, true) {
		return !w.mailbox.IsClosed()
	}
	return w.mailbox.TryPost(dataMovedMessage, 0) != actors.Closed
}

// ErrActorStopped answers a request queued in a group actor's mailbox when
// the actor stopped (it was deleted, went idle, or its logs went): nothing
// of the request was done, and a new actor can take it.
var ErrActorStopped = wire.NewError(wire.CodeShardUnavailable, "the group actor stopped; try again")

// dropped answers a request the mailbox refused or discarded, to its
// sender, on the goroutine that posted it or closed the mailbox.
func dropped(root *actor.RootContext, msg any, reason actors.DropReason) {
	env, ok := msg.(*actor.MessageEnvelope)
	if !ok || env.Sender == nil {
		return
	}
	err := error(wire.NewError(wire.CodeOverloaded, "group_queue_full: the group actor's mailbox is full (group_queue_depth)"))
	if reason == actors.DropClosed {
		err = ErrActorStopped
	}
	root.Send(env.Sender, err)
}

// answer sends a request's answer to where it goes; nil is nobody.
func (g *group) answer(to *actor.PID, res any) {
	if to != nil {
		g.root.Send(to, res)
	}
}

func (g *group) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		g.handleStarted(ctx)
	case *actor.Restarting:
		g.handleStopping()
		return
	case *actor.Stopping:
		g.handleStopping()
		return
	case *Poll, *Settle, *Admin:
		if !g.live(ctx.Sender()) {
			ctx.Stop(ctx.Self())
			return
		}
		g.usedAt = time.Now()
		g.handleRequest(ctx, msg)
	case *tick:
		if g.deposed(ctx) {
			return
		}
		g.handleTick()
		if g.idle(time.Now()) {
			g.cfg.Log.Debug().Str("group", g.cfg.Group).Msg("group actor idle; stops (its state is in the state stream)")
			ctx.Stop(ctx.Self())
			return
		}
	case *dataMoved:
		if g.deposed(ctx) {
			return
		}
		g.handleDataMoved()
	default:
		return
	}
	if g.core != nil {
		// Dead letters come from settlements and from expiries alike.
		g.count(g.cfg.Hooks.DeadLettered, int(g.core.deadLettered-g.deadCounted))
		g.deadCounted = g.core.deadLettered
	}
	g.flush(nil)
	if g.broken {
		ctx.Stop(ctx.Self())
		return
	}
	g.watchData()
	g.arm()
}

// deposed stops the actor when it may no longer serve (Handles.Live) or
// its shards went: parked polls are answered empty as it stops, and their
// next try finds the new place.
func (g *group) deposed(ctx actor.Context) bool {
	if g.cfg.Handles.Live == nil || g.cfg.Handles.Live() == nil {
		return false
	}
	ctx.Stop(ctx.Self())
	return true
}

// live refuses a request (answering to) when the actor may no longer
// serve (Handles.Live).
func (g *group) live(to *actor.PID) bool {
	if g.cfg.Handles.Live == nil {
		return true
	}
	err := g.cfg.Handles.Live()
	if err == nil {
		return true
	}
	g.answer(to, err)
	return false
}

// handleRequest dispatches a request.
func (g *group) handleRequest(ctx actor.Context, msg any) {
	to := ctx.Sender()
	switch m := msg.(type) {
	case *Poll:
		g.handlePoll(to, m)
	case *Settle:
		g.handleSettle(to, m)
	case *Admin:
		g.handleAdmin(ctx, to, m)
	}
}

// handleStarted replays the group's records from the state shard's log.
func (g *group) handleStarted(ctx actor.Context) {
	g.self, g.system = ctx.Self(), ctx.ActorSystem()
	g.core = newCore(g.cfg.Group, g.cfg.Limits)
	g.loadErr, g.deadCounted = nil, 0
	g.savedAt = time.Now()
	if err := g.replay(); err != nil {
		g.loadErr = wire.WrapError(wire.CodeStorage, err, "replay group %s of %s shard %d", g.cfg.Group, g.cfg.Scope, g.cfg.Shard)
		g.cfg.Log.Error().Err(err).Str("group", g.cfg.Group).Msg("group state did not replay")
		return
	}
	g.core.replayed(time.Now())
}

// replay reads every state record of the shard, applying this group's.
func (g *group) replay() error {
	log := g.cfg.Handles.State
	from, end := log.StartOffset(), log.Committed()
	for from < end {
		page, err := log.Read(from, 4096, 4<<20)
		if err != nil {
			return err
		}
		if len(page.Records) == 0 {
			break
		}
		for _, r := range page.Records {
			rec, err := DecodeRecord(r.Value)
			if err != nil {
				// Not ours to fix: a record no version wrote. Skipping it
				// can only make the group redeliver.
				g.cfg.Log.Warn().Err(err).Uint64("offset", r.Offset).Msg("skipped a bad group state record")
				continue
			}
			if rec.Group == g.cfg.Group {
				g.core.apply(rec)
			}
		}
		from = page.Next
	}
	return nil
}

// handleStopping writes the cursor and waits (at most stopWriteWait) for
// it, so a clean stop redelivers nothing acked, and answers parked polls,
// which would otherwise wait for nothing. Before a restart too: the cursor
// only ever holds a value that was true when advance set it, whatever a
// panic interrupted since.
func (g *group) handleStopping() {
	g.unwatchData()
	if g.timer != nil {
		g.timer.Stop()
		g.timer, g.wakeAt = nil, time.Time{}
	}
	if g.core != nil && g.loadErr == nil {
		g.core.checkpoint()
		written := make(chan error, 1)
		g.flush(func(err error) { written <- err })
		t := time.NewTimer(stopWriteWait)
		select {
		case <-written:
		case <-t.C:
			g.cfg.Log.Warn().Str("group", g.cfg.Group).Msg("group stopped before its cursor was written; what it acked since the last write will be handed out again")
		}
		t.Stop()
	}
	for _, p := range g.parked {
		g.answer(p.to, &PollResult{})
	}
	g.parked = nil
}

// handlePoll hands out what is available, or parks the poll.
func (g *group) handlePoll(to *actor.PID, msg *Poll) {
	if gone(msg) {
		return // nobody reads the answer: hand out nothing
	}
	if err := g.usable(); err != nil {
		g.answer(to, err)
		return
	}
	now := time.Now()
	g.core.expire(now)
	recs, err := g.poll(msg, now)
	switch {
	case err != nil || len(recs) > 0 || msg.Wait <= 0:
		g.answer(to, &PollResult{Records: recs, Err: err})
	case len(g.parked) >= maxParked:
		g.answer(to, &PollResult{})
	default:
		g.parked = append(g.parked, &parked{req: msg, to: to, deadline: now.Add(msg.Wait)})
	}
}

// poll runs one poll against the core and counts it.
func (g *group) poll(msg *Poll, now time.Time) ([]service.GroupRecord, error) {
	g.seen = g.cfg.Handles.Data.Committed() // before the read: see seen
	redelivered := g.core.redeliveries
	recs, err := g.core.poll(g.cfg.Handles.Data, now, msg.Max, msg.MaxBytes, msg.Visibility, msg.Consumer)
	if err != nil {
		g.broken = true
		err = wire.WrapError(wire.CodeStorage, err, "read %s shard %d for group %s", g.cfg.Scope, g.cfg.Shard, g.cfg.Group)
	}
	g.count(g.cfg.Hooks.Polled, len(recs))
	g.count(g.cfg.Hooks.Redelivered, int(g.core.redeliveries-redelivered))
	return recs, err
}

// usable is the error every request gets while the group cannot serve.
func (g *group) usable() error {
	switch {
	case g.loadErr != nil:
		return g.loadErr
	case !g.core.exists:
		return wire.NewError(wire.CodeNotFound, "no group %s on stream %s (felix group create)", g.cfg.Group, g.cfg.Scope)
	}
	return nil
}

func (g *group) handleSettle(to *actor.PID, msg *Settle) {
	if err := g.usable(); err != nil {
		g.answer(to, err)
		return
	}
	now := time.Now()
	g.core.expire(now)
	failed := g.core.settle(msg.Op, msg.Claims, now, msg.Delay, msg.Visibility)
	if n := len(msg.Claims) - len(failed); g.cfg.Hooks.Settled != nil && n > 0 {
		g.cfg.Hooks.Settled(msg.Op, n)
	}
	g.answer(to, &SettleResult{Failures: failed})
	if g.core.cursor-g.core.saved >= checkpointEvery {
		g.checkpoint(now)
	}
	if len(g.parked) > 0 && g.core.hasReady() {
		g.serveParked(now)
	}
}

// handleAdmin runs an administrative operation and answers it once its
// records are written.
func (g *group) handleAdmin(ctx actor.Context, to *actor.PID, msg *Admin) {
	if g.loadErr != nil {
		g.answer(to, g.loadErr)
		return
	}
	now := time.Now()
	var res AdminResult
	if msg.Op != OpCreate {
		if err := g.usable(); err != nil {
			g.answer(to, err)
			return
		}
	}
	switch msg.Op {
	case OpCreate:
		g.core.create(msg.Offset, now)
	case OpSeek:
		g.core.seek(msg.Offset)
	case OpDelete:
		g.core.remove()
		// Nothing is left to serve: the next request makes a new actor,
		// which replays the delete.
		ctx.Stop(ctx.Self())
	case OpDescribe:
		// The cursor it reports is written when it answers: a caller
		// (a test, an operator before a failover) learns what a
		// successor would replay.
		g.checkpoint(now)
	case OpDeadLetters:
		res.Dead = g.core.deadLetters(msg.From, msg.Max)
	case OpRedrive:
		res.Count = g.core.redrive(msg.Offsets, msg.All, now)
	case OpDiscard:
		res.Count = g.core.discard(msg.Offsets, msg.All)
	}
	g.core.expire(now)
	res.Info = g.core.info(g.cfg.Shard, g.cfg.Handles.Data.Committed(), time.Now())
	res.Info.Waiting = uint64(len(g.parked))
	g.flush(func(err error) {
		// Called on the state shard's goroutine once the record is
		// written: answer touches only what never changes after Props.
		res.Err = err
		g.answer(to, &res)
	})
	if len(g.parked) > 0 {
		g.serveParked(now)
	}
}

// handleTick applies deadlines, serves parked polls and writes the cursor
// when it is due.
func (g *group) handleTick() {
	g.wakeAt = time.Time{}
	if g.loadErr != nil || !g.core.exists {
		return
	}
	now := time.Now()
	g.core.expire(now)
	g.serveParked(now)
	if g.core.cursor != g.core.saved && now.Sub(g.savedAt) >= checkpointAfter {
		g.checkpoint(now)
	}
}

// handleDataMoved serves the parked polls the data shard's new records
// may answer. The flag is cleared first: an advance while they are served
// posts again.
func (g *group) handleDataMoved() {
	g.waker.queued.Store(false)
	if g.loadErr != nil || !g.core.exists {
		return
	}
	now := time.Now()
	g.core.expire(now)
	g.serveParked(now)
}

// watchData holds the data shard's watch while polls are parked, and
// only then: an advance nobody waits for costs the shard nothing more.
func (g *group) watchData() {
	switch {
	case len(g.parked) == 0:
		g.unwatchData()
	case g.watch == nil && g.cfg.Handles.WatchData != nil:
		g.watch = g.cfg.Handles.WatchData(g.waker, g.seen)
	}
}

func (g *group) unwatchData() {
	if g.watch != nil {
		g.watch()
		g.watch = nil
	}
}

// serveParked answers the parked polls that now get records or whose wait
// is over, oldest first.
func (g *group) serveParked(now time.Time) {
	kept := g.parked[:0]
	for _, p := range g.parked {
		if gone(p.req) {
			continue
		}
		recs, err := g.poll(p.req, now)
		if err != nil || len(recs) > 0 || !now.Before(p.deadline) {
			g.answer(p.to, &PollResult{Records: recs, Err: err})
			continue
		}
		kept = append(kept, p)
	}
	clear(g.parked[len(kept):])
	g.parked = kept
}

// idle reports whether the actor may stop: nothing served for idleAfter,
// and nothing held only in memory.
func (g *group) idle(now time.Time) bool {
	return g.core != nil && !g.usedAt.IsZero() && now.Sub(g.usedAt) >= g.idleAfter() &&
		len(g.parked) == 0 && len(g.core.pending) == 0 && len(g.core.ready) == 0 &&
		g.core.cursor == g.core.saved
}

func (g *group) idleAfter() time.Duration {
	if g.cfg.Limits.IdleAfter > 0 {
		return g.cfg.Limits.IdleAfter
	}
	return idleAfter
}

// gone reports whether a poll's caller stopped waiting.
func gone(p *Poll) bool {
	select {
	case <-p.Gone:
		return true
	default:
		return false
	}
}

// checkpoint writes the cursor now.
func (g *group) checkpoint(now time.Time) {
	g.core.checkpoint()
	g.savedAt = now
	if g.cfg.Hooks.Lag != nil {
		g.cfg.Hooks.Lag(g.core.info(g.cfg.Shard, g.cfg.Handles.Data.Committed(), time.Now()).Lag)
	}
}

// flush writes the records the core queued, in order; done (if set) is
// called once the last is written, or at once when there are none.
func (g *group) flush(done func(error)) {
	out := g.core.out
	g.core.out = nil
	if len(out) == 0 {
		if done != nil {
			done(nil)
		}
		return
	}
	for i := range out {
		b, err := AppendRecord(nil, &out[i])
		if err == nil {
			var cb func(error)
			if i == len(out)-1 {
				cb = done
			}
			err = g.cfg.Handles.Write(b, func(err error) {
				if err != nil {
					g.cfg.Log.Warn().Err(err).Str("group", g.cfg.Group).Msg("group state record not written")
				}
				if cb != nil {
					cb(err)
				}
			})
		}
		if err != nil {
			// The change stays in memory; a restart before it is written
			// again can only redeliver. This actor stops (broken) and the
			// next one replays what was written.
			g.broken = true
			g.core.saved = 0
			g.cfg.Log.Warn().Err(err).Str("group", g.cfg.Group).Msg("group state record not written")
			if done != nil {
				done(err)
			}
			return
		}
	}
}

// arm sets the timer to the earliest thing the actor must do.
func (g *group) arm() {
	if g.core == nil || g.loadErr != nil {
		return
	}
	var at time.Time
	pick := func(t time.Time) {
		if at.IsZero() || t.Before(at) {
			at = t
		}
	}
	if t, ok := g.core.nextDeadline(); ok {
		pick(t)
	}
	for _, p := range g.parked {
		pick(p.deadline)
	}
	if g.core.exists && g.core.cursor != g.core.saved {
		pick(g.savedAt.Add(checkpointAfter))
	}
	if at.IsZero() && !g.usedAt.IsZero() {
		pick(g.usedAt.Add(g.idleAfter())) // nothing else to do: look again then
	}
	if at.IsZero() || (!g.wakeAt.IsZero() && !at.Before(g.wakeAt)) {
		return
	}
	if g.timer != nil {
		g.timer.Stop()
	}
	g.wakeAt = at
	self, root := g.self, g.system.Root
	g.timer = time.AfterFunc(time.Until(at), func() { root.Send(self, tickMessage) })
}

// count calls a counting hook when it is set and n is positive.
func (g *group) count(hook func(int), n int) {
	if hook != nil && n > 0 {
		hook(n)
	}
}
