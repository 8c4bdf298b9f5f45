package kafka_test

import (
	"net"
	"reflect"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The versions the listener serves (codec.go's apis), copied so the test
// states them.
var served = map[int16][2]int16{
	0: {0, 9}, 1: {4, 12}, 2: {1, 6}, 3: {1, 12}, 8: {2, 8}, 9: {1, 7}, 10: {0, 4},
	11: {0, 9}, 12: {0, 4}, 13: {0, 5}, 14: {0, 5}, 17: {0, 1}, 22: {0, 4}, 36: {0, 2},
}

// TestUnsupportedVersions: every api at a version outside what the
// listener serves, but that kmsg can speak, is answered at that version,
// UNSUPPORTED_VERSION where the client reads its error, and the connection
// goes on (an ApiVersions after it is answered); a Produce with acks 0
// (whose client reads no answer) and a version nobody knows close it.
func TestUnsupportedVersions(t *testing.T) {
	cfg := kafkaConfig(t)
	b := startBroker(t, cfg)
	addr := b.KafkaAddr().String()
	for key, span := range served {
		req := kmsg.RequestForKey(key)
		for _, v := range []int16{span[0] - 1, span[1] + 1} {
			if v < 0 || v > req.MaxVersion() {
				continue
			}
			req.SetVersion(v)
			withTopic(req)
			resp := req.ResponseKind()
			resp.SetVersion(v)
			conn := dialRaw(t, addr)
			exchange(t, conn, req, resp)
			if code := unsupportedCode(resp); code != kerr.UnsupportedVersion.Code {
				t.Errorf("%s v%d: error %d, want UNSUPPORTED_VERSION; %+v", kmsg.NameForKey(key), v, code, resp)
			}
			t.Logf("%s v%d: UNSUPPORTED_VERSION", kmsg.NameForKey(key), v)
			exchange(t, conn, kmsg.NewPtrApiVersionsRequest(), kmsg.NewPtrApiVersionsResponse())
			_ = conn.Close()
		}
	}
	produce := kmsg.NewPtrProduceRequest()
	withTopic(produce)
	produce.Version, produce.Acks = 10, 0
	for name, raw := range map[string][]byte{
		"Produce v10 with acks 0": frame(0, 10, 1, produce.AppendTo(nil)),
		"Produce v99":             frame(0, 99, 1, nil),
	} {
		if resp := rawExchange(t, addr, raw); resp != nil {
			t.Errorf("%s: answered %x, want the connection closed", name, resp)
		}
	}
}

// withTopic names one topic and partition in req, for the apis whose
// answers carry their errors there.
func withTopic(req kmsg.Request) {
	switch r := req.(type) {
	case *kmsg.ProduceRequest:
		r.Acks = 1
		r.Topics = []kmsg.ProduceRequestTopic{{Topic: topic, Partitions: []kmsg.ProduceRequestTopicPartition{{Partition: 0}}}}
	case *kmsg.FetchRequest:
		r.Topics = []kmsg.FetchRequestTopic{{Topic: topic, Partitions: []kmsg.FetchRequestTopicPartition{{Partition: 0}}}}
	case *kmsg.ListOffsetsRequest:
		r.Topics = []kmsg.ListOffsetsRequestTopic{{Topic: topic, Partitions: []kmsg.ListOffsetsRequestTopicPartition{{Partition: 0}}}}
	case *kmsg.MetadataRequest:
		r.Topics = []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr(topic)}}
	case *kmsg.OffsetCommitRequest:
		r.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: topic, Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0}}}}
	case *kmsg.FindCoordinatorRequest:
		r.CoordinatorKeys = []string{"g"}
	case *kmsg.OffsetFetchRequest:
		r.Group = "g"
		r.Topics = []kmsg.OffsetFetchRequestTopic{{Topic: topic, Partitions: []int32{0}}}
		r.Groups = []kmsg.OffsetFetchRequestGroup{{Group: "g"}}
	}
}

// unsupportedCode is the error the client reads from resp: the first
// partition's, topic's, group's or coordinator's where the response has
// them, else the top-level one.
func unsupportedCode(resp kmsg.Response) int16 {
	switch r := resp.(type) {
	case *kmsg.ProduceResponse:
		return r.Topics[0].Partitions[0].ErrorCode
	case *kmsg.FetchResponse:
		return r.Topics[0].Partitions[0].ErrorCode
	case *kmsg.ListOffsetsResponse:
		return r.Topics[0].Partitions[0].ErrorCode
	case *kmsg.MetadataResponse:
		return r.Topics[0].ErrorCode
	case *kmsg.OffsetCommitResponse:
		return r.Topics[0].Partitions[0].ErrorCode
	case *kmsg.FindCoordinatorResponse:
		if r.Version >= 4 {
			return r.Coordinators[0].ErrorCode
		}
		return r.ErrorCode
	case *kmsg.OffsetFetchResponse:
		switch {
		case r.Version >= 8:
			return r.Groups[0].ErrorCode
		case r.Version < 2: // no top-level code yet
			return r.Topics[0].Partitions[0].ErrorCode
		}
		return r.ErrorCode
	}
	// The group, producer and SASL answers: their one top-level code.
	return int16(reflect.ValueOf(resp).Elem().FieldByName("ErrorCode").Int())
}

func dialRaw(t *testing.T, addr string) net.Conn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	return conn
}

// exchange sends req on conn (flexible headers included) and reads the
// answer into resp.
func exchange(t *testing.T, conn net.Conn, req kmsg.Request, resp kmsg.Response) {
	t.Helper()
	raw := kmsg.NewRequestFormatter().AppendRequest(nil, req, 1)
	if _, err := conn.Write(raw); err != nil {
		t.Fatalf("%s v%d: write: %v", kmsg.NameForKey(req.Key()), req.GetVersion(), err)
	}
	answer := readAnswer(t, conn)
	skip := 4 // correlation id
	if resp.IsFlexible() && resp.Key() != 18 {
		skip++ // response header tags
	}
	if len(answer) < skip {
		t.Fatalf("%s v%d: no answer (the connection closed)", kmsg.NameForKey(req.Key()), req.GetVersion())
	}
	if err := resp.ReadFrom(answer[skip:]); err != nil {
		t.Fatalf("%s v%d: answer does not parse: %v", kmsg.NameForKey(req.Key()), req.GetVersion(), err)
	}
}
