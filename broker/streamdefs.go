package broker

import (
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
