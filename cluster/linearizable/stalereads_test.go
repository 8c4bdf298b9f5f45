package linearizable_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/wire"
)

// staleReaders is how many clients read in the stale-read workload; one
// idempotent and one plain producer write.
const staleReaders = 4

// viaCluster names reads through the ClusterClient (ClientFor + Read).
const viaCluster = "cluster"

// target is a member a reader reads from directly.
type target struct{ node, addr string }

// reads is what the readers saw.
type reads struct {
	mu struct {
		sync.Mutex
		seen []seen
	}
}

func (rs *reads) add(s seen) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.mu.seen = append(rs.mu.seen, s)
}

// runStaleReads: producers write while readers read through each member
// directly and through the ClusterClient. No read may see a committed end
// (what its answer names) short of an acknowledgement that returned
// before the read began.
func runStaleReads(t *testing.T, r *run) {
	s := newSends()
	var answers tally
	var wg sync.WaitGroup
	defer r.halt(&wg) // also when the test fails before the end
	wg.Go(idempotentProducer(t, r, r.dial(t), 0, s, &answers))
	plain := r.dial(t)
	wg.Go(func() { plainProducer(r, plain, 0, s, &answers) })
	rs := &reads{}
	// The members' addresses, taken now: a restart rewrites Member.Addr
	// (with the same address) while the readers run.
	var members []target
	for _, m := range r.c.Members() {
		members = append(members, target{node: m.NodeID, addr: m.Addr})
	}
	for i := range staleReaders {
		cc := r.dialWith(t, r.readerOptions())
		rng := rand.New(rand.NewPCG(uint64(r.seed), uint64(100+i)))
		wg.Go(func() { staleReader(r, cc, members, rng, s, rs, &answers) })
	}
	r.nem.run(t)
	r.halt(&wg)
	t.Logf("faults: %s", r.nem)
	t.Logf("answers: %s", &answers)

	final := checkFinalLogs(t, r.converge(t))
	acked, shows, copies := s.snapshot()
	rs.mu.Lock()
	defer rs.mu.Unlock()
	t.Logf("%d payloads acknowledged, %d in the log, %d reads", len(acked), len(final), len(rs.mu.seen))
	report(t, "acknowledged records lost", lostAcks(final, acked))
	report(t, "duplicates", duplicates(final, copies))
	stale := staleReads(shows, rs.mu.seen)
	if len(stale) > 0 {
		t.Logf("stale reads by where they went: %s", staleBy(shows, rs.mu.seen))
	}
	report(t, "stale reads", stale)
}

// staleReader reads until the run stops, each read at a target picked at
// random: a member, over a connection of the reader's own to it, or the
// shard's owner as the ClusterClient knows it.
func staleReader(r *run, cc *client.ClusterClient, members []target, rng *rand.Rand, s *sends, rs *reads, answers *tally) {
	direct := make([]*client.Client, len(members))
	defer func() {
		for _, cl := range direct {
			if cl != nil {
				_ = cl.Close(context.Background())
			}
		}
	}()
	for !r.stopped() {
		pick := rng.IntN(len(members) + 1)
		via := viaCluster
		if pick < len(members) {
			via = members[pick].node
		}
		ctx, cancel := r.opContext()
		call := r.h.now()
		var page client.Page
		cl, err := readerClient(ctx, r, cc, members, direct, pick)
		if err == nil {
			// From 0, which is always there: a read from past a
			// member's committed end is refused (in_future), and that
			// refusal would hide how far behind the member is. The page's
			// committed end is what the read saw.
			page, err = cl.Read(ctx, r.stream, 0, client.ReadOptions{MaxRecords: 1})
		}
		cancel()
		if err != nil {
			var refusal *wire.Error
			if !errors.As(err, &refusal) {
				answers.add(fmt.Sprintf("read via %s unanswered", via))
				if pick < len(members) && direct[pick] != nil {
					// The connection may be gone (the member
					// restarted): dial again next time.
					_ = direct[pick].Close(context.Background())
					direct[pick] = nil
				}
				continue
			}
			answers.add(fmt.Sprintf("read via %s refused %s", via, refusal.Code))
			if pick == len(members) {
				refreshOwners(r, cc)
			}
			continue
		}
		answers.add(fmt.Sprintf("read via %s", via))
		rs.add(seen{call: call, length: page.Committed, via: via, what: fmt.Sprintf("a read via %s (committed end)", via)})
	}
}

// readerClient is the connection a read at pick goes over: the reader's
// own to a member (dialled when missing) or the ClusterClient's to the
// shard's owner.
func readerClient(ctx context.Context, r *run, cc *client.ClusterClient, members []target, direct []*client.Client, pick int) (*client.Client, error) {
	if pick == len(members) {
		return cc.ClientFor(ctx, r.stream, 0)
	}
	if direct[pick] == nil {
		cl, err := client.Dial(ctx, members[pick].addr, r.readerOptions())
		if err != nil {
			return nil, err
		}
		direct[pick] = cl
	}
	return direct[pick], nil
}

// staleBy counts stale reads by where they went, with the most records
// one of them missed.
func staleBy(shows []shown, all []seen) string {
	byVia := map[string][]seen{}
	for _, s := range all {
		byVia[s.via] = append(byVia[s.via], s)
	}
	vias := make([]string, 0, len(byVia))
	for v := range byVia {
		vias = append(vias, v)
	}
	slices.Sort(vias)
	var parts []string
	for _, v := range vias {
		n, worst := staleCount(shows, byVia[v])
		parts = append(parts, fmt.Sprintf("via %s %d of %d (at most %d records missing)", v, n, len(byVia[v]), worst))
	}
	return strings.Join(parts, "; ")
}

// refreshOwners asks again who owns the shard after a refused read through
// the ClusterClient: ClientFor follows no redirect and keeps the owner it
// knows, so a client that only reads would otherwise stay on a deposed one.
func refreshOwners(r *run, cc *client.ClusterClient) {
	ctx, cancel := r.opContext()
	defer cancel()
	_, _ = cc.ShardOwners(ctx, r.stream)
}
