// Package streamfront is a connection's stream administration, on the
// client's goroutine: service.Session's CreateStream, CheckCreateStream,
// Stream, Streams and DeleteStream. It checks each request at the boundary
// (names, the stream.manage right, a definition's settings) and asks the
// streams registry, the one owner of definitions; a create settles its
// replica count as the broker's member does (Config.ReplicasFor), and a
// delete takes the stream's consumer groups' state with it (Conn's
// DeleteStateOf). Any stream action on a stream lets a client see it,
// described or listed; the broker's own streams are never listed.
package streamfront

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/getfelix/felix-go/auth"
	"github.com/getfelix/felix-go/authgate"
	"github.com/getfelix/felix-go/routing"
	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/streams"
	"github.com/getfelix/felix-go/wire"
)

// Front is what every connection's stream administration shares: one per
// broker.
type Front struct {
	cfg Config
}

// Config is what a Front needs of the broker that assembles it.
type Config struct {
	// ReplicasFor settles a new stream's replica count (1 on a single
	// broker), or refuses the count asked for.
	ReplicasFor func(*service.StreamSpec) (int, error)
}

// New makes the stream administration's front over cfg.
func New(cfg Config) *Front { return &Front{cfg: cfg} }

// Conn is what a connection lends its stream administration: its
// principal and its checks and lookups.
type Conn interface {
	// Authorize checks the connection's principal for action on scope;
	// Principal is that principal.
	Authorize(action auth.Action, scope wire.Scope) error
	Principal() *auth.Principal
	// Registry asks the streams registry msg and returns its definition;
	// List asks it for tenant's definitions in namespace ("" for all).
	Registry(ctx context.Context, msg any) (streams.Def, error)
	List(ctx context.Context, tenant, namespace string) ([]streams.Def, error)
	// Forget drops what the connection learnt of scope.
	Forget(scope wire.Scope)
	// DeleteStateOf deletes a deleted stream's consumer groups' state.
	DeleteStateOf(ctx context.Context, scope wire.Scope) error
}

// Session is one connection's stream administration of service.Session;
// the broker's connection embeds it.
type Session struct {
	f *Front
	c Conn
}

// Session returns c's stream administration.
func (f *Front) Session(c Conn) Session { return Session{f: f, c: c} }

// info describes a definition to the service's callers.
func info(d streams.Def) *service.StreamInfo {
	return &service.StreamInfo{
		StreamSpec: service.StreamSpec{
			Scope: d.Scope, Shards: d.Shards, Durable: d.Durable, Routing: d.Routing.String(),
			RetentionBytes: d.RetentionBytes, RetentionAge: d.RetentionAge, Replicas: max(d.Replicas, 1),
			LogAppendTime: d.LogAppendTime, Compression: d.Compression,
		},
		Implicit: d.Implicit, CreatedAt: d.CreatedAt, Cache: d.Cache != nil,
	}
}

// CreateStream implements service.Session.
func (s Session) CreateStream(ctx context.Context, spec *service.StreamSpec) (*service.StreamInfo, error) {
	def, err := s.streamDef(spec)
	if err != nil {
		return nil, err
	}
	d, err := s.c.Registry(ctx, &streams.CreateStream{Def: def})
	if err != nil {
		return nil, err
	}
	s.c.Forget(def.Scope)
	return info(d), nil
}

// CheckCreateStream implements service.Session: the registry makes its
// checks and stores nothing.
func (s Session) CheckCreateStream(ctx context.Context, spec *service.StreamSpec) error {
	def, err := s.streamDef(spec)
	if err != nil {
		return err
	}
	_, err = s.c.Registry(ctx, &streams.CreateStream{Def: def, DryRun: true})
	return err
}

// streamDef checks a create request at the boundary (the right, the
// routing, the replicas) and makes its definition.
func (s Session) streamDef(spec *service.StreamSpec) (streams.Def, error) {
	if err := spec.Scope.Validate(); err != nil {
		return streams.Def{}, err
	}
	if err := s.c.Authorize(auth.ActionStreamManage, spec.Scope); err != nil {
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
	replicas, err := s.f.cfg.ReplicasFor(spec)
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
func (s Session) Stream(ctx context.Context, scope wire.Scope) (*service.StreamInfo, error) {
	if err := scope.Validate(); err != nil {
		return nil, err
	}
	// Any stream action on it lets a client see a stream's definition.
	if err := s.c.Authorize(auth.ActionStreamManage, scope); err != nil && (!errors.Is(err, wire.ErrForbidden) || !authgate.MayList(s.c.Principal(), scope)) {
		return nil, err
	}
	d, err := s.c.Registry(ctx, &streams.GetStream{Scope: scope})
	if err != nil {
		return nil, err
	}
	return info(d), nil
}

// Streams implements service.Session.
func (s Session) Streams(ctx context.Context, tenant, namespace string) ([]service.StreamInfo, error) {
	if err := wire.ValidateName("tenant", tenant); err != nil {
		return nil, err
	}
	p := s.c.Principal()
	if p.Expired(time.Now()) || tenant != p.Tenant {
		// Expired, or another tenant: the same refusal any operation gets.
		return nil, s.c.Authorize(auth.ActionStreamManage, wire.Scope{Tenant: tenant, Namespace: "*", Stream: "*"})
	}
	defs, err := s.c.List(ctx, tenant, namespace)
	if err != nil {
		return nil, err
	}
	out := make([]service.StreamInfo, 0, len(defs))
	for _, d := range defs {
		if authgate.MayList(p, d.Scope) && !wire.IsReservedStream(d.Scope.Stream) {
			out = append(out, *info(d))
		}
	}
	return out, nil
}

// DeleteStream implements service.Session.
func (s Session) DeleteStream(ctx context.Context, scope wire.Scope) error {
	if err := scope.Validate(); err != nil {
		return err
	}
	if err := s.c.Authorize(auth.ActionStreamManage, scope); err != nil {
		return err
	}
	_, err := s.c.Registry(ctx, &streams.DeleteStream{Scope: scope})
	s.c.Forget(scope)
	if err == nil {
		err = s.c.DeleteStateOf(ctx, scope)
	}
	return err
}
