package kafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/getfelix/felix-go/client"
)

// createTimes are the producer times TestCreateTimeKept produces, out of
// order as producers' clocks may be, all long before the broker appends
// them.
var createTimes = []time.Time{
	time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC),
	time.Date(2020, 3, 1, 0, 0, 0, 0, time.UTC),
	time.Date(2020, 2, 1, 0, 0, 0, 0, time.UTC),
	time.Date(2020, 5, 1, 0, 0, 0, 123e6, time.UTC),
}

// produceAt produces one record per time to partition 0, synchronously.
func produceAt(t *testing.T, cl *kgo.Client, times []time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, at := range times {
		r := &kgo.Record{Topic: topic, Partition: 0, Value: []byte{byte('a' + i)}, Timestamp: at}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("produce record %d: %v", i, err)
		}
	}
}

// consumeN reads n records of partition 0 from the start.
func consumeN(t *testing.T, cl *kgo.Client, n int) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got []*kgo.Record
	for len(got) < n {
		fs := cl.PollFetches(ctx)
		if err := fs.Err(); err != nil {
			t.Fatalf("poll after %d of %d records: %v", len(got), n, err)
		}
		got = append(got, fs.Records()...)
	}
	return got
}

// listOffset asks ListOffsets for partition p at ts and returns the
// partition's answer.
func listOffset(t *testing.T, cl *kgo.Client, p int32, ts int64) kmsg.ListOffsetsResponseTopicPartition {
	t.Helper()
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition, rp.Timestamp = p, ts
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return roundTrip(t, cl, req).(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0]
}

// TestCreateTimeKept: a producer's CreateTime is kept per record and comes
// back on Fetch (marked CreateTime) and through felix/1's range read;
// ListOffsets by time finds the first record whose stored time is at or
// after it and answers that record's timestamp, -1 (offset and time) for
// a time after every record, and timestamp -1 for earliest and latest.
func TestCreateTimeKept(t *testing.T) {
	cfg := kafkaConfig(t)
	b := startBroker(t, cfg)
	createStream(t, b, cfg, 1)
	cl := kgoClient(t, b, cfg, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	produceAt(t, cl, createTimes)

	for i, r := range consumeN(t, cl, len(createTimes)) {
		if !r.Timestamp.Equal(createTimes[i]) || r.Attrs.TimestampType() != 0 {
			t.Fatalf("record %d fetched with time %v (type %d), want its CreateTime %v (type 0)", i, r.Timestamp, r.Attrs.TimestampType(), createTimes[i])
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	page, err := dialFelix(t, b, cfg).Read(ctx, stream, 0, client.ReadOptions{})
	if err != nil || len(page.Records) != len(createTimes) {
		t.Fatalf("felix/1 read: %d records, %v", len(page.Records), err)
	}
	for i, r := range page.Records {
		if !r.Time.Equal(createTimes[i]) {
			t.Fatalf("felix/1 read record %d at %v, want its CreateTime %v", i, r.Time, createTimes[i])
		}
	}

	for _, tc := range []struct {
		name       string
		ts         int64
		offset, at int64
	}{
		{"earliest", -2, 0, -1},
		{"latest", -1, 4, -1},
		{"before every record", createTimes[0].Add(-time.Hour).UnixMilli(), 0, createTimes[0].UnixMilli()},
		{"between, past an older record", time.Date(2020, 2, 15, 0, 0, 0, 0, time.UTC).UnixMilli(), 1, createTimes[1].UnixMilli()},
		{"exactly a record's time", createTimes[3].UnixMilli(), 3, createTimes[3].UnixMilli()},
		{"after every record", time.Now().Add(time.Hour).UnixMilli(), -1, -1},
	} {
		p := listOffset(t, cl, 0, tc.ts)
		if p.ErrorCode != 0 || p.Offset != tc.offset || p.Timestamp != tc.at {
			t.Fatalf("ListOffsets %s (%d): code %d offset %d timestamp %d, want offset %d timestamp %d", tc.name, tc.ts, p.ErrorCode, p.Offset, p.Timestamp, tc.offset, tc.at)
		}
	}
	// felix/1's lookup uses the same stored times.
	off, err := dialFelix(t, b, cfg).OffsetForTime(ctx, stream, time.Date(2020, 2, 15, 0, 0, 0, 0, time.UTC), 0)
	if err != nil || off != 1 {
		t.Fatalf("felix/1 offset for 2020-02-15: %d, %v; want 1", off, err)
	}
}

// TestLogAppendTime: a stream created LogAppendTime keeps no producer
// times: records fetch marked LogAppendTime with the broker's append
// time, and felix/1 reads the same time; the Produce answer's
// log_append_time is that time (-1 on a CreateTime stream).
func TestLogAppendTime(t *testing.T) {
	cfg := kafkaConfig(t)
	b := startBroker(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := dialFelix(t, b, cfg).CreateStream(ctx, stream, client.StreamConfig{Durable: true, LogAppendTime: true})
	if err != nil || !info.LogAppendTime {
		t.Fatalf("create a LogAppendTime stream: %+v, %v", info, err)
	}
	if _, err := dialFelix(t, b, cfg).CreateStream(ctx, client.Stream{Namespace: "kt", Name: "volatile"}, client.StreamConfig{LogAppendTime: true}); err == nil {
		t.Fatal("an in-memory stream was created LogAppendTime; want it refused (it keeps no times)")
	}
	cl := kgoClient(t, b, cfg, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	before := time.Now().Truncate(time.Millisecond)
	produceAt(t, cl, createTimes[:2])
	after := time.Now()
	got := consumeN(t, cl, 2)
	for i, r := range got {
		if r.Attrs.TimestampType() != 1 || r.Timestamp.Before(before) || r.Timestamp.After(after) {
			t.Fatalf("record %d fetched with time %v (type %d), want type 1 and an append time in [%v, %v]", i, r.Timestamp, r.Attrs.TimestampType(), before, after)
		}
	}
	page, err := dialFelix(t, b, cfg).Read(ctx, stream, 0, client.ReadOptions{})
	if err != nil || len(page.Records) != 2 {
		t.Fatalf("felix/1 read: %d records, %v", len(page.Records), err)
	}
	for i, r := range page.Records {
		if !r.Time.Truncate(time.Millisecond).Equal(got[i].Timestamp) {
			t.Fatalf("felix/1 read record %d at %v, Kafka fetched %v", i, r.Time, got[i].Timestamp)
		}
	}

	// The Produce answer names the append time the records now carry.
	answer := produceRaw(t, cl, topic, 0, rawBatch(-1, -1, 0, "timed"))
	wantProduce(t, "a batch to the LogAppendTime stream", answer, 0, 2)
	fetched := consumeN(t, cl, 1)[0]
	if answer.LogAppendTime < 0 || answer.LogAppendTime != fetched.Timestamp.UnixMilli() {
		t.Fatalf("Produce answered log_append_time %d; the record was fetched at %d", answer.LogAppendTime, fetched.Timestamp.UnixMilli())
	}
	plain := client.Stream{Namespace: "kt", Name: "created"}
	if _, err := dialFelix(t, b, cfg).CreateStream(ctx, plain, client.StreamConfig{Durable: true}); err != nil {
		t.Fatalf("create a CreateTime stream: %v", err)
	}
	if answer := produceRaw(t, cl, "kt.created", 0, rawBatch(-1, -1, 0, "v")); answer.LogAppendTime != -1 {
		t.Fatalf("Produce to a CreateTime stream answered log_append_time %d, want -1", answer.LogAppendTime)
	}
}

// TestErrorPartitionEnds: as Kafka answers, a Fetch partition with an
// error reports high watermark, last stable offset and log start -1
// (kcat -e read 0 as the end and exited early), and one without reports
// the log start.
func TestErrorPartitionEnds(t *testing.T) {
	cfg := kafkaConfig(t)
	b := startBroker(t, cfg)
	createStream(t, b, cfg, 1)
	cl := kgoClient(t, b, cfg)
	wantProduce(t, "a batch", produceRaw(t, cl, topic, 0, rawBatch(-1, -1, 0, "x")), 0, 0)

	p := fetchRaw(t, cl, 0, 1<<20, 1<<20, 1, 0)
	if p.ErrorCode != 0 || p.HighWatermark != 1 || p.LogStartOffset != 0 {
		t.Fatalf("fetch: code %d high watermark %d log start %d, want 0, 1, 0", p.ErrorCode, p.HighWatermark, p.LogStartOffset)
	}
	req := fetchRequest(0, 1<<20, 1<<20, 1, 0)
	req.Topics[0].Partitions[0].Partition = 7 // past the stream's one shard
	past := fetchRaw(t, cl, 5, 1<<20, 1<<20, 1, 0)
	unknown := roundTrip(t, cl, req).(*kmsg.FetchResponse).Topics[0].Partitions[0]
	for name, p := range map[string]kmsg.FetchResponseTopicPartition{"out of range": past, "unknown partition": unknown} {
		if p.ErrorCode == 0 || p.HighWatermark != -1 || p.LastStableOffset != -1 || p.LogStartOffset != -1 {
			t.Fatalf("%s: code %d high watermark %d last stable %d log start %d, want an error and -1 each", name, p.ErrorCode, p.HighWatermark, p.LastStableOffset, p.LogStartOffset)
		}
	}
}
