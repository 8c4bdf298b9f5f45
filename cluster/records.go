package cluster

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/getfelix/felix-go/wire"
)

// The cluster's state in etcd, under the prefix (cluster_etcd_prefix):
//
//	name                        the cluster's name, written by its first member
//	members/<node>              memberRecord, on the member's lease
//	drain/<node>                present while an operator drains the member
//	streams/<t>/<ns>/<s>        StreamDef
//	owners/<t>/<ns>/<s>/<n>     ownerRecord, on the OWNER's lease: it vanishes
//	                            when the owner stops renewing, and its mod
//	                            revision is the ownership's fencing epoch
//	homes/<t>/<ns>/<s>/<n>      the member holding a durable shard's data
//	replicas/<t>/<ns>/<s>/<n>   a replicated shard's ReplicaSet (replicas.go)
//	producers/<id>              an idempotent producer id's tenant
//
// Names are [A-Za-z0-9._-] (wire.ValidateName, validNodeID), so "/" splits
// keys unambiguously.

// ShardKey names one shard of one stream.
type ShardKey struct {
	Scope wire.Scope
	Shard uint32
}

func (k ShardKey) String() string { return fmt.Sprintf("%s#%d", k.Scope, k.Shard) }

// StreamDef is a stream's definition as the cluster keeps it. The broker
// converts it to and from its own (streams.Def).
type StreamDef struct {
	Tenant         string    `json:"tenant"`
	Namespace      string    `json:"namespace"`
	Stream         string    `json:"stream"`
	Shards         uint32    `json:"shards"`
	Routing        string    `json:"routing"`
	Durable        bool      `json:"durable"`
	Replicas       int       `json:"replicas,omitempty"`
	RetentionBytes int64     `json:"retention_bytes,omitempty"`
	RetentionAgeMS int64     `json:"retention_age_ms,omitempty"`
	LogAppendTime  bool      `json:"log_append_time,omitempty"`
	Compression    string    `json:"compression,omitempty"`
	Implicit       bool      `json:"implicit,omitempty"`
	CreatedAt      time.Time `json:"created_at"`
	// Cache, when set, makes the stream a cache.
	Cache *CacheDef `json:"cache,omitempty"`
}

// CacheDef is a cache's settings in its stream definition.
type CacheDef struct {
	TTLMS int64 `json:"ttl_ms,omitempty"`
	// History: absent in a definition written before it, which opens as
	// one change per key.
	History int `json:"history,omitempty"`
}

// Scope is the definition's stream.
func (d StreamDef) Scope() wire.Scope {
	return wire.Scope{Tenant: d.Tenant, Namespace: d.Namespace, Stream: d.Stream}
}

// memberRecord is a live member: written on its lease, so it exists exactly
// while the member renews.
type memberRecord struct {
	NodeID string `json:"node_id"`
	Addr   string `json:"addr"`
	Admin  string `json:"admin,omitempty"`
	// PeerAddr is its peer link's address (Config.PeerAddr).
	PeerAddr string `json:"peer_addr,omitempty"`
	// KafkaAddr is its Kafka listener's address for clients
	// (Config.KafkaAddr), when it has one.
	KafkaAddr string `json:"kafka_addr,omitempty"`
	// ActorAddr is its actor system's remote address (protoactor's gRPC,
	// mutual TLS), when it runs one.
	ActorAddr string `json:"actor_addr,omitempty"`
	// Zone is its failure domain (Config.Zone); "" when it has none.
	Zone     string    `json:"zone,omitempty"`
	Lease    int64     `json:"lease"`
	JoinedAt time.Time `json:"joined_at"`
}

// ownerRecord says which member owns a shard; the key is on that member's
// lease.
type ownerRecord struct {
	NodeID string `json:"node_id"`
	Addr   string `json:"addr"`
	Lease  int64  `json:"lease"`
	// Term is, for a replicated shard, the raft term its leader claimed
	// it in (ClaimLeader): a claim never replaces a later term's.
	Term uint64 `json:"term,omitempty"`
	// epoch is the key's mod revision (not stored: etcd gives it).
	epoch int64
}

func (o ownerRecord) wire() wire.Owner {
	return wire.Owner{NodeID: o.NodeID, Addr: o.Addr, Generation: uint64(o.epoch)}
}

// keys builds and parses the etcd keys under one prefix.
type keys struct{ prefix string }

func (k keys) name() string              { return k.prefix + "/name" }
func (k keys) members() string           { return k.prefix + "/members/" }
func (k keys) member(node string) string { return k.members() + node }
func (k keys) drains() string            { return k.prefix + "/drain/" }
func (k keys) drain(node string) string  { return k.drains() + node }
func (k keys) streams() string           { return k.prefix + "/streams/" }
func (k keys) stream(s wire.Scope) string {
	return k.streams() + s.String()
}
func (k keys) owners() string           { return k.prefix + "/owners/" }
func (k keys) owner(sk ShardKey) string { return k.owners() + shardPath(sk) }
func (k keys) homes() string            { return k.prefix + "/homes/" }
func (k keys) home(sk ShardKey) string  { return k.homes() + shardPath(sk) }
func (k keys) producers() string        { return k.prefix + "/producers/" }
func (k keys) producer(id uint64) string {
	return k.producers() + strconv.FormatUint(id, 10)
}
func (k keys) streamOwners(s wire.Scope) string { return k.owners() + s.String() + "/" }
func (k keys) streamHomes(s wire.Scope) string  { return k.homes() + s.String() + "/" }

func shardPath(sk ShardKey) string {
	return sk.Scope.String() + "/" + strconv.FormatUint(uint64(sk.Shard), 10)
}

// parseShardKey reads "<t>/<ns>/<s>/<n>" after a prefix.
func parseShardKey(rest string) (ShardKey, bool) {
	parts := strings.Split(rest, "/")
	if len(parts) != 4 {
		return ShardKey{}, false
	}
	n, err := strconv.ParseUint(parts[3], 10, 32)
	if err != nil {
		return ShardKey{}, false
	}
	return ShardKey{Scope: wire.Scope{Tenant: parts[0], Namespace: parts[1], Stream: parts[2]}, Shard: uint32(n)}, true
}

// parseScope reads "<t>/<ns>/<s>" after a prefix.
func parseScope(rest string) (wire.Scope, bool) {
	parts := strings.Split(rest, "/")
	if len(parts) != 3 {
		return wire.Scope{}, false
	}
	return wire.Scope{Tenant: parts[0], Namespace: parts[1], Stream: parts[2]}, true
}

func decode[T any](b []byte) (T, error) {
	var v T
	err := json.Unmarshal(b, &v)
	return v, err
}

func encode(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only our own plain records are encoded
	}
	return string(b)
}
