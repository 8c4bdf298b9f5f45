package client

import (
	"context"
	"errors"

	"github.com/getfelix/felix-go/wire"
)

// Consumer groups in a cluster. A group's shard is served by one member:
// the owner of the stream's shard, or for a replicated stream the raft
// leader of the group's state shard, which follows the data shard's
// leader. ClusterClient.Group returns the same Group as Client.Group whose
// every call goes there: not_leader is followed, a lost member's calls go
// to the member the survivors name, and retryable refusals (an election,
// a new leader catching up) are tried again, until the call's ctx ends.
// Delivery stays at least once across a move: the new member rebuilds the
// group from its committed state records (cursor, dead letters), and hands
// out again what the old one had handed out and not seen settled, and what
// was acknowledged after the cursor's last write (at most ~100 ms or 1000
// records of acknowledgements). A settlement of a claim made on the old
// member fails with a SettleError there (the record comes again), which
// Consume takes in its stride.

// Group returns a consumer of group name on stream s in the cluster (see
// Client.Group and GroupOptions). Close releases its streams; the
// connections stay the ClusterClient's.
func (cc *ClusterClient) Group(s Stream, name string, opts GroupOptions) *Group {
	return &Group{cc: cc, scope: cc.scope(s), name: name, opts: opts}
}

// exchange makes one request on r: on the Group's client, or, for a
// ClusterClient's Group, at the member serving the shard (see above).
func (g *Group) exchange(ctx context.Context, r *rpcStream, m wire.Message) (wire.Message, error) {
	if g.cc == nil {
		return r.call(ctx, m)
	}
	var res wire.Message
	err := g.cc.route(ctx, g.scope, fixedShard(g.opts.Shard), true, func(c *Client) error {
		var err error
		res, err = r.callOn(ctx, c, m)
		return streamLost(ctx, err)
	})
	return res, err
}

// streamLost marks the loss of a group stream (its member went, or its
// connection broke before the client noticed) as a broker not reached, so
// the call is routed again; answers and the caller's own end pass as they
// are.
func streamLost(ctx context.Context, err error) error {
	var we *wire.Error
	switch {
	case err == nil, ctx.Err() != nil, errors.As(err, &we), errors.Is(err, ErrProtocol):
		return err
	}
	return &unreachableError{err}
}

// routeGroup makes an administration call at the member serving shard of
// s's groups.
func routeGroup[T any](ctx context.Context, cc *ClusterClient, s Stream, shard uint32, call func(*Client, Stream) (T, error)) (T, error) {
	var out T
	scope := cc.scope(s)
	err := cc.route(ctx, scope, fixedShard(shard), true, func(c *Client) error {
		var err error
		out, err = call(c, streamOf(scope))
		return err
	})
	return out, err
}

// The administration calls about every shard (create, seek, describe,
// delete) ask each shard's serving member for that shard alone
// (only_shards), one after the other, and put the answers together; the
// others go to the member serving the shard they name.

// eachShard runs call for each of shards at its serving member and
// gathers the shards' infos.
func (cc *ClusterClient) eachShard(ctx context.Context, s Stream, shards []uint32, call func(c *Client, s Stream, only []uint32) (GroupInfo, error)) (GroupInfo, error) {
	var out GroupInfo
	for _, n := range shards {
		info, err := routeGroup(ctx, cc, s, n, func(c *Client, s Stream) (GroupInfo, error) { return call(c, s, []uint32{n}) })
		if err != nil {
			return out, err
		}
		out.Group = info.Group
		out.Shards = append(out.Shards, info.Shards...)
	}
	return out, nil
}

// shardsOf lists s's shards.
func (cc *ClusterClient) shardsOf(ctx context.Context, s Stream) ([]uint32, error) {
	top, err := cc.ShardOwners(ctx, s)
	if err != nil {
		return nil, err
	}
	out := make([]uint32, top.Shards)
	for i := range out {
		out[i] = uint32(i)
	}
	return out, nil
}

// placeGroup creates or seeks a group shard by shard (a seek to an offset
// concerns its shard only).
func (cc *ClusterClient) placeGroup(ctx context.Context, s Stream, name string, start GroupStart, seek bool) (GroupInfo, error) {
	shards := []uint32{start.Shard}
	if !seek || start.Kind != "offset" {
		var err error
		if shards, err = cc.shardsOf(ctx, s); err != nil {
			return GroupInfo{}, err
		}
	}
	return cc.eachShard(ctx, s, shards, func(c *Client, s Stream, only []uint32) (GroupInfo, error) {
		return c.placeGroup(ctx, s, name, start, only, seek)
	})
}

// CreateGroup is Client.CreateGroup in the cluster.
func (cc *ClusterClient) CreateGroup(ctx context.Context, s Stream, name string, start GroupStart) (GroupInfo, error) {
	return cc.placeGroup(ctx, s, name, start, false)
}

// SeekGroup is Client.SeekGroup in the cluster.
func (cc *ClusterClient) SeekGroup(ctx context.Context, s Stream, name string, start GroupStart) (GroupInfo, error) {
	return cc.placeGroup(ctx, s, name, start, true)
}

// DescribeGroup is Client.DescribeGroup in the cluster.
func (cc *ClusterClient) DescribeGroup(ctx context.Context, s Stream, name string) (GroupInfo, error) {
	shards, err := cc.shardsOf(ctx, s)
	if err != nil {
		return GroupInfo{}, err
	}
	return cc.eachShard(ctx, s, shards, func(c *Client, s Stream, only []uint32) (GroupInfo, error) {
		return c.describeGroup(ctx, s, name, only)
	})
}

// ListGroups is Client.ListGroups in the cluster (shard 0's member reads
// the names).
func (cc *ClusterClient) ListGroups(ctx context.Context, s Stream) ([]string, error) {
	return routeGroup(ctx, cc, s, 0, func(c *Client, s Stream) ([]string, error) { return c.ListGroups(ctx, s) })
}

// DeleteGroup is Client.DeleteGroup in the cluster: the group's part on
// each shard in turn.
func (cc *ClusterClient) DeleteGroup(ctx context.Context, s Stream, name string) error {
	shards, err := cc.shardsOf(ctx, s)
	if err != nil {
		return err
	}
	_, err = cc.eachShard(ctx, s, shards, func(c *Client, s Stream, only []uint32) (GroupInfo, error) {
		return GroupInfo{}, c.deleteGroup(ctx, s, name, only)
	})
	return err
}

// DeadLetters is Client.DeadLetters at the member serving shard.
func (cc *ClusterClient) DeadLetters(ctx context.Context, s Stream, name string, shard uint32, from uint64, limit int) ([]uint64, bool, error) {
	type page struct {
		offsets []uint64
		more    bool
	}
	p, err := routeGroup(ctx, cc, s, shard, func(c *Client, s Stream) (page, error) {
		offs, more, err := c.DeadLetters(ctx, s, name, shard, from, limit)
		return page{offs, more}, err
	})
	return p.offsets, p.more, err
}

// Redrive is Client.Redrive at the member serving shard.
func (cc *ClusterClient) Redrive(ctx context.Context, s Stream, name string, shard uint32, offsets []uint64, all bool) (int, error) {
	return routeGroup(ctx, cc, s, shard, func(c *Client, s Stream) (int, error) { return c.Redrive(ctx, s, name, shard, offsets, all) })
}

// DiscardDeadLetters is Client.DiscardDeadLetters at the member serving shard.
func (cc *ClusterClient) DiscardDeadLetters(ctx context.Context, s Stream, name string, shard uint32, offsets []uint64, all bool) (int, error) {
	return routeGroup(ctx, cc, s, shard, func(c *Client, s Stream) (int, error) {
		return c.DiscardDeadLetters(ctx, s, name, shard, offsets, all)
	})
}
