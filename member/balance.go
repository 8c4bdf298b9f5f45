package member

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/getfelix/felix-go/cluster"
	"github.com/getfelix/felix-go/replication"
)

// Leadership balance: every member plans from its etcd mirror and its
// replicas' raft view (cluster.Balance over Node.BalanceView) and carries
// out the hand-overs it is the source of. The leader of a shard the plan
// moves asks raft to transfer the leadership on its status tick; raft
// brings a lagging target up to date first and gives up after an election
// timeout, so the target's progress is not checked here (waiting for it
// to be caught up left leadership stuck half-balanced). A transfer wakes a
// quiet group (replication.Replica.TransferLeadership).

// balancer is the member's plan and the hand-overs it started.
type balancer struct {
	// planning is held by the one shard goroutine planning again; the
	// others go on with the plan they have.
	planning sync.Mutex
	plan     atomic.Pointer[balancePlan]
	// started: cluster.ShardKey → handOver, the hand-overs this member
	// asked raft for and not yet seen done or given up.
	started sync.Map
}

// balancePlan is this member's share of a plan: shard → member to hand
// its leadership to.
type balancePlan struct {
	at time.Time
	to map[cluster.ShardKey]string
}

type handOver struct {
	to string
	at time.Time
}

// replanEvery is how old a plan gets before the next leader's status tick
// makes a new one: about a status refresh of a quiet replica.
const replanEvery = time.Second

// handOverTimeout is how long a started hand-over counts as in flight:
// raft gives up a transfer after an election timeout (1 s) and the new
// leader's record takes an etcd write to show.
const handOverTimeout = 3 * time.Second

// balance is a leader's step on its status tick: it hands the shard's
// leadership over when this member's plan says so.
func (s *shardReplica) balance(st replication.Status) {
	b := &s.m.balance
	to, ok := b.current(s.node.ID(), s.node)[s.key]
	if !ok {
		return
	}
	if h, ok := b.started.Load(s.key); ok && h.(handOver).to == to && time.Since(h.(handOver).at) < handOverTimeout {
		return // asked already; raft is on it
	}
	id, ok := s.set.Has(to)
	if !ok || id == st.ID {
		return
	}
	b.started.Store(s.key, handOver{to: to, at: time.Now()})
	s.m.metrics.LeaderHandOvers.Inc()
	s.log.Info().Str("to", to).Uint64("term", st.Term).Msg("handing the shard's leadership over to balance the members")
	s.r.TransferLeadership(id)
}

// current is the member's share of the plan, planned again when it is
// older than replanEvery.
func (b *balancer) current(self string, node *cluster.Node) map[cluster.ShardKey]string {
	p := b.plan.Load()
	if p != nil && time.Since(p.at) < replanEvery {
		return p.to
	}
	if !b.planning.TryLock() {
		if p == nil {
			return nil
		}
		return p.to
	}
	defer b.planning.Unlock()
	next := &balancePlan{at: time.Now(), to: b.replan(self, node.BalanceView())}
	b.plan.Store(next)
	return next.to
}

// replan plans from view, the hand-overs this member started and has not
// seen done counted as in flight.
func (b *balancer) replan(self string, view cluster.BalanceView) map[cluster.ShardKey]string {
	now := time.Now()
	for i, s := range view.Shards {
		h, ok := b.started.Load(s.Key)
		if !ok {
			continue
		}
		ho := h.(handOver)
		if s.Leader != self || now.Sub(ho.at) >= handOverTimeout {
			b.started.Delete(s.Key) // done, or given up: plan it afresh
			continue
		}
		view.Shards[i].TransferTo = ho.to
	}
	out := map[cluster.ShardKey]string{}
	for _, h := range cluster.Balance(view) {
		if h.From == self {
			out[h.Shard] = h.To
		}
	}
	return out
}
