package kafka

import (
	"cmp"
	"context"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Group administration: ListGroups, DescribeGroups, DeleteGroups and
// OffsetDelete over the coordinator's groups (groups.go) and their commits
// (offsets.go). A tenant's Kafka groups live in its __kafka/offsets
// stream, so their rights are the group rights there
// (service.Session.AuthorizeGroups): group.consume or group.manage to
// list and describe them, group.manage to delete them or their offsets.
// In a cluster only the tenant's coordinator has its groups: ListGroups
// elsewhere lists none (admin clients ask every broker and merge), the
// others answer NOT_COORDINATOR.
//
// A group exists while it has members or commits, as in Kafka. Deleting
// one appends a tombstone to the commit log (commitRecord.Deleted), so it
// stays deleted after a restart.

// Kafka's names of a classic group's states.
var groupStateNames = [...]string{
	groupEmpty:      "Empty",
	groupPreparing:  "PreparingRebalance",
	groupCompleting: "CompletingRebalance",
	groupStable:     "Stable",
}

// deadGroup is the state DescribeGroups gives a group that does not exist.
const deadGroup = "Dead"

// groupListing is one group as ListGroups and DescribeGroups see it.
type groupListing struct {
	name, state, protocolType, protocol string
	members                             []kmsg.DescribeGroupsResponseGroupMember
}

// listGroups is every group of tenant: those with members and those with
// commits only (Empty).
func (co *coordinator) listGroups(tenant string) []groupListing {
	co.mu.Lock()
	defer co.mu.Unlock()
	var out []groupListing
	seen := map[string]bool{}
	for k, g := range co.mu.groups {
		if k.tenant != tenant || (len(g.members) == 0 && co.offsets.empty(k)) {
			continue
		}
		seen[k.group] = true
		out = append(out, groupListing{name: k.group, state: groupStateNames[g.state], protocolType: g.protocolType})
	}
	for _, name := range co.offsets.groupsOf(tenant) {
		if !seen[name] {
			out = append(out, groupListing{name: name, state: groupStateNames[groupEmpty], protocolType: "consumer"})
		}
	}
	slices.SortFunc(out, func(a, b groupListing) int { return cmp.Compare(a.name, b.name) })
	return out
}

// describeGroup is one group with its members, or false when it does not
// exist.
func (co *coordinator) describeGroup(k groupKey) (groupListing, bool) {
	co.mu.Lock()
	defer co.mu.Unlock()
	g := co.mu.groups[k]
	if g == nil || len(g.members) == 0 {
		if co.offsets.empty(k) {
			return groupListing{}, false
		}
		d := groupListing{name: k.group, state: groupStateNames[groupEmpty], protocolType: "consumer"}
		if g != nil && g.protocolType != "" {
			d.protocolType = g.protocolType
		}
		return d, true
	}
	d := groupListing{name: k.group, state: groupStateNames[g.state], protocolType: g.protocolType}
	if g.state == groupStable || g.state == groupCompleting {
		d.protocol = g.protocol
	}
	for _, id := range slices.Sorted(maps.Keys(g.members)) {
		m := g.members[id]
		dm := kmsg.NewDescribeGroupsResponseGroupMember()
		dm.MemberID, dm.InstanceID, dm.ClientID, dm.ClientHost = m.id, m.instance, m.clientID, m.clientHost
		dm.ProtocolMetadata = []byte{}
		if d.protocol != "" {
			dm.ProtocolMetadata = protocolMetadata(m, d.protocol)
		}
		dm.MemberAssignment = []byte{}
		if g.state == groupStable && m.assigned != nil {
			dm.MemberAssignment = m.assigned
		}
		d.members = append(d.members, dm)
	}
	return d, true
}

// deletable is 0 when a group can be deleted: it exists and has no
// members.
func (co *coordinator) deletable(k groupKey) int16 {
	co.mu.Lock()
	defer co.mu.Unlock()
	g := co.mu.groups[k]
	switch {
	case g != nil && len(g.members) > 0:
		return kerr.NonEmptyGroup.Code
	case co.offsets.empty(k):
		return kerr.GroupIDNotFound.Code
	}
	return 0
}

// forgetGroup drops a deleted group's state and commits.
func (co *coordinator) forgetGroup(k groupKey) {
	co.mu.Lock()
	defer co.mu.Unlock()
	if g := co.mu.groups[k]; g != nil && len(g.members) == 0 {
		delete(co.mu.groups, k)
	}
	co.offsets.dropGroup(k)
}

// subscribedTopics is the commit keys of the topics a consumer group's
// members subscribe to (their consumer protocol metadata), and whether
// the group has members at all.
func (co *coordinator) subscribedTopics(k groupKey, names topicMapping) (map[string]bool, bool) {
	co.mu.Lock()
	defer co.mu.Unlock()
	g := co.mu.groups[k]
	if g == nil || len(g.members) == 0 {
		return nil, false
	}
	topics := map[string]bool{}
	for _, m := range g.members {
		for _, p := range m.protocols {
			var meta kmsg.ConsumerMemberMetadata
			if meta.ReadFrom(p.Metadata) != nil {
				continue
			}
			for _, t := range meta.Topics {
				if key, ok := names.commitKey(k.tenant, t); ok {
					topics[key] = true
				}
			}
		}
	}
	return topics, true
}

// groupsReadyCode checks that this listener serves the tenant's groups and
// may, with manage, change them: 0, or the code refusing every group of
// the request.
func (c *conn) groupsReadyCode(manage bool) int16 {
	if code := c.groupsReady(); code != 0 {
		return code
	}
	if c.sess.AuthorizeGroups(offsetsScope(c.tenant), manage) != nil {
		return kerr.GroupAuthorizationFailed.Code
	}
	return 0
}

// handleListGroups lists the tenant's groups, of the states and types
// asked (v4, v5).
func (c *conn) handleListGroups(h header, r *kmsg.ListGroupsRequest) *pending {
	resp := r.ResponseKind().(*kmsg.ListGroupsResponse)
	if c.l.cfg.Cluster != nil && c.checkCoordinator(c.ctx) == kerr.NotCoordinator.Code {
		c.count(h.key, 0) // another member has them
		return answered(h.correlation, resp)
	}
	resp.ErrorCode = c.groupsReadyCode(false)
	if resp.ErrorCode == 0 && (len(r.TypesFilter) == 0 || slices.ContainsFunc(r.TypesFilter, isClassic)) {
		for _, g := range c.l.groups.listGroups(c.tenant) {
			if len(r.StatesFilter) > 0 && !slices.Contains(r.StatesFilter, g.state) {
				continue
			}
			rg := kmsg.NewListGroupsResponseGroup()
			rg.Group, rg.ProtocolType, rg.GroupState, rg.GroupType = g.name, g.protocolType, g.state, "classic"
			resp.Groups = append(resp.Groups, rg)
		}
	}
	c.count(h.key, resp.ErrorCode)
	return answered(h.correlation, resp)
}

func isClassic(t string) bool { return t == "classic" || t == "Classic" }

// handleDescribeGroups describes each group; one that does not exist is
// Dead, as Kafka has it.
func (c *conn) handleDescribeGroups(h header, r *kmsg.DescribeGroupsRequest) *pending {
	resp := r.ResponseKind().(*kmsg.DescribeGroupsResponse)
	code := c.groupsReadyCode(false)
	for _, name := range r.Groups {
		rg := kmsg.NewDescribeGroupsResponseGroup()
		rg.Group, rg.ErrorCode, rg.State = name, code, deadGroup
		if code == 0 && name == "" {
			rg.ErrorCode = kerr.InvalidGroupID.Code
		}
		if rg.ErrorCode == 0 {
			if d, ok := c.l.groups.describeGroup(groupKey{c.tenant, name}); ok {
				rg.State, rg.ProtocolType, rg.Protocol, rg.Members = d.state, d.protocolType, d.protocol, d.members
			}
		}
		resp.Groups = append(resp.Groups, rg)
	}
	c.count(h.key, code)
	return answered(h.correlation, resp)
}

// handleDeleteGroups deletes each group that exists and has no members.
func (c *conn) handleDeleteGroups(h header, r *kmsg.DeleteGroupsRequest) *pending {
	resp := r.ResponseKind().(*kmsg.DeleteGroupsResponse)
	code := c.groupsReadyCode(true)
	worst := code
	for i, name := range r.Groups {
		rg := kmsg.NewDeleteGroupsResponseGroup()
		rg.Group, rg.ErrorCode = name, code
		if code == 0 && tooMany(i) != nil {
			rg.ErrorCode = kerr.InvalidRequest.Code
			worst = cmp0(worst, rg.ErrorCode)
		} else if code == 0 {
			rg.ErrorCode = c.deleteGroup(c.ctx, groupKey{c.tenant, name})
			worst = cmp0(worst, rg.ErrorCode)
		}
		resp.Groups = append(resp.Groups, rg)
	}
	c.count(h.key, worst)
	return answered(h.correlation, resp)
}

func (c *conn) deleteGroup(ctx context.Context, k groupKey) int16 {
	if k.group == "" {
		return kerr.InvalidGroupID.Code
	}
	if code := c.l.groups.deletable(k); code != 0 {
		return code
	}
	tomb := commitRecord{Group: k.group, Offset: -1, Deleted: true}
	if err := appendCommits(ctx, c.sess, k.tenant, []commitRecord{tomb}); err != nil {
		return errorCode(err)
	}
	c.l.groups.forgetGroup(k)
	return 0
}

// handleOffsetDelete forgets a group's commits of some partitions,
// refused per partition while a member subscribes to its topic.
func (c *conn) handleOffsetDelete(h header, r *kmsg.OffsetDeleteRequest) *pending {
	resp := r.ResponseKind().(*kmsg.OffsetDeleteResponse)
	k := groupKey{c.tenant, r.Group}
	resp.ErrorCode = c.groupsReadyCode(true)
	if resp.ErrorCode == 0 && r.Group == "" {
		resp.ErrorCode = kerr.InvalidGroupID.Code
	}
	names := c.l.names()
	subscribed, active := c.l.groups.subscribedTopics(k, names)
	if resp.ErrorCode == 0 && !active && c.l.groups.offsets.empty(k) {
		resp.ErrorCode = kerr.GroupIDNotFound.Code
	}
	if resp.ErrorCode != 0 {
		c.count(h.key, resp.ErrorCode)
		return answered(h.correlation, resp)
	}
	var tombs []commitRecord
	var drop []topicPartition
	for _, t := range r.Topics {
		rt := kmsg.NewOffsetDeleteResponseTopic()
		rt.Topic = t.Topic
		key, ok := names.commitKey(c.tenant, t.Topic)
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetDeleteResponseTopicPartition()
			rp.Partition = p.Partition
			switch {
			case !ok:
				rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			case subscribed[key]:
				rp.ErrorCode = kerr.GroupSubscribedToTopic.Code
			default:
				tombs = append(tombs, commitRecord{Group: r.Group, Topic: key, Partition: p.Partition, Offset: -1, Deleted: true})
				drop = append(drop, topicPartition{key, p.Partition})
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	if len(tombs) > 0 {
		if err := appendCommits(c.ctx, c.sess, c.tenant, tombs); err != nil {
			resp.ErrorCode, resp.Topics = errorCode(err), nil
			c.count(h.key, resp.ErrorCode)
			return answered(h.correlation, resp)
		}
		c.l.groups.offsets.drop(k, drop)
	}
	c.count(h.key, 0)
	return answered(h.correlation, resp)
}
