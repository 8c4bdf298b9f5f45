package cluster_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/getfelix/felix-go/broker"
	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/cluster"
	"github.com/getfelix/felix-go/config"
	"github.com/getfelix/felix-go/internal/clustercerts"
	"github.com/getfelix/felix-go/wire"
)

// Replicated streams over brokers in one process: each shard a raft group
// over three members, the peer link between them. The faults the issue
// asks of broker processes are in cluster/e2e.

func startReplicaMember(t *testing.T, etcd, id string, files clustercerts.Files) *broker.Broker {
	t.Helper()
	cfg := brokertest.Config(t)
	cfg.Admin = "127.0.0.1:0"
	cfg.Auth = "none"
	cfg.ClusterEtcd = etcd
	cfg.ClusterNodeID = id
	cfg.ClusterLeaseTTL = 2 * time.Second
	cfg.ClusterTLSCA, cfg.ClusterTLSCert, cfg.ClusterTLSKey = files.CA, files.Cert, files.Key
	return brokertest.Start(t, cfg, broker.WithoutActorCluster())
}

// replicaCluster starts members a, b and c (and d, e, ... up to n) with
// peer links.
func replicaCluster(t *testing.T, n ...int) (map[string]*broker.Broker, []string) {
	t.Helper()
	etcd := embeddedEtcd(t)
	ids := []string{"a", "b", "c"}
	if len(n) > 0 {
		ids = ids[:0]
		for i := range n[0] {
			ids = append(ids, string(rune('a'+i)))
		}
	}
	certs, err := clustercerts.Ensure(t.TempDir(), ids)
	if err != nil {
		t.Fatal(err)
	}
	members := map[string]*broker.Broker{}
	var addrs []string
	for _, id := range ids {
		members[id] = startReplicaMember(t, etcd, id, certs[id])
		addrs = append(addrs, members[id].Addr().String())
	}
	return members, addrs
}

func dialClusterInsecure(t *testing.T, addrs []string) *client.ClusterClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cc, err := client.DialCluster(ctx, addrs, client.Options{Insecure: true, Tenant: "t"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close(context.Background()) })
	return cc
}

// createReplicated creates a durable stream with three replicas once the
// members have joined (until then: shard_unavailable not_ready, or too
// few live members).
func createReplicated(ctx context.Context, t *testing.T, cc *client.ClusterClient, st client.Stream) client.StreamInfo {
	t.Helper()
	for {
		info, err := cc.CreateStream(ctx, st, client.StreamConfig{Durable: true, Replicas: 3})
		if err == nil {
			return info
		}
		if ctx.Err() != nil {
			t.Fatalf("create a replicated stream: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// readAll reads a member's own replica of shard 0 (a member in the
// replica set serves reads from what it applied).
func readAll(ctx context.Context, t *testing.T, addr string, st client.Stream) []client.Record {
	t.Helper()
	return readRange(ctx, t, addr, st, func(*client.Client) uint64 { return 0 })
}

// readRange reads a member's replica of shard 0 from the offset start
// gives, to its end.
func readRange(ctx context.Context, t *testing.T, addr string, st client.Stream, start func(*client.Client) uint64) []client.Record {
	t.Helper()
	c, err := client.Dial(ctx, addr, client.Options{Insecure: true, Tenant: "t"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close(context.Background()) }()
	var out []client.Record
	for from := start(c); ; {
		page, err := c.Read(ctx, st, from, client.ReadOptions{FollowerMaxLag: time.Minute})
		if errors.Is(err, wire.ErrNotFound) && from > 0 && ctx.Err() == nil {
			// Retention removed where the read was (it runs every 200 ms
			// in the retention tests): read again from what it kept.
			out, from = nil, start(c)
			continue
		}
		if err != nil {
			t.Fatalf("read %s at %s: %v", st.Name, addr, err)
		}
		out = append(out, page.Records...)
		if len(page.Records) == 0 || page.Next >= page.Committed {
			return out
		}
		from = page.Next
	}
}

// waitReplicas waits until every address's replica holds want records.
func waitReplicas(ctx context.Context, t *testing.T, addrs []string, st client.Stream, want int) map[string][]client.Record {
	t.Helper()
	for {
		got := map[string][]client.Record{}
		done := true
		for _, a := range addrs {
			got[a] = readAll(ctx, t, a, st)
			done = done && len(got[a]) >= want
		}
		if done {
			return got
		}
		if ctx.Err() != nil {
			t.Fatalf("replicas did not converge on %d records", want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func payloads(from, n int) []string {
	out := make([]string, n)
	for i := range n {
		out[i] = fmt.Sprintf("r%04d", from+i)
	}
	return out
}

// sameLog checks one replica's records are want, at offsets 0 to len-1.
func sameLog(t *testing.T, who string, got []client.Record, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s holds %d records; want %d", who, len(got), len(want))
	}
	for i, r := range got {
		if r.Offset != uint64(i) || string(r.Payload) != want[i] {
			t.Fatalf("%s record %d: offset %d %q; want offset %d %q", who, i, r.Offset, r.Payload, i, want[i])
		}
	}
}

func TestReplicatedStreamSurvivesItsLeader(t *testing.T) {
	members, addrs := replicaCluster(t)
	cc := dialClusterInsecure(t, addrs)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st := client.Stream{Tenant: "t", Namespace: "ns", Name: "replicated"}
	if info := createReplicated(ctx, t, cc, st); info.Replicas != 3 {
		t.Fatalf("created with %d replicas; want 3", info.Replicas)
	}
	// A subscriber from the first offset, through the leader's stop.
	sub, err := cc.Subscribe(ctx, st, client.SubscribeOptions{From: client.FromEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Close(context.Background()) }()
	var want []string
	for _, p := range payloads(0, 20) {
		if err := cc.Publish(ctx, st, []byte(p), client.PublishOptions{}); err != nil {
			t.Fatalf("publish %s: %v", p, err)
		}
		want = append(want, p)
	}
	for a, got := range waitReplicas(ctx, t, addrs, st, len(want)) {
		sameLog(t, a, got, want)
	}

	top, err := cc.ShardOwners(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	leader := top.Owners[0].Owner.NodeID
	if err := members[leader].Stop(ctx); err != nil {
		t.Fatal(err)
	}
	var survivors []string
	for id, b := range members {
		if id != leader {
			survivors = append(survivors, b.Addr().String())
		}
	}
	for _, p := range payloads(20, 20) {
		if err := cc.Publish(ctx, st, []byte(p), client.PublishOptions{}); err != nil {
			t.Fatalf("publish %s after the leader %s stopped: %v", p, leader, err)
		}
		want = append(want, p)
	}
	for a, got := range waitReplicas(ctx, t, survivors, st, len(want)) {
		sameLog(t, a, got, want)
	}
	top, err = cc.ShardOwners(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	if now := top.Owners[0].Owner.NodeID; now == leader || !slices.Contains([]string{"a", "b", "c"}, now) {
		t.Fatalf("the shard's owner is %q after %s stopped", now, leader)
	}
	// The subscriber resumed at the new leader from its next offset: every
	// record once, in order, at its offset.
	for i, w := range want {
		ev, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("subscriber, record %d: %v", i, err)
		}
		if !ev.HasOffset || ev.Offset != uint64(i) || string(ev.Payload) != w {
			t.Fatalf("subscriber got %q at %d (has offset %v); want %q at %d", ev.Payload, ev.Offset, ev.HasOffset, w, i)
		}
	}
}

func TestReplicasNeedEnoughMembers(t *testing.T) {
	etcd := embeddedEtcd(t)
	certs, err := clustercerts.Ensure(t.TempDir(), []string{"a"})
	if err != nil {
		t.Fatal(err)
	}
	b := startReplicaMember(t, etcd, "a", certs["a"])
	c := dialInsecure(t, b.Addr().String())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st := client.Stream{Tenant: "t", Namespace: "ns", Name: "r"}
	for {
		_, err = c.CreateStream(ctx, st, client.StreamConfig{Durable: true, Replicas: 3})
		if !errors.Is(err, wire.ErrUnavailable) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !errors.Is(err, wire.ErrInvalidRequest) {
		t.Fatalf("3 replicas on a cluster of 1: %v; want invalid_request", err)
	}
	// The default on a cluster of one is one copy.
	info, err := c.CreateStream(ctx, st, client.StreamConfig{Durable: true})
	if err != nil || info.Replicas != 1 {
		t.Fatalf("default replicas on a cluster of one: %+v, %v; want 1", info, err)
	}
}

// adminCall makes a request to a member's admin endpoint (auth none).
func adminCall(t *testing.T, b *broker.Broker, method, path string, into any) int {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+b.AdminAddr().String()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if method != http.MethodGet {
		req.Header.Set("Content-Type", "application/json") // the endpoint refuses a change without it
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if into != nil && res.StatusCode/100 == 2 {
		if err := json.NewDecoder(res.Body).Decode(into); err != nil {
			t.Fatal(err)
		}
	}
	return res.StatusCode
}

// TestMoveTheLeadersReplica: a replica moves off the leader to a fourth
// member (felix cluster move-replica's route). The new replica catches up
// as a learner, becomes a voter, takes the leadership, and the old one is
// removed and deletes its data; every record is on the new member, and
// publishing goes on throughout.
func TestMoveTheLeadersReplica(t *testing.T) {
	members, addrs := replicaCluster(t, 4)
	cc := dialClusterInsecure(t, addrs)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st := client.Stream{Tenant: "t", Namespace: "ns", Name: "moving"}
	createReplicated(ctx, t, cc, st)
	var want []string
	publish := func(n int) {
		for _, p := range payloads(len(want), n) {
			if err := cc.Publish(ctx, st, []byte(p), client.PublishOptions{}); err != nil {
				t.Fatalf("publish %s: %v", p, err)
			}
			want = append(want, p)
		}
	}
	publish(20)
	top, err := cc.ShardOwners(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	leader := top.Owners[0].Owner.NodeID
	path := "/debug/cluster/replicas?stream=t/ns/moving&shard=0"
	spare, move := moveAway(t, members, "moving", leader) // groups_test.go
	if code := adminCall(t, members["a"], http.MethodPost, move, nil); code != http.StatusConflict {
		t.Fatalf("a second move while one is under way: %d; want 409", code)
	}
	set := waitSet(ctx, t, members, path, func(set cluster.ReplicaSet) bool {
		publish(1) // publishing goes on throughout
		_, stays := set.Has(leader)
		return set.Move == nil && !stays
	})
	if _, in := set.Has(spare); !in {
		t.Fatalf("after the move the set is %+v; want %s in it", set, spare)
	}
	publish(10)
	got := waitReplicas(ctx, t, []string{members[spare].Addr().String()}, st, len(want))
	sameLog(t, spare, got[members[spare].Addr().String()], want)
	if top, err = cc.ShardOwners(ctx, st); err != nil || top.Owners[0].Owner.NodeID == leader {
		t.Fatalf("after the move the owner is %+v (%v); the old leader %s has no replica", top.Owners, err, leader)
	}
	// Back to the old leader, which deleted its data when it left: it
	// joins with a new raft id and an empty log, and catches up.
	back := fmt.Sprintf("/debug/cluster/move-replica?stream=t/ns/moving&shard=0&from=%s&to=%s", spare, leader)
	if code := adminCall(t, members["a"], http.MethodPost, back, nil); code != http.StatusAccepted {
		t.Fatalf("POST move-replica back: %d", code)
	}
	waitSet(ctx, t, members, path, func(set cluster.ReplicaSet) bool {
		_, in := set.Has(leader)
		return set.Move == nil && in
	})
	publish(5)
	got = waitReplicas(ctx, t, []string{members[leader].Addr().String()}, st, len(want))
	sameLog(t, leader, got[members[leader].Addr().String()], want)
}

// waitSet polls member a's view of a replica set until done holds, and on
// a timeout logs every member's replication view and peer metrics.
func waitSet(ctx context.Context, t *testing.T, members map[string]*broker.Broker, path string, done func(cluster.ReplicaSet) bool) cluster.ReplicaSet {
	t.Helper()
	for {
		var set cluster.ReplicaSet // a field the answer omits must not stay
		adminCall(t, members["a"], http.MethodGet, path, &set)
		if done(set) {
			return set
		}
		if ctx.Err() != nil {
			for id, b := range members {
				v, err := dialInsecure(t, b.Addr().String()).Replication(context.Background(), client.Stream{Tenant: "t", Namespace: "ns", Name: "moving"})
				t.Logf("%s: %+v %v", id, v, err)
				logMetrics(t, id, b)
			}
			t.Fatalf("the replica set never got there: %+v, move %+v", set, set.Move)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// logMetrics logs a member's peer link and replica metrics.
func logMetrics(t *testing.T, id string, b *broker.Broker) {
	t.Helper()
	res, err := http.Get("http://" + b.AdminAddr().String() + "/metrics")
	if err != nil {
		t.Logf("%s: /metrics: %v", id, err)
		return
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	for _, l := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(l, "felix_peer_") || strings.HasPrefix(l, "felix_replica") {
			t.Logf("  %s %s", id, l)
		}
	}
}

// TestDrainMovesReplicatedLeadership: draining the member that leads a
// replicated shard hands the leadership to another replica, while
// publishing goes on; the replica stays on the drained member.
func TestDrainMovesReplicatedLeadership(t *testing.T) {
	members, addrs := replicaCluster(t)
	cc := dialClusterInsecure(t, addrs)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := client.Stream{Tenant: "t", Namespace: "ns", Name: "drained"}
	createReplicated(ctx, t, cc, st)
	if err := cc.Publish(ctx, st, []byte("before"), client.PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	top, err := cc.ShardOwners(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	leader := top.Owners[0].Owner.NodeID
	if code := adminCall(t, members["a"], http.MethodPost, "/debug/cluster/drain?node="+leader, nil); code != http.StatusAccepted {
		t.Fatalf("drain: %d", code)
	}
	for n := 0; ; n++ {
		if err := cc.Publish(ctx, st, []byte(fmt.Sprint(n)), client.PublishOptions{}); err != nil {
			t.Fatalf("publish while draining: %v", err)
		}
		top, err := cc.ShardOwners(ctx, st)
		if err == nil && top.Owners[0].Available && top.Owners[0].Owner.NodeID != leader {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the leadership stayed on the drained member %s", leader)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var set cluster.ReplicaSet
	adminCall(t, members["a"], http.MethodGet, "/debug/cluster/replicas?stream=t/ns/drained&shard=0", &set)
	if _, in := set.Has(leader); !in {
		t.Fatalf("the drained member's replica was removed: %+v", set)
	}
}

// TestReplicaBehindRetentionCatchesUpFromSegments: a follower is stopped;
// while it is down the stream's retention removes, on the other replicas,
// every entry it lacks. When it comes back, the leader's snapshot names its
// segment files; the follower copies them over the peer link, installs the
// copy in place of its log and goes on from the leader's log: its records
// are the leader's, offsets included, and it takes part in commits again.
func TestReplicaBehindRetentionCatchesUpFromSegments(t *testing.T) {
	cfgs, members, addrs := smallSegmentCluster(t)
	cc := dialClusterInsecure(t, addrs)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	st := client.Stream{Tenant: "t", Namespace: "ns", Name: "retained"}
	for {
		_, err := cc.CreateStream(ctx, st, client.StreamConfig{Durable: true, Replicas: 3, RetentionBytes: 128 << 10})
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("create: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	batch := func(n int) [][]byte {
		out := make([][]byte, 32)
		for i := range out {
			out[i] = fmt.Appendf(make([]byte, 0, 1024), "%08d%01016d", n*32+i, 0)
		}
		return out
	}
	if err := cc.PublishBatch(ctx, st, batch(0), client.PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	top, err := cc.ShardOwners(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	leader := top.Owners[0].Owner.NodeID
	follower := "a"
	if follower == leader {
		follower = "b"
	}
	waitReplicas(ctx, t, []string{members[follower].Addr().String()}, st, 32)
	if err := members[follower].Stop(ctx); err != nil {
		t.Fatal(err)
	}
	// Publish until retention on the leader removed offset 32, the
	// follower's end, and more.
	for n := 1; ; n++ {
		if err := cc.PublishBatch(ctx, st, batch(n), client.PublishOptions{}); err != nil {
			t.Fatalf("publish batch %d: %v", n, err)
		}
		if n > 12 && firstOffset(ctx, t, members[leader].Addr().String(), st) > 64 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("retention never removed the follower's end on the leader")
		}
	}
	members[follower] = brokertest.Start(t, cfgs[follower], broker.WithoutActorCluster())
	installed := func() bool {
		return metricValue(t, members[follower], "felix_replication_snapshots_installed_total") >= 1
	}
	for !installed() {
		if ctx.Err() != nil {
			t.Fatal("the follower never installed a copy of the leader's segments")
		}
		time.Sleep(100 * time.Millisecond)
	}
	// One more batch, then the follower holds what the leader holds, at the
	// same offsets, from the leader's start.
	if err := cc.PublishBatch(ctx, st, batch(1000), client.PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	sameRetainedLog(ctx, t, members[leader].Addr().String(), members[follower].Addr().String(), st)
}

// smallSegmentCluster starts members a, b and c with peer links, 64 KiB
// segments and retention every 200 ms, and returns their configurations
// too, to start one again.
func smallSegmentCluster(t *testing.T) (map[string]config.Config, map[string]*broker.Broker, []string) {
	t.Helper()
	etcd := embeddedEtcd(t)
	certs, err := clustercerts.Ensure(t.TempDir(), []string{"a", "b", "c"})
	if err != nil {
		t.Fatal(err)
	}
	cfgs := map[string]config.Config{}
	members := map[string]*broker.Broker{}
	var addrs []string
	for _, id := range []string{"a", "b", "c"} {
		cfg := brokertest.Config(t)
		cfg.Admin, cfg.Auth, cfg.ClusterEtcd, cfg.ClusterNodeID = "127.0.0.1:0", "none", etcd, id
		cfg.ClusterLeaseTTL = 2 * time.Second
		cfg.ClusterTLSCA, cfg.ClusterTLSCert, cfg.ClusterTLSKey = certs[id].CA, certs[id].Cert, certs[id].Key
		cfg.DurableSegmentBytes = 64 << 10
		cfg.DurableRetentionInterval = 200 * time.Millisecond
		cfgs[id], members[id] = cfg, brokertest.Start(t, cfg, broker.WithoutActorCluster())
		addrs = append(addrs, members[id].Addr().String())
	}
	return cfgs, members, addrs
}

// sameRetainedLog waits until the follower's replica ends where the
// leader's does, then checks both hold the same records at the same
// offsets where both still hold records (each runs retention on its own).
func sameRetainedLog(ctx context.Context, t *testing.T, leader, follower string, st client.Stream) {
	t.Helper()
	want := readFrom(ctx, t, leader, st)
	for {
		got := readFrom(ctx, t, follower, st)
		if len(got) > 0 && got[len(got)-1].Offset == want[len(want)-1].Offset {
			from := max(got[0].Offset, want[0].Offset)
			got, want = got[from-got[0].Offset:], want[from-want[0].Offset:]
			if !slices.EqualFunc(got, want, func(a, b client.Record) bool {
				return a.Offset == b.Offset && string(a.Payload) == string(b.Payload)
			}) {
				t.Fatalf("the follower's records from %d differ from the leader's", from)
			}
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("the follower ends at %d records, the leader at offset %d", len(got), want[len(want)-1].Offset)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// firstOffset is the first offset a member's replica still holds.
func firstOffset(ctx context.Context, t *testing.T, addr string, st client.Stream) uint64 {
	t.Helper()
	c, err := client.Dial(ctx, addr, client.Options{Insecure: true, Tenant: "t"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close(context.Background()) }()
	return firstOffsetOf(ctx, c, st)
}

// firstOffsetOf walks up from 0 while reads are refused below what
// retention kept.
func firstOffsetOf(ctx context.Context, c *client.Client, st client.Stream) uint64 {
	for from := uint64(0); ; from += 32 {
		page, err := c.Read(ctx, st, from, client.ReadOptions{MaxRecords: 1, FollowerMaxLag: time.Minute})
		switch {
		case err == nil && len(page.Records) > 0:
			return page.Records[0].Offset
		case err == nil || !errors.Is(err, wire.ErrNotFound) || ctx.Err() != nil:
			return 0
		}
	}
}

// readFrom reads a member's replica of shard 0 from its first offset.
func readFrom(ctx context.Context, t *testing.T, addr string, st client.Stream) []client.Record {
	t.Helper()
	return readRange(ctx, t, addr, st, func(c *client.Client) uint64 { return firstOffsetOf(ctx, c, st) })
}

// metricValue is a counter's value on a member's /metrics.
func metricValue(t *testing.T, b *broker.Broker, name string) float64 {
	t.Helper()
	res, err := http.Get("http://" + b.AdminAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	var v float64
	if f := families[name]; f != nil {
		for _, m := range f.GetMetric() {
			v += m.GetCounter().GetValue()
		}
	}
	return v
}
