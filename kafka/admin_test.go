package kafka_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/getfelix/felix-go/broker"
	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/config"
)

// admin sends one admin request through kgo (which routes it: the
// controller, the coordinator, or every broker merged) and returns the
// typed response.
func admin[R kmsg.Response](t *testing.T, cl *kgo.Client, req kmsg.Request) R {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cl.Request(ctx, req)
	if err != nil {
		t.Fatalf("%s: %v", kmsg.NameForKey(req.Key()), err)
	}
	return resp.(R)
}

// createTopic asks CreateTopics for one topic and returns its answer.
func createTopic(t *testing.T, cl *kgo.Client, name string, partitions int32, rf int16, validateOnly bool, configs ...string) kmsg.CreateTopicsResponseTopic {
	t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	req.ValidateOnly = validateOnly
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, partitions, rf
	for _, kv := range configs {
		k, v, _ := strings.Cut(kv, "=")
		c := kmsg.NewCreateTopicsRequestTopicConfig()
		c.Name, c.Value = k, kmsg.StringPtr(v)
		rt.Configs = append(rt.Configs, c)
	}
	req.Topics = append(req.Topics, rt)
	return admin[*kmsg.CreateTopicsResponse](t, cl, req).Topics[0]
}

// wantCode fails unless code is want; what says which answer it was.
func wantCode(t *testing.T, what string, code int16, msg *string, want *kerr.Error) {
	t.Helper()
	if code != want.Code {
		got := "ok"
		if err := kerr.ErrorForCode(code); err != nil {
			got = err.Error()
		}
		m := ""
		if msg != nil {
			m = *msg
		}
		t.Fatalf("%s: got %s (%q), want %s", what, got, m, want.Message)
	}
}

var ok = &kerr.Error{Message: "ok", Code: 0}

// topicPartitions is the partition count Metadata gives for name, or the
// topic's error code.
func topicPartitions(t *testing.T, cl *kgo.Client, name string) (int, int16) {
	t.Helper()
	req := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(name)
	req.Topics = append(req.Topics, mt)
	resp := admin[*kmsg.MetadataResponse](t, cl, req)
	return len(resp.Topics[0].Partitions), resp.Topics[0].ErrorCode
}

// describeTopic is DescribeConfigs of one topic, by config name.
func describeTopic(t *testing.T, cl *kgo.Client, name string) (map[string]kmsg.DescribeConfigsResponseResourceConfig, int16) {
	t.Helper()
	req := kmsg.NewPtrDescribeConfigsRequest()
	rr := kmsg.NewDescribeConfigsRequestResource()
	rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeTopic, name
	req.Resources = append(req.Resources, rr)
	res := admin[*kmsg.DescribeConfigsResponse](t, cl, req).Resources[0]
	out := map[string]kmsg.DescribeConfigsResponseResourceConfig{}
	for _, c := range res.Configs {
		out[c.Name] = c
	}
	return out, res.ErrorCode
}

// alterTopic is IncrementalAlterConfigs SET of one topic config.
func alterTopic(t *testing.T, cl *kgo.Client, name, key, value string) kmsg.IncrementalAlterConfigsResponseResource {
	t.Helper()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	rr := kmsg.NewIncrementalAlterConfigsRequestResource()
	rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeTopic, name
	c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	c.Name, c.Op, c.Value = key, kmsg.IncrementalAlterConfigOpSet, kmsg.StringPtr(value)
	rr.Configs = append(rr.Configs, c)
	req.Resources = append(req.Resources, rr)
	return admin[*kmsg.IncrementalAlterConfigsResponse](t, cl, req).Resources[0]
}

func deleteTopic(t *testing.T, cl *kgo.Client, name string) kmsg.DeleteTopicsResponseTopic {
	t.Helper()
	req := kmsg.NewPtrDeleteTopicsRequest()
	rt := kmsg.NewDeleteTopicsRequestTopic()
	rt.Topic = kmsg.StringPtr(name)
	req.Topics, req.TopicNames = append(req.Topics, rt), []string{name}
	return admin[*kmsg.DeleteTopicsResponse](t, cl, req).Topics[0]
}

// TestAdminTopics: CreateTopics makes a durable stream (partitions =
// shards, retention from the configs) under a dotless name, which
// Metadata, DescribeConfigs and a felix/1 client then see; what a stream
// cannot be (compaction, unknown configs, more replicas than brokers, no
// partitions, a name taken) is refused with Kafka's code and no stream;
// validate_only creates nothing; CreatePartitions and a changing alter are
// refused saying why, an alter to the same value succeeds; DeleteTopics
// deletes it.
func TestAdminTopics(t *testing.T) {
	cfg := kafkaConfig(t)
	b := startBroker(t, cfg)
	cl := kgoClient(t, b, cfg)

	got := createTopic(t, cl, "audit", 3, -1, false, "retention.ms=3600000", "cleanup.policy=delete")
	wantCode(t, "create audit", got.ErrorCode, got.ErrorMessage, ok)
	if got.NumPartitions != 3 || got.ReplicationFactor != 1 {
		t.Fatalf("create audit: %d partitions, replication factor %d; want 3, 1", got.NumPartitions, got.ReplicationFactor)
	}
	if n, code := topicPartitions(t, cl, "audit"); n != 3 || code != 0 {
		t.Fatalf("metadata of audit: %d partitions, code %d; want 3, 0", n, code)
	}
	info, err := dialFelix(t, b, cfg).StreamInfo(context.Background(), client.Stream{Namespace: "default", Name: "audit"})
	if err != nil || !info.Durable || info.Shards != 3 || info.RetentionAge != time.Hour {
		t.Fatalf("the stream behind audit: %+v, %v; want durable, 3 shards, retention 1h", info, err)
	}
	configs, code := describeTopic(t, cl, "audit")
	if code != 0 || configs["retention.ms"].Value == nil || *configs["retention.ms"].Value != "3600000" ||
		configs["retention.ms"].Source != kmsg.ConfigSourceDynamicTopicConfig || *configs["cleanup.policy"].Value != "delete" ||
		*configs["max.message.bytes"].Value != "16777216" || !configs["max.message.bytes"].ReadOnly {
		t.Fatalf("describe audit: code %d, configs %+v", code, configs)
	}

	got = createTopic(t, cl, "audit", 3, -1, false)
	wantCode(t, "create audit again", got.ErrorCode, got.ErrorMessage, kerr.TopicAlreadyExists)
	for _, tc := range []struct {
		name       string
		partitions int32
		rf         int16
		configs    []string
		want       *kerr.Error
	}{
		{"compacted", 1, -1, []string{"cleanup.policy=compact"}, kerr.InvalidConfig},
		{"unknown-config", 1, -1, []string{"segment.bytes=1024"}, kerr.InvalidConfig},
		{"bad-retention", 1, -1, []string{"retention.bytes=-5"}, kerr.InvalidConfig},
		{"small-messages", 1, -1, []string{"max.message.bytes=1000"}, kerr.InvalidConfig},
		{"three-replicas", 1, 3, nil, kerr.InvalidReplicationFactor},
		{"no-partitions", 0, -1, nil, kerr.InvalidPartitions},
		{"too-many-partitions", 5000, -1, nil, kerr.InvalidPartitions},
		{"shop.", 1, -1, nil, kerr.InvalidTopicException},
		{"__consumer_offsets", 1, -1, nil, kerr.InvalidTopicException},
	} {
		got := createTopic(t, cl, tc.name, tc.partitions, tc.rf, false, tc.configs...)
		wantCode(t, "create "+tc.name, got.ErrorCode, got.ErrorMessage, tc.want)
		if tc.name != "shop." && tc.name != "__consumer_offsets" {
			if _, code := topicPartitions(t, cl, tc.name); code != kerr.UnknownTopicOrPartition.Code {
				t.Fatalf("refused topic %s: metadata code %d, want UNKNOWN_TOPIC_OR_PARTITION", tc.name, code)
			}
		}
	}
	got = createTopic(t, cl, "dry", 2, 1, true, "retention.bytes=1048576")
	wantCode(t, "create dry (validate only)", got.ErrorCode, got.ErrorMessage, ok)
	if _, code := topicPartitions(t, cl, "dry"); code != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("validate_only created dry: metadata code %d", code)
	}
	got = createTopic(t, cl, "audit", 3, -1, true)
	wantCode(t, "validate audit, which exists", got.ErrorCode, got.ErrorMessage, kerr.TopicAlreadyExists)

	grow := kmsg.NewPtrCreatePartitionsRequest()
	gt := kmsg.NewCreatePartitionsRequestTopic()
	gt.Topic, gt.Count = "audit", 6
	grow.Topics = append(grow.Topics, gt)
	gr := admin[*kmsg.CreatePartitionsResponse](t, cl, grow).Topics[0]
	wantCode(t, "grow audit", gr.ErrorCode, gr.ErrorMessage, kerr.InvalidPartitions)
	if gr.ErrorMessage == nil || !strings.Contains(*gr.ErrorMessage, "cannot add partitions") {
		t.Fatalf("grow audit: message %v does not say why", gr.ErrorMessage)
	}

	same := alterTopic(t, cl, "audit", "retention.ms", "3600000")
	wantCode(t, "alter audit's retention.ms to what it is", same.ErrorCode, same.ErrorMessage, ok)
	changed := alterTopic(t, cl, "audit", "retention.ms", "60000")
	wantCode(t, "alter audit's retention.ms", changed.ErrorCode, changed.ErrorMessage, kerr.InvalidConfig)
	unknown := alterTopic(t, cl, "audit", "flush.ms", "1")
	wantCode(t, "alter audit's flush.ms", unknown.ErrorCode, unknown.ErrorMessage, kerr.InvalidConfig)

	del := deleteTopic(t, cl, "audit")
	wantCode(t, "delete audit", del.ErrorCode, del.ErrorMessage, ok)
	if _, code := topicPartitions(t, cl, "audit"); code != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("deleted audit: metadata code %d", code)
	}
	del = deleteTopic(t, cl, "audit")
	wantCode(t, "delete audit again", del.ErrorCode, del.ErrorMessage, kerr.UnknownTopicOrPartition)
	cluster := admin[*kmsg.DescribeClusterResponse](t, cl, kmsg.NewPtrDescribeClusterRequest())
	if cluster.ErrorCode != 0 || len(cluster.Brokers) != 1 || cluster.Brokers[0].NodeID != cluster.ControllerID {
		t.Fatalf("describe cluster: %+v; want this broker alone, as the controller", cluster)
	}
}

// TestAdminRights: topic administration needs stream.manage and group
// administration the group rights on the tenant's __kafka/offsets; a
// client without them is refused with Kafka's authorization codes and
// changes nothing.
func TestAdminRights(t *testing.T) {
	cfg := kafkaConfig(t)
	b := startBroker(t, cfg)
	owner := kgoClient(t, b, cfg)
	wantCode(t, "create kept", createTopic(t, owner, "kept", 1, -1, false).ErrorCode, nil, ok)

	// The rights a Kafka group consumer needs (its commits in
	// __kafka/offsets) and the data rights, but no stream.manage and no
	// group right.
	offsets := []string{"stream.manage:__kafka/offsets", "stream.publish:__kafka/offsets", "stream.subscribe:__kafka/offsets"}
	data := append([]string{"stream.publish:default/*", "stream.subscribe:default/*"}, offsets...)
	user := kafkaUser(t, b, cfg, data...)
	got := createTopic(t, user, "mine", 1, -1, false)
	wantCode(t, "create without stream.manage", got.ErrorCode, got.ErrorMessage, kerr.TopicAuthorizationFailed)
	del := deleteTopic(t, user, "kept")
	wantCode(t, "delete without stream.manage", del.ErrorCode, del.ErrorMessage, kerr.TopicAuthorizationFailed)
	if n, code := topicPartitions(t, owner, "kept"); n != 1 || code != 0 {
		t.Fatalf("kept after a refused delete: %d partitions, code %d", n, code)
	}
	list := admin[*kmsg.ListGroupsResponse](t, user, kmsg.NewPtrListGroupsRequest())
	wantCode(t, "list groups without a group right", list.ErrorCode, nil, kerr.GroupAuthorizationFailed)

	viewer := kafkaUser(t, b, cfg, append([]string{"group.consume:__kafka/offsets"}, data...)...)
	list = admin[*kmsg.ListGroupsResponse](t, viewer, kmsg.NewPtrListGroupsRequest())
	wantCode(t, "list groups with group.consume", list.ErrorCode, nil, ok)
	dg := kmsg.NewPtrDeleteGroupsRequest()
	dg.Groups = []string{"readers"}
	dr := admin[*kmsg.DeleteGroupsResponse](t, viewer, dg).Groups[0]
	wantCode(t, "delete a group with group.consume", dr.ErrorCode, nil, kerr.GroupAuthorizationFailed)
}

// kafkaUser is a kgo client of tenant default whose token has only
// grants.
func kafkaUser(t *testing.T, b *broker.Broker, cfg config.Config, grants ...string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.KafkaAddr().String()), kgo.RetryTimeout(10*time.Second),
		kgo.SASL(plain.Auth{User: "default", Pass: brokertest.Token(t, cfg, "default", grants...)}.AsMechanism()))
	if err != nil {
		t.Fatalf("kgo.NewClient: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// TestAdminGroups: ListGroups, DescribeGroups, OffsetDelete and
// DeleteGroups over a kgo group consumer's group: listed and described
// with its member while it consumes, not deletable then; once it left,
// Empty with its commits; OffsetDelete forgets one partition's commit,
// DeleteGroups the group, which stays deleted across a restart.
func TestAdminGroups(t *testing.T) {
	cfg := kafkaConfig(t)
	b := startBroker(t, cfg)
	createStream(t, b, cfg, 2)
	produce(t, kgoClient(t, b, cfg, kgo.RecordPartitioner(kgo.ManualPartitioner())), 0, 20, 2)
	member := groupConsumer(t, b, cfg, "billing", kgo.ClientID("billing-app"))
	pollUntil(t, member, 20)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := member.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}
	cl := kgoClient(t, b, cfg)

	list := admin[*kmsg.ListGroupsResponse](t, cl, kmsg.NewPtrListGroupsRequest())
	if list.ErrorCode != 0 || len(list.Groups) != 1 || list.Groups[0].Group != "billing" || list.Groups[0].GroupState != "Stable" || list.Groups[0].ProtocolType != "consumer" {
		t.Fatalf("list groups while billing consumes: %+v", list)
	}
	desc := describeGroup(t, cl, "billing")
	if desc.State != "Stable" || desc.ProtocolType != "consumer" || len(desc.Members) != 1 ||
		desc.Members[0].ClientID != "billing-app" || desc.Members[0].ClientHost != "/127.0.0.1" || len(desc.Members[0].MemberAssignment) == 0 {
		t.Fatalf("describe billing while it consumes: %+v", desc)
	}
	if code := deleteGroup(t, cl, "billing"); code != kerr.NonEmptyGroup.Code {
		t.Fatalf("delete billing while it has a member: code %d, want NON_EMPTY_GROUP", code)
	}
	od := offsetDelete(t, cl, "billing", topic, 0)
	if od.ErrorCode != 0 || od.Topics[0].Partitions[0].ErrorCode != kerr.GroupSubscribedToTopic.Code {
		t.Fatalf("offset delete while subscribed: %+v, want GROUP_SUBSCRIBED_TO_TOPIC", od)
	}

	member.Close() // leaves the group
	desc = describeGroup(t, cl, "billing")
	if desc.State != "Empty" || len(desc.Members) != 0 {
		t.Fatalf("describe billing after its member left: %+v, want Empty with its commits", desc)
	}
	od = offsetDelete(t, cl, "billing", topic, 0)
	if od.ErrorCode != 0 || od.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("offset delete of partition 0: %+v", od)
	}
	if got := committedOffsets(t, cl, "billing"); got[0] != -1 || got[1] != 10 {
		t.Fatalf("billing's commits after deleting partition 0's: %v, want 0:-1 1:10", got)
	}
	if code := deleteGroup(t, cl, "billing"); code != 0 {
		t.Fatalf("delete billing: code %d", code)
	}
	if code := deleteGroup(t, cl, "billing"); code != kerr.GroupIDNotFound.Code {
		t.Fatalf("delete billing again: code %d, want GROUP_ID_NOT_FOUND", code)
	}

	stopBroker(t, b)
	b = startBroker(t, cfg)
	cl = kgoClient(t, b, cfg)
	if desc := describeGroup(t, cl, "billing"); desc.State != "Dead" {
		t.Fatalf("describe billing after a restart: %+v, want Dead (deleted)", desc)
	}
	if got := committedOffsets(t, cl, "billing"); got[0] != -1 || got[1] != -1 {
		t.Fatalf("billing's commits after a restart: %v, want none", got)
	}
}

func describeGroup(t *testing.T, cl *kgo.Client, group string) kmsg.DescribeGroupsResponseGroup {
	t.Helper()
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{group}
	resp := admin[*kmsg.DescribeGroupsResponse](t, cl, req)
	if resp.Groups[0].ErrorCode != 0 {
		t.Fatalf("describe %s: code %d", group, resp.Groups[0].ErrorCode)
	}
	return resp.Groups[0]
}

func deleteGroup(t *testing.T, cl *kgo.Client, group string) int16 {
	t.Helper()
	req := kmsg.NewPtrDeleteGroupsRequest()
	req.Groups = []string{group}
	return admin[*kmsg.DeleteGroupsResponse](t, cl, req).Groups[0].ErrorCode
}

func offsetDelete(t *testing.T, cl *kgo.Client, group, topic string, partition int32) *kmsg.OffsetDeleteResponse {
	t.Helper()
	req := kmsg.NewPtrOffsetDeleteRequest()
	req.Group = group
	rt := kmsg.NewOffsetDeleteRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewOffsetDeleteRequestTopicPartition()
	rp.Partition = partition
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return admin[*kmsg.OffsetDeleteResponse](t, cl, req)
}

// committedOffsets is OffsetFetch of topic's partitions 0 and 1.
func committedOffsets(t *testing.T, cl *kgo.Client, group string) map[int32]int64 {
	t.Helper()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic, rt.Partitions = topic, []int32{0, 1}
	req.Topics = append(req.Topics, rt)
	resp := admin[*kmsg.OffsetFetchResponse](t, cl, req)
	out := map[int32]int64{}
	for _, p := range resp.Topics[0].Partitions {
		out[p.Partition] = p.Offset
	}
	return out
}

// TestTransactionsRefused: a transactional producer's first requests (its
// coordinator, its transactional id) are refused with Kafka's own code,
// and the transaction apis are not advertised.
func TestTransactionsRefused(t *testing.T) {
	cfg := kafkaConfig(t)
	b := startBroker(t, cfg)
	cl := kgoClient(t, b, cfg)
	find := kmsg.NewPtrFindCoordinatorRequest()
	find.CoordinatorType, find.CoordinatorKey, find.CoordinatorKeys = 1, "tx", []string{"tx"}
	fr := admin[*kmsg.FindCoordinatorResponse](t, cl, find)
	code := fr.ErrorCode
	if len(fr.Coordinators) > 0 {
		code = fr.Coordinators[0].ErrorCode
	}
	wantCode(t, "find a transaction coordinator", code, nil, kerr.TransactionalIDAuthorizationFailed)
	init := kmsg.NewPtrInitProducerIDRequest()
	init.TransactionalID, init.TransactionTimeoutMillis = kmsg.StringPtr("tx"), 60000
	// kgo sends it to the transaction coordinator, so it asks for one
	// first: a refusal either way.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ir, err := cl.Request(ctx, init)
	if err == nil {
		wantCode(t, "init a transactional producer", ir.(*kmsg.InitProducerIDResponse).ErrorCode, nil, kerr.TransactionalIDAuthorizationFailed)
	} else if !errors.Is(err, kerr.TransactionalIDAuthorizationFailed) {
		t.Fatalf("init a transactional producer: %v, want TRANSACTIONAL_ID_AUTHORIZATION_FAILED", err)
	}
	// At the broker itself, past kgo's routing.
	direct, err := cl.Broker(0).Request(ctx, init)
	if err != nil {
		t.Fatalf("InitProducerID at broker 0: %v", err)
	}
	wantCode(t, "init a transactional producer at the broker", direct.(*kmsg.InitProducerIDResponse).ErrorCode, nil, kerr.TransactionalIDAuthorizationFailed)
	versions := admin[*kmsg.ApiVersionsResponse](t, cl, kmsg.NewPtrApiVersionsRequest())
	for _, k := range versions.ApiKeys {
		switch k.ApiKey {
		case 24, 25, 26, 28: // AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit
			t.Errorf("ApiVersions advertises %s", kmsg.NameForKey(k.ApiKey))
		}
	}
}

// TestAdminRequestBound: an admin request acts on at most 1000 topics;
// those past it are refused INVALID_REQUEST without being looked at, so
// one request cannot hold the connection and the registry for minutes.
func TestAdminRequestBound(t *testing.T) {
	cfg := kafkaConfig(t)
	b := startBroker(t, cfg)
	cl := kgoClient(t, b, cfg)
	req := kmsg.NewPtrDeleteTopicsRequest()
	for i := range 1001 {
		name := fmt.Sprintf("absent-%d", i)
		rt := kmsg.NewDeleteTopicsRequestTopic()
		rt.Topic = kmsg.StringPtr(name)
		req.Topics, req.TopicNames = append(req.Topics, rt), append(req.TopicNames, name)
	}
	resp := admin[*kmsg.DeleteTopicsResponse](t, cl, req)
	if len(resp.Topics) != 1001 {
		t.Fatalf("%d answers to 1001 topics", len(resp.Topics))
	}
	for i, rt := range resp.Topics {
		want := kerr.UnknownTopicOrPartition
		if i == 1000 {
			want = kerr.InvalidRequest
		}
		wantCode(t, fmt.Sprintf("delete %s (%d of 1001)", *rt.Topic, i+1), rt.ErrorCode, rt.ErrorMessage, want)
	}
}

// TestAdminTopicCodecAndTimes: CreateTopics takes compression.type and
// message.timestamp.type into the stream (a felix/1 client sees them),
// DescribeConfigs gives them back with their source, an alter to the same
// value succeeds and one that changes them is refused; bad values are
// INVALID_CONFIG and create nothing. A topic of compression.type=none is
// fetched uncompressed whatever its producer sent.
func TestAdminTopicCodecAndTimes(t *testing.T) {
	cfg := kafkaConfig(t)
	b := startBroker(t, cfg)
	cl := kgoClient(t, b, cfg)
	felix := dialFelix(t, b, cfg)
	for _, tc := range []struct {
		topic, compression, timestamps string
		wantCodec                      string // the stream's Compression
		wantAppendTime                 bool
	}{
		{"by-producer", "", "", "", false},
		{"zipped", "gzip", "LogAppendTime", "gzip", true},
		{"plain", "none", "CreateTime", "none", false},
		{"kept", "producer", "", "", false},
	} {
		var configs []string
		if tc.compression != "" {
			configs = append(configs, "compression.type="+tc.compression)
		}
		if tc.timestamps != "" {
			configs = append(configs, "message.timestamp.type="+tc.timestamps)
		}
		got := createTopic(t, cl, tc.topic, 1, -1, false, configs...)
		wantCode(t, "create "+tc.topic, got.ErrorCode, got.ErrorMessage, ok)
		info, err := felix.StreamInfo(context.Background(), client.Stream{Namespace: "default", Name: tc.topic})
		if err != nil || info.Compression != tc.wantCodec || info.LogAppendTime != tc.wantAppendTime {
			t.Fatalf("the stream behind %s: %+v, %v; want compression %q, log append time %v", tc.topic, info, err, tc.wantCodec, tc.wantAppendTime)
		}
		described, code := describeTopic(t, cl, tc.topic)
		codec, times := described["compression.type"], described["message.timestamp.type"]
		wantCodecValue := cmp.Or(tc.wantCodec, "producer")
		wantTimes := map[bool]string{false: "CreateTime", true: "LogAppendTime"}[tc.wantAppendTime]
		if code != 0 || codec.Value == nil || *codec.Value != wantCodecValue || times.Value == nil || *times.Value != wantTimes ||
			(codec.Source == kmsg.ConfigSourceDefaultConfig) != (tc.wantCodec == "") || (times.Source == kmsg.ConfigSourceDefaultConfig) != !tc.wantAppendTime {
			t.Fatalf("describe %s: code %d, compression.type %+v, message.timestamp.type %+v; want %s and %s", tc.topic, code, codec, times, wantCodecValue, wantTimes)
		}
		same := alterTopic(t, cl, tc.topic, "compression.type", wantCodecValue)
		wantCode(t, "alter "+tc.topic+"'s compression.type to what it is", same.ErrorCode, same.ErrorMessage, ok)
		same = alterTopic(t, cl, tc.topic, "message.timestamp.type", wantTimes)
		wantCode(t, "alter "+tc.topic+"'s message.timestamp.type to what it is", same.ErrorCode, same.ErrorMessage, ok)
		changed := alterTopic(t, cl, tc.topic, "compression.type", "lz4")
		wantCode(t, "alter "+tc.topic+"'s compression.type", changed.ErrorCode, changed.ErrorMessage, kerr.InvalidConfig)
	}
	for _, bad := range []string{"compression.type=brotli", "message.timestamp.type=Now"} {
		got := createTopic(t, cl, "bad", 1, -1, false, bad)
		wantCode(t, "create with "+bad, got.ErrorCode, got.ErrorMessage, kerr.InvalidConfig)
		if _, code := topicPartitions(t, cl, "bad"); code != kerr.UnknownTopicOrPartition.Code {
			t.Fatalf("refused topic bad: metadata code %d", code)
		}
	}

	value := strings.Repeat("compressible ", 100)
	wantProduce(t, "a zstd batch to plain", produceRaw(t, cl, "plain", 0, rawBatch(-1, -1, codecZstd, value, value)), 0, 0)
	req := fetchRequest(0, 1<<20, 1<<20, 1, 0)
	req.Topics[0].Topic = "plain"
	raw := roundTrip(t, cl, req).(*kmsg.FetchResponse).Topics[0].Partitions[0].RecordBatches
	var batch kmsg.RecordBatch
	if err := batch.ReadFrom(raw); err != nil || batch.NumRecords != 2 || batch.Attributes&7 != 0 {
		t.Fatalf("fetch of plain: %d records, codec %d, %v; want 2 records uncompressed", batch.NumRecords, batch.Attributes&7, err)
	}
}
