package cluster

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/getfelix/felix-go/wire"
)

// TestBalance runs the leadership planner over testdata/balance_*.txt:
//
//	members                  one member a line: ID [draining] [down]
//	shards n=N replicas=A,B,C leader=L [transfer=T]
//	                         adds N shards (numbered on from the last)
//	reset                    forgets the shards
//	lead shards=I-J leader=L sets who leads a range of shards
//	balance [rounds=K]       the plan; with rounds, carries each plan out
//	                         (every hand-over completes) and plans again,
//	                         K times or until nothing moves, printing
//	                         each round's moves and the leads after it
func TestBalance(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		if !strings.Contains(path, "balance_") {
			t.Skip()
		}
		v := &BalanceView{}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return runBalance(t, v, d)
		})
	})
}

var balanceScope = wire.Scope{Tenant: "t", Namespace: "ns", Stream: "s"}

func runBalance(t *testing.T, v *BalanceView, d *datadriven.TestData) string {
	switch d.Cmd {
	case "members":
		v.Members = nil
		for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
			f := strings.Fields(line)
			m := BalanceMember{ID: f[0], Live: true}
			for _, a := range f[1:] {
				switch {
				case a == "draining":
					m.Draining = true
				case a == "down":
					m.Live = false
				default:
					t.Fatalf("member %s: unknown %q", f[0], a)
				}
			}
			v.Members = append(v.Members, m)
		}
		return ""
	case "shards":
		var n int
		var replicas, leader, transfer string
		d.ScanArgs(t, "n", &n)
		d.ScanArgs(t, "replicas", &replicas)
		d.MaybeScanArgs(t, "leader", &leader)
		d.MaybeScanArgs(t, "transfer", &transfer)
		for range n {
			key := ShardKey{Scope: balanceScope, Shard: uint32(len(v.Shards))}
			v.Shards = append(v.Shards, BalanceShard{Key: key, Replicas: strings.Split(replicas, ","), Leader: leader, TransferTo: transfer})
		}
		return ""
	case "reset":
		v.Shards = nil
		return ""
	case "lead":
		var span, leader string
		d.ScanArgs(t, "shards", &span)
		d.ScanArgs(t, "leader", &leader)
		lo, hi, _ := strings.Cut(span, "-")
		from, _ := strconv.Atoi(lo)
		to, _ := strconv.Atoi(hi)
		for i := from; i <= to; i++ {
			v.Shards[i].Leader = leader
		}
		return ""
	case "balance":
		rounds := 0
		d.MaybeScanArgs(t, "rounds", &rounds)
		if rounds == 0 {
			return printPlan(Balance(*v))
		}
		var b strings.Builder
		for r := 1; r <= rounds; r++ {
			plan := Balance(*v)
			if len(plan) == 0 {
				fmt.Fprintf(&b, "round %d: settled\n", r)
				break
			}
			for _, h := range plan {
				for i := range v.Shards {
					if v.Shards[i].Key == h.Shard {
						v.Shards[i].Leader, v.Shards[i].TransferTo = h.To, ""
					}
				}
			}
			fmt.Fprintf(&b, "round %d: %d moves, leads %s\n", r, len(plan), leadsOf(v))
		}
		return b.String()
	}
	t.Fatalf("unknown command %q", d.Cmd)
	return ""
}

func printPlan(plan []HandOver) string {
	if len(plan) == 0 {
		return "nothing to move\n"
	}
	var b strings.Builder
	for _, h := range plan {
		fmt.Fprintf(&b, "shard %d: %s -> %s", h.Shard.Shard, h.From, h.To)
		if h.Drain {
			b.WriteString(" (drain)")
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// leadsOf lists every member's leads, down or draining ones too.
func leadsOf(v *BalanceView) string {
	counts := map[string]int{}
	for _, s := range v.Shards {
		if s.Leader != "" {
			counts[s.ledBy()]++
		}
	}
	var parts []string
	for _, m := range v.Members {
		parts = append(parts, fmt.Sprintf("%s=%d", m.ID, counts[m.ID]))
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}
