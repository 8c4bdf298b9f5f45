package broker

import (
	"context"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/auth"
	"github.com/getfelix/felix-go/cachefront"
	"github.com/getfelix/felix-go/groups"
	"github.com/getfelix/felix-go/readfront"
	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/streamfront"
	"github.com/getfelix/felix-go/streams"
	"github.com/getfelix/felix-go/wire"
)

// A connection's calls other than publishing and subscribing live in the
// packages of their concern: stream administration in streamfront,
// consumer groups in groups, caches in cachefront, range reads, time
// lookups and commit watches in readfront. Each package's session makes a
// connection's calls of service.Session and service.Caches, which conn
// embeds (streamCalls, groupCalls, cacheCalls, readCalls), checked and
// resolved through the connection's own lookups (connLookups). The groups
// supervisor, spawned here, serves each group's actor. A cache watch, a
// subscription, is broker's (cachewatch.go).

// The calls conn embeds, named apart: embedded fields take their type's
// name.
type (
	streamCalls = streamfront.Session
	groupCalls  = groups.Session
	cacheCalls  = cachefront.Session
	readCalls   = readfront.Session
)

// groupsSupervisorProps builds the groups supervisor's props.
func (b *Broker) groupsSupervisorProps(created func(*actors.Mailbox)) *actor.Props {
	return groups.SupervisorProps(func(ref *groups.Ref, cfg groups.Config) {
		b.dir.Add(ref.PID, actors.KindGroup, ref.Mailbox, map[string]string{
			"stream": cfg.Scope.String(), "group": cfg.Group, "shard": fmt.Sprint(cfg.Shard),
		})
	}, created)
}

// newGroupFront makes the groups' front once their supervisor stands.
func (b *Broker) newGroupFront() *groups.Front {
	return groups.NewFront(groups.FrontConfig{
		Root: b.system.Root, Supervisor: b.groups,
		Limits: groups.Limits{
			Visibility: b.cfg.GroupVisibilityTimeout, MaxVisibility: b.cfg.GroupMaxVisibility,
			MaxAttempts: b.cfg.GroupMaxAttempts, MaxInFlight: b.cfg.GroupMaxInFlight,
		},
		QueueDepth: b.cfg.GroupQueueDepth, MaxWait: b.cfg.GroupMaxWait,
		ServesReplicated: b.member.GroupLive,
		Metrics:          b.groupMetrics, Log: b.log,
	})
}

// newStreamFront makes the stream administration's front.
func (b *Broker) newStreamFront() *streamfront.Front {
	return streamfront.New(streamfront.Config{ReplicasFor: b.member.ReplicasFor})
}

// newCacheFront makes the caches' front.
func (b *Broker) newCacheFront() *cachefront.Front {
	return cachefront.New(cachefront.Config{
		Root: b.system.Root, ReplicasFor: b.member.ReplicasFor,
		AllowPublish: b.tenants.AllowPublish, PublishWait: b.cfg.PublishQueueWaitTimeout,
	})
}

// connLookups lends a connection's checks and lookups to the calls that
// live in the packages of their concern (streamfront.Conn, groups.Conn,
// cachefront.Conn, readfront.Conn).
type connLookups struct{ c *conn }

func (l connLookups) Authorize(action auth.Action, scope wire.Scope) error {
	return l.c.authorize(action, scope)
}

func (l connLookups) AuthorizeBy(scope wire.Scope, check func(*auth.Principal) error) error {
	return l.c.authorizeBy(scope, check)
}

func (l connLookups) Principal() *auth.Principal { return l.c.principal.Load() }

// Registry asks the registry and returns its definition answer.
func (l connLookups) Registry(ctx context.Context, msg any) (streams.Def, error) {
	res, err := actors.Request[*streams.StreamResult](actors.Detached(ctx), l.c.b.system.Root, l.c.b.registry, msg, requestTimeout)
	if err != nil {
		return streams.Def{}, err
	}
	return res.Def, res.Err
}

func (l connLookups) List(ctx context.Context, tenant, namespace string) ([]streams.Def, error) {
	res, err := actors.Request[*streams.StreamListResult](actors.Detached(ctx), l.c.b.system.Root, l.c.b.registry, &streams.ListStreams{Tenant: tenant, Namespace: namespace}, requestTimeout)
	if err == nil {
		err = res.Err
	}
	if err != nil {
		return nil, err
	}
	return res.Defs, nil
}

func (l connLookups) Shard(ctx context.Context, scope wire.Scope, n uint32) (*streams.ShardRef, error) {
	return l.c.shard(ctx, scope, n)
}

func (l connLookups) Def(ctx context.Context, scope wire.Scope) (streams.Def, error) {
	return l.c.cachedStream(ctx, scope, false)
}

func (l connLookups) Forget(scope wire.Scope) { l.c.forgetStream(scope) }

func (l connLookups) DeleteStateOf(ctx context.Context, scope wire.Scope) error {
	return l.c.DeleteStateOf(ctx, scope)
}

func (l connLookups) ConfirmRead(ctx context.Context, ref *streams.ShardRef, followerLag time.Duration) (*streams.ReadConfirmed, error) {
	return l.c.confirmRead(ctx, ref, followerLag)
}

// confirmRead asks a replicated shard whether a read that starts now may
// read its log (streams.ConfirmRead): its leader answers once raft
// confirmed its leadership and it applied everything committed before the
// read began, so the read sees every acknowledged record; a follower
// refuses not_leader naming the leader, unless followerLag asks for a
// follower read. Any other shard's log is only ever its committed state:
// it answers at once, without asking.
func (c *conn) confirmRead(ctx context.Context, ref *streams.ShardRef, followerLag time.Duration) (*streams.ReadConfirmed, error) {
	if !ref.Replicated {
		return &streams.ReadConfirmed{}, nil
	}
	return actors.Request[*streams.ReadConfirmed](actors.Detached(ctx), c.b.system.Root, ref.PID, &streams.ConfirmRead{FollowerMaxLag: followerLag}, requestTimeout)
}

var (
	_ service.Caches        = (*conn)(nil)
	_ service.CommitWatcher = (*conn)(nil)
)
