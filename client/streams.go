package client

import (
	"context"
	"fmt"
	"time"

	"github.com/getfelix/felix-go/wire"
)

// StreamConfig is what a stream is created with.
type StreamConfig struct {
	// Shards is the shard count (default 1). A key picks the shard; no key
	// goes to shard 0.
	Shards uint32
	// Routing is "modulo" (default) or "jump".
	Routing string
	// Durable keeps the stream in the broker's log: records get offsets
	// and survive a restart.
	Durable bool
	// RetentionBytes and RetentionAge bound what a durable stream keeps.
	RetentionBytes int64
	RetentionAge   time.Duration
	// Replicas is a durable stream's replication factor in a cluster
	// (each shard a raft group over that many members); 0 takes the
	// broker's default (3 in a cluster of at least 3, else 1).
	Replicas int
	// LogAppendTime makes every record's time its append time, never a
	// Kafka producer's (Kafka's message.timestamp.type=LogAppendTime);
	// durable streams only.
	LogAppendTime bool
	// Compression is the codec Kafka consumers get fetched batches in
	// where that saves bytes (Kafka's compression.type): gzip, snappy,
	// lz4, zstd or none; "" for each batch in the codec its producer
	// sent; durable streams only.
	Compression string
}

// StreamInfo describes a stream.
type StreamInfo struct {
	Stream         Stream
	Shards         uint32
	Durable        bool
	Routing        string
	RetentionBytes int64
	RetentionAge   time.Duration
	Replicas       int
	LogAppendTime  bool
	Compression    string
	// Implicit is true for a stream made by its first publish or subscribe.
	Implicit  bool
	CreatedAt time.Time
}

func infoFrom(m *wire.StreamInfo) StreamInfo {
	return StreamInfo{
		Stream: Stream{Tenant: m.Tenant, Namespace: m.Namespace, Name: m.Stream},
		Shards: m.Shards, Durable: m.Durable, Routing: m.Routing,
		RetentionBytes: m.RetentionBytes, RetentionAge: time.Duration(m.RetentionAgeMS) * time.Millisecond,
		Replicas: int(m.Replicas), LogAppendTime: m.LogAppendTime, Compression: m.Compression, Implicit: m.Implicit, CreatedAt: time.UnixMilli(m.CreatedAtMS).UTC(),
	}
}

// CreateStream creates a stream. Creating one that exists with the same
// settings succeeds; with other settings it fails with ErrInvalidRequest.
func (c *Client) CreateStream(ctx context.Context, s Stream, cfg StreamConfig) (StreamInfo, error) {
	if cfg.Shards == 0 {
		cfg.Shards = 1
	}
	scope := s.scope(c)
	id := c.nextReq.Add(1)
	res, err := c.request(ctx, id, &wire.StreamCreate{
		RequestID: id, Tenant: scope.Tenant, Namespace: scope.Namespace, Stream: scope.Stream,
		Shards: cfg.Shards, Routing: cfg.Routing, Durable: cfg.Durable,
		RetentionBytes: cfg.RetentionBytes, RetentionAgeMS: cfg.RetentionAge.Milliseconds(),
		Replicas: uint32(max(cfg.Replicas, 0)), LogAppendTime: cfg.LogAppendTime,
		Compression: cfg.Compression,
	})
	return c.streamInfo(res, err)
}

// StreamInfo returns a stream's definition, or ErrNotFound.
func (c *Client) StreamInfo(ctx context.Context, s Stream) (StreamInfo, error) {
	scope := s.scope(c)
	id := c.nextReq.Add(1)
	res, err := c.request(ctx, id, &wire.StreamGet{RequestID: id, Tenant: scope.Tenant, Namespace: scope.Namespace, Stream: scope.Stream})
	return c.streamInfo(res, err)
}

func (c *Client) streamInfo(res wire.Message, err error) (StreamInfo, error) {
	if err != nil {
		return StreamInfo{}, err
	}
	m, ok := res.(*wire.StreamInfo)
	if !ok {
		return StreamInfo{}, fmt.Errorf("%w: answered with %s", ErrProtocol, res.Type())
	}
	return infoFrom(m), nil
}

// ListStreams lists the client tenant's streams, of one namespace if set.
func (c *Client) ListStreams(ctx context.Context, namespace string) ([]StreamInfo, error) {
	id := c.nextReq.Add(1)
	res, err := c.request(ctx, id, &wire.StreamList{RequestID: id, Tenant: c.opts.Tenant, Namespace: namespace})
	if err != nil {
		return nil, err
	}
	m, ok := res.(*wire.StreamInfos)
	if !ok {
		return nil, fmt.Errorf("%w: answered with %s", ErrProtocol, res.Type())
	}
	out := make([]StreamInfo, 0, len(m.Streams))
	for i := range m.Streams {
		out = append(out, infoFrom(&m.Streams[i]))
	}
	return out, nil
}

// DeleteStream deletes a stream; its subscriptions end with
// ErrSubscriptionEnded.
func (c *Client) DeleteStream(ctx context.Context, s Stream) error {
	scope := s.scope(c)
	id := c.nextReq.Add(1)
	_, err := c.request(ctx, id, &wire.StreamDelete{RequestID: id, Tenant: scope.Tenant, Namespace: scope.Namespace, Stream: scope.Stream})
	return err
}

// ReadOptions bound one range read.
type ReadOptions struct {
	Shard uint32
	// End, when HasEnd, stops the page before this offset.
	End    uint64
	HasEnd bool
	// MaxRecords and MaxBytes cap the page (the broker caps them too:
	// 10000 records, 4 MiB).
	MaxRecords uint32
	MaxBytes   uint32
	// FollowerMaxLag, when not zero, asks for a follower read of a
	// replicated stream (at most a minute): any replica answers from
	// what it applied, if it heard from its leader within FollowerMaxLag
	// and applied all the leader said was committed, so the page may miss
	// records acknowledged since; Page.Committed is then that replica's
	// applied end and Page.Follower is set. Zero (the default): a
	// linearizable read, which sees every record acknowledged before it
	// began; only the leader answers it, any other member refuses with
	// wire.ErrNotLeader naming the leader.
	FollowerMaxLag time.Duration
}

// Record is one record of a range read.
type Record struct {
	Offset  uint64
	Time    time.Time
	Payload []byte
	// Key and Headers are the record's, when it was stored with them (a
	// record produced through the Kafka listener); nil otherwise.
	Key     []byte
	Headers []Header
}

// Header is one record header (a nil Value is a null one).
type Header struct {
	Key   string
	Value []byte
}

// Page is one page of a range read: the records, the offset to read from
// next, and the committed end when the page was made (Next == Committed
// means the reader is caught up).
type Page struct {
	Records   []Record
	Next      uint64
	Committed uint64
	// Follower: a follower served the page (ReadOptions.FollowerMaxLag).
	Follower bool
}

// Read returns one page of committed records of a durable stream's shard
// from offset from. It never waits for new records and registers nothing.
func (c *Client) Read(ctx context.Context, s Stream, from uint64, o ReadOptions) (Page, error) {
	scope := s.scope(c)
	id := c.nextReq.Add(1)
	req := &wire.StreamRead{
		RequestID: id, Tenant: scope.Tenant, Namespace: scope.Namespace, Stream: scope.Stream,
		Shard: o.Shard, From: from, MaxRecords: o.MaxRecords, MaxBytes: o.MaxBytes,
	}
	if o.HasEnd {
		req.End = &o.End
	}
	if o.FollowerMaxLag > 0 {
		// Rounded up: a lag under a millisecond still asks for a follower read.
		req.FollowerMaxLagMS = uint32(min((o.FollowerMaxLag+time.Millisecond-1)/time.Millisecond, wire.MaxFollowerLagMS+1))
	}
	res, err := c.request(ctx, id, req)
	if err != nil {
		return Page{}, err
	}
	m, ok := res.(*wire.StreamRecords)
	if !ok {
		return Page{}, fmt.Errorf("%w: read answered with %s", ErrProtocol, res.Type())
	}
	p := Page{Next: m.NextOffset, Committed: m.Committed, Follower: m.Follower, Records: make([]Record, len(m.Records))}
	for i, r := range m.Records {
		p.Records[i] = Record{Offset: r.Offset, Time: time.UnixMilli(r.TimeMS).UTC(), Payload: r.Payload, Key: r.Key}
		for _, h := range r.Headers {
			p.Records[i].Headers = append(p.Records[i].Headers, Header{Key: h.Key, Value: h.Value})
		}
	}
	return p, nil
}

// OffsetForTime returns where a durable stream's shard reaches time t: the
// offset of the first committed record the broker stored at or after t, or
// the committed end when every record is older. Reading or subscribing from
// it gives only records at or after t. A t before every record kept is the
// oldest offset retention kept. Times are the broker's, at millisecond
// precision (a t within a millisecond counts from that millisecond's start).
func (c *Client) OffsetForTime(ctx context.Context, s Stream, t time.Time, shard uint32) (uint64, error) {
	scope := s.scope(c)
	id := c.nextReq.Add(1)
	res, err := c.request(ctx, id, &wire.OffsetForTime{
		RequestID: id, Tenant: scope.Tenant, Namespace: scope.Namespace, Stream: scope.Stream,
		Shard: shard, TimeMS: t.UnixMilli(),
	})
	if err != nil {
		return 0, err
	}
	m, ok := res.(*wire.TimeOffset)
	if !ok {
		return 0, fmt.Errorf("%w: offset_for_time answered with %s", ErrProtocol, res.Type())
	}
	return m.Offset, nil
}
