package client

import (
	"context"
	"fmt"
	"time"

	"github.com/getfelix/felix-go/wire"
)

// Consumer group administration, on the client's control stream: create,
// seek, describe, list, delete, and the dead letters of a shard.

// GroupStart is where CreateGroup or SeekGroup puts a group's cursor:
// "latest" (default), "earliest", "offset" (Offset on Shard) or "time"
// (the first record stored at or after Time).
type GroupStart struct {
	Kind   string
	Offset uint64
	Shard  uint32
	Time   time.Time
}

// GroupShardInfo is a group's state on one shard.
type GroupShardInfo = wire.GroupShard

// GroupInfo describes a group on every shard of its stream.
type GroupInfo struct {
	Group  string
	Shards []GroupShardInfo
}

// CreateGroup creates group name on s at start; one that exists is left
// as it is.
func (c *Client) CreateGroup(ctx context.Context, s Stream, name string, start GroupStart) (GroupInfo, error) {
	return c.placeGroup(ctx, s, name, start, nil, false)
}

// SeekGroup moves an existing group's cursor: its claims in flight are
// dropped, its dead letters kept.
func (c *Client) SeekGroup(ctx context.Context, s Stream, name string, start GroupStart) (GroupInfo, error) {
	return c.placeGroup(ctx, s, name, start, nil, true)
}

// placeGroup creates (or seeks) a group on every shard, or on only's.
func (c *Client) placeGroup(ctx context.Context, s Stream, name string, start GroupStart, only []uint32, seek bool) (GroupInfo, error) {
	scope := s.scope(c)
	m := &wire.GroupCreate{
		RequestID: c.nextReq.Add(1), Tenant: scope.Tenant, Namespace: scope.Namespace, Stream: scope.Stream, Group: name,
		Start: start.Kind, StartOffset: start.Offset, Shard: start.Shard, OnlyShards: only,
	}
	if !start.Time.IsZero() {
		m.StartTimeMS = start.Time.UnixMilli()
	}
	if seek {
		return c.groupInfo(c.request(ctx, m.RequestID, (*wire.GroupSeek)(m)))
	}
	return c.groupInfo(c.request(ctx, m.RequestID, m))
}

// DescribeGroup reports a group's cursor, lag, claims and dead letters per shard.
func (c *Client) DescribeGroup(ctx context.Context, s Stream, name string) (GroupInfo, error) {
	return c.describeGroup(ctx, s, name, nil)
}

// describeGroup describes a group on every shard, or on only's.
func (c *Client) describeGroup(ctx context.Context, s Stream, name string, only []uint32) (GroupInfo, error) {
	m := c.groupDescribe(s, name, only)
	return c.groupInfo(c.request(ctx, m.RequestID, m))
}

func (c *Client) groupDescribe(s Stream, name string, only []uint32) *wire.GroupDescribe {
	scope := s.scope(c)
	return &wire.GroupDescribe{RequestID: c.nextReq.Add(1), Tenant: scope.Tenant, Namespace: scope.Namespace, Stream: scope.Stream, Group: name, OnlyShards: only}
}

func (c *Client) groupInfo(res wire.Message, err error) (GroupInfo, error) {
	if err != nil {
		return GroupInfo{}, err
	}
	m, ok := res.(*wire.GroupInfo)
	if !ok {
		return GroupInfo{}, fmt.Errorf("%w: answered with %s", ErrProtocol, res.Type())
	}
	return GroupInfo{Group: m.Group, Shards: m.Shards}, nil
}

// ListGroups lists the groups of a stream.
func (c *Client) ListGroups(ctx context.Context, s Stream) ([]string, error) {
	scope := s.scope(c)
	id := c.nextReq.Add(1)
	res, err := c.request(ctx, id, &wire.GroupList{RequestID: id, Tenant: scope.Tenant, Namespace: scope.Namespace, Stream: scope.Stream})
	if err != nil {
		return nil, err
	}
	m, ok := res.(*wire.GroupNames)
	if !ok {
		return nil, fmt.Errorf("%w: answered with %s", ErrProtocol, res.Type())
	}
	return m.Groups, nil
}

// DeleteGroup deletes a group.
func (c *Client) DeleteGroup(ctx context.Context, s Stream, name string) error {
	return c.deleteGroup(ctx, s, name, nil)
}

// deleteGroup deletes a group's parts on every shard, or on only's.
func (c *Client) deleteGroup(ctx context.Context, s Stream, name string, only []uint32) error {
	m := (*wire.GroupDelete)(c.groupDescribe(s, name, only))
	_, err := c.request(ctx, m.RequestID, m)
	return err
}

// DeadLetters lists up to limit (at most 10000) dead letters of a group on
// one shard from offset from, ascending; more says others follow.
func (c *Client) DeadLetters(ctx context.Context, s Stream, name string, shard uint32, from uint64, limit int) (offsets []uint64, more bool, err error) {
	scope := s.scope(c)
	id := c.nextReq.Add(1)
	res, err := c.request(ctx, id, &wire.GroupDeadLetters{
		RequestID: id, Tenant: scope.Tenant, Namespace: scope.Namespace, Stream: scope.Stream, Group: name,
		Shard: shard, From: from, Max: uint32(min(max(limit, 0), 1<<20)),
	})
	if err != nil {
		return nil, false, err
	}
	m, ok := res.(*wire.GroupDeadList)
	if !ok {
		return nil, false, fmt.Errorf("%w: answered with %s", ErrProtocol, res.Type())
	}
	return m.Offsets, m.More, nil
}

// Redrive hands dead letters of one shard out again (offsets, or every
// one when all); it returns how many.
func (c *Client) Redrive(ctx context.Context, s Stream, name string, shard uint32, offsets []uint64, all bool) (int, error) {
	m := c.groupRedrive(s, name, shard, offsets, all)
	return c.groupCount(c.request(ctx, m.RequestID, m))
}

// DiscardDeadLetters forgets dead letters of one shard (offsets, or every
// one when all); it returns how many.
func (c *Client) DiscardDeadLetters(ctx context.Context, s Stream, name string, shard uint32, offsets []uint64, all bool) (int, error) {
	m := (*wire.GroupDiscard)(c.groupRedrive(s, name, shard, offsets, all))
	return c.groupCount(c.request(ctx, m.RequestID, m))
}

func (c *Client) groupRedrive(s Stream, name string, shard uint32, offsets []uint64, all bool) *wire.GroupRedrive {
	scope := s.scope(c)
	return &wire.GroupRedrive{
		RequestID: c.nextReq.Add(1), Tenant: scope.Tenant, Namespace: scope.Namespace, Stream: scope.Stream, Group: name,
		Shard: shard, Offsets: offsets, All: all,
	}
}

func (c *Client) groupCount(res wire.Message, err error) (int, error) {
	if err != nil {
		return 0, err
	}
	m, ok := res.(*wire.GroupCount)
	if !ok {
		return 0, fmt.Errorf("%w: answered with %s", ErrProtocol, res.Type())
	}
	return int(m.Count), nil
}
