package kafka

import (
	"context"
	"errors"
	"hash/fnv"
	"maps"
	"net"
	"slices"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/wire"
)

// In a cluster every member runs its own listener, and Metadata lists each
// live member that has one as a broker: a partition's leader is the member
// that owns its shard (service.Session.ShardOwners; for a replicated shard,
// the raft leader that claimed it), so a client sends each partition's
// Produce and Fetch to its owner. A member that does not own a shard
// refuses it not_leader, which is NOT_LEADER_OR_FOLLOWER: the client reads
// Metadata again and goes to the owner.
//
// Kafka broker ids are int32s and Felix node ids strings: a member's id is
// the FNV-1a hash of its node id, 31 bits, so every member (and a client
// that talks to several) gets the same id for it whatever the membership,
// and an id survives the member's restarts. Two node ids whose hashes
// collide are told apart by probing upwards in node id order; that order
// is only the same on every member while they see the same membership,
// one chance in 2^31 per pair of members.
//
// Every group has one coordinator, the same on every member: the owner of
// the tenant's commit log (`__kafka/offsets`, one shard). Its commits are
// written there locally, and its groups live in that member's listener; a
// group request at another member is answered NOT_COORDINATOR, so the
// client asks FindCoordinator again.

// Cluster is what a listener in a cluster member knows of the cluster.
// Its methods must not block: they read the member's mirror of etcd.
type Cluster interface {
	// Self is this member's node id, "" while it has not joined.
	Self() string
	// KafkaMembers is every live member's Kafka address, by node id.
	KafkaMembers() map[string]string
	// Replicas is the node ids of a replicated shard's replica set; nil
	// when the shard is not replicated (or its set is not written yet).
	Replicas(scope wire.Scope, shard uint32) []string
}

// brokerView is the brokers a Metadata or FindCoordinator answer names.
type brokerView struct {
	self    int32
	ids     map[string]int32 // node id → broker id; nil for a single broker
	addrs   map[string]string
	brokers []kmsg.MetadataResponseBroker
}

// view is the brokers as this listener sees them now: itself alone as
// node 0 for a single broker (or a member that has not joined yet, whose
// shards are refused anyway), else every live member with a listener.
func (l *Listener) view() brokerView {
	host, port := l.advertised()
	self := ""
	if l.cfg.Cluster != nil {
		self = l.cfg.Cluster.Self()
	}
	if self == "" {
		b := kmsg.NewMetadataResponseBroker()
		b.NodeID, b.Host, b.Port = nodeID, host, port
		return brokerView{self: nodeID, brokers: []kmsg.MetadataResponseBroker{b}}
	}
	addrs := l.cfg.Cluster.KafkaMembers()
	addrs[self] = net.JoinHostPort(host, strconv.Itoa(int(port)))
	v := brokerView{ids: brokerIDs(addrs), addrs: addrs}
	v.self = v.ids[self]
	for _, node := range slices.Sorted(maps.Keys(addrs)) {
		b := kmsg.NewMetadataResponseBroker()
		b.NodeID = v.ids[node]
		b.Host, b.Port = splitHostPort(addrs[node])
		v.brokers = append(v.brokers, b)
	}
	return v
}

// handleDescribeCluster lists the brokers as Metadata does, this one as
// the controller (Felix has none; admin clients only show it). Only
// broker endpoints exist (v1's endpoint type 1).
func (c *conn) handleDescribeCluster(h header, r *kmsg.DescribeClusterRequest) *pending {
	resp := r.ResponseKind().(*kmsg.DescribeClusterResponse)
	v := c.l.view()
	resp.ClusterID, resp.ControllerID, resp.EndpointType = "felix", v.self, r.EndpointType
	if r.Version >= 1 && r.EndpointType != 1 {
		msg := "only broker endpoints (type 1) exist: Felix has no controllers"
		resp.ErrorCode, resp.ErrorMessage = kerr.UnsupportedEndpointType.Code, &msg
		c.count(h.key, resp.ErrorCode)
		return answered(h.correlation, resp)
	}
	for _, b := range v.brokers {
		rb := kmsg.NewDescribeClusterResponseBroker()
		rb.NodeID, rb.Host, rb.Port = b.NodeID, b.Host, b.Port
		resp.Brokers = append(resp.Brokers, rb)
	}
	c.count(h.key, 0)
	return answered(h.correlation, resp)
}

// brokerIDs maps node ids to broker ids (see above).
func brokerIDs(addrs map[string]string) map[string]int32 {
	ids := make(map[string]int32, len(addrs))
	used := make(map[int32]bool, len(addrs))
	for _, node := range slices.Sorted(maps.Keys(addrs)) {
		h := fnv.New32a()
		_, _ = h.Write([]byte(node))
		id := int32(h.Sum32() & 0x7fffffff)
		for used[id] {
			id = (id + 1) & 0x7fffffff
		}
		used[id] = true
		ids[node] = id
	}
	return ids
}

// clusterPartitions fills mt's partitions from the owners of its shards:
// LEADER_NOT_AVAILABLE (retriable) for one without a live owner that has
// a listener.
func (c *conn) clusterPartitions(ctx context.Context, mt *kmsg.MetadataResponseTopic, t topicInfo, v brokerView) {
	top, err := c.sess.ShardOwners(ctx, t.scope)
	if err != nil {
		mt.ErrorCode = ownersCode(err)
		return
	}
	for _, o := range top.Owners {
		p := kmsg.NewMetadataResponseTopicPartition()
		p.Partition = int32(o.Shard)
		leader, ok := v.ids[o.Owner.NodeID]
		if !o.Available || !ok {
			p.Leader, p.ErrorCode = -1, kerr.LeaderNotAvailable.Code
			p.Replicas, p.ISR = []int32{}, []int32{}
			mt.Partitions = append(mt.Partitions, p)
			continue
		}
		p.Leader = leader
		p.Replicas = []int32{leader}
		for _, node := range c.l.cfg.Cluster.Replicas(t.scope, o.Shard) {
			if id, ok := v.ids[node]; ok && id != leader {
				p.Replicas = append(p.Replicas, id)
			}
		}
		// Raft's progress is not reported here: the ISR is the leader,
		// which is all a client acts on.
		p.ISR = []int32{leader}
		mt.Partitions = append(mt.Partitions, p)
	}
}

// ownersCode maps a ShardOwners refusal: a member that has not joined, or
// shards not placed yet, are retriable.
func ownersCode(err error) int16 {
	if errors.Is(err, wire.ErrUnavailable) || errors.Is(err, wire.ErrNotLeader) {
		return kerr.LeaderNotAvailable.Code
	}
	return topicCode(err)
}

// coordinatorOf is the member that coordinates the tenant's groups: the
// owner of its commit log's shard, made here when the log does not exist.
// A single broker is its own coordinator.
func (c *conn) coordinatorOf(ctx context.Context, v brokerView) (int32, string, int16) {
	if v.ids == nil {
		return v.self, "", 0
	}
	scope := offsetsScope(c.tenant)
	if _, err := c.sess.Stream(ctx, scope); errors.Is(err, wire.ErrNotFound) {
		_, err = c.sess.CreateStream(ctx, offsetsSpec(c.tenant))
		if err != nil {
			return -1, "", coordinatorCode(err)
		}
	} else if err != nil {
		return -1, "", coordinatorCode(err)
	}
	top, err := c.sess.ShardOwners(ctx, scope)
	if err != nil {
		return -1, "", coordinatorCode(err)
	}
	if len(top.Owners) == 0 || !top.Owners[0].Available {
		return -1, "", kerr.CoordinatorNotAvailable.Code
	}
	node := top.Owners[0].Owner.NodeID
	id, ok := v.ids[node]
	if !ok {
		return -1, "", kerr.CoordinatorNotAvailable.Code
	}
	return id, v.addrs[node], 0
}

func coordinatorCode(err error) int16 {
	if errors.Is(err, wire.ErrForbidden) || errors.Is(err, wire.ErrUnauthenticated) {
		return kerr.GroupAuthorizationFailed.Code
	}
	return kerr.CoordinatorNotAvailable.Code
}

// checkCoordinator is 0 when this listener coordinates the tenant's
// groups, else NOT_COORDINATOR (or why it cannot tell). A member that is
// not the coordinator forgets the tenant's commits it had loaded: they go
// stale once another member writes the log, and are read again should
// the log come back here.
func (c *conn) checkCoordinator(ctx context.Context) int16 {
	v := c.l.view()
	id, _, code := c.coordinatorOf(ctx, v)
	if code == 0 && id != v.self {
		code = kerr.NotCoordinator.Code
	}
	if code != 0 {
		c.l.groups.offsets.forget(c.tenant)
	}
	return code
}

// forget drops a tenant's loaded commits, so the next group request reads
// its log again.
func (s *offsetStore) forget(tenant string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.mu.loaded[tenant] {
		return
	}
	delete(s.mu.loaded, tenant)
	for k := range s.mu.groups {
		if k.tenant == tenant {
			delete(s.mu.groups, k)
		}
	}
}

// offsetsSpec is the definition of tenant's commit log.
func offsetsSpec(tenant string) *service.StreamSpec {
	return &service.StreamSpec{Scope: offsetsScope(tenant), Shards: 1, Durable: true}
}

// splitHostPort splits a host:port for Metadata; an address without a
// port gives port 0.
func splitHostPort(addr string) (string, int32) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr, 0
	}
	p, _ := net.LookupPort("tcp", port)
	return host, int32(p)
}
