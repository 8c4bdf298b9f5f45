package broker

import (
	"context"
	"errors"
	"time"

	"github.com/getfelix/felix-go/auth"
	"github.com/getfelix/felix-go/metadata"
	"github.com/getfelix/felix-go/routing"
	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/streams"
	"github.com/getfelix/felix-go/wire"
)

// defStore adapts the metadata store to what the streams registry needs.
type defStore struct{ s *metadata.Store }

func (d defStore) PutStream(def streams.Def) error    { return d.s.PutStream(toMeta(def)) }
func (d defStore) DeleteStream(def streams.Def) error { return d.s.DeleteStream(toMeta(def)) }

func toMeta(d streams.Def) metadata.StreamDef {
	return metadata.StreamDef{
		Tenant: d.Scope.Tenant, Namespace: d.Scope.Namespace, Stream: d.Scope.Stream,
		Shards: d.Shards, Durable: d.Durable, Routing: d.Routing.String(),
		RetentionBytes: d.RetentionBytes, RetentionAge: d.RetentionAge, CreatedAt: d.CreatedAt,
	}
}

func fromMeta(m metadata.StreamDef) (streams.Def, error) {
	r, err := routing.Parse(m.Routing)
	if err != nil {
		return streams.Def{}, err
	}
	return streams.Def{
		Scope:  wire.Scope{Tenant: m.Tenant, Namespace: m.Namespace, Stream: m.Stream},
		Shards: m.Shards, Routing: r, Durable: m.Durable,
		RetentionBytes: m.RetentionBytes, RetentionAge: m.RetentionAge, CreatedAt: m.CreatedAt,
	}, nil
}

// streamInfo describes a definition to the service's callers.
func streamInfo(d streams.Def) *service.StreamInfo {
	return &service.StreamInfo{
		StreamSpec: service.StreamSpec{
			Scope: d.Scope, Shards: d.Shards, Durable: d.Durable, Routing: d.Routing.String(),
			RetentionBytes: d.RetentionBytes, RetentionAge: d.RetentionAge, Replicas: max(d.Replicas, 1),
		},
		Implicit: d.Implicit, CreatedAt: d.CreatedAt,
	}
}

// registryRequest asks the registry and returns its definition answer.
func (c *conn) registryRequest(ctx context.Context, msg any) (streams.Def, error) {
	res, err := streams.Request[*streams.StreamResult](c.b.system.Root, c.b.registry, msg, c.b.wait(ctx))
	if err != nil {
		return streams.Def{}, err
	}
	return res.Def, res.Err
}

// CreateStream implements service.Session.
func (c *conn) CreateStream(ctx context.Context, spec *service.StreamSpec) (*service.StreamInfo, error) {
	if err := spec.Scope.Validate(); err != nil {
		return nil, err
	}
	if err := c.authorize(auth.ActionStreamManage, spec.Scope); err != nil {
		return nil, err
	}
	routing, err := routing.Parse(spec.Routing)
	if err != nil {
		return nil, wire.NewError(wire.CodeInvalidRequest, "%v", err)
	}
	if spec.RetentionBytes < 0 || spec.RetentionAge < 0 {
		return nil, wire.NewError(wire.CodeInvalidRequest, "retention cannot be negative")
	}
	replicas, err := c.b.replicasFor(spec)
	if err != nil {
		return nil, err
	}
	def := streams.Def{
		Scope: spec.Scope, Shards: spec.Shards, Routing: routing, Durable: spec.Durable,
		RetentionBytes: spec.RetentionBytes, RetentionAge: spec.RetentionAge, Replicas: replicas,
	}
	d, err := c.registryRequest(ctx, &streams.CreateStream{Def: def})
	if err != nil {
		return nil, err
	}
	c.forgetStream(def.Scope)
	return streamInfo(d), nil
}

// Stream implements service.Session.
func (c *conn) Stream(ctx context.Context, scope wire.Scope) (*service.StreamInfo, error) {
	if err := scope.Validate(); err != nil {
		return nil, err
	}
	// Any stream action on it lets a client see a stream's definition.
	if err := c.authorize(auth.ActionStreamManage, scope); err != nil && (!errors.Is(err, wire.ErrForbidden) || !mayList(c.principal.Load(), scope)) {
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
	res, err := streams.Request[*streams.StreamListResult](c.b.system.Root, c.b.registry, &streams.ListStreams{Tenant: tenant, Namespace: namespace}, c.b.wait(ctx))
	if err != nil {
		return nil, err
	}
	out := make([]service.StreamInfo, 0, len(res.Defs))
	for _, d := range res.Defs {
		if mayList(p, d.Scope) && !wire.IsReservedStream(d.Scope.Stream) {
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
		err = c.deleteGroupState(ctx, scope) // groups.go
	}
	return err
}

// Range-read bounds: at most this many records and about this many bytes
// per page, whatever the client asks (the reference's caps).
const (
	maxReadRecords = 10000
	maxReadBytes   = 4 << 20
)

// Read implements service.Session: one page of committed records of a
// durable shard. It reads the shard's log directly, from the caller's
// goroutine: a read never waits and registers nothing with the shard.
func (c *conn) Read(ctx context.Context, req *service.Read) (*service.Records, error) {
	scope := req.Scope
	log, err := c.durableLog(ctx, scope, req.Shard, "range reads")
	if err != nil {
		return nil, err
	}
	committed, start := log.Committed(), log.StartOffset()
	switch {
	case req.From > committed:
		return nil, wire.NewError(wire.CodeInvalidRequest, "in_future: offset %d is past the committed end %d of %s shard %d", req.From, committed, scope, req.Shard)
	case req.From < start:
		return nil, wire.NewError(wire.CodeNotFound, "too_old: offset %d is below what retention kept; the oldest is %d", req.From, start)
	}
	end := committed
	if req.End != nil && *req.End < end {
		end = *req.End
	}
	out := &service.Records{Next: req.From, Committed: committed}
	if req.From >= end {
		return out, nil
	}
	maxRecords := int(min(uint64(maxReadRecords), end-req.From))
	if req.MaxRecords > 0 {
		maxRecords = min(maxRecords, req.MaxRecords)
	}
	maxBytes := maxReadBytes
	if req.MaxBytes > 0 {
		maxBytes = min(maxBytes, req.MaxBytes)
	}
	page, err := log.Read(req.From, maxRecords, maxBytes)
	if err != nil {
		return nil, wire.WrapError(wire.CodeStorage, err, "read %s shard %d at %d", scope, req.Shard, req.From)
	}
	out.Records = make([]service.Record, len(page.Records))
	for i, r := range page.Records {
		out.Records[i] = service.Record{Offset: r.Offset, Time: r.Time, Value: r.Value}
		if err := withAttrs(&out.Records[i], r.Attrs); err != nil {
			return nil, err
		}
	}
	out.Next = page.Next
	return out, nil
}

// OffsetForTime implements service.Session: where a durable shard's
// committed records reach time t. Like Read, it asks the shard's log from
// the caller's goroutine and registers nothing.
func (c *conn) OffsetForTime(ctx context.Context, scope wire.Scope, shard uint32, t time.Time) (uint64, error) {
	log, err := c.durableLog(ctx, scope, shard, "time lookups")
	if err != nil {
		return 0, err
	}
	// Committed first: the lookup sees at least as far. An answer at or
	// past it means every committed record is older than t (records in
	// [committed, off) are older too, but not readable yet), so the answer
	// is the committed end, which a read can start from.
	committed := log.Committed()
	off, err := log.OffsetForTime(t)
	if err != nil {
		return 0, wire.WrapError(wire.CodeStorage, err, "find time %s in %s shard %d", t.UTC().Format(time.RFC3339Nano), scope, shard)
	}
	return min(off, committed), nil
}

// durableLog authorizes a read of scope (stream.subscribe) and returns the
// log of its shard. It never creates a stream: an unknown one is
// not_found, and an in-memory one is invalid_request, naming what needs a
// durable stream (what).
func (c *conn) durableLog(ctx context.Context, scope wire.Scope, shard uint32, what string) (streams.Log, error) {
	if err := scope.Validate(); err != nil {
		return nil, err
	}
	if err := c.authorize(auth.ActionStreamSubscribe, scope); err != nil {
		return nil, err
	}
	def, err := c.registryRequest(ctx, &streams.GetStream{Scope: scope})
	if err != nil {
		return nil, err
	}
	if !def.Durable {
		return nil, wire.NewError(wire.CodeInvalidRequest, "stream %s is in memory; %s need a durable stream (felix stream create --durable)", scope, what)
	}
	ref, err := c.shard(ctx, scope, shard)
	if err != nil {
		return nil, err
	}
	return ref.Log(ctx)
}
