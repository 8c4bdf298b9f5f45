package broker

import (
	"context"
	"time"

	"github.com/getfelix/felix-go/metadata"
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
	r, err := streams.ParseRouting(m.Routing)
	if err != nil {
		return streams.Def{}, err
	}
	return streams.Def{
		Scope:  wire.Scope{Tenant: m.Tenant, Namespace: m.Namespace, Stream: m.Stream},
		Shards: m.Shards, Routing: r, Durable: m.Durable,
		RetentionBytes: m.RetentionBytes, RetentionAge: m.RetentionAge, CreatedAt: m.CreatedAt,
	}, nil
}

// streamInfo is a definition on the wire.
func streamInfo(requestID uint64, d streams.Def) *wire.StreamInfo {
	return &wire.StreamInfo{
		RequestID: requestID,
		Tenant:    d.Scope.Tenant, Namespace: d.Scope.Namespace, Stream: d.Scope.Stream,
		Shards: d.Shards, Durable: d.Durable, Routing: d.Routing.String(),
		RetentionBytes: d.RetentionBytes, RetentionAgeMS: d.RetentionAge.Milliseconds(),
		Implicit: d.Implicit, CreatedAtMS: d.CreatedAt.UnixMilli(),
	}
}

// CreateStream implements transport.Session.
func (s *session) CreateStream(req *wire.StreamCreate) (*wire.StreamInfo, error) {
	routing, err := streams.ParseRouting(req.Routing)
	if err != nil {
		return nil, wire.NewError(wire.CodeInvalidRequest, "%v", err)
	}
	if req.RetentionBytes < 0 || req.RetentionAgeMS < 0 {
		return nil, wire.NewError(wire.CodeInvalidRequest, "retention cannot be negative")
	}
	def := streams.Def{
		Scope:  wire.Scope{Tenant: req.Tenant, Namespace: req.Namespace, Stream: req.Stream},
		Shards: req.Shards, Routing: routing, Durable: req.Durable,
		RetentionBytes: req.RetentionBytes, RetentionAge: time.Duration(req.RetentionAgeMS) * time.Millisecond,
	}
	res, err := streams.Request[*streams.StreamResult](s.b.system.Root, s.b.registry, &streams.CreateStream{Def: def}, requestTimeout)
	if err != nil {
		return nil, err
	}
	if res.Err != nil {
		return nil, res.Err
	}
	s.forgetStream(def.Scope)
	return streamInfo(req.RequestID, res.Def), nil
}

// GetStream implements transport.Session.
func (s *session) GetStream(req *wire.StreamGet) (*wire.StreamInfo, error) {
	scope := wire.Scope{Tenant: req.Tenant, Namespace: req.Namespace, Stream: req.Stream}
	res, err := streams.Request[*streams.StreamResult](s.b.system.Root, s.b.registry, &streams.GetStream{Scope: scope}, requestTimeout)
	if err != nil {
		return nil, err
	}
	if res.Err != nil {
		return nil, res.Err
	}
	return streamInfo(req.RequestID, res.Def), nil
}

// ListStreams implements transport.Session.
func (s *session) ListStreams(req *wire.StreamList) (*wire.StreamInfos, error) {
	if err := wire.ValidateName("tenant", req.Tenant); err != nil {
		return nil, err
	}
	res, err := streams.Request[*streams.StreamListResult](s.b.system.Root, s.b.registry, &streams.ListStreams{Tenant: req.Tenant, Namespace: req.Namespace}, requestTimeout)
	if err != nil {
		return nil, err
	}
	out := &wire.StreamInfos{RequestID: req.RequestID, Streams: []wire.StreamInfo{}}
	for _, d := range res.Defs {
		out.Streams = append(out.Streams, *streamInfo(0, d))
	}
	return out, nil
}

// DeleteStream implements transport.Session.
func (s *session) DeleteStream(req *wire.StreamDelete) error {
	scope := wire.Scope{Tenant: req.Tenant, Namespace: req.Namespace, Stream: req.Stream}
	res, err := streams.Request[*streams.StreamResult](s.b.system.Root, s.b.registry, &streams.DeleteStream{Scope: scope}, requestTimeout)
	if err != nil {
		return err
	}
	s.forgetStream(scope)
	return res.Err
}

// Range-read bounds: at most this many records and about this many bytes
// per page, whatever the client asks (the reference's caps).
const (
	maxReadRecords = 10000
	maxReadBytes   = 4 << 20
)

// ReadStream implements transport.Session: one page of committed records of
// a durable shard. It reads the shard's log directly, from this connection's
// goroutine: a read never waits and registers nothing with the shard.
func (s *session) ReadStream(req *wire.StreamRead) (*wire.StreamRecords, error) {
	scope := wire.Scope{Tenant: req.Tenant, Namespace: req.Namespace, Stream: req.Stream}
	if err := scope.Validate(); err != nil {
		return nil, err
	}
	// A read never creates a stream: an unknown one is not_found.
	res, err := streams.Request[*streams.StreamResult](s.b.system.Root, s.b.registry, &streams.GetStream{Scope: scope}, requestTimeout)
	if err != nil {
		return nil, err
	}
	if res.Err != nil {
		return nil, res.Err
	}
	def := res.Def
	if !def.Durable {
		return nil, wire.NewError(wire.CodeInvalidRequest, "stream %s is in memory; range reads need a durable stream (felix stream create --durable)", scope)
	}
	ref, err := s.shard(scope, req.Shard)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	log, err := ref.Log(ctx)
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
	out := &wire.StreamRecords{RequestID: req.RequestID, NextOffset: req.From, Committed: committed, Records: []wire.StreamRecord{}}
	if req.From >= end {
		return out, nil
	}
	maxRecords := int(min(uint64(maxReadRecords), end-req.From))
	if req.MaxRecords > 0 {
		maxRecords = min(maxRecords, int(req.MaxRecords))
	}
	maxBytes := maxReadBytes
	if req.MaxBytes > 0 {
		maxBytes = min(maxBytes, int(req.MaxBytes))
	}
	page, err := log.Read(req.From, maxRecords, maxBytes)
	if err != nil {
		return nil, wire.NewError(wire.CodeStorage, "read %s shard %d at %d: %v", scope, req.Shard, req.From, err)
	}
	for _, r := range page.Records {
		out.Records = append(out.Records, wire.StreamRecord{Offset: r.Offset, TimeMS: r.Time.UnixMilli(), Payload: r.Value})
	}
	out.NextOffset = page.Next
	return out, nil
}
