package kafka_test

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/getfelix/felix-go/broker"
	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/config"
)

// TestFetchMaxBytesCap: a Fetch asking for 2^31-1 bytes, in all and per
// partition, gets at most kafka_fetch_max_bytes of records (and the batch
// that crosses it), starting at its offset, and the cut is counted.
func TestFetchMaxBytesCap(t *testing.T) {
	cfg := kafkaConfig(t)
	cfg.KafkaFetchMaxBytes = 64 << 10
	b := startBroker(t, cfg)
	createStream(t, b, cfg, 1)
	cl := kgoClient(t, b, cfg)
	const value = 4 << 10
	for i := range 64 { // 256 KiB, four times the cap
		wantProduce(t, "a batch", produceRaw(t, cl, topic, 0, rawBatch(-1, -1, 0, string(make([]byte, value)))), 0, int64(i))
	}
	p := fetchRaw(t, cl, 0, math.MaxInt32, math.MaxInt32, 1, 0)
	n, first := batchRecords(t, p.RecordBatches)
	if first != 0 || n < 1 {
		t.Fatalf("a 2^31-1 byte Fetch from 0 got %d records from %d, want some from 0", n, first)
	}
	if limit := int(cfg.KafkaFetchMaxBytes) + value + 100; len(p.RecordBatches) > limit {
		t.Fatalf("a 2^31-1 byte Fetch got %d bytes (%d records), want at most kafka_fetch_max_bytes %d and one batch: %d", len(p.RecordBatches), n, cfg.KafkaFetchMaxBytes, limit)
	}
	if got := metricValue(t, b, "felix_kafka_limits_total", map[string]string{"knob": "kafka_fetch_max_bytes"}); got < 1 {
		t.Fatalf("felix_kafka_limits_total{knob=kafka_fetch_max_bytes} = %v after a capped Fetch, want 1", got)
	}
	// The rest is there for the next Fetch.
	if p := fetchRaw(t, cl, int64(n), math.MaxInt32, math.MaxInt32, 1, 0); len(p.RecordBatches) == 0 {
		t.Fatalf("the Fetch after the capped one, from %d, got nothing", n)
	}
}

// saslConn is a raw connection logged in as tenant default with
// SASL/PLAIN (handshake v1), its deadline 5 s away.
func saslConn(t *testing.T, b *broker.Broker, cfg config.Config) net.Conn {
	t.Helper()
	conn := dialRaw(t, b.KafkaAddr().String())
	t.Cleanup(func() { _ = conn.Close() })
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Version, hs.Mechanism = 1, "PLAIN"
	exchange(t, conn, hs, kmsg.NewPtrSASLHandshakeResponse())
	auth := kmsg.NewPtrSASLAuthenticateRequest()
	auth.Version = 1
	auth.SASLAuthBytes = append([]byte("\x00default\x00"), brokertest.Token(t, cfg, "default")...)
	resp := kmsg.NewPtrSASLAuthenticateResponse()
	resp.Version = 1
	exchange(t, conn, auth, resp)
	if resp.ErrorCode != 0 {
		t.Fatalf("SASL/PLAIN login: code %d", resp.ErrorCode)
	}
	return conn
}

// wantClosedAfter waits (within conn's deadline) for the broker to close
// conn, and fails if that came before at least.
func wantClosedAfter(t *testing.T, what string, conn net.Conn, start time.Time, at time.Duration) {
	t.Helper()
	_, err := conn.Read(make([]byte, 1))
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		t.Fatalf("%s: the connection was still open after 5 s", what)
	case err == nil:
		t.Fatalf("%s: got an answer, want the connection closed", what)
	case time.Since(start) < at:
		t.Fatalf("%s: closed after %s, before its deadline %s", what, time.Since(start), at)
	}
}

// TestRequestReadDeadlines: after the login, a request whose body does not
// all arrive within kafka_request_read_timeout_ms of its first byte
// closes its connection (at 8 bytes short, the slow-body attack), as does
// a request past kafka_max_request_bytes; each is counted under its knob.
// A connection idle between requests stays open past the body's deadline,
// and closes at kafka_idle_timeout_ms.
func TestRequestReadDeadlines(t *testing.T) {
	cfg := kafkaConfig(t)
	cfg.KafkaRequestReadTimeout = 300 * time.Millisecond
	cfg.KafkaIdleTimeout = 2 * time.Second
	b := startBroker(t, cfg)

	idle := saslConn(t, b, cfg)
	slow := saslConn(t, b, cfg)
	body := make([]byte, 1<<20)
	raw := frame(18, 3, 9, body)
	start := time.Now()
	if _, err := slow.Write(raw[:len(raw)-8]); err != nil {
		t.Fatal(err)
	}
	wantClosedAfter(t, "a request 8 bytes short", slow, start, 250*time.Millisecond)
	if got := metricValue(t, b, "felix_kafka_limits_total", map[string]string{"knob": "kafka_request_read_timeout_ms"}); got != 1 {
		t.Fatalf("felix_kafka_limits_total{knob=kafka_request_read_timeout_ms} = %v, want 1", got)
	}
	// The idle connection has waited as long as the slow one, and more.
	if _, err := idle.Write(frame(18, 0, 1, nil)); err != nil || readAnswer(t, idle) == nil {
		t.Fatalf("a connection idle past kafka_request_read_timeout_ms between requests was not served: %v", err)
	}
	// Idle past kafka_idle_timeout_ms (2 s) after its answer, it closes.
	_ = idle.SetDeadline(time.Now().Add(5 * time.Second))
	wantClosedAfter(t, "a connection idle past kafka_idle_timeout_ms", idle, time.Now(), 1900*time.Millisecond)
	if got := metricValue(t, b, "felix_kafka_limits_total", map[string]string{"knob": "kafka_idle_timeout_ms"}); got != 1 {
		t.Fatalf("felix_kafka_limits_total{knob=kafka_idle_timeout_ms} = %v, want 1", got)
	}

	big := saslConn(t, b, cfg)
	// Only the size and the header are sent: the broker closes before
	// reading a body, so writing one would be reset.
	if _, err := big.Write(frame(0, 7, 1, make([]byte, cfg.KafkaMaxRequestBytes))[:14]); err != nil {
		t.Fatal(err)
	}
	wantClosedAfter(t, "a request past kafka_max_request_bytes", big, time.Now(), 0)
	if got := metricValue(t, b, "felix_kafka_limits_total", map[string]string{"knob": "kafka_max_request_bytes"}); got != 1 {
		t.Fatalf("felix_kafka_limits_total{knob=kafka_max_request_bytes} = %v, want 1", got)
	}
	if got := metricValue(t, b, "felix_kafka_requests_total", map[string]string{"api": "Produce", "outcome": "closed"}); got != 1 {
		t.Fatalf("felix_kafka_requests_total{api=Produce,outcome=closed} = %v after an oversized Produce, want 1", got)
	}
}

// TestProduceDecompressedPerRequest: four zstd batches, each well inside
// kafka_max_batch_bytes once decompressed but past
// kafka_max_request_decompressed_bytes together, are refused
// RECORD_LIST_TOO_LARGE on every partition with nothing written, and the
// same connection then produces.
func TestProduceDecompressedPerRequest(t *testing.T) {
	cfg := kafkaConfig(t)
	cfg.KafkaMaxBatchBytes = 1 << 20
	cfg.KafkaMaxRequestDecompressedBytes = 2 << 20
	b := startBroker(t, cfg)
	createStream(t, b, cfg, 4)
	conn := saslConn(t, b, cfg)

	produceOn := func(what string, batches ...[]byte) *kmsg.ProduceResponse {
		t.Helper()
		req := kmsg.NewPtrProduceRequest()
		req.Version, req.Acks, req.TimeoutMillis = 7, -1, 5000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = topic
		for i, batch := range batches {
			rp := kmsg.NewProduceRequestTopicPartition()
			rp.Partition, rp.Records = int32(i), batch
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
		resp := kmsg.NewPtrProduceResponse()
		resp.Version = req.Version
		exchange(t, conn, req, resp)
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != len(batches) {
			t.Fatalf("%s: answer %+v, want one topic of %d partitions", what, resp.Topics, len(batches))
		}
		return resp
	}
	// 768 KiB of zeros each, a few hundred bytes compressed: 3 MiB in all.
	bomb := rawBatch(-1, -1, 4, string(make([]byte, 768<<10)))
	resp := produceOn("four 768 KiB batches", bomb, bomb, bomb, bomb)
	for _, p := range resp.Topics[0].Partitions {
		wantProduce(t, "a batch of a request past its decompressed bound", p, kerr.RecordListTooLarge.Code, 0)
	}
	if got := committed(t, b, cfg); got != 0 {
		t.Fatalf("a refused request wrote %d records to partition 0", got)
	}
	if got := metricValue(t, b, "felix_kafka_limits_total", map[string]string{"knob": "kafka_max_request_decompressed_bytes"}); got != 1 {
		t.Fatalf("felix_kafka_limits_total{knob=kafka_max_request_decompressed_bytes} = %v, want 1", got)
	}
	resp = produceOn("two of them after the refusal", bomb, bomb)
	for _, p := range resp.Topics[0].Partitions {
		wantProduce(t, "a batch of a request within its bound", p, 0, 0)
	}
}

// TestProduceSyncMessageTooLarge: a record batch past kafka_max_batch_bytes
// is answered MESSAGE_TOO_LARGE, so kgo's ProduceSync returns that error
// (it does not retry it) instead of waiting on a closed connection.
func TestProduceSyncMessageTooLarge(t *testing.T) {
	cfg := kafkaConfig(t)
	cfg.KafkaMaxBatchBytes = 64 << 10
	b := startBroker(t, cfg)
	createStream(t, b, cfg, 1)
	for _, codec := range []kgo.CompressionCodec{kgo.NoCompression(), kgo.ZstdCompression()} {
		cl := kgoClient(t, b, cfg, kgo.ProducerBatchCompression(codec), kgo.DefaultProduceTopic(topic))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := cl.ProduceSync(ctx, &kgo.Record{Value: make([]byte, 128<<10)}).FirstErr()
		cancel()
		if !errors.Is(err, kerr.MessageTooLarge) {
			t.Fatalf("ProduceSync of a 128 KiB record (%v), kafka_max_batch_bytes 64 KiB: %v, want MESSAGE_TOO_LARGE", codec, err)
		}
		ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
		err = cl.ProduceSync(ctx, &kgo.Record{Value: []byte("small")}).FirstErr()
		cancel()
		if err != nil {
			t.Fatalf("ProduceSync of a small record after MESSAGE_TOO_LARGE (%v): %v", codec, err)
		}
	}
}

// TestPipelinedFetchesShareTheBudget: two Fetches sent back to back on a
// connection whose kafka_max_inflight_fetch_bytes holds one full answer
// are both answered, in order and each within its cap: the second waits
// for the first's answer to be written instead of the two deadlocking.
func TestPipelinedFetchesShareTheBudget(t *testing.T) {
	cfg := kafkaConfig(t)
	cfg.KafkaFetchMaxBytes = 64 << 10
	cfg.KafkaMaxInflightFetchBytes = 64 << 10
	b := startBroker(t, cfg)
	createStream(t, b, cfg, 1)
	cl := kgoClient(t, b, cfg)
	const value = 4 << 10
	for i := range 64 {
		wantProduce(t, "a batch", produceRaw(t, cl, topic, 0, rawBatch(-1, -1, 0, string(make([]byte, value)))), 0, int64(i))
	}
	conn := saslConn(t, b, cfg)
	var raw []byte
	for corr, from := range []int64{0, 32} {
		req := fetchRequest(from, math.MaxInt32, math.MaxInt32, 1, 0)
		req.Version = 11
		// AppendRequest writes the size at the front of what it is given:
		// each frame is made on its own.
		raw = append(raw, kmsg.NewRequestFormatter().AppendRequest(nil, req, int32(corr))...)
	}
	if _, err := conn.Write(raw); err != nil {
		t.Fatal(err)
	}
	for corr, from := range []int64{0, 32} {
		answer := readAnswer(t, conn)
		if len(answer) < 4 || int32(binary.BigEndian.Uint32(answer)) != int32(corr) {
			t.Fatalf("answer %d of 2 pipelined Fetches: %x..., want correlation %d", corr+1, answer[:min(len(answer), 8)], corr)
		}
		resp := kmsg.NewPtrFetchResponse()
		resp.Version = 11
		if err := resp.ReadFrom(answer[4:]); err != nil {
			t.Fatalf("answer %d does not parse: %v", corr+1, err)
		}
		p := resp.Topics[0].Partitions[0]
		n, first := batchRecords(t, p.RecordBatches)
		if first != from || n < 1 || len(p.RecordBatches) > int(cfg.KafkaFetchMaxBytes)+value+100 {
			t.Fatalf("Fetch %d from %d: %d records (%d bytes) from %d, want some from %d within %d bytes and a batch", corr+1, from, n, len(p.RecordBatches), first, from, cfg.KafkaFetchMaxBytes)
		}
	}
}
