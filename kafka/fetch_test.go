package kafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

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
	woken := make(chan kmsg.Response, 1)
	go func() {
		resp, err := cl.Request(context.Background(), fetchRequest(21, 1<<20, 1<<20, 1, 5000))
		if err != nil {
			resp = nil
		}
		woken <- resp
	}()
	time.Sleep(50 * time.Millisecond) // let the fetch start waiting; it is woken either way
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
// woken by the commit of a publish (service.CommitWatcher), not by reading
// again: with the re-read timer set past the test, it still answers the
// new record long before its max_wait.
func TestFetchWokenByCommit(t *testing.T) {
	t.Cleanup(kafka.SetFetchPoll(time.Hour, time.Hour)) // runs after the broker stopped
	cfg := kafkaConfig(t)
	b := startBroker(t, cfg)
	createStream(t, b, cfg, 1)
	cl := kgoClient(t, b, cfg)
	wantProduce(t, "a batch", produceRaw(t, cl, topic, 0, rawBatch(-1, -1, 0, "first")), 0, 0)
	for i := int64(1); i <= 3; i++ {
		woken := make(chan kmsg.Response, 1)
		go func() {
			resp, err := cl.Request(context.Background(), fetchRequest(i, 1<<20, 1<<20, 1, 20000))
			if err != nil {
				resp = nil
			}
			woken <- resp
		}()
		// Let the fetch start waiting; a publish before it waits is seen
		// by its read or by the watch's own check, so it is woken either way.
		time.Sleep(20 * time.Millisecond)
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
