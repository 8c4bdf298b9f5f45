package cluster

import (
	"cmp"
	"math"
	"slices"
)

// Leadership balance. Raft elects whichever replica times out first, so
// without help one member ends up leading most shards (159, 26 and 7 of
// 192 on three members) and takes nearly all the writes. Balance plans
// hand-overs (raft's leadership transfer) from the cluster's view; every
// member computes the same plan from its mirror and carries out the
// hand-overs it is the source of (member/balance.go).
//
// The plan:
//   - a shard led by a draining member goes to the least-loaded live
//     replica that is not draining, all of them at once;
//   - otherwise a member leading more than an even share plus balanceSlack
//     gives shards to replicas that lead at least two fewer, least-loaded
//     first; and a member leading less than an even share minus the slack
//     takes shards it holds replicas of from leaders that lead at least
//     two more. Each such hand-over narrows the spread (the sum of the
//     squared leads falls), so the plan settles instead of flapping, and
//     within the slack nothing moves;
//   - a member takes part in at most maxHandOvers hand-overs in flight
//     (from or to it), so a join or a return moves leadership in waves
//     rather than stalling every shard of a member at once.

// BalanceView is what Balance plans from.
type BalanceView struct {
	Members []BalanceMember
	Shards  []BalanceShard
}

// BalanceMember is one member: Live when its lease is, Draining when an
// operator drains it.
type BalanceMember struct {
	ID       string
	Live     bool
	Draining bool
}

// BalanceShard is one replicated shard: the members holding its voting
// replicas, its leader ("" while none is known), and the member a
// hand-over in flight moves it to ("" when none).
type BalanceShard struct {
	Key        ShardKey
	Replicas   []string
	Leader     string
	TransferTo string
}

// HandOver is a planned leadership transfer of Shard from From to To.
type HandOver struct {
	Shard    ShardKey
	From, To string
	// Drain: From is draining (not a rebalance).
	Drain bool
}

// maxHandOvers is how many hand-overs in flight a member takes part in.
const maxHandOvers = 4

// balanceSlack is how far above an even share a member may lead before it
// gives shards away: 5 %, so an election or two does not set off moves.
const balanceSlack = 0.05

// Balance plans the hand-overs that spread leadership evenly over the live
// members that are not draining, in shard order. It is pure: the same view
// gives the same plan on every member.
func Balance(v BalanceView) []HandOver {
	eligible := map[string]bool{}
	for _, m := range v.Members {
		if m.Live && !m.Draining {
			eligible[m.ID] = true
		}
	}
	shards := slices.Clone(v.Shards)
	slices.SortFunc(shards, func(a, b BalanceShard) int { return compareKeys(a.Key, b.Key) })
	// leads counts, per eligible member, the shards it leads or a
	// hand-over in flight gives it; busy the hand-overs in flight it is in.
	leads, busy := map[string]int{}, map[string]int{}
	for id := range eligible {
		leads[id] = 0
	}
	for _, s := range shards {
		if s.TransferTo != "" {
			busy[s.Leader]++
			busy[s.TransferTo]++
		}
		if l := s.ledBy(); eligible[l] {
			leads[l]++
		}
	}
	var plan []HandOver
	draining := func(id string) bool {
		return slices.ContainsFunc(v.Members, func(m BalanceMember) bool { return m.ID == id && m.Draining })
	}
	// Drains first, all at once: the operator is waiting to stop it.
	for i, s := range shards {
		if s.TransferTo != "" || s.Leader == "" || !draining(s.Leader) {
			continue
		}
		if to, ok := leastLoaded(s.Replicas, eligible, leads, nil, math.MaxInt); ok {
			plan = append(plan, HandOver{Shard: s.Key, From: s.Leader, To: to, Drain: true})
			leads[to]++
			shards[i].TransferTo = to
		}
	}
	total := 0
	for _, n := range leads {
		total += n
	}
	if len(leads) == 0 {
		return plan
	}
	even := float64(total) / float64(len(leads))
	over, under := even*(1+balanceSlack), even*(1-balanceSlack)
	for {
		h, ok := push(shards, leads, busy, eligible, over)
		if !ok {
			h, ok = pull(shards, leads, busy, eligible, under)
		}
		if !ok {
			return plan
		}
		plan = append(plan, h)
		for i := range shards {
			if shards[i].Key == h.Shard {
				shards[i].TransferTo = h.To
			}
		}
		leads[h.From]--
		leads[h.To]++
		busy[h.From]++
		busy[h.To]++
	}
}

// push finds a hand-over from the member leading the most, above over,
// to the least-loaded replica of one of its shards that leads at least
// two fewer.
func push(shards []BalanceShard, leads, busy map[string]int, eligible map[string]bool, over float64) (HandOver, bool) {
	var givers []string
	for id, n := range leads {
		if float64(n) > over && busy[id] < maxHandOvers {
			givers = append(givers, id)
		}
	}
	slices.SortFunc(givers, func(a, b string) int { return cmp.Or(cmp.Compare(leads[b], leads[a]), cmp.Compare(a, b)) })
	for _, from := range givers {
		best, bestTo := -1, ""
		for i, s := range shards {
			if s.TransferTo != "" || s.Leader != from {
				continue
			}
			to, ok := leastLoaded(s.Replicas, eligible, leads, busy, leads[from]-2)
			if ok && (best < 0 || leads[to] < leads[bestTo]) {
				best, bestTo = i, to
			}
		}
		if best >= 0 {
			return HandOver{Shard: shards[best].Key, From: from, To: bestTo}, true
		}
	}
	return HandOver{}, false
}

// pull finds a hand-over to the member leading the fewest, below under,
// from the busiest leader of one of the shards it holds a replica of that
// leads at least two more: a member that just joined or returned may hold
// replicas only of shards whose leaders are not above the slack.
func pull(shards []BalanceShard, leads, busy map[string]int, eligible map[string]bool, under float64) (HandOver, bool) {
	var takers []string
	for id, n := range leads {
		if float64(n) < under && busy[id] < maxHandOvers {
			takers = append(takers, id)
		}
	}
	slices.SortFunc(takers, func(a, b string) int { return cmp.Or(cmp.Compare(leads[a], leads[b]), cmp.Compare(a, b)) })
	for _, to := range takers {
		best := -1
		for i, s := range shards {
			from := s.Leader
			n, counted := leads[from]
			if s.TransferTo != "" || !counted || !eligible[from] || busy[from] >= maxHandOvers || n < leads[to]+2 || !slices.Contains(s.Replicas, to) {
				continue
			}
			if best < 0 || n > leads[shards[best].Leader] {
				best = i
			}
		}
		if best >= 0 {
			return HandOver{Shard: shards[best].Key, From: shards[best].Leader, To: to}, true
		}
	}
	return HandOver{}, false
}

// ledBy is who will lead the shard once its hand-over in flight is done.
func (s BalanceShard) ledBy() string {
	if s.TransferTo != "" {
		return s.TransferTo
	}
	return s.Leader
}

// leastLoaded is the eligible replica leading the fewest shards, at most
// most of them, with a free hand-over slot when busy is given; ties go to
// the lower id.
func leastLoaded(replicas []string, eligible map[string]bool, leads, busy map[string]int, most int) (string, bool) {
	best := ""
	for _, r := range replicas {
		n, counted := leads[r]
		if !eligible[r] || !counted || n > most || busy != nil && busy[r] >= maxHandOvers {
			continue
		}
		if best == "" || n < leads[best] || n == leads[best] && r < best {
			best = r
		}
	}
	return best, best != ""
}

func compareKeys(a, b ShardKey) int {
	if c := cmp.Compare(a.Scope.String(), b.Scope.String()); c != 0 {
		return c
	}
	return cmp.Compare(a.Shard, b.Shard)
}
