package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/clustertest"
	"github.com/getfelix/felix-go/routing"
	"github.com/getfelix/felix-go/wire"
)

// TestReplicatedCacheCallsThroughClusterClient: every cache call through
// a ClusterClient on a 2-shard, 3-replica durable cache answers as on one
// broker (put-if absent and at a version, a stale version refused, get,
// delete-if, delete of an absent key, list pages, counters, a commit
// and state_get), a prefix watch sees every change in version order per
// shard, a TTL's expiry included, and a watch resumed from the versions
// it had after every member restarted misses none of the writes made
// meanwhile, and sees no snapshot.
func TestReplicatedCacheCallsThroughClusterClient(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{Nodes: 3, LeaseTTL: leaseTTL})
	c.WaitReady(t, 3)
	cc := dialAll(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	k := client.Cache{Namespace: "e2e", Name: "calls"}
	var info wire.CacheInfo
	for {
		var err error
		info, err = cc.CreateCache(ctx, k, client.CacheSpec{Shards: 2, Durable: true, Replicas: 3})
		if err == nil && info.Replicas == 3 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("create the cache: %+v, %v", info, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	r, err := routing.Parse(info.Routing)
	if err != nil {
		t.Fatal(err)
	}
	shardOf := func(key string) uint32 { return r.ShardFor([]byte(key), info.Shards) }
	// Until each shard has a leader that takes writes: a put of each
	// shard's own key, sent again until acknowledged (unconditional, so
	// a repeat changes nothing a later step reads).
	wantKeys := map[string]bool{}
	for n := range info.Shards {
		key := keyOnShard(t, shardOf, "w/ready", n)
		for {
			if res, err := cc.Put(ctx, k, key, []byte("ready"), client.PutOptions{}); err == nil && res.Applied {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("no leader of shard %d took a put", n)
			}
			time.Sleep(50 * time.Millisecond)
		}
		wantKeys[key] = true
	}

	w, err := cc.Watch(ctx, k, client.WatchPrefix("w/"), client.WatchFrom{})
	if err != nil {
		t.Fatal(err)
	}
	events := watchEvents(ctx, w)
	// want: each shard's changes the watch must see, in version order.
	// versions: each key's version as its last write answered.
	want := map[uint32][]string{}
	versions := map[string]uint64{}
	wrote := func(key string, kind wire.WatchKind, value string, res wire.CacheResult, err error) {
		t.Helper()
		if err != nil || !res.Applied {
			t.Fatalf("%s %s=%q: %+v, %v", kindName(kind), key, value, res, err)
		}
		n := shardOf(key)
		want[n] = append(want[n], change(kind, key, value, res.Version))
		versions[key] = res.Version
	}

	first, err := cc.Put(ctx, k, "w/user", []byte("ann"), client.PutOptions{IfAbsent: true})
	wrote("w/user", wire.WatchPut, "ann", first, err)
	if again, err := cc.Put(ctx, k, "w/user", []byte("bob"), client.PutOptions{IfAbsent: true}); err != nil || again.Applied || again.Reason != "condition_failed" || again.Version != first.Version {
		t.Fatalf("second put-if-absent: %+v, %v; want condition_failed at %d", again, err, first.Version)
	}
	swapped, err := cc.Put(ctx, k, "w/user", []byte("cy"), client.PutOptions{IfVersion: &first.Version})
	wrote("w/user", wire.WatchPut, "cy", swapped, err)
	if string(swapped.Prev) != "ann" {
		t.Fatalf("put-if at %d replaced %q, want ann", first.Version, swapped.Prev)
	}
	if stale, err := cc.Put(ctx, k, "w/user", []byte("dee"), client.PutOptions{IfVersion: &first.Version}); err != nil || stale.Applied || stale.Version != swapped.Version {
		t.Fatalf("put-if at a replaced version: %+v, %v; want refused at %d", stale, err, swapped.Version)
	}
	if got, err := cc.Get(ctx, k, "w/user"); err != nil || !got.Found || string(got.Value) != "cy" || got.Version != swapped.Version {
		t.Fatalf("get: %+v, %v; want cy at %d", got, err, swapped.Version)
	}
	wantKeys["w/user"] = true
	for i := range 6 {
		key := fmt.Sprintf("w/item%d", i)
		res, err := cc.Put(ctx, k, key, []byte(key), client.PutOptions{})
		wrote(key, wire.WatchPut, key, res, err)
		wantKeys[key] = true
	}
	v := swapped.Version
	if res, err := cc.Delete(ctx, k, "w/item0", &v); err != nil || res.Applied {
		t.Fatalf("delete-if at w/user's version: %+v, %v; want refused", res, err)
	}
	item0, err := cc.Get(ctx, k, "w/item0")
	if err != nil || !item0.Found {
		t.Fatalf("get w/item0: %+v, %v", item0, err)
	}
	res, err := cc.Delete(ctx, k, "w/item0", &item0.Version)
	wrote("w/item0", wire.WatchDelete, "", res, err)
	delete(wantKeys, "w/item0")
	if gone, err := cc.Delete(ctx, k, "w/item0", nil); err != nil || gone.Applied || gone.Reason != "not_found" {
		t.Fatalf("delete of an absent key: %+v, %v; want not_found", gone, err)
	}

	for range 2 {
		if _, err := cc.CounterAdd(ctx, k, "n/hits", 21); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := cc.CounterGet(ctx, k, "n/hits"); err != nil || !n.Found || n.Value != 42 {
		t.Fatalf("counter: %+v, %v; want 42", n, err)
	}

	order := "w/order"
	line := keyOnShard(t, shardOf, "w/line", shardOf(order))
	done, err := cc.Commit(ctx, k, order, []byte("paid"), []client.CacheOp{{Key: order, Value: []byte("paid")}, {Key: line, Value: []byte("open")}})
	if err != nil || !done.Applied {
		t.Fatalf("commit: %+v, %v", done, err)
	}
	n := shardOf(order)
	want[n] = append(want[n], change(wire.WatchPut, order, "paid", done.Version), change(wire.WatchPut, line, "open", done.Version),
		change(wire.WatchCommitEvent, "", "paid", done.Version))
	wantKeys[order], wantKeys[line] = true, true
	state, err := cc.StateGet(ctx, k, order, line)
	if err != nil || state.Applied < done.Version || len(state.Values) != 2 || state.Values[0].Version != done.Version || string(state.Values[1].Value) != "open" {
		t.Fatalf("state after the commit at %d: %+v, %v", done.Version, state, err)
	}

	// A TTL's expiry: absent to a get at once, written by the shard as a
	// change of its own, which the watch sees.
	short, err := cc.Put(ctx, k, "w/session", []byte("s"), client.PutOptions{TTL: 300 * time.Millisecond})
	wrote("w/session", wire.WatchPut, "s", short, err)

	listed := map[string]bool{}
	for n := range info.Shards {
		for after := ""; ; {
			page, err := cc.ListShard(ctx, k, n, "w/", after, 2)
			if err != nil {
				t.Fatalf("list shard %d: %v", n, err)
			}
			for _, e := range page.Entries {
				if shardOf(e.Key) != n {
					t.Fatalf("shard %d listed %s, which routes to %d", n, e.Key, shardOf(e.Key))
				}
				listed[e.Key] = true
			}
			if after = page.Next; after == "" {
				break
			}
		}
	}
	delete(listed, "w/session") // listed or expired by now
	if !maps.Equal(listed, wantKeys) {
		t.Fatalf("listed %v; want %v", listed, wantKeys)
	}

	extra := expectChanges(ctx, t, events, want, false)
	var expiry client.WatchEvent
	switch {
	case len(extra) > 1:
		t.Fatalf("events past those expected: %+v", extra)
	case len(extra) == 1:
		expiry = extra[0]
	default:
		expiry = nextEvent(ctx, t, events)
	}
	if expiry.Kind != wire.WatchExpire || expiry.Key != "w/session" || expiry.Version <= short.Version {
		t.Fatalf("after w/session's TTL: %+v; want its expiry after %d", expiry, short.Version)
	}
	if v, err := cc.Get(ctx, k, "w/session"); err != nil || v.Found {
		t.Fatalf("get of an expired key: %+v, %v; want absent", v, err)
	}

	// Every member is killed and restarts while the watch is away; writes meanwhile
	// reach it once it resumes from its versions.
	resume := w.Resume()
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	want = map[uint32][]string{}
	for i := range 4 {
		key := fmt.Sprintf("w/item%d", i+1)
		res, err := cc.Put(ctx, k, key, []byte("unseen"), client.PutOptions{})
		wrote(key, wire.WatchPut, "unseen", res, err)
	}
	members := c.Members()
	for _, m := range members {
		m.Kill()
	}
	for _, m := range members {
		m.Launch(t)
	}
	for _, m := range members {
		m.WaitServing(t)
	}
	cc = dialAll(t, c)
	var w2 *client.Watcher
	for {
		if w2, err = cc.Watch(ctx, k, client.WatchPrefix("w/"), client.WatchFrom{Versions: resume}); err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("watch from %v after the restart: %v", resume, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	defer w2.Close(ctx)
	events = watchEvents(ctx, w2)
	for i := range 2 {
		key := fmt.Sprintf("w/item%d", i+1)
		at := versions[key]
		for {
			res, err := cc.Put(ctx, k, key, []byte("after"), client.PutOptions{IfVersion: &at})
			if err == nil {
				wrote(key, wire.WatchPut, "after", res, err)
				break
			}
			var we *wire.Error
			if !errors.As(err, &we) || we.Retry == wire.RetryOutcomeUnknown || ctx.Err() != nil {
				t.Fatalf("put %s after the restart: %v", key, err)
			}
			time.Sleep(100 * time.Millisecond) // refused before it was proposed: no leader yet
		}
	}
	if extra := expectChanges(ctx, t, events, want, true); len(extra) > 0 {
		t.Fatalf("events past those expected after the restart: %+v", extra)
	}
}

// keyOnShard finds a key starting with prefix that routes to shard n.
func keyOnShard(t *testing.T, shardOf func(string) uint32, prefix string, n uint32) string {
	t.Helper()
	for i := range 1000 {
		if key := fmt.Sprintf("%s%d", prefix, i); shardOf(key) == n {
			return key
		}
	}
	t.Fatalf("no key %s… routes to shard %d", prefix, n)
	return ""
}

func change(kind wire.WatchKind, key, value string, version uint64) string {
	return fmt.Sprintf("%d %s %s=%q", version, kindName(kind), key, value)
}

func kindName(kind wire.WatchKind) string {
	switch kind {
	case wire.WatchPut:
		return "put"
	case wire.WatchDelete:
		return "delete"
	case wire.WatchExpire:
		return "expire"
	case wire.WatchCommitEvent:
		return "commit"
	}
	return fmt.Sprintf("kind %d", kind)
}

// watchEvents reads w's events into a channel until it ends; the error
// that ended it comes as an event of Kind 0 with the error as Value.
func watchEvents(ctx context.Context, w *client.Watcher) <-chan client.WatchEvent {
	out := make(chan client.WatchEvent, 256)
	go func() {
		defer close(out)
		for {
			ev, err := w.Next(ctx)
			if err != nil {
				if !errors.Is(err, client.ErrClosed) && ctx.Err() == nil {
					out <- client.WatchEvent{Value: []byte(err.Error())}
				}
				return
			}
			out <- ev
		}
	}()
	return out
}

// eventWait bounds the wait for a watch event that must come: every
// write it follows was acknowledged already.
const eventWait = 15 * time.Second

func nextEvent(ctx context.Context, t *testing.T, events <-chan client.WatchEvent) client.WatchEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, eventWait)
	defer cancel()
	select {
	case ev, ok := <-events:
		if !ok || ev.Kind == 0 {
			t.Fatalf("the watch ended: %s", ev.Value)
		}
		return ev
	case <-ctx.Done():
		t.Fatalf("no watch event within %s", eventWait)
	}
	return client.WatchEvent{}
}

// expectChanges reads events until each shard has as many as want holds
// for it, checks that they are want's, in order, and returns the events
// that came past them; noSnapshot also refuses retained events.
func expectChanges(ctx context.Context, t *testing.T, events <-chan client.WatchEvent, want map[uint32][]string, noSnapshot bool) []client.WatchEvent {
	t.Helper()
	got := map[uint32][]string{}
	var extra []client.WatchEvent
	short := func() bool {
		for n, w := range want {
			if len(got[n]) < len(w) {
				return true
			}
		}
		return false
	}
	for short() {
		ev := nextEvent(ctx, t, events)
		if ev.Retained && noSnapshot {
			t.Fatalf("a retained event %+v: the resume should have replayed every change", ev)
		}
		if len(got[ev.Shard]) == len(want[ev.Shard]) {
			extra = append(extra, ev)
			continue
		}
		got[ev.Shard] = append(got[ev.Shard], change(ev.Kind, ev.Key, string(ev.Value), ev.Version))
	}
	for n, w := range want {
		if !slices.Equal(got[n], w) {
			t.Fatalf("shard %d's events:\n%v\nwant\n%v", n, got[n], w)
		}
	}
	return extra
}
