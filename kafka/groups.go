package kafka

import (
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The classic consumer group protocol (JoinGroup, SyncGroup, Heartbeat,
// LeaveGroup), coordinated by the broker the client is connected to: a
// single broker is every group's coordinator. Beyond the reference, which
// refuses FindCoordinator.
//
// A group moves empty → preparing (a rebalance: every member must send
// JoinGroup again, within the rebalance timeout) → completing (the
// members have their JoinGroup answers; the leader, which got every
// member's metadata, sends the assignment in SyncGroup) → stable (every
// SyncGroup answered with the member's assignment). Any JoinGroup, a
// LeaveGroup, or a member whose session expires starts a rebalance; the
// others learn of it from Heartbeat (REBALANCE_IN_PROGRESS) and join again.
// The coordinator assigns nothing itself: the leader's client does.
//
// State lives in the coordinator under one mutex, touched only by the
// handlers (from connections' read loops) and the expiry ticker. A member
// waiting in JoinGroup or SyncGroup is a pending answer of its connection,
// so it counts against that connection's kafka_max_inflight.

// groupState is where a group is in a rebalance.
type groupState uint8

const (
	groupEmpty groupState = iota
	groupPreparing
	groupCompleting
	groupStable
)

// groupTick is how often the coordinator expires members and ends
// rebalances whose timeout passed.
const groupTick = 100 * time.Millisecond

// Bounds on what clients can make the coordinator hold, as Apache Kafka's
// group.min.session.timeout.ms, group.max.session.timeout.ms and
// group.max.size bound it (their defaults), plus a cap on the groups a
// listener keeps: a client that joins without end, or with a session of
// weeks, would otherwise pin members for as long.
const (
	minSessionTimeout = 6 * time.Second
	maxSessionTimeout = 30 * time.Minute
	maxGroupMembers   = 1000
	maxGroups         = 10000
)

type groupKey struct{ tenant, group string }

type member struct {
	id        string
	protocols []kmsg.JoinGroupRequestProtocol
	session   time.Duration
	rebalance time.Duration
	lastSeen  time.Time
	join      *joinWait // waiting for the rebalance to complete
	sync      *syncWait // waiting for the leader's assignment
	assigned  []byte
}

type joinWait struct {
	p    *pending
	corr int32
	resp *kmsg.JoinGroupResponse
}

type syncWait struct {
	p    *pending
	corr int32
	resp *kmsg.SyncGroupResponse
}

type group struct {
	state        groupState
	generation   int32
	protocolType string
	protocol     string
	leader       string
	members      map[string]*member
	deadline     time.Time // of the rebalance under way
}

// coordinator holds every group of the listener.
type coordinator struct {
	stop   chan struct{}
	done   chan struct{}
	nextID uint64
	mu     struct {
		sync.Mutex
		groups map[groupKey]*group
	}
	offsets offsetStore
}

func newCoordinator() *coordinator {
	co := &coordinator{stop: make(chan struct{}), done: make(chan struct{})}
	co.mu.groups = make(map[groupKey]*group)
	co.offsets.init()
	go co.run()
	return co
}

// run expires members until close.
func (co *coordinator) run() {
	defer close(co.done)
	t := time.NewTicker(groupTick)
	defer t.Stop()
	for {
		select {
		case <-co.stop:
			return
		case now := <-t.C:
			co.expire(now)
		}
	}
}

func (co *coordinator) close() {
	close(co.stop)
	<-co.done
}

// expire removes members whose session ended and finishes rebalances past
// their deadline, dropping the members that did not join again.
func (co *coordinator) expire(now time.Time) {
	co.mu.Lock()
	defer co.mu.Unlock()
	for key, g := range co.mu.groups {
		for id, m := range g.members {
			if m.join == nil && m.sync == nil && now.Sub(m.lastSeen) > m.session {
				co.removeLocked(g, id)
			}
		}
		if g.state == groupPreparing && now.After(g.deadline) {
			co.completeLocked(g)
		}
		if len(g.members) == 0 && co.offsets.empty(key) {
			delete(co.mu.groups, key)
		}
	}
}

// groupLocked returns the group, made empty when new. REQUIRES: co.mu.
func (co *coordinator) groupLocked(k groupKey) *group {
	g := co.mu.groups[k]
	if g == nil {
		g = &group{members: make(map[string]*member)}
		co.mu.groups[k] = g
	}
	return g
}

// join handles a JoinGroup: the answer comes when the rebalance completes.
func (co *coordinator) join(k groupKey, corr int32, r *kmsg.JoinGroupRequest, connID uint64) *pending {
	resp := r.ResponseKind().(*kmsg.JoinGroupResponse)
	w := &joinWait{p: newPending(), corr: corr, resp: resp}
	co.mu.Lock()
	defer co.mu.Unlock()
	session := time.Duration(r.SessionTimeoutMillis) * time.Millisecond
	if session < minSessionTimeout || session > maxSessionTimeout {
		return w.fail(kerr.InvalidSessionTimeout.Code)
	}
	if co.mu.groups[k] == nil && len(co.mu.groups) >= maxGroups {
		return w.fail(kerr.CoordinatorNotAvailable.Code)
	}
	g := co.groupLocked(k)
	id := r.MemberID
	switch {
	case id == "" && len(g.members) >= maxGroupMembers:
		return w.fail(kerr.GroupMaxSizeReached.Code)
	case len(r.Protocols) == 0 || (len(g.members) > 0 && r.ProtocolType != g.protocolType):
		return w.fail(kerr.InconsistentGroupProtocol.Code)
	case id != "" && g.members[id] == nil:
		return w.fail(kerr.UnknownMemberID.Code)
	case id == "":
		co.nextID++
		id = fmt.Sprintf("felix-%d-%d", connID, co.nextID)
	}
	m := g.members[id]
	if m == nil {
		m = &member{id: id}
		g.members[id] = m
	}
	if m.join != nil {
		m.join.fail(kerr.RebalanceInProgress.Code) // replaced by this one
	}
	g.protocolType = r.ProtocolType
	m.protocols = r.Protocols
	m.session = session
	m.rebalance = max(time.Duration(r.RebalanceTimeoutMillis)*time.Millisecond, m.session)
	m.lastSeen = time.Now()
	m.join = w
	if g.state != groupPreparing {
		co.rebalanceLocked(g)
	}
	if co.allJoinedLocked(g) {
		co.completeLocked(g)
	}
	return w.p
}

func (w *joinWait) fail(code int16) *pending {
	w.resp.ErrorCode = code
	w.resp.Generation = -1
	w.p.finish(appendResponse(nil, w.corr, w.resp), false)
	return w.p
}

func (w *syncWait) fail(code int16) *pending {
	w.resp.ErrorCode = code
	w.p.finish(appendResponse(nil, w.corr, w.resp), false)
	return w.p
}

// rebalanceLocked starts a rebalance: SyncGroups still waiting belong to
// a generation that will not complete.
func (co *coordinator) rebalanceLocked(g *group) {
	g.state = groupPreparing
	var longest time.Duration
	for _, m := range g.members {
		longest = max(longest, m.rebalance)
		if m.sync != nil {
			m.sync.fail(kerr.RebalanceInProgress.Code)
			m.sync = nil
		}
	}
	g.deadline = time.Now().Add(longest)
}

func (co *coordinator) allJoinedLocked(g *group) bool {
	for _, m := range g.members {
		if m.join == nil {
			return false
		}
	}
	return len(g.members) > 0
}

// completeLocked ends a rebalance: members that did not join again leave,
// a protocol every member supports is chosen, and every JoinGroup is
// answered, the leader's with every member's metadata.
func (co *coordinator) completeLocked(g *group) {
	for id, m := range g.members {
		if m.join == nil {
			delete(g.members, id)
		}
	}
	if len(g.members) == 0 {
		g.state, g.leader = groupEmpty, ""
		return
	}
	if g.members[g.leader] == nil {
		for id := range g.members {
			g.leader = id
			break
		}
	}
	g.protocol = commonProtocol(g)
	if g.protocol == "" {
		for id, m := range g.members {
			m.join.fail(kerr.InconsistentGroupProtocol.Code)
			delete(g.members, id)
		}
		g.state = groupEmpty
		return
	}
	g.generation++
	g.state = groupCompleting
	for _, m := range g.members {
		co.answerJoinLocked(g, m)
	}
}

func (co *coordinator) answerJoinLocked(g *group, m *member) {
	resp := m.join.resp
	resp.Generation = g.generation
	resp.ProtocolType = &g.protocolType
	resp.Protocol = &g.protocol
	resp.LeaderID = g.leader
	resp.MemberID = m.id
	if m.id == g.leader {
		for _, o := range g.members {
			jm := kmsg.NewJoinGroupResponseMember()
			jm.MemberID = o.id
			jm.ProtocolMetadata = protocolMetadata(o, g.protocol)
			resp.Members = append(resp.Members, jm)
		}
	}
	m.join.p.finish(appendResponse(nil, m.join.corr, resp), false)
	m.join = nil
	m.lastSeen = time.Now()
}

// commonProtocol is the first of the leader's protocols every member
// supports, or "".
func commonProtocol(g *group) string {
	for _, p := range g.members[g.leader].protocols {
		all := true
		for _, m := range g.members {
			all = all && protocolMetadata(m, p.Name) != nil
		}
		if all {
			return p.Name
		}
	}
	return ""
}

func protocolMetadata(m *member, name string) []byte {
	for _, p := range m.protocols {
		if p.Name == name {
			if p.Metadata == nil {
				return []byte{}
			}
			return p.Metadata
		}
	}
	return nil
}

// sync handles a SyncGroup: the leader's carries every assignment; the
// others wait for it.
func (co *coordinator) sync(k groupKey, corr int32, r *kmsg.SyncGroupRequest) *pending {
	w := &syncWait{p: newPending(), corr: corr, resp: r.ResponseKind().(*kmsg.SyncGroupResponse)}
	co.mu.Lock()
	defer co.mu.Unlock()
	g := co.mu.groups[k]
	var m *member
	if g != nil {
		m = g.members[r.MemberID]
	}
	switch {
	case m == nil:
		return w.fail(kerr.UnknownMemberID.Code)
	case r.Generation != g.generation:
		return w.fail(kerr.IllegalGeneration.Code)
	case g.state == groupPreparing:
		return w.fail(kerr.RebalanceInProgress.Code)
	}
	m.lastSeen = time.Now()
	m.sync = w
	if m.id == g.leader && g.state == groupCompleting {
		for _, o := range g.members {
			o.assigned = []byte{}
		}
		for _, a := range r.GroupAssignment {
			if o := g.members[a.MemberID]; o != nil {
				o.assigned = a.MemberAssignment
			}
		}
		g.state = groupStable
	}
	if g.state == groupStable {
		for _, o := range g.members {
			if o.sync != nil {
				o.sync.resp.ProtocolType, o.sync.resp.Protocol = &g.protocolType, &g.protocol
				o.sync.resp.MemberAssignment = o.assigned
				o.sync.p.finish(appendResponse(nil, o.sync.corr, o.sync.resp), false)
				o.sync = nil
			}
		}
	}
	return w.p
}

// heartbeat answers whether the member's generation is still current.
func (co *coordinator) heartbeat(k groupKey, r *kmsg.HeartbeatRequest) int16 {
	co.mu.Lock()
	defer co.mu.Unlock()
	return co.checkMemberLocked(k, r.MemberID, r.Generation)
}

// checkMemberLocked is the code for a member's request at generation gen:
// 0 when it may go on. REQUIRES: co.mu.
func (co *coordinator) checkMemberLocked(k groupKey, id string, gen int32) int16 {
	g := co.mu.groups[k]
	var m *member
	if g != nil {
		m = g.members[id]
	}
	switch {
	case m == nil:
		return kerr.UnknownMemberID.Code
	case gen != g.generation:
		return kerr.IllegalGeneration.Code
	case g.state == groupPreparing:
		return kerr.RebalanceInProgress.Code
	}
	m.lastSeen = time.Now()
	return 0
}

// leave removes members; the others rebalance.
func (co *coordinator) leave(k groupKey, ids []string) []int16 {
	co.mu.Lock()
	defer co.mu.Unlock()
	codes := make([]int16, len(ids))
	g := co.mu.groups[k]
	for i, id := range ids {
		if g == nil || g.members[id] == nil {
			codes[i] = kerr.UnknownMemberID.Code
			continue
		}
		co.removeLocked(g, id)
	}
	return codes
}

// removeLocked takes a member out and rebalances the rest. REQUIRES: co.mu.
func (co *coordinator) removeLocked(g *group, id string) {
	m := g.members[id]
	if m.join != nil {
		m.join.fail(kerr.UnknownMemberID.Code)
	}
	if m.sync != nil {
		m.sync.fail(kerr.UnknownMemberID.Code)
	}
	delete(g.members, id)
	if len(g.members) == 0 {
		g.state, g.leader = groupEmpty, ""
		return
	}
	if g.state != groupPreparing {
		co.rebalanceLocked(g)
	}
	if co.allJoinedLocked(g) {
		co.completeLocked(g)
	}
}
