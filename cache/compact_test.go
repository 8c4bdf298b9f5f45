package cache

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
)

// TestCompactionKeepsState drives an index with random records over a few
// keys (conditions naming versions seen, TTLs and their expire records,
// counters, commits), compacts the log at random horizons, and checks the
// promise compaction makes: the compacted log replays to the same state,
// and every record written afterwards applies to the replayed index with
// the same result as to the live one.
func TestCompactionKeepsState(t *testing.T) {
	for seed := range uint64(200) {
		g := &gen{rng: rand.New(rand.NewPCG(seed, 7))}
		live := New(WithMaxKeys(6))
		var log []stored
		var off uint64
		write := func(x *Index, r *Record) Result {
			res := x.Apply(off, r)
			log = append(log, stored{offset: off, rec: *r})
			off++
			g.now += int64(g.rng.IntN(3))
			return res
		}
		for range 40 {
			write(live, g.record(live))
		}
		var horizon uint64
		for round := range 3 {
			// A shard never moves its horizon back.
			horizon += uint64(g.rng.IntN(int(off-horizon) + 1))
			p := NewPlanner(horizon, 1+g.rng.IntN(3), WithMaxKeys(6))
			for _, s := range log {
				p.Observe(s.offset, &s.rec)
			}
			var kept []stored
			for _, s := range log {
				if out, ok := p.Decide(s.offset, &s.rec); ok {
					kept = append(kept, stored{offset: s.offset, rec: out})
				}
			}
			log = kept
			live.Compacted(horizon)
			replayed := New(WithMaxKeys(6))
			for _, s := range kept {
				replayed.Apply(s.offset, &s.rec)
			}
			replayed.Compacted(horizon)
			if got, want := dumpIndex(replayed), dumpIndex(live); got != want {
				t.Fatalf("seed %d round %d horizon %d: compacted log replays to\n%swant\n%s", seed, round, horizon, got, want)
			}
			// Records after the compaction, on both: same answers.
			for range 20 {
				r := g.record(live)
				at := off
				want := write(live, r)
				got := replayed.Apply(at, r)
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("seed %d round %d: record %d %s applies as %+v on the compacted log, %+v on the whole", seed, round, at, showRecord(r), got, want)
				}
			}
		}
	}
}

// gen makes random records against what an index holds, so conditions
// often hold and often do not.
type gen struct {
	rng *rand.Rand
	now int64
}

var genKeys = []string{"a", "b", "c", "d", "e", "f", "g"}

func (g *gen) record(x *Index) *Record {
	key := genKeys[g.rng.IntN(len(genKeys))]
	r := &Record{At: g.now, Key: key}
	switch g.rng.IntN(9) {
	case 0, 1:
		r.Kind, r.Value = KindPut, []byte(fmt.Sprint(g.rng.IntN(100)))
		if g.rng.IntN(3) == 0 {
			r.Expires = g.now + int64(1+g.rng.IntN(5))
		}
		r.Cond = g.cond(x, key, true)
	case 2:
		r.Kind, r.Cond = KindDelete, g.cond(x, key, false)
	case 3:
		if due := x.Due(g.now, 1); len(due) > 0 {
			r.Kind, r.Key, r.Version = KindExpire, due[0].Key, due[0].Version
		} else {
			r.Kind, r.Version = KindExpire, uint64(g.rng.IntN(50))
		}
	case 4, 5:
		r.Kind, r.Delta = KindCounterAdd, int64(g.rng.IntN(10)-3)
	case 6:
		r.Kind, r.Delta = KindCounterSet, int64(g.rng.IntN(10))
	default:
		r.Kind, r.Key, r.Event = KindCommit, "", []byte("e")
		for _, i := range g.rng.Perm(len(genKeys))[:g.rng.IntN(4)] {
			op := Op{Key: genKeys[i], Delete: g.rng.IntN(3) == 0}
			if !op.Delete {
				op.Value = []byte(fmt.Sprint(g.rng.IntN(100)))
			}
			r.Ops = append(r.Ops, op)
		}
	}
	return r
}

func (g *gen) cond(x *Index, key string, put bool) Cond {
	switch g.rng.IntN(4) {
	case 0:
		if put {
			return Cond{Kind: CondAbsent}
		}
	case 1:
		if e, ok := x.Get(key, g.now); ok {
			return Cond{Kind: CondVersion, Version: e.Version}
		}
	case 2:
		return Cond{Kind: CondVersion, Version: uint64(g.rng.IntN(50))}
	}
	return Cond{}
}
