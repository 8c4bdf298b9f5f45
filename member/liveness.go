package member

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/getfelix/felix-go/streams"
)

// A quiet raft group (replication's quiesce) sends nothing, so its
// followers cannot tell a dead leader from an idle one by the group's own
// heartbeats. The peer link tells them instead, once per pair of members
// rather than once per group: every peerBeat the link sends each live
// peer a beat, and it notes when it last heard anything from each member
// (a beat, a raft message, a snapshot chunk). A member not heard from for
// peerSilence, or gone from the cluster's membership (its lease expired,
// or it left), is gone for the quiet groups it is in: their replicas wake,
// and a follower of a leader on it ends the leader's lease at once
// (Replica.LeaderGone) and elects a new one.
//
// Rejected: waiting for the etcd lease alone. It is the authority on
// membership, but it expires cluster_lease_ttl_ms (5 s by default) after
// a member dies, where raft's own heartbeats found a dead leader in an
// election timeout (0.5 to 1 s); the beats keep failover there.
const (
	// peerBeatGroup carries the beats; they have no body.
	peerBeatGroup = "felix.beat"
	// peerBeat is the beat's interval: a replica's tick.
	peerBeat = streams.ReplicaTick
	// peerSilence is how long a member may go unheard before it is gone
	// for quiet groups: five beats, a follower's shortest election
	// timeout, so a quiet group fails over as fast as an awake one.
	peerSilence = 5 * peerBeat
)

// runBeats beats to every live peer each peerBeat until stop closes, and
// after each round tells gone of the members that went (livenessState).
func (p *Peers) runBeats(members func() []string, gone func(node string), stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(peerBeat)
	defer t.Stop()
	var live livenessState
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			list := members()
			for _, node := range list {
				p.Send(node, peerBeatGroup, nil)
			}
			for _, node := range live.check(time.Now(), list, p.HeardAt) {
				gone(node)
			}
		}
	}
}

// livenessState is, for the beat loop, each other member's place for
// quiet groups: live, or gone (told once). A member is gone when it
// leaves the membership (members with a peer link, from the cluster's
// etcd leases) or goes unheard for peerSilence; it is live again once it
// is a member and heard from. A member first seen is given peerSilence
// from then to be heard: the link may not have reached it yet.
//
// A check that comes late (more than starvedCheck after the last: this
// member's own goroutines did not run, on a machine short of CPU, or a
// process stopped and resumed) gives every member peerSilence from now
// again: what went unheard meanwhile may only not have been read, and
// counting it gone would wake every quiet group it is in and end its
// leaders' leases, more load on a machine that already has too much.
type livenessState struct {
	peers map[string]*peerLiveness
	last  time.Time // the last check
}

// starvedCheck is how late a check may come before it counts as this
// member's own stall.
const starvedCheck = peerSilence / 2

type peerLiveness struct {
	seen time.Time // when it was first in the membership
	gone bool
}

// check takes the membership now and when each member was last heard
// from, and returns the members that went gone since the last check, in
// the membership's order, then those that left it, sorted.
func (l *livenessState) check(now time.Time, members []string, heardAt func(string) time.Time) (gone []string) {
	if l.peers == nil {
		l.peers = make(map[string]*peerLiveness)
	}
	if !l.last.IsZero() && now.Sub(l.last) > starvedCheck {
		for _, pl := range l.peers {
			pl.seen = now
		}
	}
	l.last = now
	for _, node := range members {
		pl, ok := l.peers[node]
		if !ok {
			pl = &peerLiveness{seen: now}
			l.peers[node] = pl
		}
		heard := laterOf(heardAt(node), pl.seen)
		silent := now.Sub(heard) >= peerSilence
		switch {
		case silent && !pl.gone:
			pl.gone = true
			gone = append(gone, node)
		case !silent && pl.gone:
			pl.gone = false // back: its own messages wake its groups
		}
	}
	var left []string
	for node, pl := range l.peers {
		if slices.Contains(members, node) {
			continue
		}
		if !pl.gone {
			left = append(left, node)
		}
		delete(l.peers, node) // a member again later is first seen again
	}
	slices.Sort(left)
	return append(gone, left...)
}

// replicaWatch is an open replica as the member's loss pushes see it: the
// members its group names (as its shard last read the set) and how to
// tell it one is gone.
type replicaWatch struct {
	nodes atomic.Pointer[[]string]
	gone  func(node string)
}

// replicaWatches are the member's open replicas, for memberGone.
type replicaWatches struct {
	mu sync.Mutex
	m  map[*replicaWatch]struct{}
}

func (w *replicaWatches) add(rw *replicaWatch) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = make(map[*replicaWatch]struct{})
	}
	w.m[rw] = struct{}{}
}

func (w *replicaWatches) remove(rw *replicaWatch) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.m, rw)
}

// memberGone tells every open replica whose group names member node that
// it is gone, and returns how many it told.
func (w *replicaWatches) memberGone(node string) int {
	w.mu.Lock()
	var to []*replicaWatch
	for rw := range w.m {
		if nodes := rw.nodes.Load(); nodes != nil && slices.Contains(*nodes, node) {
			to = append(to, rw)
		}
	}
	w.mu.Unlock()
	for _, rw := range to {
		rw.gone(node)
	}
	return len(to)
}

// memberGone is the beat loop's news that member node is gone: the
// replicas whose group names it are told.
func (m *Member) memberGone(node string) {
	n := m.watches.memberGone(node)
	m.log.Info().Str("member", node).Int("replicas", n).Msg("member gone: its quiet groups are woken")
}

// noteHeard records that something arrived from node now.
func (p *Peers) noteHeard(node string) {
	now := int64(time.Since(p.base))
	if v, ok := p.heard.Load(node); ok {
		v.(*atomic.Int64).Store(now)
		return
	}
	v := new(atomic.Int64)
	v.Store(now)
	if old, loaded := p.heard.LoadOrStore(node, v); loaded {
		old.(*atomic.Int64).Store(now)
	}
}

// HeardAt is when anything last arrived from member node; zero if nothing
// has.
func (p *Peers) HeardAt(node string) time.Time {
	v, ok := p.heard.Load(node)
	if !ok {
		return time.Time{}
	}
	return p.base.Add(time.Duration(v.(*atomic.Int64).Load()))
}
