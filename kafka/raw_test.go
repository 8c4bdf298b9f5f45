package kafka_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"hash/crc32"
	"io"
	"net"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/getfelix/felix-go/broker"
	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/config"
)

// rawBatch builds a RecordBatch v2 of values, uncompressed or zstd, for
// producer id (-1: none) at base sequence seq.
func rawBatch(id int64, seq int32, codec int16, values ...string) []byte {
	var recs []byte
	for i, v := range values {
		r := kmsg.Record{OffsetDelta: int32(i), Value: []byte(v)}
		body := r.AppendTo(nil)
		// AppendTo wrote Length 0 as its first varint: replace it.
		r.Length = int32(len(body) - 1)
		recs = r.AppendTo(recs)
	}
	if codec == 4 {
		enc, _ := zstd.NewWriter(nil)
		recs = enc.EncodeAll(recs, nil)
		_ = enc.Close()
	}
	b := kmsg.RecordBatch{
		Magic: 2, Attributes: codec, LastOffsetDelta: int32(len(values) - 1),
		FirstTimestamp: time.Now().UnixMilli(), MaxTimestamp: time.Now().UnixMilli(),
		ProducerID: id, ProducerEpoch: 0, FirstSequence: seq, NumRecords: int32(len(values)), Records: recs,
	}
	if id < 0 {
		b.ProducerEpoch, b.FirstSequence = -1, -1
	}
	raw := b.AppendTo(nil)
	binary.BigEndian.PutUint32(raw[8:], uint32(len(raw)-12))
	binary.BigEndian.PutUint32(raw[17:], crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli)))
	return raw
}

// produceRaw sends one batch to topic/partition with acks=all and returns
// the partition's answer.
func produceRaw(t *testing.T, cl *kgo.Client, topic string, partition int32, batch []byte) kmsg.ProduceResponseTopicPartition {
	t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = -1, 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = partition, batch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return roundTrip(t, cl, req).(*kmsg.ProduceResponse).Topics[0].Partitions[0]
}

// roundTrip sends req through kgo and returns its answer.
func roundTrip(t *testing.T, cl *kgo.Client, req kmsg.Request) kmsg.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cl.Request(ctx, req)
	if err != nil {
		t.Fatalf("%s: %v", kmsg.NameForKey(req.Key()), err)
	}
	return resp
}

func initProducer(t *testing.T, cl *kgo.Client) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := kmsg.NewPtrInitProducerIDRequest().RequestWith(ctx, cl)
	if err != nil || resp.ErrorCode != 0 {
		t.Fatalf("InitProducerID: %v, code %d", err, resp.ErrorCode)
	}
	return resp.ProducerID
}

func wantProduce(t *testing.T, what string, got kmsg.ProduceResponseTopicPartition, code int16, offset int64) {
	t.Helper()
	if got.ErrorCode != code || (code == 0 && got.BaseOffset != offset) {
		t.Fatalf("%s: got code %d (%v) offset %d, want code %d (%v) offset %d", what, got.ErrorCode, kerr.ErrorForCode(got.ErrorCode), got.BaseOffset, code, kerr.ErrorForCode(code), offset)
	}
}

// committed reads shard 0's committed end through felix/1.
func committed(t testing.TB, b *broker.Broker, cfg config.Config) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	page, err := dialFelix(t, b, cfg).Read(ctx, stream, 0, client.ReadOptions{MaxRecords: 1})
	if err != nil {
		t.Fatalf("felix read: %v", err)
	}
	return page.Committed
}

// TestIdempotentSequences: Kafka sequences count records, Felix's count
// batches. A retried batch (same producer, same base sequence) is answered
// with its original offset and written once, also after a restart that
// lost the listener's sequence map; a gap is OUT_OF_ORDER_SEQUENCE_NUMBER.
func TestIdempotentSequences(t *testing.T) {
	cfg := kafkaConfig(t)
	b := startBroker(t, cfg)
	createStream(t, b, cfg, 1)
	cl := kgoClient(t, b, cfg)
	id := initProducer(t, cl)

	first := rawBatch(id, 0, 0, "a", "b", "c")
	wantProduce(t, "first batch", produceRaw(t, cl, topic, 0, first), 0, 0)
	wantProduce(t, "first batch again", produceRaw(t, cl, topic, 0, first), 0, 0)
	second := rawBatch(id, 3, 4, "d", "e")
	wantProduce(t, "second batch (zstd)", produceRaw(t, cl, topic, 0, second), 0, 3)
	wantProduce(t, "a sequence gap", produceRaw(t, cl, topic, 0, rawBatch(id, 9, 0, "x")), kerr.OutOfOrderSequenceNumber.Code, 0)
	third := rawBatch(id, 5, 0, "f")
	wantProduce(t, "third batch", produceRaw(t, cl, topic, 0, third), 0, 5)
	if got := committed(t, b, cfg); got != 6 {
		t.Fatalf("after a duplicate and a gap the shard holds %d records, want 6", got)
	}

	// The answers to the last two batches were lost; after a restart the
	// producer sends both again, oldest first.
	stopBroker(t, b)
	b = startBroker(t, cfg)
	cl = kgoClient(t, b, cfg)
	wantProduce(t, "second batch retried after a restart", produceRaw(t, cl, topic, 0, second), 0, 3)
	wantProduce(t, "third batch retried after a restart", produceRaw(t, cl, topic, 0, third), 0, 5)
	wantProduce(t, "fourth batch after a restart", produceRaw(t, cl, topic, 0, rawBatch(id, 6, 0, "g")), 0, 6)
	if got := committed(t, b, cfg); got != 7 {
		t.Fatalf("after the restart the shard holds %d records, want 7", got)
	}
}

// TestBadInput: each bad request gets its typed Kafka error (or its
// connection closed), writes nothing, and another client is served
// throughout.
func TestBadInput(t *testing.T) {
	cfg := kafkaConfig(t)
	b := startBroker(t, cfg)
	createStream(t, b, cfg, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := dialFelix(t, b, cfg).CreateStream(ctx, client.Stream{Namespace: "kt", Name: "memory"}, client.StreamConfig{}); err != nil {
		t.Fatalf("create in-memory stream: %v", err)
	}
	cl := kgoClient(t, b, cfg)

	corrupt := rawBatch(-1, -1, 0, "v")
	corrupt[len(corrupt)-1] ^= 0xff
	wantProduce(t, "a corrupt CRC", produceRaw(t, cl, topic, 0, corrupt), kerr.CorruptMessage.Code, 0)
	two := append(rawBatch(-1, -1, 0, "v"), rawBatch(-1, -1, 0, "w")...)
	wantProduce(t, "two batches in one partition", produceRaw(t, cl, topic, 0, two), kerr.CorruptMessage.Code, 0)
	wantProduce(t, "a truncated batch", produceRaw(t, cl, topic, 0, rawBatch(-1, -1, 0, "v")[:40]), kerr.CorruptMessage.Code, 0)
	wantProduce(t, "a zstd bomb", produceRaw(t, cl, topic, 0, zstdBomb(t)), kerr.MessageTooLarge.Code, 0)
	wantProduce(t, "an unknown topic", produceRaw(t, cl, "kt.nothing", 0, rawBatch(-1, -1, 0, "v")), kerr.UnknownTopicOrPartition.Code, 0)
	wantProduce(t, "a partition past the shards", produceRaw(t, cl, topic, 7, rawBatch(-1, -1, 0, "v")), kerr.UnknownTopicOrPartition.Code, 0)
	wantProduce(t, "an in-memory stream", produceRaw(t, cl, "kt.memory", 0, rawBatch(-1, -1, 0, "v")), kerr.InvalidTopicException.Code, 0)
	// A dotless topic is a stream of the default namespace, none here.
	wantProduce(t, "a topic without a namespace", produceRaw(t, cl, "nodot", 0, rawBatch(-1, -1, 0, "v")), kerr.UnknownTopicOrPartition.Code, 0)
	wantProduce(t, "a topic with no stream name", produceRaw(t, cl, "kt.", 0, rawBatch(-1, -1, 0, "v")), kerr.InvalidTopicException.Code, 0)
	if got := committed(t, b, cfg); got != 0 {
		t.Fatalf("bad batches wrote %d records", got)
	}

	addr := b.KafkaAddr().String()
	// ApiVersions at a version not served: the KIP-511 answer, v0 with
	// UNSUPPORTED_VERSION and the versions served.
	resp := rawExchange(t, addr, frame(18, 99, 7, nil))
	if len(resp) < 6 || binary.BigEndian.Uint32(resp) != 7 || int16(binary.BigEndian.Uint16(resp[4:])) != kerr.UnsupportedVersion.Code {
		t.Fatalf("ApiVersions v99: answer %x, want correlation 7 and error 35", resp)
	}
	// Each of these closes its connection, with no answer.
	for _, tc := range []struct {
		name string
		raw  []byte
	}{
		{"an unknown api key", frame(30000, 0, 1, nil)},
		{"Produce v2 (not served)", frame(0, 2, 1, nil)},
		{"Metadata before authenticating", frame(3, 1, 1, []byte{0, 0, 0, 0})},
		{"a 1 GiB size prefix", []byte{0x40, 0, 0, 0}},
		{"a negative size prefix", []byte{0xff, 0xff, 0xff, 0xf0}},
		{"a short frame", []byte{0, 0, 0, 2, 0, 1}},
	} {
		if resp := rawExchange(t, addr, tc.raw); resp != nil {
			t.Errorf("%s: answered %x, want the connection closed", tc.name, resp)
		}
	}
	wantSASLRefused(t, b, cfg)
	for _, session := range []int32{10, 24 * 60 * 60 * 1000} { // 10 ms, a day
		join := kmsg.NewPtrJoinGroupRequest()
		join.Group, join.ProtocolType, join.SessionTimeoutMillis = "bad-session", "consumer", session
		join.RebalanceTimeoutMillis = 1000
		join.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range"}}
		if got := roundTrip(t, cl, join).(*kmsg.JoinGroupResponse); got.ErrorCode != kerr.InvalidSessionTimeout.Code {
			t.Errorf("JoinGroup with a %d ms session: error %d, want INVALID_SESSION_TIMEOUT", session, got.ErrorCode)
		}
	}

	wantProduce(t, "a good batch after all that", produceRaw(t, cl, topic, 0, rawBatch(-1, -1, 0, "ok")), 0, 0)
	checkKafkaMetrics(t, b)
}

// zstdBomb is a batch whose 4 KiB of zstd expands to 64 MiB of records.
func zstdBomb(t *testing.T) []byte {
	enc, _ := zstd.NewWriter(nil)
	defer enc.Close()
	recs := enc.EncodeAll(make([]byte, 64<<20), nil)
	if len(recs) > 1<<20 {
		t.Fatalf("bomb is %d bytes compressed", len(recs))
	}
	b := kmsg.RecordBatch{Magic: 2, Attributes: 4, ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, NumRecords: 1, Records: recs}
	raw := b.AppendTo(nil)
	binary.BigEndian.PutUint32(raw[8:], uint32(len(raw)-12))
	binary.BigEndian.PutUint32(raw[17:], crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli)))
	return raw
}

// wantSASLRefused: a wrong token is SASL_AUTHENTICATION_FAILED.
func wantSASLRefused(t *testing.T, b *broker.Broker, cfg config.Config) {
	t.Helper()
	addr := b.KafkaAddr().String()
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Version, hs.Mechanism = 1, "PLAIN"
	auth := kmsg.NewPtrSASLAuthenticateRequest()
	auth.Version, auth.SASLAuthBytes = 1, []byte("\x00default\x00not-a-token")
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	for i, req := range []kmsg.Request{hs, auth} {
		if _, err := conn.Write(kmsg.NewRequestFormatter().AppendRequest(nil, req, int32(i))); err != nil {
			t.Fatal(err)
		}
		body := readAnswer(t, conn)
		if body == nil {
			t.Fatalf("request %d: connection closed", i)
		}
		resp := req.ResponseKind()
		if err := resp.ReadFrom(body[4:]); err != nil {
			t.Fatalf("decode answer %d: %v", i, err)
		}
		if sa, ok := resp.(*kmsg.SASLAuthenticateResponse); ok && sa.ErrorCode != kerr.SaslAuthenticationFailed.Code {
			t.Fatalf("a wrong token: code %d, want SASL_AUTHENTICATION_FAILED", sa.ErrorCode)
		}
	}
	if readAnswer(t, conn) != nil {
		t.Fatal("the connection stayed open after a failed SASL authentication")
	}
}

// frame is a request frame with an empty client id and body.
func frame(key, version int16, corr int32, body []byte) []byte {
	b := make([]byte, 4, 16+len(body))
	b = binary.BigEndian.AppendUint16(b, uint16(key))
	b = binary.BigEndian.AppendUint16(b, uint16(version))
	b = binary.BigEndian.AppendUint32(b, uint32(corr))
	b = binary.BigEndian.AppendUint16(b, 0xffff) // null client id
	b = append(b, body...)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

// rawExchange sends raw on a fresh connection and returns the first
// answer's bytes after the size, or nil when the connection closes first.
func rawExchange(t *testing.T, addr string, raw []byte) []byte {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write(raw); err != nil {
		return nil
	}
	return readAnswer(t, conn)
}

func readAnswer(t *testing.T, conn net.Conn) []byte {
	t.Helper()
	var size [4]byte
	if _, err := io.ReadFull(conn, size[:]); err != nil {
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatal("no answer and no close within 5 s (a hang)")
		}
		return nil
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(conn, body); err != nil {
		return nil
	}
	return bytes.Clone(body)
}

// TestSASLHandshakeV0: after a v0 SASLHandshake the PLAIN token comes as a
// bare frame; success is an empty frame, then requests are served.
func TestSASLHandshakeV0(t *testing.T) {
	cfg := kafkaConfig(t)
	b := startBroker(t, cfg)
	conn, err := net.DialTimeout("tcp", b.KafkaAddr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Version, hs.Mechanism = 0, "PLAIN"
	token := append([]byte("\x00default\x00"), brokertest.Token(t, cfg, "default")...)
	raw := binary.BigEndian.AppendUint32(nil, uint32(len(token)))
	md := kmsg.NewPtrMetadataRequest()
	md.Version = 1
	for _, b := range [][]byte{kmsg.NewRequestFormatter().AppendRequest(nil, hs, 1), append(raw, token...), kmsg.NewRequestFormatter().AppendRequest(nil, md, 2)} {
		if _, err := conn.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	if a := readAnswer(t, conn); len(a) < 4 || binary.BigEndian.Uint32(a) != 1 {
		t.Fatalf("handshake answer %x", a)
	}
	if a := readAnswer(t, conn); a == nil || len(a) != 0 {
		t.Fatalf("raw token answer %x, want an empty frame", a)
	}
	if a := readAnswer(t, conn); len(a) < 4 || binary.BigEndian.Uint32(a) != 2 {
		t.Fatalf("metadata after a v0 handshake: %x", a)
	}
}

// TestConnectionLimits: the broker's own limits hold for Kafka clients: a
// connection that does not authenticate within auth_timeout_ms is
// closed, a request past pre_auth_max_frame_bytes before authenticating
// closes its connection, and past max_preauth_connections_per_ip an
// unauthenticated connection is refused, until one closes.
func TestConnectionLimits(t *testing.T) {
	cfg := kafkaConfig(t)
	cfg.AuthTimeout = 300 * time.Millisecond
	b := startBroker(t, cfg)
	addr := b.KafkaAddr().String()

	idle, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	_ = idle.SetDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	if readAnswer(t, idle) != nil {
		t.Fatal("an idle unauthenticated connection got an answer")
	}
	if waited := time.Since(start); waited < 250*time.Millisecond {
		t.Fatalf("an idle unauthenticated connection was closed after %s, before auth_timeout_ms (300 ms)", waited)
	}

	big := frame(18, 3, 1, make([]byte, 100<<10)) // past 64 KiB, before SASL
	if resp := rawExchange(t, addr, big); resp != nil {
		t.Fatalf("a 100 KiB request before authenticating was answered: %x", resp[:min(len(resp), 16)])
	}

	limited := kafkaConfig(t)
	limited.MaxPreAuthConnectionsPerIP = 2
	addr = startBroker(t, limited).KafkaAddr().String()
	for i := range 2 {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		// An answered ApiVersions proves the connection was admitted.
		if _, err := c.Write(frame(18, 0, 1, nil)); err != nil || readAnswer(t, c) == nil {
			t.Fatalf("connection %d of the 2 allowed was not served: %v", i+1, err)
		}
	}
	if resp := rawExchange(t, addr, frame(18, 0, 1, nil)); resp != nil {
		t.Fatal("a third unauthenticated connection from one IP was served; max_preauth_connections_per_ip is 2")
	}
}

// metricValue sums the samples of a counter family whose labels include
// want.
func metricValue(t *testing.T, b *broker.Broker, name string, want map[string]string) float64 {
	t.Helper()
	families, err := b.Metrics().Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	sample:
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue sample
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// checkKafkaMetrics: the felix_kafka_* metrics saw the bad-input run.
func checkKafkaMetrics(t *testing.T, b *broker.Broker) {
	t.Helper()
	for _, c := range []struct {
		name   string
		labels map[string]string
	}{
		{"felix_kafka_requests_total", map[string]string{"api": "Produce", "outcome": "ok"}},
		{"felix_kafka_requests_total", map[string]string{"api": "Produce", "outcome": "CORRUPT_MESSAGE"}},
		{"felix_kafka_requests_total", map[string]string{"api": "ApiVersions", "outcome": "UNSUPPORTED_VERSION"}},
		{"felix_kafka_connections_total", map[string]string{"event": "accepted"}},
		{"felix_kafka_bytes_total", map[string]string{"direction": "in"}},
	} {
		if v := metricValue(t, b, c.name, c.labels); v <= 0 {
			t.Errorf("%s%v = %v, want > 0", c.name, c.labels, v)
		}
	}
}
