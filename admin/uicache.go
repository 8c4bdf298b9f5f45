package admin

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/wire"
)

// GET /debug/cache serves the cache page (/ui/cache) and the tree page's
// caches list: one cache's shards as this broker sees them, each with its
// index's keys, its watches, the writes and reads it served since it
// started (the pages turn two samples into rates) and its compaction. It
// answers through the cache calls a client makes (Stream, Cache,
// ShardOwners) on the broker's connection-less session, and asks each
// shard here for its status (Member.CacheStatus); the route is checked as
// /debug/stream is (requireStream: node.view on the cache's tenant).

// CacheView is the answer of GET /debug/cache.
type CacheView struct {
	Cache     string `json:"cache"`
	Tenant    string `json:"tenant"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Shards    uint32 `json:"shards"`
	Routing   string `json:"routing"`
	Durable   bool   `json:"durable"`
	Replicas  int    `json:"replicas"`
	// TTLMillis is a put's expiry when it names none (0: none); History
	// the changes per key compaction keeps.
	TTLMillis int64 `json:"ttl_ms"`
	History   int   `json:"history"`
	// Node is this member's id in a cluster ("" on a single broker).
	Node string `json:"node,omitempty"`
	// Keys, Watches, Writes and Reads add up the shards listed that are
	// served here.
	Keys    int    `json:"keys"`
	Watches int    `json:"watches"`
	Writes  uint64 `json:"writes"`
	Reads   uint64 `json:"reads"`
	// ShardList holds shards From to From+len-1 (at most maxViewShards).
	From      uint32           `json:"from"`
	ShardList []CacheShardView `json:"shard_list"`
	SampledAt time.Time        `json:"sampled_at"`
}

// CacheShardView is one shard on the cache page.
type CacheShardView struct {
	Shard uint32 `json:"shard"`
	// Owner and Here as on the stream page (ShardView): only a shard
	// served here has an actor, a status and watches to show.
	Owner        string `json:"owner,omitempty"`
	Here         bool   `json:"here"`
	Actor        string `json:"actor,omitempty"`
	MailboxDepth int    `json:"mailbox_depth"`
	Capacity     int    `json:"capacity"`
	Restarts     int64  `json:"restarts"`
	// Status is the shard's own account; nil when it did not answer
	// (Error says why).
	Status *CacheShardStatus `json:"status,omitempty"`
	// WatchList shows at most maxViewSubscribers of the shard's watches
	// (Status.Watchers counts them all).
	WatchList []WatchView `json:"watch_list"`
	Error     string      `json:"error,omitempty"`
}

// CacheShardStatus is what a cache shard says of itself.
type CacheShardStatus struct {
	Keys       int `json:"keys"`
	Tombstones int `json:"tombstones"`
	Counters   int `json:"counters"`
	Watchers   int `json:"watchers"`
	// Writes counts the records applied (puts, deletes, counter adds,
	// commits, expiries) and Reads the reads answered, since the shard
	// started.
	Writes uint64 `json:"writes"`
	Reads  uint64 `json:"reads"`
	// Applied is the last record applied (nil: none yet); Floor the
	// lowest version a watch may resume from.
	Applied *uint64 `json:"applied,omitempty"`
	Floor   uint64  `json:"floor"`
	// LogRecords counts the records in a durable shard's log; Compacting
	// says a compaction runs now; Compactions counts those committed since
	// the shard started, the last of them LastCompaction.
	LogRecords     int             `json:"log_records"`
	Compacting     bool            `json:"compacting"`
	Compactions    int             `json:"compactions"`
	LastCompaction *CompactionView `json:"last_compaction,omitempty"`
}

// CompactionView is one committed compaction of a cache shard's log.
type CompactionView struct {
	At             time.Time `json:"at"`
	Horizon        uint64    `json:"horizon"`
	RecordsRemoved int       `json:"records_removed"`
	BytesRemoved   int64     `json:"bytes_removed"`
	TookMillis     float64   `json:"took_ms"`
}

// WatchView is one watch's feeder.
type WatchView struct {
	Subscription string `json:"subscription"`
	Conn         string `json:"conn"`
	Watch        string `json:"watch"`
	Path         string `json:"path"`
	Depth        int    `json:"mailbox_depth"`
	Capacity     int    `json:"capacity"`
}

func (rt *routes) handleCacheView(w http.ResponseWriter, r *http.Request) {
	serveShardView(w, r, "cache", rt.cacheView)
}

// errNoCache answers a name that is a stream, not a cache: for this page
// the cache does not exist.
var errNoCache = wire.NewError(wire.CodeNotFound, "no such cache: the name is a stream's (its page is /ui/stream)")

// cacheView gathers the cache page's document. It never creates a cache
// or a stream: an unknown name is not_found.
func (rt *routes) cacheView(ctx context.Context, scope wire.Scope, from uint32) (*CacheView, error) {
	c := rt.m.Session(scope.Tenant)
	stream, err := c.Stream(ctx, scope)
	if err != nil {
		return nil, err
	}
	caches, ok := c.(service.Caches)
	if !stream.Cache || !ok {
		return nil, errNoCache
	}
	info, err := caches.Cache(ctx, scope)
	if err != nil {
		return nil, err
	}
	v := &CacheView{
		Cache: scope.String(), Tenant: scope.Tenant, Namespace: scope.Namespace, Name: scope.Stream,
		Shards: info.Shards, Routing: info.Routing, Durable: info.Durable, Replicas: info.Replicas,
		TTLMillis: info.TTL.Milliseconds(), History: info.History, From: min(from, info.Shards),
		ShardList: []CacheShardView{}, SampledAt: time.Now(),
	}
	if n := rt.m.Cluster(); n != nil {
		v.Node = n.ID()
	}
	top, err := c.ShardOwners(ctx, scope)
	if err != nil {
		return nil, err
	}
	list := rt.labelled("cache", v.Cache)
	for n := v.From; n < info.Shards && n-v.From < maxViewShards; n++ {
		sv := rt.cacheShardView(ctx, scope, top, n, v.Node, list)
		if st := sv.Status; st != nil {
			v.Keys += st.Keys
			v.Watches += st.Watchers
			v.Writes += st.Writes
			v.Reads += st.Reads
		}
		v.ShardList = append(v.ShardList, sv)
	}
	return v, nil
}

// labelled is the live tree's actors whose label key is value.
func (rt *routes) labelled(key, value string) []actors.Info {
	var out []actors.Info
	for _, a := range rt.m.Actors() {
		if a.Labels[key] == value {
			out = append(out, a)
		}
	}
	return out
}

// cacheShardView is cache shard n as this member sees it.
func (rt *routes) cacheShardView(ctx context.Context, scope wire.Scope, top *service.Topology, n uint32, node string, list []actors.Info) CacheShardView {
	sv := CacheShardView{Shard: n, WatchList: []WatchView{}}
	sv.Owner, sv.Here, sv.Error = shardOwner(top, n, node)
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
			if len(sv.WatchList) < maxViewSubscribers {
				sv.WatchList = append(sv.WatchList, WatchView{
					Subscription: a.Labels["subscription"], Conn: a.Labels["conn"], Watch: a.Labels["watch"], Path: a.Path,
					Depth: a.MailboxDepth, Capacity: a.Capacity,
				})
			}
		}
	}
	st, err := rt.m.CacheStatus(ctx, scope, n)
	if err != nil {
		sv.Error = err.Error()
		return sv
	}
	sv.Status = &st
	return sv
}

// shardOwner is who serves shard n by top, whether that is this member
// (node: its id, "" on a single broker, which serves every shard), and
// why no member does when none does.
func shardOwner(top *service.Topology, n uint32, node string) (owner string, here bool, why string) {
	if int(n) >= len(top.Owners) {
		return "", true, ""
	}
	o := top.Owners[n]
	if !o.Available {
		why = "no member serves it now"
	}
	return o.Owner.NodeID, o.Owner.NodeID == "" || (node != "" && o.Owner.NodeID == node), why
}
