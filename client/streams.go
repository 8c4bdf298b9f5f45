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
}

// StreamInfo describes a stream.
type StreamInfo struct {
	Stream         Stream
	Shards         uint32
	Durable        bool
	Routing        string
	RetentionBytes int64
	RetentionAge   time.Duration
	// Implicit is true for a stream made by its first publish or subscribe.
	Implicit  bool
	CreatedAt time.Time
}

func infoFrom(m *wire.StreamInfo) StreamInfo {
	return StreamInfo{
		Stream: Stream{Tenant: m.Tenant, Namespace: m.Namespace, Name: m.Stream},
		Shards: m.Shards, Durable: m.Durable, Routing: m.Routing,
		RetentionBytes: m.RetentionBytes, RetentionAge: time.Duration(m.RetentionAgeMS) * time.Millisecond,
		Implicit: m.Implicit, CreatedAt: time.UnixMilli(m.CreatedAtMS).UTC(),
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
