package kafka_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/getfelix/felix-go/client"
)

// TestDotlessTopic: a topic named without a '.' is a stream of the
// default namespace everywhere: a Produce auto-creates it there,
// Metadata lists it back under its bare name, Fetch and ListOffsets read
// it, and a commit made under one of its names is fetched under the
// other.
func TestDotlessTopic(t *testing.T) {
	const name = "user-events"
	cfg := kafkaConfig(t)
	cfg.KafkaAutoCreateTopics = "create"
	b := startBroker(t, cfg)
	cl := kgoClient(t, b, cfg, kgo.AllowAutoTopicCreation())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	for i := range 3 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: name, Value: []byte{'a' + byte(i)}}).FirstErr(); err != nil {
			t.Fatalf("produce to %s: %v", name, err)
		}
	}
	info, err := dialFelix(t, b, cfg).StreamInfo(ctx, client.Stream{Namespace: "default", Name: name})
	if err != nil {
		t.Fatalf("the stream default/%s after a produce to %s: %v", name, name, err)
	}
	if !info.Durable {
		t.Fatalf("default/%s is not durable", name)
	}

	meta := kmsg.NewPtrMetadataRequest() // no topics: every one
	mresp, err := meta.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("metadata: %v", err)
	}
	var listed []string
	for _, mt := range mresp.Topics {
		listed = append(listed, *mt.Topic)
	}
	if !slices.Contains(listed, name) || slices.Contains(listed, "default."+name) {
		t.Fatalf("metadata lists %v, want %s and not default.%s", listed, name, name)
	}

	lo := kmsg.NewPtrListOffsetsRequest()
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = name
	lp := kmsg.NewListOffsetsRequestTopicPartition()
	lp.Timestamp = -1 // the end
	lt.Partitions = append(lt.Partitions, lp)
	lo.Topics = append(lo.Topics, lt)
	loResp, err := lo.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("list offsets: %v", err)
	}
	if p := loResp.Topics[0].Partitions[0]; p.ErrorCode != 0 || p.Offset != 3 {
		t.Fatalf("list offsets of %s: code %d, offset %d; want 0, 3", name, p.ErrorCode, p.Offset)
	}

	reader := kgoClient(t, b, cfg, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{name: {0: kgo.NewOffset().AtStart()}}), kgo.FetchMaxWait(200*time.Millisecond))
	var values []byte
	for len(values) < 3 {
		fs := reader.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("fetched %q from %s, want \"abc\"", values, name)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) { values = append(values, r.Value...) })
	}
	if string(values) != "abc" {
		t.Fatalf("fetched %q from %s, want \"abc\"", values, name)
	}

	commit := kmsg.NewPtrOffsetCommitRequest()
	commit.Group, commit.Generation = "names", -1
	ct := kmsg.NewOffsetCommitRequestTopic()
	ct.Topic = name
	cp := kmsg.NewOffsetCommitRequestTopicPartition()
	cp.Offset = 2
	ct.Partitions = append(ct.Partitions, cp)
	bad := kmsg.NewOffsetCommitRequestTopic()
	bad.Topic = "kt."
	bad.Partitions = append(bad.Partitions, cp)
	commit.Topics = append(commit.Topics, ct, bad)
	cresp, err := commit.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("offset commit: %v", err)
	}
	if c := cresp.Topics[0].Partitions[0].ErrorCode; c != 0 {
		t.Fatalf("commit to %s: code %d, want 0", name, c)
	}
	if c := cresp.Topics[1].Partitions[0].ErrorCode; c != 17 { // INVALID_TOPIC_EXCEPTION
		t.Fatalf("commit to kt.: code %d, want 17 (INVALID_TOPIC_EXCEPTION)", c)
	}

	// Under the dotted name, and with no topics named (every commit, by
	// its listed name).
	fetch := kmsg.NewPtrOffsetFetchRequest()
	fetch.Group = "names"
	ft := kmsg.NewOffsetFetchRequestTopic()
	ft.Topic, ft.Partitions = "default."+name, []int32{0}
	fetch.Topics = append(fetch.Topics, ft)
	fresp, err := fetch.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("offset fetch: %v", err)
	}
	if p := fresp.Topics[0].Partitions[0]; p.ErrorCode != 0 || p.Offset != 2 {
		t.Fatalf("offset fetch of default.%s: code %d, offset %d; want 0, 2 (committed as %s)", name, p.ErrorCode, p.Offset, name)
	}
	fetch.Topics = nil
	fresp, err = fetch.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("offset fetch of every topic: %v", err)
	}
	if len(fresp.Topics) != 1 || fresp.Topics[0].Topic != name || fresp.Topics[0].Partitions[0].Offset != 2 {
		t.Fatalf("offset fetch of every topic: %+v, want %s partition 0 at 2", fresp.Topics, name)
	}
}

// TestCacheIsNoTopic: a durable cache is a stream of key writes in the
// cache's own encoding, so Metadata does not list it and a Produce to it
// is refused INVALID_TOPIC_EXCEPTION, not stored among its key writes.
func TestCacheIsNoTopic(t *testing.T) {
	cfg := kafkaConfig(t)
	b := startBroker(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := dialFelix(t, b, cfg).CreateCache(ctx, client.Cache{Namespace: "default", Name: "flags"}, client.CacheSpec{Shards: 1, Durable: true}); err != nil {
		t.Fatalf("create the cache default/flags: %v", err)
	}
	cl := kgoClient(t, b, cfg)
	mresp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("metadata: %v", err)
	}
	for _, mt := range mresp.Topics {
		if *mt.Topic == "flags" || *mt.Topic == "default.flags" {
			t.Fatalf("metadata lists the cache as topic %s", *mt.Topic)
		}
	}
	err = cl.ProduceSync(ctx, &kgo.Record{Topic: "flags", Value: []byte("x")}).FirstErr()
	if !errors.Is(err, kerr.InvalidTopicException) {
		t.Fatalf("produce to the cache: %v, want INVALID_TOPIC_EXCEPTION", err)
	}
}

// TestConsumerOffsetsListedOnAFreshBroker: a single broker lists
// __consumer_offsets, marked internal, before any group was used (a regex
// consumer skips internal topics by finding them in Metadata; franz-go's
// TestConsumeRegex failed whenever it ran before every group test).
func TestConsumerOffsetsListedOnAFreshBroker(t *testing.T) {
	cfg := kafkaConfig(t)
	b := startBroker(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mresp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, kgoClient(t, b, cfg))
	if err != nil {
		t.Fatalf("metadata: %v", err)
	}
	for _, mt := range mresp.Topics {
		if *mt.Topic == "__consumer_offsets" {
			if !mt.IsInternal {
				t.Fatal("__consumer_offsets is listed but not marked internal")
			}
			return
		}
	}
	t.Fatalf("a fresh broker's metadata lists %d topics and no __consumer_offsets", len(mresp.Topics))
}
