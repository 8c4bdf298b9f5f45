package kafka_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"hash/crc32"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/getfelix/felix-go/client"
)

// messageV1 is one message-set entry of magic 1.
func messageV1(codec byte, ts int64, key, value []byte) []byte {
	msg := binary.BigEndian.AppendUint64([]byte{0, 0, 0, 0, 1, codec}, uint64(ts))
	msg = binary.BigEndian.AppendUint32(msg, uint32(len(key)))
	msg = append(msg, key...)
	msg = binary.BigEndian.AppendUint32(msg, uint32(len(value)))
	msg = append(msg, value...)
	binary.BigEndian.PutUint32(msg, crc32.ChecksumIEEE(msg[4:]))
	entry := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint64(nil, 0), uint32(len(msg)))
	return append(entry, msg...)
}

// TestProduceV2MessageSet: a client that speaks Kafka 0.10.2 (Produce v2)
// produces a gzip-wrapped message set of magic 1 messages; the records are
// stored with their keys and CreateTimes and read back through felix/1,
// and a RecordBatch in a Produce v2 is refused
// UNSUPPORTED_FOR_MESSAGE_FORMAT.
func TestProduceV2MessageSet(t *testing.T) {
	cfg := kafkaConfig(t)
	b := startBroker(t, cfg)
	createStream(t, b, cfg, 1)
	cl := kgoClient(t, b, cfg, kgo.MaxVersions(kversion.V0_10_2()))
	at := time.UnixMilli(1588291200123)
	inner := append(messageV1(0, at.UnixMilli(), []byte("k1"), []byte("one")), messageV1(0, at.UnixMilli()+1, []byte("k2"), []byte("two"))...)
	var zipped bytes.Buffer
	w := gzip.NewWriter(&zipped)
	_, _ = w.Write(inner)
	_ = w.Close()
	for name, tc := range map[string]struct {
		set  []byte
		code int16
	}{
		"gzip message set": {messageV1(1, at.UnixMilli(), nil, zipped.Bytes()), 0},
		"a RecordBatch":    {rawBatch(-1, -1, 0, "x"), 43}, // UNSUPPORTED_FOR_MESSAGE_FORMAT
	} {
		req := kmsg.NewPtrProduceRequest()
		req.Version, req.Acks, req.TimeoutMillis = 2, -1, 5000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Records = tc.set
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp := roundTrip(t, cl, req).(*kmsg.ProduceResponse)
		if resp.Version != 2 || resp.Topics[0].Partitions[0].ErrorCode != tc.code {
			t.Fatalf("%s: answered v%d code %d, want v2 code %d", name, resp.Version, resp.Topics[0].Partitions[0].ErrorCode, tc.code)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	page, err := dialFelix(t, b, cfg).Read(ctx, stream, 0, client.ReadOptions{})
	if err != nil || len(page.Records) != 2 {
		t.Fatalf("felix/1 read: %d records, %v; want 2", len(page.Records), err)
	}
	for i, want := range []string{"one", "two"} {
		r := page.Records[i]
		if string(r.Payload) != want || string(r.Key) != "k"+string(rune('1'+i)) || !r.Time.Equal(at.Add(time.Duration(i)*time.Millisecond)) {
			t.Fatalf("record %d: %q key %q at %v; want %q with its key and CreateTime", i, r.Payload, r.Key, r.Time, want)
		}
	}
}
