package streams

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/cache"
	"github.com/getfelix/felix-go/wire"
)

var cacheScope = wire.Scope{Tenant: "t", Namespace: "n", Stream: "c"}

// spawnCacheShard spawns shard 0 of a cache; log nil makes it in memory.
func spawnCacheShard(t *testing.T, cfg ShardConfig, log *fakeLog, settings CacheSettings) *testShard {
	t.Helper()
	if log == nil {
		return spawnCacheShardOn(t, cfg, nil, settings)
	}
	return spawnCacheShardOn(t, cfg, log, settings)
}

// spawnCacheShardOn is spawnCacheShard over any log.
func spawnCacheShardOn(t *testing.T, cfg ShardConfig, log Log, settings CacheSettings) *testShard {
	t.Helper()
	sys := newSystem(t)
	rc := RegistryConfig{Shard: cfg, PubQueueDepth: 8, Log: zerolog.Nop(), Root: sys.Root}
	if log != nil {
		rc.OpenLog = func(Def, uint32) (Log, bool, error) { return log, false, nil }
	}
	sup := spawnSupervisor(t, sys, rc)
	def := Def{Scope: cacheScope, Shards: 1, Durable: log != nil, Cache: &settings}
	res, err := sys.Root.RequestFuture(sup, &spawnShard{def: def, shard: 0}, eventTimeout).Result()
	if err != nil {
		t.Fatal(err)
	}
	return &testShard{sys: sys, ref: res.(*ShardRef), sup: sup}
}

// write posts one cache write and waits for its answer.
func (ts *testShard) write(t *testing.T, op CacheOp) PublishResult {
	t.Helper()
	answers := make(chan PublishResult, 2)
	p := &Publish{Cache: &op, Done: func(r PublishResult) { answers <- r }}
	if r := ts.ref.Mailbox.TryPost(p, eventTimeout); !r.Accepted() {
		t.Fatalf("cache write not admitted: %v", r)
	}
	return answer(t, answers)
}

// applied writes op and fails unless it applied at offset want.
func (ts *testShard) applied(t *testing.T, op CacheOp, want uint64) PublishResult {
	t.Helper()
	res := ts.write(t, op)
	if res.Err != nil || res.Cache == nil || res.Cache.Err != nil || res.Base != want || res.Cache.Version != want {
		t.Fatalf("%s %q: %+v (cache %+v); want applied at %d", op.Record.Kind, op.Record.Key, res, res.Cache, want)
	}
	return res
}

func (ts *testShard) read(t *testing.T, msg any) *CacheReadResult {
	t.Helper()
	res, err := ts.sys.Root.RequestFuture(ts.ref.PID, msg, eventTimeout).Result()
	if err != nil {
		t.Fatal(err)
	}
	return res.(*CacheReadResult)
}

func put(key, value string) CacheOp {
	return CacheOp{Record: cache.Record{Kind: cache.KindPut, Key: key, Value: []byte(value)}}
}

func TestCacheShardAppliesWritesAndAnswersFromItsIndex(t *testing.T) {
	ts := spawnCacheShard(t, ShardConfig{}, nil, CacheSettings{})
	ts.applied(t, put("user/1", "ann"), 0)
	absent := put("user/1", "bob")
	absent.Record.Cond = cache.Cond{Kind: cache.CondAbsent}
	if res := ts.write(t, absent); res.Err != nil || res.Cache == nil || !errors.Is(res.Cache.Err, cache.ErrConditionFailed) || res.Cache.Version != 0 {
		t.Fatalf("put if absent over user/1: %+v (cache %+v); want condition failed at version 0", res, res.Cache)
	}
	ts.applied(t, put("user/2", "cy"), 2)
	add := CacheOp{Record: cache.Record{Kind: cache.KindCounterAdd, Key: "hits", Delta: 5}}
	ts.applied(t, add, 3)
	if res := ts.applied(t, add, 4); res.Cache.Counter != 10 {
		t.Fatalf("second add: total %d; want 10", res.Cache.Counter)
	}
	del := CacheOp{Record: cache.Record{Kind: cache.KindDelete, Key: "user/2"}}
	if res := ts.applied(t, del, 5); res.Cache.Prev == nil || string(res.Cache.Prev.Value) != "cy" {
		t.Fatalf("delete: removed %+v; want cy", res.Cache.Prev)
	}

	if got := ts.read(t, &CacheGet{Key: "user/1"}); !got.Found || string(got.Entry.Value) != "ann" || got.Entry.Version != 0 {
		t.Fatalf("get user/1: %+v; want ann at 0", got)
	}
	if got := ts.read(t, &CacheGet{Key: "user/2"}); got.Found || got.Err != nil {
		t.Fatalf("get user/2 after its delete: %+v; want absent", got)
	}
	if got := ts.read(t, &CacheList{Prefix: "user/"}); len(got.Page) != 1 || got.Page[0].Key != "user/1" || got.Next != "" {
		t.Fatalf("list user/: %+v; want user/1 only", got)
	}
	if got := ts.read(t, &CounterGet{Key: "hits"}); !got.Found || got.Counter.Value != 10 {
		t.Fatalf("counter hits: %+v; want 10", got)
	}
	got := ts.read(t, &StateGet{Keys: []string{"user/1", "user/2"}})
	if got.Applied != 5 || !got.Lookups[0].Found || got.Lookups[1].Found {
		t.Fatalf("state get: %+v; want user/1 only, as of 5", got)
	}
}

func TestCacheShardTakesCacheWritesOnlyAndStreamsNone(t *testing.T) {
	ts := spawnCacheShard(t, ShardConfig{}, nil, CacheSettings{})
	if res := answer(t, ts.publish(t, nil, "plain")); !errors.Is(res.Err, &wire.Error{Code: wire.CodeInvalidRequest}) {
		t.Fatalf("plain publish to a cache: %+v; want invalid_request", res)
	}
	bad := CacheOp{Record: cache.Record{Kind: cache.KindPut}} // no key
	if res := ts.write(t, bad); !errors.Is(res.Err, &wire.Error{Code: wire.CodeInvalidRequest}) {
		t.Fatalf("put without a key: %+v; want invalid_request", res)
	}
	ts.applied(t, put("k", "v"), 0) // the refusals took no offset

	stream := spawnTestShard(t, ShardConfig{}, nil, false, nil)
	if res := stream.write(t, put("k", "v")); !errors.Is(res.Err, &wire.Error{Code: wire.CodeInvalidRequest}) {
		t.Fatalf("cache write to a stream: %+v; want invalid_request", res)
	}
	if got := stream.read(t, &CacheGet{Key: "k"}); !errors.Is(got.Err, &wire.Error{Code: wire.CodeInvalidRequest}) {
		t.Fatalf("cache read of a stream: %+v; want invalid_request", got)
	}
}

func TestDurableCacheShardRebuildsItsIndexFromItsLog(t *testing.T) {
	log := newFakeLog(0)
	first := spawnCacheShard(t, ShardConfig{}, log, CacheSettings{})
	first.applied(t, put("a", "1"), 0)
	first.applied(t, put("b", "2"), 1)
	first.applied(t, CacheOp{Record: cache.Record{Kind: cache.KindDelete, Key: "a"}}, 2)
	first.applied(t, CacheOp{Record: cache.Record{Kind: cache.KindCounterAdd, Key: "n", Delta: 3}}, 3)
	if err := first.sys.Root.StopFuture(first.sup).Wait(); err != nil {
		t.Fatal(err)
	}

	again := spawnCacheShard(t, ShardConfig{}, log, CacheSettings{})
	if got := again.read(t, &CacheGet{Key: "b"}); !got.Found || string(got.Entry.Value) != "2" || got.Entry.Version != 1 {
		t.Fatalf("b after reopening: %+v; want 2 at version 1", got)
	}
	if got := again.read(t, &CacheGet{Key: "a"}); got.Found {
		t.Fatalf("a after reopening: %+v; want deleted", got)
	}
	if got := again.read(t, &CounterGet{Key: "n"}); got.Counter.Value != 3 {
		t.Fatalf("counter after reopening: %+v; want 3", got)
	}
	// The rebuilt versions are the ones a put-if names.
	cas := put("b", "3")
	cas.Record.Cond = cache.Cond{Kind: cache.CondVersion, Version: 1}
	again.applied(t, cas, 4)
}

func TestCacheShardWritesExpiryAsADeleteSubscribersSee(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	cfg := ShardConfig{now: func() time.Time { return time.Unix(0, now.Load()) }, cacheExpiryInterval: 5 * time.Millisecond}
	ts := spawnCacheShard(t, cfg, nil, CacheSettings{TTL: time.Minute})
	f := ts.addFeeder(t, 1, actors.MailboxConfig{Capacity: 8})
	ts.applied(t, put("session", "s1"), 0)
	short := put("flash", "f")
	short.TTL = time.Second
	ts.applied(t, short, 1)
	for range 2 {
		f.nextEnv(t)
	}
	if got := ts.read(t, &CacheGet{Key: "session"}); got.Entry.Expires != now.Load()+int64(time.Minute) {
		t.Fatalf("session: expires %d; want the cache's TTL from the shard's clock, %d", got.Entry.Expires, now.Load()+int64(time.Minute))
	}

	now.Add(int64(2 * time.Second))
	env := f.nextEnv(t) // the expire record, written on the shard's tick
	rec, err := cache.DecodeRecord(env.Payloads[0])
	if err != nil || rec.Kind != cache.KindExpire || rec.Key != "flash" || rec.Version != 1 || env.Base != 2 {
		t.Fatalf("after flash's expiry the subscriber got %+v at %d (%v); want an expire of flash@1 at 2", rec, env.Base, err)
	}
	if got := ts.read(t, &CacheGet{Key: "flash"}); got.Found {
		t.Fatalf("flash after its expiry: %+v; want absent", got)
	}
	if got := ts.read(t, &CacheGet{Key: "session"}); !got.Found {
		t.Fatalf("session, not expired: %+v; want present", got)
	}
}

func TestReplicatedCacheShardAppliesOnCommitAndReadsAtTheLeader(t *testing.T) {
	r := &fakeReplica{term: 1}
	ts := spawnReplicatedCacheShard(t, r)
	rec, err := cache.AppendRecord(nil, &cache.Record{Kind: cache.KindPut, Key: "k", Value: []byte("from-leader")})
	if err != nil {
		t.Fatal(err)
	}
	r.appendFrom(1, string(rec))
	r.commitAll(t)
	r.waitApplied(t)
	if got := ts.read(t, &CacheGet{Key: "k"}); !errors.Is(got.Err, &wire.Error{Code: wire.CodeNotLeader}) {
		t.Fatalf("read on a follower: %+v; want not_leader", got)
	}

	becomeLeader(t, r, 2)
	if got := ts.read(t, &CacheGet{Key: "k"}); !got.Found || string(got.Entry.Value) != "from-leader" || got.Entry.Version != 0 {
		t.Fatalf("read at the new leader of what the follower applied: %+v", got)
	}
	answers := make(chan PublishResult, 2)
	cas := put("k", "mine")
	cas.Record.Cond = cache.Cond{Kind: cache.CondVersion, Version: 0}
	ts.ref.Mailbox.TryPost(&Publish{Cache: &cas, Done: func(res PublishResult) { answers <- res }}, eventTimeout)
	r.proposed(t, 1)
	noAnswer(t, answers, "not committed yet")
	r.commitAll(t)
	if res := answer(t, answers); res.Err != nil || res.Cache == nil || res.Cache.Err != nil || res.Base != 1 {
		t.Fatalf("put-if at the leader: %+v (cache %+v); want applied at 1", res, res.Cache)
	}
	if got := ts.read(t, &CacheGet{Key: "k"}); string(got.Entry.Value) != "mine" || got.Entry.Version != 1 {
		t.Fatalf("after the put-if: %+v; want mine at 1", got)
	}
}

func spawnReplicatedCacheShard(t *testing.T, r *fakeReplica) *testShard {
	t.Helper()
	return spawnReplicatedCacheShardOn(t, r, ShardConfig{}, newFakeLog(0), CacheSettings{})
}

func spawnReplicatedCacheShardOn(t *testing.T, r *fakeReplica, cfg ShardConfig, log Log, settings CacheSettings) *testShard {
	t.Helper()
	r.proposals = make(chan struct{}, 16)
	r.readies = make(chan struct{}, 1)
	sys := newSystem(t)
	rc := RegistryConfig{Shard: cfg, PubQueueDepth: 8, Log: zerolog.Nop(), Root: sys.Root}
	rc.OpenLog = func(Def, uint32) (Log, bool, error) { return log, false, nil }
	opened := make(chan struct{})
	rc.OpenReplica = func(_ Def, _ uint32, _ Log, inbox *PeerInbox) (Replica, error) {
		r.inbox = inbox
		close(opened)
		return r, nil
	}
	sup := spawnSupervisor(t, sys, rc)
	def := Def{Scope: cacheScope, Shards: 1, Durable: true, Replicas: 3, Cache: &settings}
	res, err := sys.Root.RequestFuture(sup, &spawnShard{def: def, shard: 0}, eventTimeout).Result()
	if err != nil {
		t.Fatal(err)
	}
	<-opened
	return &testShard{sys: sys, ref: res.(*ShardRef), sup: sup}
}

// TestRegistryCreatesCachesApart: a cache takes no retention (it would
// delete live keys) and no negative TTL; a repeated create is the same
// cache, and a stream of the same name is another thing.
func TestRegistryCreatesCachesApart(t *testing.T) {
	sys := newSystem(t)
	rc := RegistryConfig{PubQueueDepth: 8, Log: zerolog.Nop(), Root: sys.Root}
	shards := spawnSupervisor(t, sys, rc)
	reg, err := sys.Root.SpawnNamed(RegistryProps(rc, shards, nil), "registry")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sys.Root.StopFuture(reg).Wait() })
	create := func(d Def) error {
		t.Helper()
		res, err := actors.Request[*StreamResult](context.Background(), sys.Root, reg, &CreateStream{Def: d}, eventTimeout)
		if err != nil {
			t.Fatal(err)
		}
		return res.Err
	}
	for _, d := range []Def{
		{Scope: cacheScope, Shards: 1, Cache: &CacheSettings{TTL: -time.Second}},
		{Scope: cacheScope, Shards: 1, Durable: true, RetentionAge: time.Hour, Cache: &CacheSettings{}},
		{Scope: cacheScope, Shards: 1, Cache: &CacheSettings{History: -1}},
		{Scope: cacheScope, Shards: 1, Cache: &CacheSettings{History: cache.MaxHistory + 1}},
	} {
		if err := create(d); !errors.Is(err, wire.ErrInvalidRequest) {
			t.Fatalf("create %+v (cache %+v): %v; want invalid_request", d, d.Cache, err)
		}
	}
	c := Def{Scope: cacheScope, Shards: 1, Cache: &CacheSettings{TTL: time.Minute}}
	if err := create(c); err != nil {
		t.Fatal(err)
	}
	if err := create(Def{Scope: cacheScope, Shards: 1, Cache: &CacheSettings{TTL: time.Minute, History: cache.DefaultHistory}}); err != nil {
		t.Fatalf("the same cache again, its default history named: %v; want it confirmed", err)
	}
	if err := create(Def{Scope: cacheScope, Shards: 1, Cache: &CacheSettings{TTL: time.Minute, History: 3}}); !errors.Is(err, wire.ErrInvalidRequest) {
		t.Fatalf("the cache again with another history: %v; want invalid_request", err)
	}
	if err := create(Def{Scope: cacheScope, Shards: 1}); !errors.Is(err, wire.ErrInvalidRequest) {
		t.Fatalf("a stream over the cache's name: %v; want invalid_request", err)
	}
}
