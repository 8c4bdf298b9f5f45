package kafka

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/wire"
)

// Committed offsets. A group's commits are kept durably beside the
// streams: one durable stream per tenant, `__kafka/offsets`, one record
// per committed partition offset (JSON: group, topic, partition, offset,
// metadata), appended before the commit is answered; a tombstone
// (Deleted) forgets the group's commit of its partition, or with no topic
// every commit of the group (DeleteGroups, OffsetDelete: groupadmin.go). A commit's topic is
// kept as its stream's full `<namespace>.<stream>` (commitKey), whatever
// name the client gave, so that `orders` and `default.orders` share their
// commits and a change of the default namespace does not move them. The
// namespace `__kafka` is reserved: no topic maps to it (topicMapping). After a
// restart, the first group request of a tenant reads that stream back,
// the last commit of each partition winning. Deleting the stream forgets
// every commit of the tenant.

// offsetsNamespace and offsetsStream name each tenant's commit log.
const (
	offsetsNamespace = "__kafka"
	offsetsStream    = "offsets"
)

// commitRecord is one committed offset as the commit log stores it.
type commitRecord struct {
	Group     string  `json:"g"`
	Topic     string  `json:"t"`
	Partition int32   `json:"p"`
	Offset    int64   `json:"o"`
	Metadata  *string `json:"m,omitempty"`
	// Deleted marks a tombstone. Its offset is -1, so a broker that
	// predates tombstones reads it as no commit.
	Deleted bool `json:"x,omitempty"`
}

// topicPartition is a commit's partition; topic is its commitKey.
type topicPartition struct {
	topic     string
	partition int32
}

type committed struct {
	offset   int64
	metadata *string
}

// offsetStore is every group's committed offsets, loaded per tenant from
// its commit log on first use.
type offsetStore struct {
	load sync.Mutex // held while a tenant's log is read, so it is read once
	mu   struct {
		sync.Mutex
		loaded map[string]bool
		groups map[groupKey]map[topicPartition]committed
	}
}

func (s *offsetStore) init() {
	s.mu.loaded = make(map[string]bool)
	s.mu.groups = make(map[groupKey]map[topicPartition]committed)
}

func (s *offsetStore) empty(k groupKey) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.mu.groups[k]) == 0
}

func (s *offsetStore) put(k groupKey, tp topicPartition, c committed) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.mu.groups[k]
	if g == nil {
		g = make(map[topicPartition]committed)
		s.mu.groups[k] = g
	}
	g[tp] = c
}

// drop forgets some of a group's commits.
func (s *offsetStore) drop(k groupKey, tps []topicPartition) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, tp := range tps {
		delete(s.mu.groups[k], tp)
	}
	if len(s.mu.groups[k]) == 0 {
		delete(s.mu.groups, k)
	}
}

// dropGroup forgets every commit of a group.
func (s *offsetStore) dropGroup(k groupKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.mu.groups, k)
}

// groupsOf names tenant's groups that have commits.
func (s *offsetStore) groupsOf(tenant string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for k, g := range s.mu.groups {
		if k.tenant == tenant && len(g) > 0 {
			out = append(out, k.group)
		}
	}
	return out
}

// get returns a group's commits, all of them when topics is nil.
func (s *offsetStore) get(k groupKey) map[topicPartition]committed {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[topicPartition]committed, len(s.mu.groups[k]))
	for tp, c := range s.mu.groups[k] {
		out[tp] = c
	}
	return out
}

// ensure reads tenant's commit log once, with the session sess, creating
// the log's stream when it does not exist.
func (s *offsetStore) ensure(ctx context.Context, sess service.Session, names topicMapping, tenant string) error {
	s.mu.Lock()
	done := s.mu.loaded[tenant]
	s.mu.Unlock()
	if done {
		return nil
	}
	s.load.Lock()
	defer s.load.Unlock()
	s.mu.Lock()
	done = s.mu.loaded[tenant]
	s.mu.Unlock()
	if done {
		return nil
	}
	scope := offsetsScope(tenant)
	if _, err := sess.CreateStream(ctx, offsetsSpec(tenant)); err != nil {
		return fmt.Errorf("kafka: the commit log %s: %w", scope, err)
	}
	for from := uint64(0); ; {
		page, err := sess.Read(ctx, &service.Read{Scope: scope, From: from})
		if err != nil {
			return fmt.Errorf("kafka: read the commit log %s: %w", scope, err)
		}
		for _, r := range page.Records {
			var c commitRecord
			if json.Unmarshal(r.Value, &c) != nil {
				continue // not ours: someone wrote to the reserved stream
			}
			if c.Deleted && c.Topic == "" {
				s.dropGroup(groupKey{tenant, c.Group})
				continue
			}
			// Records are keyed as they are written (commitKey); mapping
			// them again keeps the commits of a client that named the topic
			// otherwise before the keys were.
			key, ok := names.commitKey(tenant, c.Topic)
			if !ok {
				continue
			}
			tp := topicPartition{key, c.Partition}
			if c.Deleted {
				s.drop(groupKey{tenant, c.Group}, []topicPartition{tp})
				continue
			}
			s.put(groupKey{tenant, c.Group}, tp, committed{c.Offset, c.Metadata})
		}
		if page.Next >= page.Committed || page.Next == from {
			break
		}
		from = page.Next
	}
	s.mu.Lock()
	s.mu.loaded[tenant] = true
	s.mu.Unlock()
	return nil
}

func offsetsScope(tenant string) wire.Scope {
	return wire.Scope{Tenant: tenant, Namespace: offsetsNamespace, Stream: offsetsStream}
}

// appendCommits writes commits to the tenant's commit log and waits for
// the ack (durable per the broker's fsync policy).
func appendCommits(ctx context.Context, sess service.Session, tenant string, recs []commitRecord) error {
	payloads := make([][]byte, len(recs))
	for i, r := range recs {
		payloads[i], _ = json.Marshal(r)
	}
	done := make(chan error, 1)
	err := sess.Publish(ctx, &service.Publish{Scope: offsetsScope(tenant), Payloads: payloads}, func(r service.PublishResult) { done <- r.Err })
	if err != nil {
		return err
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// handleOffsetCommit checks the member (commitCode), writes the commits to
// the commit log, then keeps them. A topic that maps to no stream is
// refused INVALID_TOPIC_EXCEPTION, the rest committed.
func (c *conn) handleOffsetCommit(h header, r *kmsg.OffsetCommitRequest) *pending {
	resp := r.ResponseKind().(*kmsg.OffsetCommitResponse)
	k := groupKey{c.tenant, r.Group}
	code := c.groupCode(r.Group)
	if code == 0 {
		code = c.l.groups.commitCode(k, r.MemberID, r.InstanceID, r.Generation)
	}
	keys := make([]string, len(r.Topics))
	var recs []commitRecord
	for i, t := range r.Topics {
		key, ok := c.l.names().commitKey(c.tenant, t.Topic)
		if !ok {
			continue
		}
		keys[i] = key
		for _, p := range t.Partitions {
			recs = append(recs, commitRecord{Group: r.Group, Topic: key, Partition: p.Partition, Offset: p.Offset, Metadata: p.Metadata})
		}
	}
	if code == 0 && len(recs) > 0 {
		if err := appendCommits(c.ctx, c.sess, c.tenant, recs); err != nil {
			code = errorCode(err)
		}
	}
	for i, t := range r.Topics {
		rt := kmsg.NewOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		tcode := code
		if tcode == 0 && keys[i] == "" {
			tcode = kerr.InvalidTopicException.Code
		}
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetCommitResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, tcode
			rt.Partitions = append(rt.Partitions, rp)
			if tcode == 0 {
				c.l.groups.offsets.put(k, topicPartition{keys[i], p.Partition}, committed{p.Offset, p.Metadata})
			}
		}
		resp.Topics = append(resp.Topics, rt)
	}
	c.count(h.key, code)
	return answered(h.correlation, resp)
}

// groupCode checks a group id and loads the tenant's commits.
func (c *conn) groupCode(group string) int16 {
	if group == "" {
		return kerr.InvalidGroupID.Code
	}
	return c.groupsReady()
}

// groupsReady is 0 when this listener coordinates the tenant's groups
// and has loaded its commits.
func (c *conn) groupsReady() int16 {
	if c.l.cfg.Cluster != nil {
		if code := c.checkCoordinator(c.ctx); code != 0 {
			return code
		}
	}
	if err := c.l.groups.offsets.ensure(c.ctx, c.sess, c.l.names(), c.tenant); err != nil {
		c.l.cfg.Log.Warn().Err(err).Str("tenant", c.tenant).Msg("kafka: group offsets unavailable")
		if errors.Is(err, wire.ErrForbidden) || errors.Is(err, wire.ErrUnauthenticated) {
			return kerr.GroupAuthorizationFailed.Code
		}
		return kerr.CoordinatorNotAvailable.Code
	}
	return 0
}

// handleOffsetFetch answers a group's commits (v1–v7: one group).
func (c *conn) handleOffsetFetch(h header, r *kmsg.OffsetFetchRequest) *pending {
	resp := r.ResponseKind().(*kmsg.OffsetFetchResponse)
	resp.ErrorCode = c.groupCode(r.Group)
	if resp.ErrorCode != 0 {
		c.count(h.key, resp.ErrorCode)
		return answered(h.correlation, resp)
	}
	names := c.l.names()
	commits := c.l.groups.offsets.get(groupKey{c.tenant, r.Group})
	topics := r.Topics
	if topics == nil { // every topic the group committed, by its topic name
		byTopic := map[string][]int32{}
		for tp := range commits {
			s, _ := names.scope(c.tenant, tp.topic)
			if name, ok := names.topic(s); ok {
				byTopic[name] = append(byTopic[name], tp.partition)
			}
		}
		for t, ps := range byTopic {
			topics = append(topics, kmsg.OffsetFetchRequestTopic{Topic: t, Partitions: ps})
		}
	}
	for _, t := range topics {
		rt := kmsg.NewOffsetFetchResponseTopic()
		rt.Topic = t.Topic
		key, ok := names.commitKey(c.tenant, t.Topic)
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetFetchResponseTopicPartition()
			rp.Partition, rp.Offset, rp.LeaderEpoch = p, -1, -1
			if !ok {
				rp.ErrorCode = kerr.InvalidTopicException.Code
			}
			if cm, ok := commits[topicPartition{key, p}]; ok {
				rp.Offset, rp.Metadata = cm.offset, cm.metadata
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	c.count(h.key, 0)
	return answered(h.correlation, resp)
}

// handleFindCoordinator names the tenant's coordinator for every group
// (this broker, or in a cluster the owner of the tenant's commit log);
// transaction coordinators are refused, as transactions are.
func (c *conn) handleFindCoordinator(h header, r *kmsg.FindCoordinatorRequest) *pending {
	resp := r.ResponseKind().(*kmsg.FindCoordinatorResponse)
	v := c.l.view()
	id, addr, code := c.coordinatorOf(c.ctx, v)
	host, port := c.l.advertised()
	if addr != "" {
		host, port = splitHostPort(addr)
	}
	if r.CoordinatorType != 0 {
		code = kerr.TransactionalIDAuthorizationFailed.Code
	}
	if code != 0 {
		id, host, port = -1, "", -1
	}
	keys := r.CoordinatorKeys
	if r.Version < 4 {
		keys = []string{r.CoordinatorKey}
	}
	for _, key := range keys {
		co := kmsg.NewFindCoordinatorResponseCoordinator()
		co.Key, co.NodeID, co.Host, co.Port, co.ErrorCode = key, id, host, port, code
		resp.Coordinators = append(resp.Coordinators, co)
	}
	resp.ErrorCode, resp.NodeID, resp.Host, resp.Port = code, id, host, port
	c.count(h.key, code)
	return answered(h.correlation, resp)
}

// The group membership requests, handed to the coordinator.

func (c *conn) handleJoinGroup(h header, r *kmsg.JoinGroupRequest) *pending {
	if code := c.groupCode(r.Group); code != 0 {
		resp := r.ResponseKind().(*kmsg.JoinGroupResponse)
		resp.ErrorCode, resp.Generation = code, -1
		c.count(h.key, code)
		return answered(h.correlation, resp)
	}
	c.count(h.key, 0)
	from := joiner{conn: c.id, clientID: h.clientID, clientHost: remoteHost(c.nc.RemoteAddr())}
	return c.l.groups.join(groupKey{c.tenant, r.Group}, h.correlation, r, from)
}

func (c *conn) handleSyncGroup(h header, r *kmsg.SyncGroupRequest) *pending {
	c.count(h.key, 0)
	return c.l.groups.sync(groupKey{c.tenant, r.Group}, h.correlation, r)
}

func (c *conn) handleHeartbeat(h header, r *kmsg.HeartbeatRequest) *pending {
	resp := r.ResponseKind().(*kmsg.HeartbeatResponse)
	resp.ErrorCode = c.l.groups.heartbeat(groupKey{c.tenant, r.Group}, r)
	c.count(h.key, resp.ErrorCode)
	return answered(h.correlation, resp)
}

func (c *conn) handleLeaveGroup(h header, r *kmsg.LeaveGroupRequest) *pending {
	resp := r.ResponseKind().(*kmsg.LeaveGroupResponse)
	who := []leaving{{id: r.MemberID}}
	if r.Version >= 3 {
		who = who[:0]
		for _, m := range r.Members {
			who = append(who, leaving{id: m.MemberID, instance: m.InstanceID})
		}
	}
	codes := c.l.groups.leave(groupKey{c.tenant, r.Group}, who)
	if r.Version < 3 {
		resp.ErrorCode = codes[0]
	}
	for i, m := range r.Members {
		lm := kmsg.NewLeaveGroupResponseMember()
		lm.MemberID, lm.InstanceID, lm.ErrorCode = m.MemberID, m.InstanceID, codes[i]
		resp.Members = append(resp.Members, lm)
	}
	c.count(h.key, resp.ErrorCode)
	return answered(h.correlation, resp)
}
