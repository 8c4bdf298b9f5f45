package broker

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/auth"
	"github.com/getfelix/felix-go/authgate"
	"github.com/getfelix/felix-go/routing"
	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/streams"
	"github.com/getfelix/felix-go/wire"
)

// streamInfo describes a definition to the service's callers.
func streamInfo(d streams.Def) *service.StreamInfo {
	return &service.StreamInfo{
		StreamSpec: service.StreamSpec{
			Scope: d.Scope, Shards: d.Shards, Durable: d.Durable, Routing: d.Routing.String(),
			RetentionBytes: d.RetentionBytes, RetentionAge: d.RetentionAge, Replicas: max(d.Replicas, 1),
			LogAppendTime: d.LogAppendTime, Compression: d.Compression,
		},
		Implicit: d.Implicit, CreatedAt: d.CreatedAt, Cache: d.Cache != nil,
	}
}

// registryRequest asks the registry and returns its definition answer.
func (c *conn) registryRequest(ctx context.Context, msg any) (streams.Def, error) {
	res, err := actors.Request[*streams.StreamResult](actors.Detached(ctx), c.b.system.Root, c.b.registry, msg, requestTimeout)
	if err != nil {
		return streams.Def{}, err
	}
	return res.Def, res.Err
}

// CreateStream implements service.Session.
func (c *conn) CreateStream(ctx context.Context, spec *service.StreamSpec) (*service.StreamInfo, error) {
	def, err := c.streamDef(spec)
	if err != nil {
		return nil, err
	}
	d, err := c.registryRequest(ctx, &streams.CreateStream{Def: def})
	if err != nil {
		return nil, err
	}
	c.forgetStream(def.Scope)
	return streamInfo(d), nil
}

// CheckCreateStream implements service.Session: the registry makes its
// checks and stores nothing.
func (c *conn) CheckCreateStream(ctx context.Context, spec *service.StreamSpec) error {
	def, err := c.streamDef(spec)
	if err != nil {
		return err
	}
	_, err = c.registryRequest(ctx, &streams.CreateStream{Def: def, DryRun: true})
	return err
}

// streamDef checks a create request at the boundary (the right, the
// routing, the replicas) and makes its definition.
func (c *conn) streamDef(spec *service.StreamSpec) (streams.Def, error) {
	if err := spec.Scope.Validate(); err != nil {
		return streams.Def{}, err
	}
	if err := c.authorize(auth.ActionStreamManage, spec.Scope); err != nil {
		return streams.Def{}, err
	}
	routing, err := routing.Parse(spec.Routing)
	if err != nil {
		return streams.Def{}, wire.NewError(wire.CodeInvalidRequest, "%v", err)
	}
	if spec.RetentionBytes < 0 || spec.RetentionAge < 0 {
		return streams.Def{}, wire.NewError(wire.CodeInvalidRequest, "retention cannot be negative")
	}
	if spec.LogAppendTime && !spec.Durable {
		return streams.Def{}, wire.NewError(wire.CodeInvalidRequest, "log append time is a durable stream's setting: an in-memory stream keeps no record times of its own")
	}
	if spec.Compression != "" && (!spec.Durable || spec.Compression != service.CompressionNone && !slices.Contains(service.Codecs, spec.Compression)) {
		return streams.Def{}, wire.NewError(wire.CodeInvalidRequest, "compression %q: a durable stream's Kafka fetch codec is one of %s, or %s (without one, each batch is fetched in its producer's codec)", spec.Compression, strings.Join(service.Codecs, ", "), service.CompressionNone)
	}
	replicas, err := c.b.member.ReplicasFor(spec)
	if err != nil {
		return streams.Def{}, err
	}
	return streams.Def{
		Scope: spec.Scope, Shards: spec.Shards, Routing: routing, Durable: spec.Durable,
		RetentionBytes: spec.RetentionBytes, RetentionAge: spec.RetentionAge, Replicas: replicas,
		LogAppendTime: spec.LogAppendTime, Compression: spec.Compression,
	}, nil
}

// Stream implements service.Session.
func (c *conn) Stream(ctx context.Context, scope wire.Scope) (*service.StreamInfo, error) {
	if err := scope.Validate(); err != nil {
		return nil, err
	}
	// Any stream action on it lets a client see a stream's definition.
	if err := c.authorize(auth.ActionStreamManage, scope); err != nil && (!errors.Is(err, wire.ErrForbidden) || !authgate.MayList(c.principal.Load(), scope)) {
		return nil, err
	}
	d, err := c.registryRequest(ctx, &streams.GetStream{Scope: scope})
	if err != nil {
		return nil, err
	}
	return streamInfo(d), nil
}

// Streams implements service.Session.
func (c *conn) Streams(ctx context.Context, tenant, namespace string) ([]service.StreamInfo, error) {
	if err := wire.ValidateName("tenant", tenant); err != nil {
		return nil, err
	}
	p := c.principal.Load()
	if p.Expired(time.Now()) || tenant != p.Tenant {
		// Expired, or another tenant: the same refusal any operation gets.
		return nil, c.authorize(auth.ActionStreamManage, wire.Scope{Tenant: tenant, Namespace: "*", Stream: "*"})
	}
	res, err := actors.Request[*streams.StreamListResult](actors.Detached(ctx), c.b.system.Root, c.b.registry, &streams.ListStreams{Tenant: tenant, Namespace: namespace}, requestTimeout)
	if err == nil {
		err = res.Err
	}
	if err != nil {
		return nil, err
	}
	out := make([]service.StreamInfo, 0, len(res.Defs))
	for _, d := range res.Defs {
		if authgate.MayList(p, d.Scope) && !wire.IsReservedStream(d.Scope.Stream) {
			out = append(out, *streamInfo(d))
		}
	}
	return out, nil
}

// DeleteStream implements service.Session.
func (c *conn) DeleteStream(ctx context.Context, scope wire.Scope) error {
	if err := scope.Validate(); err != nil {
		return err
	}
	if err := c.authorize(auth.ActionStreamManage, scope); err != nil {
		return err
	}
	_, err := c.registryRequest(ctx, &streams.DeleteStream{Scope: scope})
	c.forgetStream(scope)
	if err == nil {
		err = c.DeleteStateOf(ctx, scope)
	}
	return err
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
