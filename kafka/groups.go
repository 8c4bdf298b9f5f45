package kafka

import (
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The classic consumer group protocol (JoinGroup, SyncGroup, Heartbeat,
// LeaveGroup), coordinated by the broker the client is connected to: a
// single broker is every group's coordinator (in a cluster, the owner of
// the tenant's __kafka/offsets).
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
// Static members (KIP-345, group.instance.id, JoinGroup v5+) are members
// known by their instance id as well: a JoinGroup without a member id for
// an instance the group has takes its place under a new member id (the
// old one is fenced: FENCED_INSTANCE_ID), a LeaveGroup may name the
// instance alone, and a request naming an instance with another member id
// is FENCED_INSTANCE_ID. A static member that closes sends no LeaveGroup,
// so it stays until its session expires or a LeaveGroup names it. Unlike
// Apache Kafka, a static member's return rebalances the group as any join
// does (Kafka hands back its old assignment without one): slower, never
// wrong.
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
	id string
	// instance is a static member's group.instance.id, nil for a dynamic
	// one; clientID and clientHost are for DescribeGroups.
	instance             *string
	clientID, clientHost string
	protocols            []kmsg.JoinGroupRequestProtocol
	session              time.Duration
	rebalance            time.Duration
	lastSeen             time.Time
	join                 *joinWait // waiting for the rebalance to complete
	sync                 *syncWait // waiting for the leader's assignment
	assigned             []byte
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
	static       map[string]string // instance id → member id
	deadline     time.Time         // of the rebalance under way
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
				co.removeLocked(g, id, kerr.UnknownMemberID.Code)
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
		g = &group{members: make(map[string]*member), static: make(map[string]string)}
		co.mu.groups[k] = g
	}
	return g
}

// joiner is who sends a JoinGroup, for DescribeGroups.
type joiner struct {
	conn                 uint64
	clientID, clientHost string
}

// join handles a JoinGroup: the answer comes when the rebalance completes.
func (co *coordinator) join(k groupKey, corr int32, r *kmsg.JoinGroupRequest, from joiner) *pending {
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
	if r.InstanceID != nil {
		known, ok := g.static[*r.InstanceID]
		switch {
		case ok && id != "" && id != known:
			return w.fail(kerr.FencedInstanceID.Code)
		case ok && id == "":
			// The instance came back (a restart): its old membership is
			// fenced and this join takes its place.
			co.removeLocked(g, known, kerr.FencedInstanceID.Code)
		}
	}
	switch {
	case id == "" && len(g.members) >= maxGroupMembers:
		return w.fail(kerr.GroupMaxSizeReached.Code)
	case len(r.Protocols) == 0 || (len(g.members) > 0 && r.ProtocolType != g.protocolType):
		return w.fail(kerr.InconsistentGroupProtocol.Code)
	case id != "" && g.members[id] == nil:
		return w.fail(kerr.UnknownMemberID.Code)
	case id == "":
		co.nextID++
		id = fmt.Sprintf("felix-%d-%d", from.conn, co.nextID)
	}
	m := g.members[id]
	if m == nil {
		m = &member{id: id, instance: r.InstanceID}
		g.members[id] = m
		if m.instance != nil {
			g.static[*m.instance] = id
		}
	}
	m.clientID, m.clientHost = from.clientID, from.clientHost
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
			jm.MemberID, jm.InstanceID = o.id, o.instance
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
	case fenced(g, r.InstanceID, m.id):
		return w.fail(kerr.FencedInstanceID.Code)
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
	return memberCodeLocked(co.mu.groups[k], r.MemberID, r.InstanceID, r.Generation, groupPreparing)
}

// commitCode is the coordinator's check of an OffsetCommit: 0 when its
// commits may be kept. It makes Kafka's checks, in Kafka's order:
//
//   - No member and generation -1 is a simple consumer's commit (one that
//     assigns itself partitions and keeps its offsets in the group):
//     accepted while the group has no members, UNKNOWN_MEMBER_ID while it
//     has, as they own the group's offsets then.
//   - Otherwise the member must be in the group (UNKNOWN_MEMBER_ID) at its
//     generation (ILLEGAL_GENERATION); a group never seen has no
//     generation to match (ILLEGAL_GENERATION).
//   - A member of the current generation commits while the group is
//     stable and also while a rebalance is being prepared: an eager
//     assignor's client commits what it processed when its partitions are
//     revoked, before it joins again, and refusing that commit (as a
//     Heartbeat is refused) made the partitions' next owner process those
//     records again. The member learns of the rebalance from its
//     Heartbeat.
//   - Once the rebalance completes, a member of the new generation that
//     has not synced has no assignment to commit for:
//     REBALANCE_IN_PROGRESS, which the client retries after its SyncGroup.
func (co *coordinator) commitCode(k groupKey, id string, instance *string, gen int32) int16 {
	co.mu.Lock()
	defer co.mu.Unlock()
	g := co.mu.groups[k]
	if gen < 0 && id == "" {
		if g != nil && len(g.members) > 0 {
			return kerr.UnknownMemberID.Code
		}
		return 0
	}
	if g == nil && gen >= 0 {
		return kerr.IllegalGeneration.Code
	}
	return memberCodeLocked(g, id, instance, gen, groupCompleting)
}

// memberCodeLocked is the code for member id (static: of instance) of g
// (nil: no such group) at generation gen, refused REBALANCE_IN_PROGRESS
// while g is in busy (a heartbeat while a rebalance is prepared, a commit
// while it completes); 0 counts as a sign of life. REQUIRES: co.mu.
func memberCodeLocked(g *group, id string, instance *string, gen int32, busy groupState) int16 {
	var m *member
	if g != nil {
		m = g.members[id]
	}
	switch {
	case g != nil && fenced(g, instance, id):
		return kerr.FencedInstanceID.Code
	case m == nil:
		return kerr.UnknownMemberID.Code
	case gen != g.generation:
		return kerr.IllegalGeneration.Code
	case g.state == busy:
		return kerr.RebalanceInProgress.Code
	}
	m.lastSeen = time.Now()
	return 0
}

// fenced reports whether a request naming instance comes from another
// member than the one the group knows for it (a static member that was
// replaced). REQUIRES: co.mu.
func fenced(g *group, instance *string, id string) bool {
	if instance == nil {
		return false
	}
	known, ok := g.static[*instance]
	return ok && known != id
}

// leaving is a member a LeaveGroup names: by member id, by instance id
// (static members, v3+), or both.
type leaving struct {
	id       string
	instance *string
}

// leave removes members; the others rebalance.
func (co *coordinator) leave(k groupKey, who []leaving) []int16 {
	co.mu.Lock()
	defer co.mu.Unlock()
	codes := make([]int16, len(who))
	g := co.mu.groups[k]
	for i, l := range who {
		id := l.id
		if g != nil && l.instance != nil {
			known, ok := g.static[*l.instance]
			switch {
			case !ok:
				id = ""
			case id != "" && id != known:
				codes[i] = kerr.FencedInstanceID.Code
				continue
			default:
				id = known
			}
		}
		if g == nil || g.members[id] == nil {
			codes[i] = kerr.UnknownMemberID.Code
			continue
		}
		co.removeLocked(g, id, kerr.UnknownMemberID.Code)
	}
	return codes
}

// removeLocked takes a member out and rebalances the rest; its waiting
// JoinGroup or SyncGroup is answered code. REQUIRES: co.mu.
func (co *coordinator) removeLocked(g *group, id string, code int16) {
	m := g.members[id]
	if m.join != nil {
		m.join.fail(code)
	}
	if m.sync != nil {
		m.sync.fail(code)
	}
	if m.instance != nil && g.static[*m.instance] == id {
		delete(g.static, *m.instance)
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

// remoteHost is a client's host as Kafka's DescribeGroups gives it.
func remoteHost(addr net.Addr) string {
	if addr == nil {
		return ""
	}
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return "/" + addr.String()
	}
	return "/" + host
}
