package transport

import (
	"context"
	"time"

	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/wire"
)

// The conversions between felix/1 messages and the service's domain types.
// Each request handler converts, calls the session, and converts back.

func scopeOf(tenant, namespace, stream string) wire.Scope {
	return wire.Scope{Tenant: tenant, Namespace: namespace, Stream: stream}
}

func subscribeRequest(m *wire.Subscribe) (*service.Subscribe, error) {
	req := &service.Subscribe{Scope: m.Scope(), Shard: m.Shard, QueueCapacity: m.QueueCapacity, Offset: m.StartOffset}
	switch m.Start {
	case "", "latest":
		req.Start = service.StartLatest
	case "earliest":
		req.Start = service.StartEarliest
	case "offset":
		req.Start = service.StartOffset
	default:
		return nil, wire.NewError(wire.CodeInvalidRequest, "start %q is not latest, earliest or offset", m.Start)
	}
	return req, nil
}

// maxReplicas caps the replication factor read off the wire before it
// becomes an int; the broker refuses anything above its members anyway.
const maxReplicas = 64

func createStream(ctx context.Context, s service.Session, m *wire.StreamCreate) (wire.Message, error) {
	// The longest age a time.Duration holds, about 292 years. Past it the
	// conversion wraps: 18446744073710 ms became 0.45 ms and retention
	// deleted the stream's records. For ever is 0, not a big
	// number.
	const maxRetentionAgeMS = int64(^uint64(0)>>1) / int64(time.Millisecond)
	if m.RetentionAgeMS < 0 || m.RetentionAgeMS > maxRetentionAgeMS {
		return nil, wire.NewError(wire.CodeInvalidRequest,
			"retention_age_ms must be 0 to %d (about 292 years); 0 keeps everything; got %d", maxRetentionAgeMS, m.RetentionAgeMS)
	}
	if m.RetentionBytes < 0 {
		return nil, wire.NewError(wire.CodeInvalidRequest,
			"retention_bytes must be 0 to %d; 0 keeps everything; got %d", int64(^uint64(0)>>1), m.RetentionBytes)
	}
	info, err := s.CreateStream(ctx, &service.StreamSpec{
		Scope: scopeOf(m.Tenant, m.Namespace, m.Stream), Shards: m.Shards, Durable: m.Durable, Routing: m.Routing,
		RetentionBytes: m.RetentionBytes, RetentionAge: time.Duration(m.RetentionAgeMS) * time.Millisecond,
		Replicas: int(min(m.Replicas, maxReplicas)), LogAppendTime: m.LogAppendTime,
		Compression: m.Compression,
	})
	if err != nil {
		return nil, err
	}
	return streamInfo(m.RequestID, info), nil
}

func getStream(ctx context.Context, s service.Session, m *wire.StreamGet) (wire.Message, error) {
	info, err := s.Stream(ctx, scopeOf(m.Tenant, m.Namespace, m.Stream))
	if err != nil {
		return nil, err
	}
	return streamInfo(m.RequestID, info), nil
}

func listStreams(ctx context.Context, s service.Session, m *wire.StreamList) (wire.Message, error) {
	if err := wire.ValidateName("tenant", m.Tenant); err != nil {
		return nil, err
	}
	infos, err := s.Streams(ctx, m.Tenant, m.Namespace)
	if err != nil {
		return nil, err
	}
	out := &wire.StreamInfos{RequestID: m.RequestID, Streams: make([]wire.StreamInfo, 0, len(infos))}
	for i := range infos {
		out.Streams = append(out.Streams, *streamInfo(0, &infos[i]))
	}
	return out, nil
}

func streamInfo(requestID uint64, d *service.StreamInfo) *wire.StreamInfo {
	return &wire.StreamInfo{
		RequestID: requestID,
		Tenant:    d.Scope.Tenant, Namespace: d.Scope.Namespace, Stream: d.Scope.Stream,
		Shards: d.Shards, Durable: d.Durable, Routing: d.Routing,
		RetentionBytes: d.RetentionBytes, RetentionAgeMS: d.RetentionAge.Milliseconds(),
		Replicas: uint32(max(d.Replicas, 0)), LogAppendTime: d.LogAppendTime, Compression: d.Compression, Implicit: d.Implicit, CreatedAtMS: d.CreatedAt.UnixMilli(),
	}
}

func readStream(ctx context.Context, s service.Session, m *wire.StreamRead) (wire.Message, error) {
	page, err := s.Read(ctx, &service.Read{
		Scope: scopeOf(m.Tenant, m.Namespace, m.Stream), Shard: m.Shard, From: m.From, End: m.End,
		MaxRecords: int(m.MaxRecords), MaxBytes: int(m.MaxBytes),
		FollowerMaxLag: time.Duration(m.FollowerMaxLagMS) * time.Millisecond,
	})
	if err != nil {
		return nil, err
	}
	out := &wire.StreamRecords{RequestID: m.RequestID, NextOffset: page.Next, Committed: page.Committed, Follower: page.Follower, Records: make([]wire.StreamRecord, 0, len(page.Records))}
	for _, r := range page.Records {
		wr := wire.StreamRecord{Offset: r.Offset, TimeMS: r.Time.UnixMilli(), Payload: r.Value, Key: r.Key}
		for _, h := range r.Headers {
			wr.Headers = append(wr.Headers, wire.StreamHeader{Key: h.Key, Value: h.Value})
		}
		out.Records = append(out.Records, wr)
	}
	return out, nil
}

func offsetForTime(ctx context.Context, s service.Session, m *wire.OffsetForTime) (wire.Message, error) {
	off, err := s.OffsetForTime(ctx, scopeOf(m.Tenant, m.Namespace, m.Stream), m.Shard, time.UnixMilli(m.TimeMS))
	if err != nil {
		return nil, err
	}
	return &wire.TimeOffset{RequestID: m.RequestID, Offset: off}, nil
}

func initProducer(ctx context.Context, s service.Session, m *wire.ProducerInit) (wire.Message, error) {
	id, err := s.InitProducer(ctx)
	if err != nil {
		return nil, err
	}
	return &wire.ProducerInitOK{RequestID: m.RequestID, ProducerID: id}, nil
}

func shardOwners(ctx context.Context, s service.Session, m *wire.ShardOwners) (wire.Message, error) {
	top, err := s.ShardOwners(ctx, scopeOf(m.Tenant, m.Namespace, m.Stream))
	if err != nil {
		return nil, err
	}
	return &wire.ShardOwnersView{
		RequestID: m.RequestID, Shards: top.Shards, Routing: top.Routing, Durable: top.Durable, Owners: top.Owners,
	}, nil
}

// clientError is err as the client may see it: a *wire.Error (anything
// else is internal), without its owner unless the client negotiated
// FeatureRedirect (redirect). A client that did not offer it must never
// find an owner in an answer, least of all the ack flag it cannot parse.
func clientError(err error, redirect bool) *wire.Error {
	e := wire.AsError(err)
	if e.Owner == nil || redirect {
		return e
	}
	plain := *e
	plain.Owner = nil
	return &plain
}

// errorMsg is e as the answer to request requestID, its owner included.
func errorMsg(requestID uint64, e *wire.Error) *wire.ErrorMsg {
	return &wire.ErrorMsg{RequestID: requestID, Code: e.Code, Retry: e.Retry, Message: e.Message, Owner: e.Owner}
}
