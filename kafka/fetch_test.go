package kafka_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/getfelix/felix-go/broker"
	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/config"
	"github.com/getfelix/felix-go/kafka"
)

// fetchRaw sends one Fetch of topic partition 0 from offset.
func fetchRaw(t *testing.T, cl *kgo.Client, offset int64, partMax, maxBytes, minBytes, waitMS int32) kmsg.FetchResponseTopicPartition {
	t.Helper()
	return roundTrip(t, cl, fetchRequest(offset, partMax, maxBytes, minBytes, waitMS)).(*kmsg.FetchResponse).Topics[0].Partitions[0]
}

func fetchRequest(offset int64, partMax, maxBytes, minBytes, waitMS int32) *kmsg.FetchRequest {
	req := kmsg.NewPtrFetchRequest()
	req.MaxWaitMillis, req.MinBytes, req.MaxBytes = waitMS, minBytes, maxBytes
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.FetchOffset, rp.PartitionMaxBytes = offset, partMax
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}

// batchRecords counts the records in a Fetch answer's batches.
func batchRecords(t *testing.T, raw []byte) (n int, first int64) {
	t.Helper()
	first = -1
	for len(raw) > 0 {
		var b kmsg.RecordBatch
		if err := b.ReadFrom(raw); err != nil {
			t.Fatalf("a fetched batch does not parse: %v", err)
		}
		if first < 0 {
			first = b.FirstOffset
		}
		n += int(b.NumRecords)
		raw = raw[12+b.Length:]
	}
	return n, first
}

// TestFetchCapsAndLongPoll: a partition byte cap smaller than a record
// still returns one batch (KIP-74) and no more than the cap beyond it; a
// fetch at the end waits max_wait for min_bytes, and an append wakes it;
// an offset past the end is OFFSET_OUT_OF_RANGE; ListOffsets answers
// earliest, latest and by time.
func TestFetchCapsAndLongPoll(t *testing.T) {
	cfg := kafkaConfig(t)
	b := startBroker(t, cfg)
	createStream(t, b, cfg, 1)
	cl := kgoClient(t, b, cfg)
	for i := range 20 {
		wantProduce(t, "a batch", produceRaw(t, cl, topic, 0, rawBatch(-1, -1, 0, string(make([]byte, 1000+i)))), 0, int64(i))
	}
	// ListOffsets times are milliseconds: the later batch goes in the
	// next millisecond, which is mid.
	mid := time.Now().Truncate(time.Millisecond).Add(time.Millisecond)
	time.Sleep(time.Until(mid))
	wantProduce(t, "a later batch", produceRaw(t, cl, topic, 0, rawBatch(-1, -1, 0, "late")), 0, 20)

	p := fetchRaw(t, cl, 0, 10, 1<<20, 1, 0)
	if n, first := batchRecords(t, p.RecordBatches); n < 1 || first != 0 || len(p.RecordBatches) > 2200 {
		t.Fatalf("partition cap 10 bytes: %d records (%d bytes) from %d, want at least one batch and not much more", n, len(p.RecordBatches), first)
	}
	if p.HighWatermark != 21 || p.LastStableOffset != 21 {
		t.Fatalf("high watermark %d, last stable %d, want 21", p.HighWatermark, p.LastStableOffset)
	}
	if p := fetchRaw(t, cl, 0, 1<<20, 5000, 1, 0); len(p.RecordBatches) > 5000+1100 {
		t.Fatalf("total cap 5000 bytes: got %d bytes", len(p.RecordBatches))
	}
	if p := fetchRaw(t, cl, 99, 1<<20, 1<<20, 1, 0); p.ErrorCode != 1 {
		t.Fatalf("fetch past the end: code %d, want OFFSET_OUT_OF_RANGE", p.ErrorCode)
	}

	start := time.Now()
	if p := fetchRaw(t, cl, 21, 1<<20, 1<<20, 1, 300); len(p.RecordBatches) != 0 || time.Since(start) < 250*time.Millisecond {
		t.Fatalf("fetch at the end: %d bytes after %s, want none after max_wait 300 ms", len(p.RecordBatches), time.Since(start))
	}
	watched, watching := watchedClient(t, b, cfg)
	woken := make(chan kmsg.Response, 1)
	go func() {
		resp, err := watched.Request(context.Background(), fetchRequest(21, 1<<20, 1<<20, 1, 5000))
		if err != nil {
			resp = nil
		}
		woken <- resp
	}()
	awaitWatch(t, watching, 21)
	start = time.Now()
	wantProduce(t, "a batch during a long poll", produceRaw(t, cl, topic, 0, rawBatch(-1, -1, 0, "wake")), 0, 21)
	resp := <-woken
	if resp == nil || time.Since(start) > 2*time.Second {
		t.Fatalf("the long poll failed (%v) or returned %s after the append", resp == nil, time.Since(start))
	}
	if n, first := batchRecords(t, resp.(*kmsg.FetchResponse).Topics[0].Partitions[0].RecordBatches); n != 1 || first != 21 {
		t.Fatalf("the long poll got %d records from %d, want the one at 21", n, first)
	}

	for _, tc := range []struct {
		name string
		ts   int64
		want int64
	}{{"earliest", -2, 0}, {"latest", -1, 22}, {"by time", mid.UnixMilli(), 20}} {
		req := kmsg.NewPtrListOffsetsRequest()
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Timestamp = tc.ts
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		if got := roundTrip(t, cl, req).(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0].Offset; got != tc.want {
			t.Fatalf("ListOffsets %s: offset %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestFetchWokenByCommit: a Fetch waiting at the end of a partition is
// woken by the commit of a publish (service.CommitWatcher: the shard's
// watch), not by reading again (there is no re-read timer): it answers the
// new record long before its max_wait.
func TestFetchWokenByCommit(t *testing.T) {
	cfg := kafkaConfig(t)
	b := startBroker(t, cfg)
	createStream(t, b, cfg, 1)
	cl := kgoClient(t, b, cfg)
	watched, watching := watchedClient(t, b, cfg)
	wantProduce(t, "a batch", produceRaw(t, cl, topic, 0, rawBatch(-1, -1, 0, "first")), 0, 0)
	for i := int64(1); i <= 3; i++ {
		woken := make(chan kmsg.Response, 1)
		go func() {
			resp, err := watched.Request(context.Background(), fetchRequest(i, 1<<20, 1<<20, 1, 20000))
			if err != nil {
				resp = nil
			}
			woken <- resp
		}()
		awaitWatch(t, watching, uint64(i))
		start := time.Now()
		wantProduce(t, "a batch during a long poll", produceRaw(t, cl, topic, 0, rawBatch(-1, -1, 0, "wake")), 0, i)
		resp := <-woken
		if resp == nil || time.Since(start) > 10*time.Second {
			t.Fatalf("the long poll failed (%v) or returned %s after the append", resp == nil, time.Since(start))
		}
		if n, first := batchRecords(t, resp.(*kmsg.FetchResponse).Topics[0].Partitions[0].RecordBatches); n != 1 || first != i {
			t.Fatalf("the long poll got %d records from %d, want the one at %d", n, first, i)
		}
	}
}

// watchedClient is a franz-go client of a Kafka listener of the test's own
// in front of b, whose sessions report each commit watch a Fetch registers
// (watchedService): a test then knows the Fetch read, found nothing and
// waits, instead of guessing with a sleep.
func watchedClient(t *testing.T, b *broker.Broker, cfg config.Config) (*kgo.Client, <-chan uint64) {
	t.Helper()
	watching := make(chan uint64, 16)
	ln, err := kafka.Listen(watchedService{Service: b, watching: watching}, kafka.Config{Addr: "127.0.0.1:0", Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close(context.Background()) })
	cl, err := kgo.NewClient(kgo.SeedBrokers(ln.Addr().String()),
		kgo.SASL(plain.Auth{User: "default", Pass: brokertest.Token(t, cfg, "default")}.AsMechanism()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl, watching
}

// awaitWatch waits for a Fetch's commit watch from offset after.
func awaitWatch(t *testing.T, watching <-chan uint64, after uint64) {
	t.Helper()
	select {
	case got := <-watching:
		if got != after {
			t.Fatalf("the Fetch at %d watches from %d", after, got)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the Fetch at %d never began to wait", after)
	}
}

// TestFetchInProducersCodec: on a stream without a codec of its own, a
// batch produced compressed is fetched compressed in the producer's codec
// (so a client's decompression limit applies to it, as Kafka's does) and
// one produced plain is fetched plain: the two come back as two batches,
// each in its own codec, and decode to what was produced.
func TestFetchInProducersCodec(t *testing.T) {
	cfg := kafkaConfig(t)
	b := startBroker(t, cfg)
	createStream(t, b, cfg, 1)
	cl := kgoClient(t, b, cfg)
	value := strings.Repeat("compressible ", 100)
	wantProduce(t, "a zstd batch", produceRaw(t, cl, topic, 0, rawBatch(-1, -1, codecZstd, value, value)), 0, 0)
	wantProduce(t, "a plain batch", produceRaw(t, cl, topic, 0, rawBatch(-1, -1, 0, value)), 0, 2)

	raw := fetchRaw(t, cl, 0, 1<<20, 1<<20, 1, 0).RecordBatches
	var got []int16
	for len(raw) > 0 {
		var batch kmsg.RecordBatch
		if err := batch.ReadFrom(raw); err != nil {
			t.Fatalf("a fetched batch does not parse: %v", err)
		}
		got = append(got, batch.Attributes&7)
		raw = raw[12+batch.Length:]
	}
	if !slices.Equal(got, []int16{codecZstd, 0}) {
		t.Fatalf("fetched batch codecs %v, want [zstd plain] (%d, 0)", got, codecZstd)
	}
	recs := consumeN(t, kgoClient(t, b, cfg, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())), 3)
	for i, r := range recs {
		if string(r.Value) != value || r.Offset != int64(i) {
			t.Fatalf("record %d: offset %d, %d bytes, want offset %d and the value produced", i, r.Offset, len(r.Value), i)
		}
	}
}

// codecZstd is zstd's RecordBatch attribute.
const codecZstd = 4

// TestFetchProducedBatchWhole: a compressed batch of three records larger
// than the partition's byte cap together is fetched whole, one batch of
// the three in its producer's codec, as Kafka serves what it stored (kgo's
// MaxDecompressBatchBytes reports the batch's end from it); the next
// batch, produced plain, comes after it as a batch of its own.
func TestFetchProducedBatchWhole(t *testing.T) {
	cfg := kafkaConfig(t)
	b := startBroker(t, cfg)
	createStream(t, b, cfg, 1)
	cl := kgoClient(t, b, cfg)
	big := string(make([]byte, 64<<10))
	wantProduce(t, "a zstd batch", produceRaw(t, cl, topic, 0, rawBatch(-1, -1, codecZstd, big, big, big)), 0, 0)
	wantProduce(t, "a plain batch", produceRaw(t, cl, topic, 0, rawBatch(-1, -1, 0, "after")), 0, 3)

	raw := fetchRaw(t, cl, 0, 1000, 1<<20, 1, 0).RecordBatches
	var got []string
	for len(raw) > 0 {
		var batch kmsg.RecordBatch
		if err := batch.ReadFrom(raw); err != nil {
			t.Fatalf("a fetched batch does not parse: %v", err)
		}
		got = append(got, fmt.Sprintf("%d@%d/codec%d", batch.NumRecords, batch.FirstOffset, batch.Attributes&7))
		raw = raw[12+batch.Length:]
	}
	if want := []string{"3@0/codec4", "1@3/codec0"}; !slices.Equal(got, want) {
		t.Fatalf("fetched batches %v, want %v: the produced batch whole in zstd, then the plain one", got, want)
	}
}
