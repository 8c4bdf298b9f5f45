// Package defstore is where stream definitions are kept: a single
// broker's in its metadata store (Local), a cluster member's in etcd
// (Cluster), each the registry's streams.DefStore; and the conversions
// between streams.Def and each store's record, which a definition written
// by an older broker (no cache history, say) opens through.
package defstore

import (
	"context"
	"time"

	"github.com/getfelix/felix-go/cluster"
	"github.com/getfelix/felix-go/metadata"
	"github.com/getfelix/felix-go/routing"
	"github.com/getfelix/felix-go/streams"
	"github.com/getfelix/felix-go/wire"
)

// Local keeps a single broker's definitions in its metadata store
// (metadata.db).
type Local struct{ Store *metadata.Store }

func (d Local) PutStream(def streams.Def) error    { return d.Store.PutStream(toMeta(def)) }
func (d Local) DeleteStream(def streams.Def) error { return d.Store.DeleteStream(toMeta(def)) }

func toMeta(d streams.Def) metadata.StreamDef {
	return metadata.StreamDef{
		Tenant: d.Scope.Tenant, Namespace: d.Scope.Namespace, Stream: d.Scope.Stream,
		Shards: d.Shards, Durable: d.Durable, Routing: d.Routing.String(),
		RetentionBytes: d.RetentionBytes, RetentionAge: d.RetentionAge, LogAppendTime: d.LogAppendTime, Compression: d.Compression, CreatedAt: d.CreatedAt,
		Cache: cacheToMeta(d.Cache),
	}
}

func cacheToMeta(c *streams.CacheSettings) *metadata.CacheDef {
	if c == nil {
		return nil
	}
	return &metadata.CacheDef{TTL: c.TTL, History: c.History}
}

func cacheFromMeta(c *metadata.CacheDef) *streams.CacheSettings {
	if c == nil {
		return nil
	}
	return &streams.CacheSettings{TTL: c.TTL, History: streams.HistoryOrDefault(c.History)}
}

// FromMeta reads a definition metadata.db stored.
func FromMeta(m metadata.StreamDef) (streams.Def, error) {
	r, err := routing.Parse(m.Routing)
	if err != nil {
		return streams.Def{}, err
	}
	return streams.Def{
		Scope:  wire.Scope{Tenant: m.Tenant, Namespace: m.Namespace, Stream: m.Stream},
		Shards: m.Shards, Routing: r, Durable: m.Durable,
		RetentionBytes: m.RetentionBytes, RetentionAge: m.RetentionAge, LogAppendTime: m.LogAppendTime, Compression: m.Compression, CreatedAt: m.CreatedAt,
		Cache: cacheFromMeta(m.Cache),
	}, nil
}

// Cluster keeps a member's stream definitions in etcd: explicit and
// implicit ones, since every member must agree on a stream a first
// publish made. Node is the member's cluster node, nil while it starts.
type Cluster struct{ Node func() *cluster.Node }

var _ streams.ImplicitStore = Cluster{}

func (s Cluster) node() (*cluster.Node, error) {
	if n := s.Node(); n != nil {
		return n, nil
	}
	return nil, wire.NewError(wire.CodeShardUnavailable, "not_ready: this member is still starting; try another member")
}

func (s Cluster) PutStream(d streams.Def) error {
	n, err := s.node()
	if err != nil {
		return err
	}
	stored, err := n.CreateDef(context.Background(), toCluster(d))
	if err != nil {
		return err
	}
	if got, err := FromCluster(stored); err == nil && !got.Implicit && !got.SameSettings(d) {
		return wire.NewError(wire.CodeInvalidRequest, "stream %s exists with other settings (%d shards, %s routing, durable %t); delete it first or create it with the same settings", d.Scope, got.Shards, got.Routing, got.Durable)
	}
	return nil
}

func (s Cluster) PutImplicit(d streams.Def) (streams.Def, error) {
	n, err := s.node()
	if err != nil {
		return streams.Def{}, err
	}
	stored, err := n.CreateDef(context.Background(), toCluster(d))
	if err != nil {
		return streams.Def{}, err
	}
	return FromCluster(stored)
}

func (s Cluster) DeleteStream(d streams.Def) error {
	n, err := s.node()
	if err != nil {
		return err
	}
	return n.DeleteDef(context.Background(), d.Scope)
}

func toCluster(d streams.Def) cluster.StreamDef {
	return cluster.StreamDef{
		Tenant: d.Scope.Tenant, Namespace: d.Scope.Namespace, Stream: d.Scope.Stream,
		Shards: d.Shards, Routing: d.Routing.String(), Durable: d.Durable,
		RetentionBytes: d.RetentionBytes, RetentionAgeMS: d.RetentionAge.Milliseconds(),
		Replicas: d.Replicas, LogAppendTime: d.LogAppendTime, Compression: d.Compression, Implicit: d.Implicit, CreatedAt: d.CreatedAt,
		Cache: cacheToCluster(d.Cache),
	}
}

func cacheToCluster(c *streams.CacheSettings) *cluster.CacheDef {
	if c == nil {
		return nil
	}
	return &cluster.CacheDef{TTLMS: c.TTL.Milliseconds(), History: c.History}
}

func cacheFromCluster(c *cluster.CacheDef) *streams.CacheSettings {
	if c == nil {
		return nil
	}
	return &streams.CacheSettings{TTL: time.Duration(c.TTLMS) * time.Millisecond, History: streams.HistoryOrDefault(c.History)}
}

// FromCluster reads a definition etcd holds.
func FromCluster(d cluster.StreamDef) (streams.Def, error) {
	r, err := routing.Parse(d.Routing)
	if err != nil {
		return streams.Def{}, err
	}
	return streams.Def{
		Scope: d.Scope(), Shards: d.Shards, Routing: r, Durable: d.Durable,
		RetentionBytes: d.RetentionBytes, RetentionAge: time.Duration(d.RetentionAgeMS) * time.Millisecond,
		Replicas: d.Replicas, LogAppendTime: d.LogAppendTime, Compression: d.Compression, Implicit: d.Implicit, CreatedAt: d.CreatedAt,
		Cache: cacheFromCluster(d.Cache),
	}, nil
}
