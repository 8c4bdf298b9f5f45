package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/wire"
)

// GET /debug/stream serves the stream page (/ui/stream): one stream's
// shards as this broker sees them, with offsets, subscribers, replication
// and consumer groups. It answers through the same service calls a client
// makes (Stream, ShardOwners, Replication, Groups, DescribeGroup), on the
// broker's connection-less session with every right on the tenant named
// (Member.Session): the route's own check is the admin token's node.view
// on the stream's tenant (requireStream): any tenant for a token of an
// unrestricted key, its own only for one of a key restricted to tenants.

// StreamView is the answer of GET /debug/stream.
type StreamView struct {
	Stream    string    `json:"stream"`
	Tenant    string    `json:"tenant"`
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	Shards    uint32    `json:"shards"`
	Routing   string    `json:"routing"`
	Durable   bool      `json:"durable"`
	Replicas  int       `json:"replicas"`
	Implicit  bool      `json:"implicit"`
	CreatedAt time.Time `json:"created_at"`
	// Node is this member's id in a cluster ("" on a single broker).
	Node string `json:"node,omitempty"`
	// Published counts the records this broker's shards of the stream fanned
	// out since a page began watching it (see FanoutRates); absent when
	// maxRateWatches other streams are watched.
	Published *uint64 `json:"published,omitempty"`
	// ShardList holds shards From to From+len-1 (at most maxViewShards).
	From      uint32      `json:"from"`
	ShardList []ShardView `json:"shard_list"`
	// Groups are the stream's consumer groups, at most maxViewGroups of
	// GroupCount described; GroupsNote says why there are none to show
	// when that is not simply that none exists.
	Groups     []GroupView `json:"groups"`
	GroupCount int         `json:"group_count"`
	GroupsNote string      `json:"groups_note,omitempty"`
	SampledAt  time.Time   `json:"sampled_at"`
}

// ShardView is one shard on the stream page.
type ShardView struct {
	Shard uint32 `json:"shard"`
	// Owner is the member that serves the shard in a cluster; Here that it
	// is this one (always, on a single broker): only then are the actor,
	// offsets and subscribers known.
	Owner string `json:"owner,omitempty"`
	Here  bool   `json:"here"`
	// Actor is the shard actor's path while it runs (an in-memory shard
	// stops when idle), with its mailbox and restarts.
	Actor        string `json:"actor,omitempty"`
	MailboxDepth int    `json:"mailbox_depth"`
	Capacity     int    `json:"capacity"`
	Restarts     int64  `json:"restarts"`
	// First, Next and Committed are a durable shard's log offsets: the
	// oldest record kept, the next record's offset, the end readers see.
	First     *uint64 `json:"first,omitempty"`
	Next      *uint64 `json:"next,omitempty"`
	Committed *uint64 `json:"committed,omitempty"`
	// Replication is this member's view of a replicated shard's raft group
	// (the leader's view lists every replica's lag).
	Replication *wire.ShardReplication `json:"replication,omitempty"`
	// Subscribers counts the shard's subscriptions here; SubscriberList
	// shows at most maxViewSubscribers of them.
	Subscribers    int              `json:"subscribers"`
	SubscriberList []SubscriberView `json:"subscriber_list"`
	Error          string           `json:"error,omitempty"`
}

// SubscriberView is one subscription's feeder.
type SubscriberView struct {
	Subscription string `json:"subscription"`
	Conn         string `json:"conn"`
	Path         string `json:"path"`
	Depth        int    `json:"mailbox_depth"`
	Capacity     int    `json:"capacity"`
	Dropped      uint64 `json:"dropped"`
}

// GroupView is one consumer group, per shard.
type GroupView struct {
	Group  string           `json:"group"`
	Shards []GroupShardView `json:"shards"`
	Error  string           `json:"error,omitempty"`
}

// GroupShardView is a group's state on one shard (service.GroupShardInfo).
type GroupShardView struct {
	Shard       uint32   `json:"shard"`
	Cursor      uint64   `json:"cursor"`
	Next        uint64   `json:"next"`
	Committed   uint64   `json:"committed"`
	Lag         uint64   `json:"lag"`
	InFlight    uint64   `json:"in_flight"`
	DeadLetters uint64   `json:"dead_letters"`
	Consumers   []string `json:"consumers"`
}

// The stream page's bounds, so one request costs a bounded number of
// actor requests and a bounded answer whatever the stream holds.
const (
	maxViewShards      = 64
	maxViewSubscribers = 20
	maxViewGroups      = 8
)

func (rt *routes) handleStreamView(w http.ResponseWriter, r *http.Request) {
	serveShardView(w, r, "stream", rt.streamView)
}

// streamView gathers the stream page's document. It never creates a
// stream: an unknown one is not_found.
func (rt *routes) streamView(ctx context.Context, scope wire.Scope, from uint32) (*StreamView, error) {
	c := rt.m.Session(scope.Tenant)
	info, err := c.Stream(ctx, scope)
	if err != nil {
		return nil, err
	}
	v := &StreamView{
		Stream: scope.String(), Tenant: scope.Tenant, Namespace: scope.Namespace, Name: scope.Stream,
		Shards: info.Shards, Routing: info.Routing, Durable: info.Durable, Replicas: info.Replicas,
		Implicit: info.Implicit, CreatedAt: info.CreatedAt, From: min(from, info.Shards), SampledAt: time.Now(),
		ShardList: []ShardView{}, Groups: []GroupView{},
	}
	if n := rt.m.Cluster(); n != nil {
		v.Node = n.ID()
	}
	if rt.cfg.Rates != nil {
		if published, ok := rt.cfg.Rates.read(scope, v.SampledAt); ok {
			v.Published = &published
		}
	}
	top, err := c.ShardOwners(ctx, scope)
	if err != nil {
		return nil, err
	}
	var repl []wire.ShardReplication
	if info.Replicas > 1 {
		_, repl, _ = c.Replication(ctx, scope) // only its own checks can fail, and they passed in Stream
	}
	actorsOf := rt.labelled("stream", scope.String())
	for n := v.From; n < info.Shards && n-v.From < maxViewShards; n++ {
		v.ShardList = append(v.ShardList, rt.shardView(ctx, top, n, v.Node, info.Durable, repl, actorsOf))
	}
	groupViews(ctx, c, v)
	return v, nil
}

// shardView is shard n as this member sees it; node is this member's id
// ("" on a single broker).
func (rt *routes) shardView(ctx context.Context, top *service.Topology, n uint32, node string, durable bool, repl []wire.ShardReplication, list []actors.Info) ShardView {
	sv := ShardView{Shard: n, SubscriberList: []SubscriberView{}}
	sv.Owner, sv.Here, sv.Error = shardOwner(top, n, node)
	for i := range repl {
		if repl[i].Shard == n {
			sv.Replication = &repl[i]
		}
	}
	if !sv.Here {
		return sv
	}
	label := strconv.FormatUint(uint64(n), 10)
	for _, a := range list {
		if a.Labels["shard"] != label {
			continue
		}
		switch actors.Kind(a.Kind) {
		case actors.KindShard:
			sv.Actor, sv.MailboxDepth, sv.Capacity, sv.Restarts = a.Path, a.MailboxDepth, a.Capacity, a.Restarts
		case actors.KindFeeder:
			sv.Subscribers++
			if len(sv.SubscriberList) < maxViewSubscribers {
				sv.SubscriberList = append(sv.SubscriberList, SubscriberView{
					Subscription: a.Labels["subscription"], Conn: a.Labels["conn"], Path: a.Path,
					Depth: a.MailboxDepth, Capacity: a.Capacity, Dropped: a.Dropped + a.ByteDropped,
				})
			}
		}
	}
	// An in-memory shard has no offsets to read.
	if durable {
		off, err := rt.m.ShardOffsets(ctx, top.Scope, n)
		if err != nil {
			sv.Error = err.Error()
			return sv
		}
		sv.First, sv.Next, sv.Committed = &off.First, &off.Next, &off.Committed
	}
	return sv
}

// groupViews describes the stream's consumer groups through the group
// admin calls. Groups exist on durable streams only. In a cluster each
// shard's group is described by the member serving it: this page shows
// the shards served here and names the member of each other one.
func groupViews(ctx context.Context, c service.Session, v *StreamView) {
	if !v.Durable {
		return
	}
	scope := wire.Scope{Tenant: v.Tenant, Namespace: v.Namespace, Stream: v.Name}
	names, err := c.Groups(ctx, scope)
	if err != nil {
		v.GroupsNote = "list the groups: " + strings.TrimPrefix(err.Error(), "broker: ")
		return
	}
	v.GroupCount = len(names)
	if v.Shards > maxViewShards {
		v.GroupsNote = "the stream has more than " + strconv.Itoa(maxViewShards) + " shards: groups are listed, not described (felix group describe)"
	}
	for i, name := range names {
		if i == maxViewGroups {
			break
		}
		gv := GroupView{Group: name, Shards: []GroupShardView{}}
		if v.Shards <= maxViewShards {
			describeGroup(ctx, c, scope, v, &gv)
		}
		v.Groups = append(v.Groups, gv)
	}
}

// describeGroup fills gv with the group's state on every shard, or, on a
// cluster member, shard by shard on the shards served here, with the
// others' serving members in gv.Error.
func describeGroup(ctx context.Context, c service.Session, scope wire.Scope, v *StreamView, gv *GroupView) {
	var only [][]uint32
	if v.Node == "" {
		only = [][]uint32{nil}
	} else {
		for s := range v.Shards {
			only = append(only, []uint32{s})
		}
	}
	var elsewhere []string
	for _, shards := range only {
		info, err := c.DescribeGroupOn(ctx, scope, gv.Group, shards)
		var we *wire.Error
		switch {
		case err != nil && v.Node != "" && errors.As(err, &we) && we.Owner != nil:
			elsewhere = append(elsewhere, fmt.Sprintf("%d on %s", shards[0], we.Owner.NodeID))
			continue
		case err != nil:
			gv.Error = err.Error()
			return
		}
		for _, s := range info.Shards {
			gv.Shards = append(gv.Shards, GroupShardView{
				Shard: s.Shard, Cursor: s.Cursor, Next: s.Next, Committed: s.Committed, Lag: s.Lag,
				InFlight: s.InFlight, DeadLetters: s.DeadLetters, Consumers: append([]string{}, s.Consumers...),
			})
		}
	}
	if len(elsewhere) > 0 {
		gv.Error = "served by other members (shard on member): " + strings.Join(elsewhere, ", ")
	}
}
