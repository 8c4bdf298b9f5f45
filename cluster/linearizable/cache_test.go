package linearizable_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/wire"
)

// The cache workload: clients put, get, put-if (absent, and at the
// version they last saw) and delete-if on a few keys of a durable cache
// of one shard and three replicas, through ClusterClients.
const (
	cacheClients = 6
	// cacheMemberReaders read keys through a member picked at random,
	// over connections of their own to each: a member that still
	// believes it leads, cut off or resumed, is asked directly.
	cacheMemberReaders = 2
	// finalReadTimeout bounds the reads of every key after the faults.
	finalReadTimeout = 30 * time.Second
)

// cacheKeys are the keys the clients share: few, so that conditional
// writes race.
var cacheKeys = []string{"k0", "k1", "k2"}

// createCache makes the workload's cache, named as its stream.
func createCache(ctx context.Context, cc *client.ClusterClient, s client.Stream) (uint32, error) {
	info, err := cc.CreateCache(ctx, cacheOf(s), client.CacheSpec{Shards: 1, Durable: true, Replicas: 3})
	return info.Replicas, err
}

func cacheOf(s client.Stream) client.Cache {
	return client.Cache{Tenant: s.Tenant, Namespace: s.Namespace, Name: s.Name}
}

// runCache: the clients' history must be linearizable against a
// versioned register per key (cacheModel), the final reads of every key
// after the faults included. Half the clients keep their connections as
// a reading application does (readerOptions), so their reads reach an
// old leader that resumes after a stop; the member readers ask each
// member directly. The watchers' events must agree with the same
// history's writes (checkWatchers).
func runCache(t *testing.T, r *run) {
	watchers := startWatchers(t, r)
	var wg sync.WaitGroup
	defer r.halt(&wg) // also when the test fails before the end
	var answers tally
	for i := range cacheClients {
		o := r.clientOptions()
		if i%2 == 1 {
			o = r.readerOptions()
		}
		cc := r.dialWith(t, o)
		rng := rand.New(rand.NewPCG(uint64(r.seed), uint64(i)))
		wg.Go(func() { (&cacheClient{r: r, cc: cc, id: i, rng: rng, answers: &answers}).run() })
	}
	// The members' addresses, taken now: a restart rewrites Member.Addr
	// (with the same address) while the readers run.
	var members []target
	for _, m := range r.c.Members() {
		members = append(members, target{node: m.NodeID, addr: m.Addr})
	}
	for i := range cacheMemberReaders {
		rng := rand.New(rand.NewPCG(uint64(r.seed), uint64(100+i)))
		wg.Go(func() { memberReader(r, cacheClients+1+i, members, rng, &answers) })
	}
	r.nem.run(t)
	r.halt(&wg)
	t.Logf("faults: %s", r.nem)
	t.Logf("answers: %s", &answers)
	finalCacheReads(t, r)
	checkWatchers(t, r, watchers)

	ops := r.h.operations()
	start := time.Now()
	res, err := checkModel(cacheModel(), ops, r.checkFor, keptFile(t, "cache.html"), r.nem.annotations()...)
	t.Logf("porcupine: %d operations on %d keys, %s in %s", len(ops), len(partitionByKey(ops)), res, time.Since(start).Round(time.Millisecond))
	if err != nil {
		t.Errorf("not linearizable: %v", err)
	}
}

// finalCacheReads reads every key once the faults are healed, retrying
// until one read of each answers: a read after every operation, which
// decides what the writes of unknown outcome did as far as one read can.
func finalCacheReads(t *testing.T, r *run) {
	t.Helper()
	cc := r.dial(t)
	k := cacheOf(r.stream)
	deadline := time.Now().Add(finalReadTimeout)
	for _, key := range cacheKeys {
		for {
			ctx, cancel := r.opContext()
			call := r.h.now()
			v, err := cc.Get(ctx, k, key)
			ret := r.h.now()
			cancel()
			if err == nil {
				r.h.add(cacheClients, cacheInput{kind: cacheGet, key: key}, getOutput(v.Found, string(v.Value), v.Version), call, ret)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no read of %s answered within %s after the faults: %v", key, finalReadTimeout, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// memberReader gets keys until the run stops, each at a member picked at
// random over the reader's own connection to it (dialled again after an
// unanswered read). A member that does not lead refuses (not_leader):
// such reads changed nothing and are not recorded.
func memberReader(r *run, id int, members []target, rng *rand.Rand, answers *tally) {
	direct := make([]*client.Client, len(members))
	defer func() {
		for _, cl := range direct {
			if cl != nil {
				_ = cl.Close(context.Background())
			}
		}
	}()
	k := cacheOf(r.stream)
	for !r.stopped() {
		pick := rng.IntN(len(members))
		key := cacheKeys[rng.IntN(len(cacheKeys))]
		ctx, cancel := r.opContext()
		call := r.h.now()
		v, err := memberGet(ctx, r, members[pick].addr, &direct[pick], k, key)
		ret := r.h.now()
		cancel()
		var refusal *wire.Error
		switch {
		case err == nil:
			answers.add("get via a member")
			in := cacheInput{kind: cacheGet, key: key, via: members[pick].node}
			r.h.add(id, in, getOutput(v.Found, string(v.Value), v.Version), call, ret)
		case errors.As(err, &refusal):
			answers.add("get via a member refused " + refusal.Code.String())
		default:
			answers.add("get via a member unanswered")
			if direct[pick] != nil {
				_ = direct[pick].Close(context.Background())
				direct[pick] = nil
			}
		}
	}
}

// memberGet gets key at the member at addr over *cl, dialled when nil.
func memberGet(ctx context.Context, r *run, addr string, cl **client.Client, k client.Cache, key string) (wire.CacheValue, error) {
	if *cl == nil {
		c, err := client.Dial(ctx, addr, r.readerOptions())
		if err != nil {
			return wire.CacheValue{}, err
		}
		*cl = c
	}
	return (*cl).Get(ctx, k, key)
}

func getOutput(found bool, value string, version uint64) cacheOutput {
	return cacheOutput{outcome: written, found: found, value: value, version: version}
}

// cacheClient is one client of the workload.
type cacheClient struct {
	r       *run
	cc      *client.ClusterClient
	id      int
	rng     *rand.Rand
	answers *tally
	// seen is the version of each key this client last learnt (from a
	// get, a write or a refusal): its put-ifs and delete-ifs expect it.
	seen map[string]uint64
}

// run makes operations until the run stops: about two in five gets, the
// rest writes, most of them conditional.
func (c *cacheClient) run() {
	c.seen = map[string]uint64{}
	for n := 0; !c.r.stopped(); n++ {
		key := cacheKeys[c.rng.IntN(len(cacheKeys))]
		in := cacheInput{key: key, value: fmt.Sprintf("c%d-%d", c.id, n), version: c.seen[key]}
		switch p := c.rng.IntN(20); {
		case p < 8:
			c.get(key)
			continue
		case p < 10:
			in.kind = cachePut
		case p < 13:
			in.kind = cachePutIfAbsent
		case p < 17:
			in.kind = cachePutIfVersion
		default:
			in.kind, in.value = cacheDeleteIf, ""
		}
		c.write(in)
	}
}

func (c *cacheClient) get(key string) {
	ctx, cancel := c.r.opContext()
	defer cancel()
	call := c.r.h.now()
	v, err := c.cc.Get(ctx, cacheOf(c.r.stream), key)
	ret := c.r.h.now()
	if err != nil {
		c.answers.add("get failed")
		return // a read that failed changed nothing
	}
	c.answers.add("get")
	if v.Found {
		c.seen[key] = v.Version
	}
	c.r.h.add(c.id, cacheInput{kind: cacheGet, key: key}, getOutput(v.Found, string(v.Value), v.Version), call, ret)
}

// write makes one put or delete and records it by its answer.
func (c *cacheClient) write(in cacheInput) {
	k := cacheOf(c.r.stream)
	ctx, cancel := c.r.opContext()
	defer cancel()
	var o client.PutOptions
	switch in.kind {
	case cachePutIfAbsent:
		o.IfAbsent = true
	case cachePutIfVersion:
		o.IfVersion = &in.version
	}
	call := c.r.h.now()
	var res wire.CacheResult
	var err error
	if in.kind == cacheDeleteIf {
		res, err = c.cc.Delete(ctx, k, in.key, &in.version)
	} else {
		res, err = c.cc.Put(ctx, k, in.key, []byte(in.value), o)
	}
	ret := c.r.h.now()
	if err != nil {
		if a, _ := classify(err); a == answerFailed {
			c.answers.add(in.kind.String() + " failed")
			return // refused before anything was proposed
		}
		c.answers.add(in.kind.String() + " unknown")
		c.r.h.add(c.id, in, cacheOutput{outcome: unknown}, call, pendingReturn)
		return
	}
	out := cacheOutput{outcome: written, version: res.Version, hadPrev: res.HadPrev, prev: string(res.Prev)}
	what := " applied"
	if !res.Applied {
		out = cacheOutput{outcome: refused, version: res.Version, present: res.Present, reason: res.Reason}
		what = " refused"
	}
	c.answers.add(in.kind.String() + what)
	if res.Applied && in.kind != cacheDeleteIf || !res.Applied && res.Present {
		c.seen[in.key] = res.Version
	}
	c.r.h.add(c.id, in, out, call, ret)
}
