package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/getfelix/felix-go/broker"
	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/cluster"
	"github.com/getfelix/felix-go/internal/clustercerts"
	"github.com/getfelix/felix-go/wire"
)

// A Kafka client in a cluster: three members on one embedded etcd, each
// with its own Kafka listener; the client knows one of them.

const clusterTopic = "kc.orders"

var clusterStream = client.Stream{Tenant: "t", Namespace: "kc", Name: "orders"}

// startKafkaMembers starts the members a, b and c, each serving Kafka
// clients that skip SASL as tenant t, with peer links (which replicated
// streams need).
func startKafkaMembers(t *testing.T) map[string]*broker.Broker {
	t.Helper()
	e, err := cluster.StartEtcd(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	ids := []string{"a", "b", "c"}
	certs, err := clustercerts.Ensure(t.TempDir(), ids)
	if err != nil {
		t.Fatal(err)
	}
	members := map[string]*broker.Broker{}
	for _, id := range ids {
		cfg := brokertest.Config(t)
		cfg.Auth = "none"
		cfg.ClusterEtcd = e.Endpoint()
		cfg.ClusterNodeID = id
		cfg.ClusterLeaseTTL = 2 * time.Second
		cfg.KafkaListen = "127.0.0.1:0"
		cfg.KafkaAnonymousTenant = "t"
		cfg.ClusterTLSCA, cfg.ClusterTLSCert, cfg.ClusterTLSKey = certs[id].CA, certs[id].Cert, certs[id].Key
		// No actor remote in-process (cluster/brokers_test.go).
		members[id] = brokertest.Start(t, cfg, broker.WithoutActorCluster())
	}
	return members
}

// placedStream creates the stream at member a once the members joined,
// and waits until every shard has an owner and the owners are at least
// spread members; it returns each shard's owner.
func placedStream(ctx context.Context, t *testing.T, a *broker.Broker, conf client.StreamConfig, spread int) []string {
	t.Helper()
	c, err := client.Dial(ctx, a.Addr().String(), client.Options{Insecure: true, Tenant: "t"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close(context.Background()) }()
	for {
		// Until the members joined: not_ready, or too few live members
		// for the replicas.
		_, err = c.CreateStream(ctx, clusterStream, conf)
		if err == nil || !errors.Is(err, wire.ErrUnavailable) && !errors.Is(err, wire.ErrInvalidRequest) || ctx.Err() != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("create %s: %v", clusterTopic, err)
	}
	for ctx.Err() == nil {
		top, err := c.ShardOwners(ctx, clusterStream)
		if err != nil {
			t.Fatalf("shard owners: %v", err)
		}
		owners, distinct := make([]string, 0, len(top.Owners)), map[string]bool{}
		for _, o := range top.Owners {
			if o.Available {
				owners = append(owners, o.Owner.NodeID)
				distinct[o.Owner.NodeID] = true
			}
		}
		if len(owners) == int(conf.Shards) && len(distinct) >= spread {
			return owners
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal(ctx.Err())
	return nil
}

func TestClusterProduceConsume(t *testing.T) {
	// Durable shards kept by one member each (Replicas 1: with peer
	// links and three members a durable stream is otherwise replicated)
	// are placed over the members by rendezvous: with 6 shards over 3
	// members, at least two own some.
	t.Run("durable", func(t *testing.T) { testCluster(t, client.StreamConfig{Shards: 6, Durable: true, Replicas: 1}, 2) })
	// A replicated shard's leader is whichever replica raft elects, so
	// they may all be one member.
	t.Run("replicated", func(t *testing.T) { testCluster(t, client.StreamConfig{Shards: 6, Durable: true, Replicas: 3}, 1) })
}

func testCluster(t *testing.T, conf client.StreamConfig, spread int) {
	members := startKafkaMembers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	seed := members["b"].KafkaAddr().String()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seed), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RetryTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// Every member is in, so no shard moves once placed.
	metadataOfAll(ctx, t, cl)
	owners := placedStream(ctx, t, members["a"], conf, spread)
	checkLeaders(ctx, t, cl, members, owners, conf.Replicas)
	if conf.Replicas <= 1 {
		// Every member holds a replica of a replicated shard and serves
		// its committed records to a Fetch; only a shard held by one
		// member is refused elsewhere.
		checkNotLeader(t, members, owners)
	}

	const n = 600
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: clusterTopic, Partition: int32(i % 6), Value: fmt.Appendf(nil, "v-%04d", i)}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce through the cluster: %v", err)
	}
	want := map[int32][]string{}
	for _, r := range recs {
		want[r.Partition] = append(want[r.Partition], string(r.Value))
		if int(r.Offset) != len(want[r.Partition])-1 {
			t.Fatalf("record %s acked at %d/%d, want offset %d", r.Value, r.Partition, r.Offset, len(want[r.Partition])-1)
		}
	}

	parts := map[int32]kgo.Offset{}
	for p := range int32(6) {
		parts[p] = kgo.NewOffset().AtStart()
	}
	byAssign := consumeCluster(ctx, t, n, kgo.SeedBrokers(seed), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{clusterTopic: parts}))
	compareValues(t, "assigned", byAssign, want)
	byGroup := consumeCluster(ctx, t, n, kgo.SeedBrokers(seed), kgo.ConsumerGroup("g"), kgo.ConsumeTopics(clusterTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	compareValues(t, "group", byGroup, want)
	checkCoordinator(t, members)
}

// checkCoordinator asks every member for group g's coordinator: they all
// name the same one, and a group request at another member is answered
// NOT_COORDINATOR. On a replicated cluster the coordinator is the leader
// of the group's shard, which the leadership balancer may hand over
// between two questions, so a round counts only when the members named
// the same coordinator before and after it; the check asks again, up to
// 30 s, until one does.
func checkCoordinator(t *testing.T, members map[string]*broker.Broker) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		named, answers := askCoordinator(t, members)
		var wrong []string
		if named != nil {
			wrong = offsetFetchAnswers(t, members, named)
			if after, _ := askCoordinator(t, members); after != nil && sameNode(after, named) {
				for _, w := range wrong {
					t.Error(w)
				}
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the members did not name one coordinator of group g through a whole round within 30 s; last answers: %s; OffsetFetch: %v", answers, wrong)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// askCoordinator asks each member FindCoordinator for group g; named is
// the coordinator when they all answered without error and alike, else
// nil, and answers says what each said.
func askCoordinator(t *testing.T, members map[string]*broker.Broker) (named *kmsg.FindCoordinatorResponse, answers string) {
	t.Helper()
	agree := true
	for _, id := range []string{"a", "b", "c"} {
		req := kmsg.NewPtrFindCoordinatorRequest()
		req.Version, req.CoordinatorKey = 2, "g"
		resp := kmsg.NewPtrFindCoordinatorResponse()
		rawRequest(t, members[id].KafkaAddr().String(), req, resp)
		answers += fmt.Sprintf("%s: node %d at %s:%d (error %d); ", id, resp.NodeID, resp.Host, resp.Port, resp.ErrorCode)
		if resp.ErrorCode != 0 || named != nil && !sameNode(resp, named) {
			agree = false
		}
		if named == nil {
			named = resp
		}
	}
	if !agree {
		return nil, answers
	}
	return named, answers
}

func sameNode(a, b *kmsg.FindCoordinatorResponse) bool {
	return a.NodeID == b.NodeID && a.Host == b.Host && a.Port == b.Port
}

// offsetFetchAnswers asks each member OffsetFetch for group g and says
// which answered other than they should with named the coordinator.
func offsetFetchAnswers(t *testing.T, members map[string]*broker.Broker, named *kmsg.FindCoordinatorResponse) []string {
	t.Helper()
	var wrong []string
	for id, b := range members {
		req := kmsg.NewPtrOffsetFetchRequest()
		req.Version, req.Group = 5, "g"
		resp := kmsg.NewPtrOffsetFetchResponse()
		rawRequest(t, b.KafkaAddr().String(), req, resp)
		isCoordinator := fmt.Sprintf("%s:%d", named.Host, named.Port) == b.KafkaAddr().String()
		if isCoordinator && resp.ErrorCode != 0 || !isCoordinator && resp.ErrorCode != kerr.NotCoordinator.Code {
			wrong = append(wrong, fmt.Sprintf("OffsetFetch at %s (coordinator: %v): error %d", id, isCoordinator, resp.ErrorCode))
		}
	}
	return wrong
}

// metadataOfAll asks Metadata for topics at the seed until it lists the
// three members (each learns of the others through etcd); it returns the
// answer and each broker's address by id.
func metadataOfAll(ctx context.Context, t *testing.T, cl *kgo.Client, topics ...string) (*kmsg.MetadataResponse, map[int32]string) {
	t.Helper()
	req := kmsg.NewPtrMetadataRequest()
	req.Topics = []kmsg.MetadataRequestTopic{}
	for _, name := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(name)
		req.Topics = append(req.Topics, rt)
	}
	addrOf := map[int32]string{}
	for {
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		clear(addrOf)
		for _, b := range resp.Brokers {
			addrOf[b.NodeID] = fmt.Sprintf("%s:%d", b.Host, b.Port)
		}
		if len(addrOf) == 3 {
			return resp, addrOf
		}
		if ctx.Err() != nil {
			t.Fatalf("metadata lists brokers %v, want the 3 members", addrOf)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkLeaders wants each partition led by its shard's owner.
// A replicated shard lists its replica set, leader first.
func checkLeaders(ctx context.Context, t *testing.T, cl *kgo.Client, members map[string]*broker.Broker, owners []string, replicas int) {
	t.Helper()
	resp, addrOf := metadataOfAll(ctx, t, cl, clusterTopic)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 6 {
		t.Fatalf("metadata topics = %+v, want %s with 6 partitions", resp.Topics, clusterTopic)
	}
	for _, p := range resp.Topics[0].Partitions {
		if got, want := addrOf[p.Leader], members[owners[p.Partition]].KafkaAddr().String(); p.ErrorCode != 0 || got != want {
			t.Errorf("partition %d: leader %d at %s (error %d), want %s's listener %s", p.Partition, p.Leader, got, p.ErrorCode, owners[p.Partition], want)
		}
		if len(p.Replicas) != max(replicas, 1) || p.Replicas[0] != p.Leader {
			t.Errorf("partition %d: replicas %v, want %d led by %d", p.Partition, p.Replicas, max(replicas, 1), p.Leader)
		}
	}
}

// checkNotLeader fetches each partition at a member that does not own
// it: NOT_LEADER_OR_FOLLOWER, so that the client refreshes its metadata.
func checkNotLeader(t *testing.T, members map[string]*broker.Broker, owners []string) {
	t.Helper()
	for p, owner := range owners {
		other := map[string]string{"a": "b", "b": "c", "c": "a"}[owner]
		if code := fetchAt(t, members[other].KafkaAddr().String(), int32(p)); code != kerr.NotLeaderForPartition.Code {
			t.Errorf("fetch partition %d at %s (owner %s): error %d, want NOT_LEADER_OR_FOLLOWER", p, other, owner, code)
		}
	}
}

// fetchAt sends one Fetch v11 of partition p from offset 0 to addr and
// returns its error code.
func fetchAt(t *testing.T, addr string, p int32) int16 {
	req := kmsg.NewPtrFetchRequest()
	req.Version, req.MaxWaitMillis, req.MaxBytes = 11, 0, 1<<20
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = clusterTopic
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.Partition, fp.PartitionMaxBytes = p, 1<<20
	ft.Partitions = append(ft.Partitions, fp)
	req.Topics = append(req.Topics, ft)
	resp := kmsg.NewPtrFetchResponse()
	rawRequest(t, addr, req, resp)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		t.Fatalf("fetch partition %d at %s: answer %+v", p, addr, resp)
	}
	return resp.Topics[0].Partitions[0].ErrorCode
}

// rawRequest sends req (a version without flexible headers) on a fresh
// connection to addr and reads the answer into resp.
func rawRequest(t *testing.T, addr string, req kmsg.Request, resp kmsg.Response) {
	t.Helper()
	answer := rawExchange(t, addr, frame(req.Key(), req.GetVersion(), 1, req.AppendTo(nil)))
	resp.SetVersion(req.GetVersion())
	if len(answer) < 4 {
		t.Fatalf("%s at %s: no answer", kmsg.NameForKey(req.Key()), addr)
	}
	if err := resp.ReadFrom(answer[4:]); err != nil {
		t.Fatalf("%s at %s: unreadable answer %x: %v", kmsg.NameForKey(req.Key()), addr, answer, err)
	}
}

// consumeCluster reads n records with a new client and returns their values
// by partition, failing on an offset that is not the next one.
func consumeCluster(ctx context.Context, t *testing.T, n int, opts ...kgo.Opt) map[int32][]string {
	t.Helper()
	cl, err := kgo.NewClient(append(opts, kgo.RetryTimeout(30*time.Second))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got, total := map[int32][]string{}, 0
	for total < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records: %v", total, n, ctx.Err())
		}
		fs.EachError(func(topic string, p int32, err error) { t.Logf("fetch %s/%d: %v (retried)", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if int(r.Offset) != len(got[r.Partition]) {
				t.Fatalf("partition %d: offset %d after %d records", r.Partition, r.Offset, len(got[r.Partition]))
			}
			got[r.Partition] = append(got[r.Partition], string(r.Value))
			total++
		})
	}
	return got
}

func compareValues(t *testing.T, how string, got, want map[int32][]string) {
	t.Helper()
	for p, w := range want {
		if fmt.Sprint(got[p]) != fmt.Sprint(w) {
			t.Errorf("%s: partition %d read %d records, want the %d acked in order", how, p, len(got[p]), len(w))
		}
	}
}

// TestClusterAdmin: in a cluster, CreateTopics makes a replicated stream
// (replication factor = replicas) and refuses more replicas than members;
// DescribeCluster lists every member; a group's admin requests go to its
// coordinator (ListGroups at the others lists none, so kgo's merge of
// every broker's answer names the group once).
func TestClusterAdmin(t *testing.T) {
	members := startKafkaMembers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(members["b"].KafkaAddr().String()), kgo.RetryTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	request := func(req kmsg.Request) kmsg.Response {
		t.Helper()
		resp, err := cl.Request(ctx, req)
		if err != nil {
			t.Fatalf("%s: %v", kmsg.NameForKey(req.Key()), err)
		}
		return resp
	}
	create := func(name string, rf int16) kmsg.CreateTopicsResponseTopic {
		req := kmsg.NewPtrCreateTopicsRequest()
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, 2, rf
		req.Topics = append(req.Topics, rt)
		return request(req).(*kmsg.CreateTopicsResponse).Topics[0]
	}

	// Until every member joined, fewer brokers are listed (or the
	// cluster refuses replicas): retry.
	var got kmsg.CreateTopicsResponseTopic
	for got = create("kc.ledger", 3); got.ErrorCode != 0 && ctx.Err() == nil; got = create("kc.ledger", 3) {
		if got.ErrorCode != kerr.InvalidReplicationFactor.Code && got.ErrorCode != kerr.InvalidRequest.Code {
			t.Fatalf("create kc.ledger: code %d (%v)", got.ErrorCode, got.ErrorMessage)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got.ErrorCode != 0 || got.ReplicationFactor != 3 {
		t.Fatalf("create kc.ledger: %+v, want replication factor 3", got)
	}
	dry := kmsg.NewPtrCreateTopicsRequest()
	dry.ValidateOnly = true
	drt := kmsg.NewCreateTopicsRequestTopic()
	drt.Topic, drt.NumPartitions, drt.ReplicationFactor = "kc.dry", 2, 3
	dry.Topics = append(dry.Topics, drt)
	if got := request(dry).(*kmsg.CreateTopicsResponse).Topics[0]; got.ErrorCode != 0 {
		t.Fatalf("validate kc.dry: code %d (%v)", got.ErrorCode, got.ErrorMessage)
	}
	if got := create("kc.wide", 4); got.ErrorCode != kerr.InvalidReplicationFactor.Code {
		t.Fatalf("create kc.wide with 4 replicas on 3 members: code %d, want INVALID_REPLICATION_FACTOR", got.ErrorCode)
	}
	c, err := client.Dial(ctx, members["a"].Addr().String(), client.Options{Insecure: true, Tenant: "t"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close(context.Background()) }()
	info, err := c.StreamInfo(ctx, client.Stream{Tenant: "t", Namespace: "kc", Name: "ledger"})
	if err != nil || info.Replicas != 3 || info.Shards != 2 || !info.Durable {
		t.Fatalf("the stream behind kc.ledger: %+v, %v; want durable, 2 shards, 3 replicas", info, err)
	}

	if _, err := c.StreamInfo(ctx, client.Stream{Tenant: "t", Namespace: "kc", Name: "dry"}); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("kc.dry after validate_only: %v, want not found", err)
	}
	desc := request(kmsg.NewPtrDescribeClusterRequest()).(*kmsg.DescribeClusterResponse)
	if desc.ErrorCode != 0 || len(desc.Brokers) != 3 {
		t.Fatalf("describe cluster: %+v, want 3 brokers", desc)
	}

	commit := kmsg.NewPtrOffsetCommitRequest()
	commit.Group, commit.Generation = "ledger-readers", -1
	ct := kmsg.NewOffsetCommitRequestTopic()
	ct.Topic = "kc.ledger"
	cp := kmsg.NewOffsetCommitRequestTopicPartition()
	cp.Partition, cp.Offset = 0, 7
	ct.Partitions = append(ct.Partitions, cp)
	commit.Topics = append(commit.Topics, ct)
	if code := request(commit).(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode; code != 0 {
		t.Fatalf("commit: code %d", code)
	}
	list := request(kmsg.NewPtrListGroupsRequest()).(*kmsg.ListGroupsResponse)
	if list.ErrorCode != 0 || len(list.Groups) != 1 || list.Groups[0].Group != "ledger-readers" {
		t.Fatalf("list groups over 3 members: %+v, want ledger-readers once", list)
	}
	del := kmsg.NewPtrDeleteGroupsRequest()
	del.Groups = []string{"ledger-readers"}
	if code := request(del).(*kmsg.DeleteGroupsResponse).Groups[0].ErrorCode; code != 0 {
		t.Fatalf("delete group: code %d", code)
	}
	dt := kmsg.NewPtrDeleteTopicsRequest()
	dtt := kmsg.NewDeleteTopicsRequestTopic()
	dtt.Topic = kmsg.StringPtr("kc.ledger")
	dt.Topics, dt.TopicNames = append(dt.Topics, dtt), []string{"kc.ledger"}
	if code := request(dt).(*kmsg.DeleteTopicsResponse).Topics[0].ErrorCode; code != 0 {
		t.Fatalf("delete kc.ledger: code %d", code)
	}
}
