package groups

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/auth"
	"github.com/getfelix/felix-go/metrics"
	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/streams"
	"github.com/getfelix/felix-go/wire"
)

// The front is the consumer groups' side of service.Session, on the
// client's goroutines: it checks names, rights (group.consume for polls
// and settlements, group.manage for the rest) and limits, resolves the
// group actor of (stream, group, shard) through the supervisor (handing it
// the data shard's log and the state shard's when it has to spawn one),
// and posts the request into the actor's bounded mailbox.

// Front is what every connection's group calls share: one per broker.
type Front struct {
	cfg FrontConfig
}

// FrontConfig is what a Front needs of the broker that assembles it.
type FrontConfig struct {
	// Root sends the requests; Supervisor is the groups supervisor
	// (SupervisorProps).
	Root       *actor.RootContext
	Supervisor *actor.PID
	// Limits are every group actor's; Limits.MaxDeadLetters defaults to
	// 100,000 per group and shard.
	Limits Limits
	// QueueDepth bounds each group actor's mailbox (group_queue_depth).
	QueueDepth int
	// MaxWait bounds a parked poll (group_max_wait_ms).
	MaxWait time.Duration
	// ServesReplicated says whether this member serves the groups of a
	// replicated state stream's shard, and returns what tells a group
	// actor it still does; nil on a single broker.
	ServesReplicated func(ctx context.Context, state streams.Def, shard uint32) (func() error, error)
	Metrics          *metrics.GroupMetrics
	Log              zerolog.Logger
}

// NewFront makes the groups' front over cfg.
func NewFront(cfg FrontConfig) *Front {
	if cfg.Limits.MaxDeadLetters == 0 {
		cfg.Limits.MaxDeadLetters = defaultMaxDeadLetters
	}
	return &Front{cfg: cfg}
}

// Conn is what a connection lends its group calls: its principal's check
// and its lookups, so a group call is checked and resolved as every other
// call of that connection is.
type Conn interface {
	// Authorize checks the connection's principal for action on scope.
	Authorize(action auth.Action, scope wire.Scope) error
	// Registry asks the streams registry msg and returns its definition.
	Registry(ctx context.Context, msg any) (streams.Def, error)
	// Shard returns shard n of scope as served here.
	Shard(ctx context.Context, scope wire.Scope, n uint32) (*streams.ShardRef, error)
}

// Session is one connection's consumer-group calls of service.Session; the
// broker's connection embeds it.
type Session struct {
	f *Front
	c Conn
}

// Session returns c's group calls.
func (f *Front) Session(c Conn) Session { return Session{f: f, c: c} }

// defaultMaxDeadLetters bounds each group's dead letters per shard.
const defaultMaxDeadLetters = 100_000

// groupStateWait bounds how long a group actor waits for room in its
// state shard's mailbox before a state record counts as not written.
const groupStateWait = 100 * time.Millisecond

// requestTimeout bounds an answer from the supervisor or a group actor,
// beyond the wait a request asks for.
const requestTimeout = 5 * time.Second

// maxPage bounds the dead letters one call lists or names, as a range
// read's records.
const maxPage = 10_000

// stateScope is the internal stream keeping scope's groups' state.
func stateScope(scope wire.Scope) (wire.Scope, error) {
	s := scope
	s.Stream = wire.GroupStreamPrefix + scope.Stream
	if len(s.Stream) > wire.MaxNameLen {
		return s, wire.NewError(wire.CodeInvalidRequest, "stream %s: consumer groups need a stream name of at most %d bytes", scope, wire.MaxNameLen-len(wire.GroupStreamPrefix))
	}
	return s, nil
}

// checkGroup runs the boundary's checks on a group request.
func (s Session) checkGroup(scope wire.Scope, group string, action auth.Action) error {
	if err := scope.Validate(); err != nil {
		return err
	}
	if err := wire.ValidateGroupName(group); err != nil {
		return err
	}
	return s.c.Authorize(action, scope)
}

// AuthorizeGroups implements service.Session. The group.manage right
// also lets a client see the groups it may change.
func (s Session) AuthorizeGroups(scope wire.Scope, manage bool) error {
	if err := scope.Validate(); err != nil {
		return err
	}
	err := s.c.Authorize(auth.ActionGroupManage, scope)
	if err != nil && !manage && errors.Is(err, wire.ErrForbidden) {
		err = s.c.Authorize(auth.ActionGroupConsume, scope)
	}
	return err
}

// groupStream returns the definition of a stream groups may use: it
// exists (it is never created here) and is durable.
func (s Session) groupStream(ctx context.Context, scope wire.Scope) (streams.Def, error) {
	def, err := s.c.Registry(ctx, &streams.GetStream{Scope: scope})
	if err != nil {
		return def, err
	}
	if !def.Durable {
		return def, wire.NewError(wire.CodeInvalidRequest, "stream %s is in memory; consumer groups need a durable stream (felix stream create --durable)", scope)
	}
	return def, nil
}

// groupRef returns the actor serving (scope, group, shard): the groups
// supervisor's, spawned with the shards' logs when none serves.
func (s Session) groupRef(ctx context.Context, def streams.Def, group string, shard uint32) (*Ref, error) {
	if shard >= def.Shards {
		return nil, wire.NewError(wire.CodeNotFound, "stream %s has %d shard(s); there is no shard %d", def.Scope, def.Shards, shard)
	}
	handles, err := s.groupHandles(ctx, def, shard)
	if err != nil {
		return nil, err
	}
	ensure := &Ensure{Config: s.f.groupConfig(def.Scope, group, shard, handles), Depth: s.f.cfg.QueueDepth}
	ref, err := actors.Request[*Ref](actors.Detached(ctx), s.f.cfg.Root, s.f.cfg.Supervisor, ensure, requestTimeout)
	if err == nil {
		err = ref.Err
	}
	if err != nil {
		return nil, err
	}
	return ref, nil
}

// groupConfig is a group actor's configuration.
func (f *Front) groupConfig(scope wire.Scope, group string, shard uint32, h Handles) Config {
	m, t := f.cfg.Metrics, scope.Tenant
	return Config{
		Scope: scope, Group: group, Shard: shard, Handles: h, Limits: f.cfg.Limits,
		Hooks: Hooks{
			Polled: func(n int) { m.Handed.WithLabelValues(t).Add(float64(n)) },
			Settled: func(op service.SettleOp, n int) {
				m.Settled.WithLabelValues(t, settleOpName(op)).Add(float64(n))
			},
			Redelivered:  func(n int) { m.Redeliveries.WithLabelValues(t).Add(float64(n)) },
			DeadLettered: func(n int) { m.DeadLetters.WithLabelValues(t).Add(float64(n)) },
			Lag: func(lag uint64) {
				m.Lag.WithLabelValues(t, scope.Namespace, scope.Stream, group, fmt.Sprint(shard)).Set(float64(lag))
			},
		},
		Log: f.cfg.Log.With().Str("stream", scope.String()).Str("group", group).Uint32("shard", shard).Logger(),
	}
}

func settleOpName(op service.SettleOp) string {
	switch op {
	case service.SettleAck:
		return wire.SettleAck
	case service.SettleNack:
		return wire.SettleNack
	case service.SettleExtend:
		return wire.SettleExtend
	}
	return wire.SettleDeadLetter
}

// groupHandles resolves the logs a group actor works with: the state
// shard's of the internal stream (made on first use with the data
// stream's shards, routing and replicas), and the data shard's. The state
// shard comes first: where it is served decides where the group runs
// (member/groupcluster.go).
func (s Session) groupHandles(ctx context.Context, def streams.Def, shard uint32) (Handles, error) {
	var h Handles
	ss, err := stateScope(def.Scope)
	if err != nil {
		return h, err
	}
	state := streams.Def{Scope: ss, Shards: def.Shards, Routing: def.Routing, Durable: true, Replicas: def.Replicas}
	if _, err := s.c.Registry(ctx, &streams.CreateStream{Def: state}); err != nil {
		return h, err
	}
	stateRef, err := s.c.Shard(ctx, ss, shard)
	if err != nil {
		return h, err
	}
	if h.State, err = stateRef.Log(ctx); err != nil {
		return h, err
	}
	var serving func() error
	if state.Replicated() {
		if serving, err = s.f.cfg.ServesReplicated(ctx, state, shard); err != nil {
			return h, err
		}
	}
	dataRef, err := s.c.Shard(ctx, def.Scope, shard)
	if err != nil {
		return h, err
	}
	if h.Data, err = dataRef.Log(ctx); err != nil {
		return h, err
	}
	h.WatchData = func(w streams.CommitWaker, after uint64) func() {
		return dataRef.WatchCommitted(w, after)
	}
	h.Live = func() error {
		if dataRef.Mailbox.IsClosed() || stateRef.Mailbox.IsClosed() {
			return wire.NewError(wire.CodeShardUnavailable, "the shards of %s shard %d stopped (the stream was deleted, or a shard stopped); try again", def.Scope, shard)
		}
		if serving != nil {
			return serving()
		}
		return nil
	}
	h.Write = func(rec []byte, done func(error)) error {
		// A deposed actor writes nothing: its successor's state stands.
		if err := h.Live(); err != nil {
			return err
		}
		p := &streams.Publish{Payloads: [][]byte{rec}, Done: func(r streams.PublishResult) { done(r.Err) }}
		switch stateRef.Mailbox.TryPost(p, groupStateWait) {
		case actors.Posted, actors.PostedEvicting:
			return nil
		case actors.Closed:
			return wire.NewError(wire.CodeShardUnavailable, "the state shard of %s stopped", ss)
		}
		return wire.NewError(wire.CodeOverloaded, "the state shard of %s is full", ss)
	}
	return h, nil
}

// post asks the group actor serving (scope, group, shard) msg, and waits
// up to wait (plus the request timeout) for its answer of type T. A full
// mailbox answers overloaded at once (group_queue_full); an actor that
// stopped with the request queued did nothing of it, and the next look
// finds or spawns its successor. ctx's end ends the wait (not Detached):
// the caller leaves nothing to undo, and a parked poll whose caller left
// is dropped by the actor (Poll.Gone).
func post[T any](ctx context.Context, s Session, scope wire.Scope, group string, shard uint32, msg any, wait time.Duration) (T, error) {
	var zero T
	for attempt := 0; ; attempt++ {
		ref, err := s.liveGroup(ctx, scope, group, shard)
		if err != nil {
			return zero, err
		}
		res, err := actors.Request[T](ctx, s.f.cfg.Root, ref.PID, msg, wait+requestTimeout)
		switch {
		case err == nil:
			return res, nil
		case ctx.Err() != nil:
			return zero, ctx.Err()
		case errors.Is(err, ErrActorStopped) || errors.Is(err, actor.ErrDeadLetter):
			if attempt < 2 {
				continue
			}
			return zero, wire.NewError(wire.CodeShardUnavailable, "group %s of %s shard %d is not available", group, scope, shard)
		case errors.Is(err, actor.ErrTimeout):
			return zero, wire.NewError(wire.CodeShardUnavailable, "group %s of %s shard %d did not answer", group, scope, shard)
		}
		return zero, err
	}
}

// liveGroup returns the actor serving the group, as the groups supervisor
// knows it, without asking the registry: a live one's stream exists and
// is durable, since deleting a stream closes its log and a group actor
// whose log fails stops. When none serves, it resolves the stream and
// has one spawned.
func (s Session) liveGroup(ctx context.Context, scope wire.Scope, group string, shard uint32) (*Ref, error) {
	ref, err := actors.Request[*Ref](actors.Detached(ctx), s.f.cfg.Root, s.f.cfg.Supervisor, &Find{Scope: scope, Group: group, Shard: shard}, requestTimeout)
	if err != nil {
		return nil, err
	}
	if ref.PID != nil {
		return ref, nil
	}
	def, err := s.groupStream(ctx, scope)
	if err != nil {
		return nil, err
	}
	return s.groupRef(ctx, def, group, shard)
}

// PollGroup implements service.Session.
func (s Session) PollGroup(ctx context.Context, req *service.GroupPoll) ([]service.GroupRecord, error) {
	if err := s.checkGroup(req.Scope, req.Group, auth.ActionGroupConsume); err != nil {
		return nil, err
	}
	if err := s.f.checkPoll(req); err != nil {
		return nil, err
	}
	s.f.cfg.Metrics.Polls.WithLabelValues(req.Scope.Tenant).Inc()
	msg := &Poll{
		Max: req.MaxRecords, MaxBytes: req.MaxBytes, Wait: req.Wait, Visibility: req.Visibility,
		Consumer: req.Consumer, Gone: ctx.Done(),
	}
	res, err := post[*PollResult](ctx, s, req.Scope, req.Group, req.Shard, msg, req.Wait)
	if err != nil {
		return nil, err
	}
	return res.Records, res.Err
}

// checkPoll refuses absurd limits and fills in the defaults.
func (f *Front) checkPoll(req *service.GroupPoll) error {
	switch {
	case req.MaxRecords < 0 || req.MaxRecords > wire.GroupMaxPollRecords:
		return wire.NewError(wire.CodeInvalidRequest, "max_records must be 1 to %d, got %d", wire.GroupMaxPollRecords, req.MaxRecords)
	case req.MaxBytes < 0 || req.MaxBytes > wire.GroupMaxPollBytes:
		return wire.NewError(wire.CodeInvalidRequest, "max_bytes must be at most %d, got %d", wire.GroupMaxPollBytes, req.MaxBytes)
	case req.Wait < 0 || req.Wait > f.cfg.MaxWait:
		return wire.NewError(wire.CodeInvalidRequest, "wait_ms must be at most group_max_wait_ms (%d), got %d", f.cfg.MaxWait.Milliseconds(), req.Wait.Milliseconds())
	case req.Visibility < 0 || req.Visibility > f.cfg.Limits.MaxVisibility:
		return wire.NewError(wire.CodeInvalidRequest, "visibility_ms must be at most group_max_visibility_ms (%d), got %d", f.cfg.Limits.MaxVisibility.Milliseconds(), req.Visibility.Milliseconds())
	}
	if req.MaxRecords == 0 {
		req.MaxRecords = 100
	}
	if req.MaxBytes == 0 {
		req.MaxBytes = wire.GroupMaxPollBytes
	}
	if req.Visibility == 0 {
		req.Visibility = f.cfg.Limits.Visibility
	}
	return nil
}

// SettleGroup implements service.Session.
func (s Session) SettleGroup(ctx context.Context, req *service.GroupSettle) ([]service.ClaimFailure, error) {
	if err := s.checkGroup(req.Scope, req.Group, auth.ActionGroupConsume); err != nil {
		return nil, err
	}
	switch {
	case len(req.Claims) == 0 || len(req.Claims) > wire.GroupMaxClaims:
		return nil, wire.NewError(wire.CodeInvalidRequest, "a settlement names 1 to %d claims, got %d", wire.GroupMaxClaims, len(req.Claims))
	case req.Op < service.SettleAck || req.Op > service.SettleDeadLetter:
		return nil, wire.NewError(wire.CodeInvalidRequest, "unknown settlement %d", req.Op)
	case req.Delay < 0 || req.Delay > s.f.cfg.Limits.MaxVisibility:
		return nil, wire.NewError(wire.CodeInvalidRequest, "delay_ms must be at most group_max_visibility_ms (%d)", s.f.cfg.Limits.MaxVisibility.Milliseconds())
	case req.Op == service.SettleExtend && (req.Visibility <= 0 || req.Visibility > s.f.cfg.Limits.MaxVisibility):
		return nil, wire.NewError(wire.CodeInvalidRequest, "an extension's visibility_ms must be 1 to group_max_visibility_ms (%d)", s.f.cfg.Limits.MaxVisibility.Milliseconds())
	}
	msg := &Settle{Op: req.Op, Claims: req.Claims, Delay: req.Delay, Visibility: req.Visibility}
	res, err := post[*SettleResult](ctx, s, req.Scope, req.Group, req.Shard, msg, 0)
	if err != nil {
		return nil, err
	}
	return res.Failures, res.Err
}

// admin runs one administrative operation on one shard of a group. One
// queued as the actor stopped (a delete just before, an idle stop) did
// nothing there: post gives it to the actor's successor.
func (s Session) admin(ctx context.Context, def streams.Def, group string, shard uint32, msg *Admin) (AdminResult, error) {
	if shard >= def.Shards {
		return AdminResult{}, wire.NewError(wire.CodeNotFound, "stream %s has %d shard(s); there is no shard %d", def.Scope, def.Shards, shard)
	}
	res, err := post[*AdminResult](ctx, s, def.Scope, group, shard, msg, 0)
	if err != nil {
		return AdminResult{}, err
	}
	return *res, res.Err
}

// manage checks a group administration request and resolves its stream.
func (s Session) manage(ctx context.Context, scope wire.Scope, group string) (streams.Def, error) {
	if err := s.checkGroup(scope, group, auth.ActionGroupManage); err != nil {
		return streams.Def{}, err
	}
	return s.groupStream(ctx, scope)
}

// manageShards is manage for a request about every shard, or about only
// some (a cluster client asking each shard's member): the shards, in
// order.
func (s Session) manageShards(ctx context.Context, scope wire.Scope, group string, only []uint32) (streams.Def, []uint32, error) {
	def, err := s.manage(ctx, scope, group)
	if err != nil {
		return def, nil, err
	}
	if len(only) == 0 {
		all := make([]uint32, def.Shards)
		for i := range all {
			all[i] = uint32(i)
		}
		return def, all, nil
	}
	if len(only) > int(def.Shards) {
		return def, nil, wire.NewError(wire.CodeInvalidRequest, "only_shards names %d shards; stream %s has %d", len(only), scope, def.Shards)
	}
	out := slices.Clone(only)
	slices.Sort(out)
	out = slices.Compact(out)
	if last := out[len(out)-1]; last >= def.Shards {
		return def, nil, wire.NewError(wire.CodeNotFound, "stream %s has %d shard(s); there is no shard %d", scope, def.Shards, last)
	}
	return def, out, nil
}

// CreateGroup implements service.Session.
func (s Session) CreateGroup(ctx context.Context, scope wire.Scope, group string, start service.GroupStart) (*service.GroupInfo, error) {
	return s.placeGroup(ctx, scope, group, start, OpCreate)
}

// SeekGroup implements service.Session.
func (s Session) SeekGroup(ctx context.Context, scope wire.Scope, group string, start service.GroupStart) (*service.GroupInfo, error) {
	return s.placeGroup(ctx, scope, group, start, OpSeek)
}

// placeGroup creates or seeks a group on each shard start applies to: an
// offset names one shard, the other starts every shard.
func (s Session) placeGroup(ctx context.Context, scope wire.Scope, group string, start service.GroupStart, op AdminOp) (*service.GroupInfo, error) {
	def, shards, err := s.manageShards(ctx, scope, group, start.Only)
	if err != nil {
		return nil, err
	}
	if start.Kind == service.GroupStartOffset && start.Shard >= def.Shards {
		return nil, wire.NewError(wire.CodeNotFound, "stream %s has %d shard(s); there is no shard %d", scope, def.Shards, start.Shard)
	}
	info := &service.GroupInfo{Scope: scope, Group: group}
	for _, shard := range shards {
		var off uint64
		if start.Kind == service.GroupStartOffset && shard != start.Shard {
			if op == OpSeek {
				continue
			}
			off, err = s.startOffset(ctx, def, shard, service.GroupStart{Kind: service.GroupStartEarliest})
		} else {
			off, err = s.startOffset(ctx, def, shard, start)
		}
		if err != nil {
			return nil, err
		}
		res, err := s.admin(ctx, def, group, shard, &Admin{Op: op, Offset: off})
		if err != nil {
			return nil, err
		}
		info.Shards = append(info.Shards, res.Info)
	}
	return info, nil
}

// startOffset resolves a start on one shard; an offset past the committed
// end or below what retention kept is refused.
func (s Session) startOffset(ctx context.Context, def streams.Def, shard uint32, start service.GroupStart) (uint64, error) {
	ref, err := s.c.Shard(ctx, def.Scope, shard)
	if err != nil {
		return 0, err
	}
	log, err := ref.Log(ctx)
	if err != nil {
		return 0, err
	}
	committed, oldest := log.Committed(), log.StartOffset()
	switch start.Kind {
	case service.GroupStartEarliest:
		return oldest, nil
	case service.GroupStartOffset:
		switch {
		case start.Offset > committed:
			return 0, wire.NewError(wire.CodeInvalidRequest, "in_future: offset %d is past the committed end %d of %s shard %d", start.Offset, committed, def.Scope, shard)
		case start.Offset < oldest:
			return 0, wire.NewError(wire.CodeNotFound, "too_old: offset %d is below what retention kept; the oldest is %d", start.Offset, oldest)
		}
		return start.Offset, nil
	case service.GroupStartTime:
		off, err := log.OffsetForTime(start.Time)
		if err != nil {
			return 0, wire.WrapError(wire.CodeStorage, err, "find time in %s shard %d", def.Scope, shard)
		}
		return min(off, committed), nil
	}
	return committed, nil
}

// DescribeGroup implements service.Session.
func (s Session) DescribeGroup(ctx context.Context, scope wire.Scope, group string) (*service.GroupInfo, error) {
	return s.DescribeGroupOn(ctx, scope, group, nil)
}

// DescribeGroupOn implements service.Session.
func (s Session) DescribeGroupOn(ctx context.Context, scope wire.Scope, group string, only []uint32) (*service.GroupInfo, error) {
	def, shards, err := s.manageShards(ctx, scope, group, only)
	if err != nil {
		return nil, err
	}
	info := &service.GroupInfo{Scope: scope, Group: group}
	for _, shard := range shards {
		res, err := s.admin(ctx, def, group, shard, &Admin{Op: OpDescribe})
		if err != nil {
			return nil, err
		}
		info.Shards = append(info.Shards, res.Info)
	}
	return info, nil
}

// DeleteGroup implements service.Session.
func (s Session) DeleteGroup(ctx context.Context, scope wire.Scope, group string) error {
	return s.DeleteGroupOn(ctx, scope, group, nil)
}

// DeleteGroupOn implements service.Session.
func (s Session) DeleteGroupOn(ctx context.Context, scope wire.Scope, group string, only []uint32) error {
	def, shards, err := s.manageShards(ctx, scope, group, only)
	if err != nil {
		return err
	}
	for _, shard := range shards {
		if _, err := s.admin(ctx, def, group, shard, &Admin{Op: OpDelete}); err != nil {
			return err
		}
	}
	return nil
}

// GroupDeadLetters implements service.Session.
func (s Session) GroupDeadLetters(ctx context.Context, ref service.GroupRef, from uint64, max int) (*service.DeadLetters, error) {
	def, err := s.manage(ctx, ref.Scope, ref.Group)
	if err != nil {
		return nil, err
	}
	if max <= 0 || max > maxPage {
		max = maxPage
	}
	res, err := s.admin(ctx, def, ref.Group, ref.Shard, &Admin{Op: OpDeadLetters, From: from, Max: max})
	if err != nil {
		return nil, err
	}
	return &res.Dead, nil
}

// RedriveGroup implements service.Session.
func (s Session) RedriveGroup(ctx context.Context, ref service.GroupRef, offsets []uint64, all bool) (int, error) {
	return s.changeDead(ctx, ref, offsets, all, OpRedrive)
}

// DiscardDeadLetters implements service.Session.
func (s Session) DiscardDeadLetters(ctx context.Context, ref service.GroupRef, offsets []uint64, all bool) (int, error) {
	return s.changeDead(ctx, ref, offsets, all, OpDiscard)
}

func (s Session) changeDead(ctx context.Context, ref service.GroupRef, offsets []uint64, all bool, op AdminOp) (int, error) {
	def, err := s.manage(ctx, ref.Scope, ref.Group)
	if err != nil {
		return 0, err
	}
	if !all && (len(offsets) == 0 || len(offsets) > maxPage) {
		return 0, wire.NewError(wire.CodeInvalidRequest, "name 1 to %d dead letters, or all", maxPage)
	}
	res, err := s.admin(ctx, def, ref.Group, ref.Shard, &Admin{Op: op, Offsets: offsets, All: all})
	return res.Count, err
}

// Groups implements service.Session: the groups whose state records on
// shard 0 say they exist (every group has a part on every shard).
func (s Session) Groups(ctx context.Context, scope wire.Scope) ([]string, error) {
	if err := scope.Validate(); err != nil {
		return nil, err
	}
	if err := s.c.Authorize(auth.ActionGroupManage, scope); err != nil {
		return nil, err
	}
	if _, err := s.groupStream(ctx, scope); err != nil {
		return nil, err
	}
	ss, err := stateScope(scope)
	if err != nil {
		return nil, err
	}
	if _, err := s.c.Registry(ctx, &streams.GetStream{Scope: ss}); errors.Is(err, wire.ErrNotFound) {
		return []string{}, nil // no group was ever made
	} else if err != nil {
		return nil, err
	}
	ref, err := s.c.Shard(ctx, ss, 0)
	if err != nil {
		return nil, err
	}
	log, err := ref.Log(ctx)
	if err != nil {
		return nil, err
	}
	names, err := Names(log)
	if err != nil {
		return nil, wire.WrapError(wire.CodeStorage, err, "read the groups of %s", scope)
	}
	return names, nil
}

// deleteGroupState deletes a deleted stream's groups with it: their state
// stream, if any. A stream of that name made later starts with no
func (s Session) DeleteStateOf(ctx context.Context, scope wire.Scope) error {
	ss, err := stateScope(scope)
	if err != nil {
		return nil // no groups are possible on such a name
	}
	_, err = s.c.Registry(ctx, &streams.DeleteStream{Scope: ss})
	if errors.Is(err, wire.ErrNotFound) {
		return nil
	}
	return err
}
