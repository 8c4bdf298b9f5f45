package cluster

import "slices"

// BalanceView is the cluster as this member's mirror shows it, for
// Balance: every member (a replica's member that is not live among them),
// and every replicated shard with its voters and its leader. The leader is
// this member's replica's when it knows one of a later term than the
// owner record (Config.RaftLeader), else the record's: a hand-over shows
// on the replicas at once and in etcd only once the new leader claimed the
// record. Left out: shards whose replica is moving (the move decides their
// leader), and consumer-group state shards, which follow their data
// shard's leader, unless their leader drains.
func (n *Node) BalanceView() BalanceView {
	n.mu.RLock()
	defer n.mu.RUnlock()
	s := &n.state
	var v BalanceView
	seen := map[string]bool{}
	addMember := func(id string) {
		if !seen[id] {
			seen[id] = true
			_, live := s.members[id]
			v.Members = append(v.Members, BalanceMember{ID: id, Live: live, Draining: s.draining[id]})
		}
	}
	for id := range s.members {
		addMember(id)
	}
	for key, set := range s.replicaSets {
		if set.Move != nil || !s.replicated(key) {
			continue
		}
		rec, recorded := s.owners[key]
		leader := ""
		if o, ok := s.raftOwner(key, rec, recorded, n.cfg.RaftLeader); ok {
			leader = o.NodeID
		} else if recorded {
			leader = rec.NodeID
		}
		if _, isState := GroupDataShard(key); isState && !s.draining[leader] {
			continue
		}
		sh := BalanceShard{Key: key, Leader: leader}
		for _, r := range set.Members {
			sh.Replicas = append(sh.Replicas, r.Node)
			addMember(r.Node)
		}
		v.Shards = append(v.Shards, sh)
	}
	slices.SortFunc(v.Members, func(a, b BalanceMember) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return v
}
