package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/getfelix/felix-go/broker"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/cluster"
	"github.com/getfelix/felix-go/wire"
)

// Consumer groups on a replicated stream: the group is served by one
// member (the leader of its state shard, which follows the data shard's
// leader), others refuse with not_leader naming it, and when that member
// stops the group goes on at the new leader from its committed state.

// groupServer asks every member to describe the group and returns the one
// that answers, checking that every other one refuses not_leader naming
// it; "" while they do not agree yet (an election, a leadership moving).
func groupServer(ctx context.Context, t *testing.T, members map[string]*broker.Broker, st client.Stream, group string) (string, client.GroupInfo) {
	t.Helper()
	server, named := "", map[string]string{}
	var info client.GroupInfo
	for id, b := range members {
		c := dialInsecure(t, b.Addr().String())
		got, err := c.DescribeGroup(ctx, st, group)
		_ = c.Close(context.Background())
		var we *wire.Error
		switch {
		case err == nil && server == "":
			server, info = id, got
		case err == nil:
			return "", info // two answer: a leadership is moving
		case errors.As(err, &we) && we.Code == wire.CodeNotLeader && we.Owner != nil:
			named[id] = we.Owner.NodeID
		default:
			return "", info // electing, catching up
		}
	}
	for id, n := range named {
		if n != server {
			t.Logf("member %s names %s; %s serves", id, n, server)
			return "", info
		}
	}
	return server, info
}

// waitGroupServer waits until one member serves the group, the others
// route to it, and it is the data shard's owner (the state shard's
// leadership followed the data shard's).
func waitGroupServer(ctx context.Context, t *testing.T, cc *client.ClusterClient, members map[string]*broker.Broker, st client.Stream, group string) (string, client.GroupInfo) {
	t.Helper()
	for {
		top, err := cc.ShardOwners(ctx, st)
		if err != nil {
			t.Fatal(err)
		}
		server, info := groupServer(ctx, t, members, st, group)
		if server != "" && server == top.Owners[0].Owner.NodeID {
			return server, info
		}
		if ctx.Err() != nil {
			t.Fatalf("no member serves group %s at the data shard's leader %s (last: %q)", group, top.Owners[0].Owner.NodeID, server)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// deliveries counts each offset's hand-outs and acknowledgements.
type deliveries struct {
	mu    sync.Mutex
	seen  map[uint64]int
	acked map[uint64]bool
	// changed is signalled on each acknowledgement (waitAcked).
	changed chan struct{}
}

func (d *deliveries) saw(off uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.seen[off]++
}

func (d *deliveries) ack(off uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.acked[off] = true
	select {
	case d.changed <- struct{}{}:
	default:
	}
}

// waitAcked waits until n records were handled.
func (d *deliveries) waitAcked(ctx context.Context, t *testing.T, n int, what string) {
	t.Helper()
	for d.ackedCount() < n {
		select {
		case <-d.changed:
		case <-ctx.Done():
			t.Fatalf("%s: %d of %d records handled", what, d.ackedCount(), n)
		}
	}
}

func (d *deliveries) ackedCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.acked)
}

func TestGroupSurvivesItsLeader(t *testing.T) {
	members, cc, ctx, st := startReplicated(t, "jobs", 3)
	publish := func(from, n int) {
		if err := cc.PublishBatch(ctx, st, bytesOf(payloads(from, n)), client.PublishOptions{}); err != nil {
			t.Fatalf("publish %d..%d: %v", from, from+n-1, err)
		}
	}
	publish(0, 200)
	if _, err := cc.CreateGroup(ctx, st, "workers", client.GroupStart{Kind: "earliest"}); err != nil {
		t.Fatalf("create the group: %v", err)
	}
	// One member serves the group, the data shard's leader (the state
	// shard's leadership followed it); the others say not_leader naming it.
	leader, _ := waitGroupServer(ctx, t, cc, members, st, "workers")

	// Acknowledge 0..99; claim 100..119 and hold them.
	d := &deliveries{seen: map[uint64]int{}, acked: map[uint64]bool{}, changed: make(chan struct{}, 1)}
	held := cc.Group(st, "workers", client.GroupOptions{Consumer: "held", Visibility: time.Minute})
	defer held.Close()
	ackThenHold(ctx, t, held, d, 100, 20)

	// Still there; its describe writes the cursor: 100 is committed on a
	// quorum when it answers.
	if now, info := waitGroupServer(ctx, t, cc, members, st, "workers"); now != leader || info.Shards[0].Cursor != 100 || info.Shards[0].InFlight != 20 {
		t.Fatalf("before the stop: served by %s (was %s), cursor %d, in flight %d; want 100 and 20", now, leader, info.Shards[0].Cursor, info.Shards[0].InFlight)
	}

	// A consumer runs through the leader's stop.
	moved := make(chan struct{})
	var afterMove sync.Map // offsets handed out after the stop
	consumer := cc.Group(st, "workers", client.GroupOptions{Consumer: "runner", Visibility: time.Minute})
	defer consumer.Close()
	cctx, stopConsumer := context.WithCancel(ctx)
	consumed := make(chan error, 1)
	go func() {
		consumed <- consumer.Consume(cctx, client.ConsumeOptions{Batch: 10, Wait: time.Second}, func(_ context.Context, r client.GroupRecord) error {
			select {
			case <-moved:
				afterMove.Store(r.Offset, true)
			default:
			}
			d.saw(r.Offset)
			d.ack(r.Offset) // acknowledged once Consume's ack returns; counted as handled here
			return nil
		})
	}()
	d.waitAcked(ctx, t, 150, "before the stop") // mid-consumption
	close(moved)
	if err := members[leader].Stop(ctx); err != nil {
		t.Fatal(err)
	}
	delete(members, leader)
	publish(200, 100)
	d.waitAcked(ctx, t, 300, "after "+leader+" stopped")
	stopConsumer()
	if err := <-consumed; err != nil {
		t.Fatalf("consume: %v", err)
	}

	checkAtLeastOnce(t, d, &afterMove, 300, 100, 120)
	now, info := waitGroupServer(ctx, t, cc, members, st, "workers")
	if now == leader || info.Shards[0].Cursor != 300 {
		t.Fatalf("after the move: served by %s (stopped: %s), cursor %d; want 300", now, leader, info.Shards[0].Cursor)
	}
	redelivered := 0
	for _, n := range d.seen {
		redelivered += n - 1
	}
	t.Logf("group moved from %s to %s; %d hand-outs beyond the first", leader, now, redelivered)
}

// ackThenHold acknowledges the first acked records through g, then claims
// the next held ones and keeps them in flight.
func ackThenHold(ctx context.Context, t *testing.T, g *client.Group, d *deliveries, acked, held int) {
	t.Helper()
	for d.ackedCount() < acked {
		recs, err := g.Poll(ctx, acked-d.ackedCount(), time.Second)
		if err != nil {
			t.Fatalf("poll: %v", err)
		}
		for _, r := range recs {
			d.saw(r.Offset)
			d.ack(r.Offset)
		}
		if err := g.Ack(ctx, recs...); err != nil {
			t.Fatalf("ack: %v", err)
		}
	}
	inFlight, err := g.Poll(ctx, held, time.Second)
	if err != nil || len(inFlight) != held || inFlight[0].Offset != uint64(acked) {
		t.Fatalf("claim %d..%d: %d records, %v", acked, acked+held-1, len(inFlight), err)
	}
	for _, r := range inFlight {
		d.saw(r.Offset)
	}
}

// checkAtLeastOnce checks a group's move: every record below total was
// handled; nothing below cursor (acknowledged and committed before the
// move) was handed out after it; what was in flight, [cursor, held), was.
func checkAtLeastOnce(t *testing.T, d *deliveries, afterMove *sync.Map, total, cursor, held uint64) {
	t.Helper()
	for off := range total {
		if !d.acked[off] {
			t.Errorf("record %d never handled", off)
		}
	}
	afterMove.Range(func(k, _ any) bool {
		if off := k.(uint64); off < cursor {
			t.Errorf("record %d, acknowledged under the committed cursor, was handed out again after the move", off)
		}
		return true
	})
	for off := cursor; off < held; off++ {
		if _, ok := afterMove.Load(off); !ok {
			t.Errorf("record %d, in flight at the old leader, was not handed out again", off)
		}
	}
}

func bytesOf(ps []string) [][]byte {
	out := make([][]byte, len(ps))
	for i, p := range ps {
		out[i] = []byte(p)
	}
	return out
}

// TestGroupsOnEveryShardsOwner: on an unreplicated durable stream of four
// shards spread over three members, each shard's group is served by the
// shard's owner (its state shard is placed there too): any other member
// refuses not_leader naming it. The cluster client creates, consumes,
// describes and deletes the group shard by shard, and deleting the stream
// deletes its groups.
func TestGroupsOnEveryShardsOwner(t *testing.T) {
	etcd := embeddedEtcd(t)
	members := map[string]*broker.Broker{}
	var addrs []string
	for _, id := range []string{"a", "b", "c"} {
		members[id] = startMember(t, etcd, id)
		addrs = append(addrs, members[id].Addr().String())
	}
	cc := dialClusterInsecure(t, addrs)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st := client.Stream{Tenant: "t", Namespace: "ns", Name: "spread"}
	for {
		_, err := cc.CreateStream(ctx, st, client.StreamConfig{Durable: true, Shards: 4})
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("create the stream: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // the members are joining
	}
	want := map[string]bool{}
	for _, p := range payloads(0, 40) {
		if err := cc.Publish(ctx, st, []byte(p), client.PublishOptions{Key: []byte(p)}); err != nil {
			t.Fatalf("publish %s: %v", p, err)
		}
		want[p] = true
	}
	if _, err := cc.CreateGroup(ctx, st, "workers", client.GroupStart{Kind: "earliest"}); err != nil {
		t.Fatalf("create the group: %v", err)
	}
	requireNotLeaderElsewhere(ctx, t, cc, members, st, "workers")
	got := drainGroup(ctx, t, cc, st, "workers", 4)
	if len(got) != len(want) {
		t.Fatalf("consumed %d distinct records of %d", len(got), len(want))
	}
	info, err := cc.DescribeGroup(ctx, st, "workers")
	if err != nil || len(info.Shards) != 4 {
		t.Fatalf("describe: %+v, %v", info, err)
	}
	var cursors uint64
	for _, s := range info.Shards {
		cursors += s.Cursor
		if s.Lag != 0 {
			t.Errorf("shard %d: lag %d after everything was acked", s.Shard, s.Lag)
		}
	}
	if cursors != 40 {
		t.Errorf("the cursors sum to %d; want 40", cursors)
	}
	if names, err := cc.ListGroups(ctx, st); err != nil || len(names) != 1 || names[0] != "workers" {
		t.Fatalf("groups: %q, %v", names, err)
	}
	if err := cc.DeleteGroup(ctx, st, "workers"); err != nil {
		t.Fatalf("delete the group: %v", err)
	}
	if _, err := cc.DescribeGroup(ctx, st, "workers"); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("describe a deleted group: %v; want not_found", err)
	}

	requireGroupsGoWithTheStream(ctx, t, cc, st)
}

// requireNotLeaderElsewhere checks every member but a shard's owner
// refuses a poll of its group with not_leader naming the owner.
func requireNotLeaderElsewhere(ctx context.Context, t *testing.T, cc *client.ClusterClient, members map[string]*broker.Broker, st client.Stream, group string) {
	t.Helper()
	top, err := cc.ShardOwners(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	owners := map[string]bool{}
	for n, o := range top.Owners {
		owners[o.Owner.NodeID] = true
		for id, b := range members {
			if id == o.Owner.NodeID {
				continue
			}
			g := dialInsecure(t, b.Addr().String()).Group(st, group, client.GroupOptions{Shard: uint32(n)})
			_, err := g.Poll(ctx, 1, 0)
			g.Close()
			var we *wire.Error
			if !errors.As(err, &we) || we.Code != wire.CodeNotLeader || we.Owner == nil || we.Owner.NodeID != o.Owner.NodeID {
				t.Fatalf("member %s polled shard %d (owned by %s): %v; want not_leader naming the owner", id, n, o.Owner.NodeID, err)
			}
		}
	}
	if len(owners) < 2 {
		t.Logf("the shards are on %d member(s) only", len(owners))
	}
}

// drainGroup polls and acknowledges every shard's group through the
// cluster client until each has nothing more, and returns the payloads.
func drainGroup(ctx context.Context, t *testing.T, cc *client.ClusterClient, st client.Stream, group string, shards uint32) map[string]bool {
	t.Helper()
	got := map[string]bool{}
	for n := range shards {
		g := cc.Group(st, group, client.GroupOptions{Shard: n})
		for {
			recs, err := g.Poll(ctx, 100, 0)
			if err != nil {
				t.Fatalf("poll shard %d: %v", n, err)
			}
			if len(recs) == 0 {
				break
			}
			for _, r := range recs {
				got[string(r.Payload)] = true
			}
			if err := g.Ack(ctx, recs...); err != nil {
				t.Fatalf("ack shard %d: %v", n, err)
			}
		}
		g.Close()
	}
	return got
}

// requireGroupsGoWithTheStream: deleting the stream deletes its groups'
// state: made again, it has none.
func requireGroupsGoWithTheStream(ctx context.Context, t *testing.T, cc *client.ClusterClient, st client.Stream) {
	t.Helper()
	if _, err := cc.CreateGroup(ctx, st, "again", client.GroupStart{Kind: "earliest"}); err != nil {
		t.Fatal(err)
	}
	if err := cc.DeleteStream(ctx, st); err != nil {
		t.Fatal(err)
	}
	if _, err := cc.CreateStream(ctx, st, client.StreamConfig{Durable: true, Shards: 4}); err != nil {
		t.Fatal(err)
	}
	for {
		names, err := cc.ListGroups(ctx, st)
		if errors.Is(err, wire.ErrNotFound) && ctx.Err() == nil {
			// The member asked has not seen the new definition yet (each
			// learns it from its etcd watch).
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if err != nil || len(names) != 0 {
			t.Fatalf("groups of the stream made again: %q, %v; want none", names, err)
		}
		break
	}
}

// TestGroupStateMovesWithItsReplica: moving the data shard's replica (the
// leader's, so the group's server moves too) moves the groups' state
// replica the same way: both sets end alike, and the group goes on at the
// data shard's new leader from its committed cursor.
func TestGroupStateMovesWithItsReplica(t *testing.T) {
	members, cc, ctx, st := startReplicated(t, "moving", 4)
	if err := cc.PublishBatch(ctx, st, bytesOf(payloads(0, 10)), client.PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cc.CreateGroup(ctx, st, "workers", client.GroupStart{Kind: "earliest"}); err != nil {
		t.Fatal(err)
	}
	// The group is served where it settles first: served for a moment by
	// the state shard's first leader, it moves to the data shard's leader,
	// and there starts from the last cursor saved, which an ack just made
	// need not have reached (at least once: the records are handed out
	// again), so an ack before it settled could be undone by the move.
	waitGroupServer(ctx, t, cc, members, st, "workers")
	g := cc.Group(st, "workers", client.GroupOptions{})
	defer g.Close()
	first, err := g.Poll(ctx, 5, time.Second)
	if err != nil || len(first) != 5 {
		t.Fatalf("poll: %d records, %v", len(first), err)
	}
	if err := g.Ack(ctx, first...); err != nil {
		t.Fatal(err)
	}
	leader, info := waitGroupServer(ctx, t, cc, members, st, "workers")
	if info.Shards[0].Cursor != 5 {
		t.Fatalf("cursor %d before the move; want 5", info.Shards[0].Cursor)
	}

	dataPath := "/debug/cluster/replicas?stream=t/ns/moving&shard=0"
	statePath := "/debug/cluster/replicas?stream=t/ns/" + wire.GroupStreamPrefix + "moving&shard=0"
	spare, _ := moveAway(t, members, "moving", leader)
	moved := func(set cluster.ReplicaSet) bool {
		_, stays := set.Has(leader)
		_, came := set.Has(spare)
		return set.Move == nil && !stays && came
	}
	data := waitSet(ctx, t, members, dataPath, moved)
	state := waitSet(ctx, t, members, statePath, moved)
	if !slices.Equal(data.Members, state.Members) {
		t.Fatalf("after the move the data set is %+v, the state set %+v; want them alike", data.Members, state.Members)
	}

	now, _ := waitGroupServer(ctx, t, cc, members, st, "workers")
	rest, err := g.Poll(ctx, 10, time.Second)
	if err != nil || len(rest) != 5 || rest[0].Offset != 5 {
		t.Fatalf("after the move to %s: %d records from %v, %v; want 5..9", now, len(rest), offsetsOf(rest), err)
	}
	if err := g.Ack(ctx, rest...); err != nil {
		t.Fatal(err)
	}
	if _, info := waitGroupServer(ctx, t, cc, members, st, "workers"); info.Shards[0].Cursor != 10 {
		t.Fatalf("cursor %d after the move; want 10", info.Shards[0].Cursor)
	}
}

func offsetsOf(recs []client.GroupRecord) []uint64 {
	out := make([]uint64, len(recs))
	for i, r := range recs {
		out[i] = r.Offset
	}
	return out
}

// moveAway starts moving the replica on member from of shard 0 of t/ns/name
// to a member outside the shard's set; it returns that member and the
// move's admin path.
func moveAway(t *testing.T, members map[string]*broker.Broker, name, from string) (spare, move string) {
	t.Helper()
	var set cluster.ReplicaSet
	if code := adminCall(t, members["a"], http.MethodGet, "/debug/cluster/replicas?stream=t/ns/"+name+"&shard=0", &set); code != http.StatusOK {
		t.Fatalf("GET replicas: %d", code)
	}
	for id := range members {
		if _, in := set.Has(id); !in {
			spare = id
		}
	}
	move = fmt.Sprintf("/debug/cluster/move-replica?stream=t/ns/%s&shard=0&from=%s&to=%s", name, from, spare)
	if code := adminCall(t, members["a"], http.MethodPost, move, nil); code != http.StatusAccepted {
		t.Fatalf("POST move-replica: %d", code)
	}
	return spare, move
}

// startReplicated starts n members with peer links, a cluster client, a
// minute for the test, and the replicated stream t/ns/name.
func startReplicated(t *testing.T, name string, n int) (map[string]*broker.Broker, *client.ClusterClient, context.Context, client.Stream) {
	t.Helper()
	members, addrs := replicaCluster(t, n)
	cc := dialClusterInsecure(t, addrs)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	st := client.Stream{Tenant: "t", Namespace: "ns", Name: name}
	createReplicated(ctx, t, cc, st)
	return members, cc, ctx, st
}
