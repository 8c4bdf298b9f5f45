package member

import (
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

// runBeats beats to every live peer each peerBeat until stop closes.
func (p *Peers) runBeats(members func() []string, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(peerBeat)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			for _, node := range members() {
				p.Send(node, peerBeatGroup, nil)
			}
		}
	}
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
