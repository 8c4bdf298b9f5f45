package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/auth"
	"github.com/getfelix/felix-go/cluster"
	"github.com/getfelix/felix-go/groups"
	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/streams"
	"github.com/getfelix/felix-go/wire"
)

// Consumer groups (issue #15): the service methods, on the client's
// goroutines. They check names, permissions (group.consume for polls and
// settlements, group.manage for the rest) and limits, resolve the group
// actor of (stream, group, shard) through the groups supervisor (handing it
// the data shard's log and the state shard's when it has to spawn one),
// and post the request into the actor's bounded mailbox.

// groupKey names a group actor in the broker's cache of them.
type groupKey struct {
	scope wire.Scope
	group string
	shard uint32
}

// groupMaxDeadLetters bounds each group's dead letters per shard.
const groupMaxDeadLetters = 100_000

// groupStateWait bounds how long a group actor waits for room in its
// state shard's mailbox before a state record counts as not written.
const groupStateWait = 100 * time.Millisecond

// groupsSupervisorProps builds the groups supervisor's props.
func (b *Broker) groupsSupervisorProps(created func(*actors.Mailbox)) *actor.Props {
	return groups.SupervisorProps(func(ref *groups.Ref, cfg groups.Config) {
		b.dir.Add(ref.PID, actors.KindGroup, ref.Mailbox, map[string]string{
			"stream": cfg.Scope.String(), "group": cfg.Group, "shard": fmt.Sprint(cfg.Shard),
		})
	}, created)
}

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
func (c *conn) checkGroup(scope wire.Scope, group string, action auth.Action) error {
	if err := scope.Validate(); err != nil {
		return err
	}
	if err := wire.ValidateGroupName(group); err != nil {
		return err
	}
	return c.authorize(action, scope)
}

// groupStream returns the definition of a stream groups may use: it
// exists (it is never created here) and is durable.
func (c *conn) groupStream(ctx context.Context, scope wire.Scope) (streams.Def, error) {
	def, err := c.registryRequest(ctx, &streams.GetStream{Scope: scope})
	if err != nil {
		return def, err
	}
	if !def.Durable {
		return def, wire.NewError(wire.CodeInvalidRequest, "stream %s is in memory; consumer groups need a durable stream (felix stream create --durable)", scope)
	}
	return def, nil
}

// groupRef returns the group actor of (scope, group, shard), spawning it
// when there is none (or the cached one stopped).
func (c *conn) groupRef(ctx context.Context, def streams.Def, group string, shard uint32) (*groups.Ref, error) {
	if shard >= def.Shards {
		return nil, wire.NewError(wire.CodeNotFound, "stream %s has %d shard(s); there is no shard %d", def.Scope, def.Shards, shard)
	}
	key := groupKey{scope: def.Scope, group: group, shard: shard}
	if ref, ok := c.b.cachedGroup(key); ok {
		return ref, nil
	}
	handles, err := c.groupHandles(ctx, def, shard)
	if err != nil {
		return nil, err
	}
	ensure := &groups.Ensure{Config: c.b.groupConfig(def.Scope, group, shard, handles), Depth: c.b.cfg.GroupQueueDepth}
	var ref *groups.Ref
	for attempt := 0; ; attempt++ {
		ref, err = ask[*groups.Ref](ctx, c, c.b.groups, ensure)
		if err == nil {
			err = ref.Err
		}
		// A stopped actor's name is taken until its supervisor saw it go:
		// a moment.
		if err == nil || attempt == 20 || !errors.Is(err, wire.ErrUnavailable) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err != nil {
		return nil, err
	}
	c.b.groupRefs.Store(key, &groupEntry{ref: ref, live: handles.Live})
	return ref, nil
}

// groupEntry is a group actor in the broker's cache, with what says
// whether it may still serve (its Handles.Live).
type groupEntry struct {
	ref  *groups.Ref
	live func() error
}

// cachedGroup returns the cached actor of key while it lives and may
// serve; one that stopped is forgotten, one that may no longer serve (its
// member was deposed, perhaps to lead again in a later term) is stopped,
// and waited for so that the supervisor does not hand it out again, and
// forgotten: the caller resolves the group anew.
func (b *Broker) cachedGroup(key groupKey) (*groups.Ref, bool) {
	v, ok := b.groupRefs.Load(key)
	if !ok {
		return nil, false
	}
	e := v.(*groupEntry)
	if !e.ref.Mailbox.IsClosed() {
		if e.live == nil || e.live() == nil {
			return e.ref, true
		}
		// Quick: a deposed actor's stop writes nothing, so it waits for
		// no write.
		_ = b.system.Root.StopFuture(e.ref.PID).Wait()
	}
	b.groupRefs.CompareAndDelete(key, v)
	return nil, false
}

// groupConfig is a group actor's configuration.
func (b *Broker) groupConfig(scope wire.Scope, group string, shard uint32, h groups.Handles) groups.Config {
	m, t := b.groupMetrics, scope.Tenant
	return groups.Config{
		Scope: scope, Group: group, Shard: shard, Handles: h,
		Limits: groups.Limits{
			Visibility: b.cfg.GroupVisibilityTimeout, MaxVisibility: b.cfg.GroupMaxVisibility,
			MaxAttempts: b.cfg.GroupMaxAttempts, MaxInFlight: b.cfg.GroupMaxInFlight, MaxDeadLetters: groupMaxDeadLetters,
		},
		Hooks: groups.Hooks{
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
		Log: b.log.With().Str("stream", scope.String()).Str("group", group).Uint32("shard", shard).Logger(),
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
// (groupcluster.go).
func (c *conn) groupHandles(ctx context.Context, def streams.Def, shard uint32) (groups.Handles, error) {
	var h groups.Handles
	ss, err := stateScope(def.Scope)
	if err != nil {
		return h, err
	}
	state := streams.Def{Scope: ss, Shards: def.Shards, Routing: def.Routing, Durable: true, Replicas: def.Replicas}
	if _, err := c.registryRequest(ctx, &streams.CreateStream{Def: state}); err != nil {
		return h, err
	}
	stateRef, err := c.shard(ctx, ss, shard)
	if err != nil {
		return h, err
	}
	if h.State, err = stateRef.Log(ctx); err != nil {
		return h, err
	}
	var serving func() error
	if state.Replicated() {
		v, term, err := c.groupTerm(ctx, state, shard)
		if err != nil {
			return h, err
		}
		serving = c.b.groupLive(v, term, cluster.ShardKey{Scope: ss, Shard: shard}, state.Shards)
	}
	dataRef, err := c.shard(ctx, def.Scope, shard)
	if err != nil {
		return h, err
	}
	if h.Data, err = dataRef.Log(ctx); err != nil {
		return h, err
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

// post hands a request to the group actor of (scope, group, shard) and
// waits up to wait (plus the request timeout) for its answer on reply.
func post[T any](ctx context.Context, c *conn, scope wire.Scope, group string, shard uint32, msg any, reply <-chan T, wait time.Duration) (T, error) {
	var zero T
	for attempt := 0; ; attempt++ {
		ref, err := c.liveGroup(ctx, scope, group, shard)
		if err != nil {
			return zero, err
		}
		switch ref.Mailbox.TryPost(msg, 0) {
		case actors.Posted, actors.PostedEvicting:
		case actors.Closed:
			if attempt < 2 {
				continue // stopped: the next look spawns a new one
			}
			return zero, wire.NewError(wire.CodeShardUnavailable, "group %s of %s shard %d is not available", group, scope, shard)
		default:
			return zero, wire.NewError(wire.CodeOverloaded, "group_queue_full: group %s of %s shard %d has group_queue_depth requests queued", group, scope, shard)
		}
		t := time.NewTimer(wait + requestTimeout)
		defer t.Stop()
		select {
		case res := <-reply:
			return res, nil
		case <-ctx.Done():
			return zero, ctx.Err()
		case <-t.C:
			return zero, wire.NewError(wire.CodeShardUnavailable, "group %s of %s shard %d did not answer", group, scope, shard)
		}
	}
}

// liveGroup returns the cached group actor while it lives, without asking
// the registry: a live one's stream exists and is durable, since deleting
// a stream closes its log and a group actor whose log fails stops. Else it
// resolves the stream and the actor again.
func (c *conn) liveGroup(ctx context.Context, scope wire.Scope, group string, shard uint32) (*groups.Ref, error) {
	if ref, ok := c.b.cachedGroup(groupKey{scope: scope, group: group, shard: shard}); ok {
		return ref, nil
	}
	def, err := c.groupStream(ctx, scope)
	if err != nil {
		return nil, err
	}
	return c.groupRef(ctx, def, group, shard)
}

// PollGroup implements service.Session.
func (c *conn) PollGroup(ctx context.Context, req *service.GroupPoll) ([]service.GroupRecord, error) {
	if err := c.checkGroup(req.Scope, req.Group, auth.ActionGroupConsume); err != nil {
		return nil, err
	}
	if err := c.b.checkPoll(req); err != nil {
		return nil, err
	}
	c.b.groupMetrics.Polls.WithLabelValues(req.Scope.Tenant).Inc()
	msg := &groups.Poll{
		Max: req.MaxRecords, MaxBytes: req.MaxBytes, Wait: req.Wait, Visibility: req.Visibility,
		Consumer: req.Consumer, Reply: make(chan groups.PollResult, 1), Gone: ctx.Done(),
	}
	res, err := post(ctx, c, req.Scope, req.Group, req.Shard, msg, msg.Reply, req.Wait)
	if err != nil {
		return nil, err
	}
	return res.Records, res.Err
}

// checkPoll refuses absurd limits and fills in the defaults.
func (b *Broker) checkPoll(req *service.GroupPoll) error {
	switch {
	case req.MaxRecords < 0 || req.MaxRecords > wire.GroupMaxPollRecords:
		return wire.NewError(wire.CodeInvalidRequest, "max_records must be 1 to %d, got %d", wire.GroupMaxPollRecords, req.MaxRecords)
	case req.MaxBytes < 0 || req.MaxBytes > wire.GroupMaxPollBytes:
		return wire.NewError(wire.CodeInvalidRequest, "max_bytes must be at most %d, got %d", wire.GroupMaxPollBytes, req.MaxBytes)
	case req.Wait < 0 || req.Wait > b.cfg.GroupMaxWait:
		return wire.NewError(wire.CodeInvalidRequest, "wait_ms must be at most group_max_wait_ms (%d), got %d", b.cfg.GroupMaxWait.Milliseconds(), req.Wait.Milliseconds())
	case req.Visibility < 0 || req.Visibility > b.cfg.GroupMaxVisibility:
		return wire.NewError(wire.CodeInvalidRequest, "visibility_ms must be at most group_max_visibility_ms (%d), got %d", b.cfg.GroupMaxVisibility.Milliseconds(), req.Visibility.Milliseconds())
	}
	if req.MaxRecords == 0 {
		req.MaxRecords = 100
	}
	if req.MaxBytes == 0 {
		req.MaxBytes = wire.GroupMaxPollBytes
	}
	if req.Visibility == 0 {
		req.Visibility = b.cfg.GroupVisibilityTimeout
	}
	return nil
}

// SettleGroup implements service.Session.
func (c *conn) SettleGroup(ctx context.Context, req *service.GroupSettle) ([]service.ClaimFailure, error) {
	if err := c.checkGroup(req.Scope, req.Group, auth.ActionGroupConsume); err != nil {
		return nil, err
	}
	switch {
	case len(req.Claims) == 0 || len(req.Claims) > wire.GroupMaxClaims:
		return nil, wire.NewError(wire.CodeInvalidRequest, "a settlement names 1 to %d claims, got %d", wire.GroupMaxClaims, len(req.Claims))
	case req.Op < service.SettleAck || req.Op > service.SettleDeadLetter:
		return nil, wire.NewError(wire.CodeInvalidRequest, "unknown settlement %d", req.Op)
	case req.Delay < 0 || req.Delay > c.b.cfg.GroupMaxVisibility:
		return nil, wire.NewError(wire.CodeInvalidRequest, "delay_ms must be at most group_max_visibility_ms (%d)", c.b.cfg.GroupMaxVisibility.Milliseconds())
	case req.Op == service.SettleExtend && (req.Visibility <= 0 || req.Visibility > c.b.cfg.GroupMaxVisibility):
		return nil, wire.NewError(wire.CodeInvalidRequest, "an extension's visibility_ms must be 1 to group_max_visibility_ms (%d)", c.b.cfg.GroupMaxVisibility.Milliseconds())
	}
	msg := &groups.Settle{Op: req.Op, Claims: req.Claims, Delay: req.Delay, Visibility: req.Visibility, Reply: make(chan groups.SettleResult, 1)}
	res, err := post(ctx, c, req.Scope, req.Group, req.Shard, msg, msg.Reply, 0)
	if err != nil {
		return nil, err
	}
	return res.Failures, res.Err
}

// admin runs one administrative operation on one shard of a group.
func (c *conn) admin(ctx context.Context, def streams.Def, group string, shard uint32, msg *groups.Admin) (groups.AdminResult, error) {
	msg.Reply = make(chan groups.AdminResult, 1)
	if shard >= def.Shards {
		return groups.AdminResult{}, wire.NewError(wire.CodeNotFound, "stream %s has %d shard(s); there is no shard %d", def.Scope, def.Shards, shard)
	}
	res, err := post(ctx, c, def.Scope, group, shard, msg, msg.Reply, 0)
	if err == nil && res.Err == groups.ErrActorStopped {
		// Queued as the actor stopped (a delete just before, an idle
		// stop): nothing was done; a new actor takes it.
		msg.Reply = make(chan groups.AdminResult, 1)
		res, err = post(ctx, c, def.Scope, group, shard, msg, msg.Reply, 0)
	}
	if err == nil {
		err = res.Err
	}
	return res, err
}

// manage checks a group administration request and resolves its stream.
func (c *conn) manage(ctx context.Context, scope wire.Scope, group string) (streams.Def, error) {
	if err := c.checkGroup(scope, group, auth.ActionGroupManage); err != nil {
		return streams.Def{}, err
	}
	return c.groupStream(ctx, scope)
}

// manageShards is manage for a request about every shard, or about only
// some (a cluster client asking each shard's member): the shards, in
// order.
func (c *conn) manageShards(ctx context.Context, scope wire.Scope, group string, only []uint32) (streams.Def, []uint32, error) {
	def, err := c.manage(ctx, scope, group)
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
func (c *conn) CreateGroup(ctx context.Context, scope wire.Scope, group string, start service.GroupStart) (*service.GroupInfo, error) {
	return c.placeGroup(ctx, scope, group, start, groups.OpCreate)
}

// SeekGroup implements service.Session.
func (c *conn) SeekGroup(ctx context.Context, scope wire.Scope, group string, start service.GroupStart) (*service.GroupInfo, error) {
	return c.placeGroup(ctx, scope, group, start, groups.OpSeek)
}

// placeGroup creates or seeks a group on each shard start applies to: an
// offset names one shard, the other starts every shard.
func (c *conn) placeGroup(ctx context.Context, scope wire.Scope, group string, start service.GroupStart, op groups.AdminOp) (*service.GroupInfo, error) {
	def, shards, err := c.manageShards(ctx, scope, group, start.Only)
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
			if op == groups.OpSeek {
				continue
			}
			off, err = c.startOffset(ctx, def, shard, service.GroupStart{Kind: service.GroupStartEarliest})
		} else {
			off, err = c.startOffset(ctx, def, shard, start)
		}
		if err != nil {
			return nil, err
		}
		res, err := c.admin(ctx, def, group, shard, &groups.Admin{Op: op, Offset: off})
		if err != nil {
			return nil, err
		}
		info.Shards = append(info.Shards, res.Info)
	}
	return info, nil
}

// startOffset resolves a start on one shard; an offset past the committed
// end or below what retention kept is refused.
func (c *conn) startOffset(ctx context.Context, def streams.Def, shard uint32, start service.GroupStart) (uint64, error) {
	ref, err := c.shard(ctx, def.Scope, shard)
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
func (c *conn) DescribeGroup(ctx context.Context, scope wire.Scope, group string) (*service.GroupInfo, error) {
	return c.DescribeGroupOn(ctx, scope, group, nil)
}

// DescribeGroupOn implements service.Session.
func (c *conn) DescribeGroupOn(ctx context.Context, scope wire.Scope, group string, only []uint32) (*service.GroupInfo, error) {
	def, shards, err := c.manageShards(ctx, scope, group, only)
	if err != nil {
		return nil, err
	}
	info := &service.GroupInfo{Scope: scope, Group: group}
	for _, shard := range shards {
		res, err := c.admin(ctx, def, group, shard, &groups.Admin{Op: groups.OpDescribe})
		if err != nil {
			return nil, err
		}
		info.Shards = append(info.Shards, res.Info)
	}
	return info, nil
}

// DeleteGroup implements service.Session.
func (c *conn) DeleteGroup(ctx context.Context, scope wire.Scope, group string) error {
	return c.DeleteGroupOn(ctx, scope, group, nil)
}

// DeleteGroupOn implements service.Session.
func (c *conn) DeleteGroupOn(ctx context.Context, scope wire.Scope, group string, only []uint32) error {
	def, shards, err := c.manageShards(ctx, scope, group, only)
	if err != nil {
		return err
	}
	for _, shard := range shards {
		if _, err := c.admin(ctx, def, group, shard, &groups.Admin{Op: groups.OpDelete}); err != nil {
			return err
		}
	}
	return nil
}

// GroupDeadLetters implements service.Session.
func (c *conn) GroupDeadLetters(ctx context.Context, ref service.GroupRef, from uint64, max int) (*service.DeadLetters, error) {
	def, err := c.manage(ctx, ref.Scope, ref.Group)
	if err != nil {
		return nil, err
	}
	if max <= 0 || max > maxReadRecords {
		max = maxReadRecords
	}
	res, err := c.admin(ctx, def, ref.Group, ref.Shard, &groups.Admin{Op: groups.OpDeadLetters, From: from, Max: max})
	if err != nil {
		return nil, err
	}
	return &res.Dead, nil
}

// RedriveGroup implements service.Session.
func (c *conn) RedriveGroup(ctx context.Context, ref service.GroupRef, offsets []uint64, all bool) (int, error) {
	return c.changeDead(ctx, ref, offsets, all, groups.OpRedrive)
}

// DiscardDeadLetters implements service.Session.
func (c *conn) DiscardDeadLetters(ctx context.Context, ref service.GroupRef, offsets []uint64, all bool) (int, error) {
	return c.changeDead(ctx, ref, offsets, all, groups.OpDiscard)
}

func (c *conn) changeDead(ctx context.Context, ref service.GroupRef, offsets []uint64, all bool, op groups.AdminOp) (int, error) {
	def, err := c.manage(ctx, ref.Scope, ref.Group)
	if err != nil {
		return 0, err
	}
	if !all && (len(offsets) == 0 || len(offsets) > maxReadRecords) {
		return 0, wire.NewError(wire.CodeInvalidRequest, "name 1 to %d dead letters, or all", maxReadRecords)
	}
	res, err := c.admin(ctx, def, ref.Group, ref.Shard, &groups.Admin{Op: op, Offsets: offsets, All: all})
	return res.Count, err
}

// Groups implements service.Session: the groups whose state records on
// shard 0 say they exist (every group has a part on every shard).
func (c *conn) Groups(ctx context.Context, scope wire.Scope) ([]string, error) {
	if err := scope.Validate(); err != nil {
		return nil, err
	}
	if err := c.authorize(auth.ActionGroupManage, scope); err != nil {
		return nil, err
	}
	if _, err := c.groupStream(ctx, scope); err != nil {
		return nil, err
	}
	ss, err := stateScope(scope)
	if err != nil {
		return nil, err
	}
	if _, err := c.registryRequest(ctx, &streams.GetStream{Scope: ss}); errors.Is(err, wire.ErrNotFound) {
		return []string{}, nil // no group was ever made
	} else if err != nil {
		return nil, err
	}
	ref, err := c.shard(ctx, ss, 0)
	if err != nil {
		return nil, err
	}
	log, err := ref.Log(ctx)
	if err != nil {
		return nil, err
	}
	names, err := groups.Names(log)
	if err != nil {
		return nil, wire.WrapError(wire.CodeStorage, err, "read the groups of %s", scope)
	}
	return names, nil
}

// deleteGroupState deletes a deleted stream's groups with it: their state
// stream, if any. A stream of that name made later starts with no groups.
func (c *conn) deleteGroupState(ctx context.Context, scope wire.Scope) error {
	ss, err := stateScope(scope)
	if err != nil {
		return nil // no groups are possible on such a name
	}
	_, err = c.registryRequest(ctx, &streams.DeleteStream{Scope: ss})
	if errors.Is(err, wire.ErrNotFound) {
		return nil
	}
	return err
}
