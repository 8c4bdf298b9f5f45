package broker

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/auth"
	"github.com/getfelix/felix-go/persistence"
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
	res, err := actors.Request[*streams.StreamListResult](actors.Detached(ctx), c.b.system.Root, c.b.registry, &streams.ListStreams{Tenant: tenant, Namespace: namespace}, requestTimeout)
	if err == nil {
		err = res.Err
	}
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
		err = c.DeleteStateOf(ctx, scope)
	}
	return err
}

// Range-read bounds: at most this many records and about this many bytes
// per page, whatever the client asks, so one read cannot make the broker
// hold an unbounded answer.
const (
	maxReadRecords = 10000
	maxReadBytes   = 4 << 20
)

// Read implements service.Session: one page of committed records of a
// durable shard. It reads the shard's log directly, from the caller's
// goroutine, and registers nothing with the shard; a replicated shard
// first confirms the read (confirmRead).
func (c *conn) Read(ctx context.Context, req *service.Read) (*service.Records, error) {
	scope := req.Scope
	if req.FollowerMaxLag < 0 || req.FollowerMaxLag > wire.MaxFollowerLagMS*time.Millisecond {
		return nil, wire.NewError(wire.CodeInvalidRequest, "a follower read's lag is at most %d ms", wire.MaxFollowerLagMS)
	}
	ref, log, err := c.durableLog(ctx, scope, req.Shard, "range reads")
	if err != nil {
		return nil, err
	}
	confirmed, err := c.confirmRead(ctx, ref, req.FollowerMaxLag)
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
	out := &service.Records{Next: req.From, Committed: committed, Start: start, Follower: confirmed.Follower}
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
// the caller's goroutine and registers nothing, once a replicated shard
// confirmed the read.
func (c *conn) OffsetForTime(ctx context.Context, scope wire.Scope, shard uint32, t time.Time) (uint64, error) {
	ref, log, err := c.durableLog(ctx, scope, shard, "time lookups")
	if err != nil {
		return 0, err
	}
	if _, err := c.confirmRead(ctx, ref, 0); err != nil {
		return 0, err
	}
	// Committed first: the lookup sees at least as far. An answer at or
	// past it means every committed record is older than t (records in
	// [committed, off) are older too, but not readable yet), so the answer
	// is the committed end, which a read can start from.
	committed := log.Committed()
	off, err := log.OffsetForTime(t)
	if err == nil && off < committed {
		off, err = skipOlderRecords(log, off, committed, t)
	}
	if err != nil {
		return 0, wire.WrapError(wire.CodeStorage, err, "find time %s in %s shard %d", t.UTC().Format(time.RFC3339Nano), scope, shard)
	}
	return min(off, committed), nil
}

// maxTimeScanRecords bounds the records a time lookup reads past the log's
// answer, so one lookup costs at most a few pages.
const maxTimeScanRecords = 4 * maxReadRecords

// skipOlderRecords moves a time lookup from the log's answer to the first
// record whose stored time (its producer's, else its append time) is at or
// after t. The log indexes append times, which never decrease; a record
// that kept its producer's time can be older than its append time, so the
// first records appended at or after t can still be older than t, and are
// skipped, as Kafka's lookup skips them. A record whose producer's time is
// later than its append time is found from its append time: the log has
// no index of producers' times. It reads at most maxTimeScanRecords and
// answers where it stopped.
func skipOlderRecords(log streams.Log, from, committed uint64, t time.Time) (uint64, error) {
	for read := 0; from < committed && read < maxTimeScanRecords; {
		page, err := log.Read(from, int(min(uint64(maxReadRecords), committed-from)), maxReadBytes)
		if err != nil || len(page.Records) == 0 {
			return from, err
		}
		for _, r := range page.Records {
			at := r.Time
			if a, err := persistence.DecodeRecordAttrs(r.Attrs); err == nil && !a.Time.IsZero() {
				at = a.Time
			}
			if !at.Before(t) {
				return r.Offset, nil
			}
		}
		read += len(page.Records)
		from = page.Next
	}
	return from, nil
}

// durableLog authorizes a read of scope (stream.subscribe) and returns its
// shard and the shard's log. It never creates a stream: an unknown one is
// not_found, and an in-memory one is invalid_request, naming what needs a
// durable stream (what).
func (c *conn) durableLog(ctx context.Context, scope wire.Scope, shard uint32, what string) (*streams.ShardRef, streams.Log, error) {
	if err := scope.Validate(); err != nil {
		return nil, nil, err
	}
	if err := c.authorize(auth.ActionStreamSubscribe, scope); err != nil {
		return nil, nil, err
	}
	def, err := c.registryRequest(ctx, &streams.GetStream{Scope: scope})
	if err != nil {
		return nil, nil, err
	}
	if !def.Durable {
		return nil, nil, wire.NewError(wire.CodeInvalidRequest, "stream %s is in memory; %s need a durable stream (felix stream create --durable)", scope, what)
	}
	ref, err := c.shard(ctx, scope, shard)
	if err != nil {
		return nil, nil, err
	}
	log, err := ref.Log(ctx)
	return ref, log, err
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
