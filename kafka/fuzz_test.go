package kafka

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/getfelix/felix-go/service"
)

// FuzzRequest: decodeRequest never panics, whatever the frame; a request
// it accepts is one of the advertised apis at a served version; one it
// refuses as unsupported but can answer gets an UNSUPPORTED_VERSION
// response that encodes and parses back at the request's version.
func FuzzRequest(f *testing.F) {
	for key := range apis {
		req := kmsg.RequestForKey(key)
		for v := apis[key].min; v <= apis[key].max; v++ {
			req.SetVersion(v)
			framed := kmsg.NewRequestFormatter(kmsg.FormatterClientID("fuzz")).AppendRequest(nil, req, 1)
			f.Add(framed[4:])
		}
	}
	f.Add([]byte{0x75, 0x30, 0, 0, 0, 0, 0, 1, 0, 0}) // api key 30000: kfake's nil dereference
	f.Add([]byte{0, 18, 0, 99, 0, 0, 0, 1, 0xff, 0xff})
	for _, key := range []int16{0, 1, 3, 9, 10} { // unsupported versions, below and above the range
		req := kmsg.RequestForKey(key)
		for _, v := range []int16{apis[key].min - 1, apis[key].max + 1} {
			req.SetVersion(v)
			framed := kmsg.NewRequestFormatter(kmsg.FormatterClientID("fuzz")).AppendRequest(nil, req, 1)
			f.Add(framed[4:])
		}
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		h, req, err := decodeRequest(frame)
		if errors.Is(err, ErrUnsupportedVersion) && req != nil {
			checkUnsupported(t, h, req)
			return
		}
		if err != nil {
			return
		}
		span, ok := apis[h.key]
		if !ok || h.version < span.min || h.version > span.max || req.Key() != h.key {
			t.Fatalf("accepted api %d v%d", h.key, h.version)
		}
	})
}

// FuzzRecordBatch: parseBatch never panics and never returns more than
// the bound, whatever the batch, compressed or not (bombs included), and
// the size it reports covers the values it returns.
func FuzzRecordBatch(f *testing.F) {
	values := [][]byte{[]byte("a"), bytes.Repeat([]byte("b"), 300), nil}
	for codec := range 5 {
		f.Add(seedBatch(codec, values))
	}
	f.Add(seedBatch(codecZstd, [][]byte{make([]byte, 1<<20)}))
	f.Add(seedBatch(codecGzip, [][]byte{make([]byte, 1<<20)}))
	f.Add(seedBatch(codecNone, [][]byte{make([]byte, 100<<10)})) // past the bound as sent
	f.Fuzz(func(t *testing.T, raw []byte) {
		const max = 64 << 10
		b, err := parseBatch(raw, max)
		if err != nil {
			return
		}
		n := 0
		for _, v := range b.values {
			n += len(v)
		}
		if n > max || b.size > max || n > b.size || len(b.values) == 0 {
			t.Fatalf("accepted %d values of %d bytes (%d decompressed), bound %d", len(b.values), n, b.size, max)
		}
	})
}

// seedBatch is a valid batch of values with codec, its CRC right.
func seedBatch(codec int, values [][]byte) []byte {
	var recs []byte
	for i, v := range values {
		r := kmsg.Record{OffsetDelta: int32(i), Value: v, Key: []byte("k")}
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		recs = r.AppendTo(recs)
	}
	recs = compress(codec, recs)
	b := kmsg.RecordBatch{Magic: 2, Attributes: int16(codec), LastOffsetDelta: int32(len(values) - 1), ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, NumRecords: int32(len(values)), Records: recs}
	raw := b.AppendTo(nil)
	binary.BigEndian.PutUint32(raw[8:], uint32(len(raw)-12))
	binary.BigEndian.PutUint32(raw[batchCRCOffset:], crc32.Checksum(raw[batchCRCFrom:], castagnoli))
	return raw
}

// TestParseBatchCodecs: a batch in each codec decodes to its values, and
// the same batch over the bound is MESSAGE_TOO_LARGE, not decoded.
func TestParseBatchCodecs(t *testing.T) {
	values := [][]byte{[]byte("one"), bytes.Repeat([]byte("x"), 2000), []byte("three")}
	for codec := range 5 {
		b, err := parseBatch(seedBatch(codec, values), 1<<20)
		if err != nil {
			t.Fatalf("codec %d: %v", codec, err)
		}
		if len(b.values) != 3 || !bytes.Equal(b.values[1], values[1]) || len(b.attrs) != 3 || string(b.attrs[2].Key) != "k" {
			t.Fatalf("codec %d: got %d values, attrs %+v; want the 3 given, each with key k", codec, len(b.values), b.attrs)
		}
		if _, err := parseBatch(seedBatch(codec, values), 1000); err != ErrBatchTooLarge && !isTooLarge(err) {
			t.Fatalf("codec %d over the bound: %v, want ErrBatchTooLarge", codec, err)
		}
	}
}

func isTooLarge(err error) bool { return err != nil && errorCode(err) == 10 }

// checkUnsupported: the refusal of req encodes, at its version, into a
// response that parses back.
func checkUnsupported(t *testing.T, h header, req kmsg.Request) {
	resp := unsupportedResponse(req)
	if resp.GetVersion() != h.version || resp.Key() != h.key {
		t.Fatalf("api %d v%d answered with api %d v%d", h.key, h.version, resp.Key(), resp.GetVersion())
	}
	back := req.ResponseKind()
	back.SetVersion(h.version)
	if err := back.ReadFrom(resp.AppendTo(nil)); err != nil {
		t.Fatalf("api %d v%d: the UNSUPPORTED_VERSION answer does not parse back: %v", h.key, h.version, err)
	}
}

// FuzzTopicConfig: a CreateTopics config, whatever its name and value,
// never panics, and one accepted leaves the stream's retention
// non-negative (an overflowing value once wrapped to a fraction of a
// millisecond); an alter's comparison of it never panics either.
func FuzzTopicConfig(f *testing.F) {
	for _, kv := range [][2]string{
		{"retention.ms", "3600000"}, {"retention.ms", "-1"}, {"retention.ms", "9223372036854775807"},
		{"retention.bytes", "0"}, {"retention.bytes", "1e9"}, {"cleanup.policy", "compact,delete"},
		{"cleanup.policy", " delete "}, {"max.message.bytes", "16777216"}, {"segment.ms", "1"},
	} {
		f.Add(kv[0], kv[1])
	}
	l := &Listener{cfg: Config{}.withDefaults()}
	c := &conn{l: l}
	f.Fuzz(func(t *testing.T, name, value string) {
		var spec service.StreamSpec
		if err := c.applyTopicConfig(&spec, name, &value); err == nil && (spec.RetentionAge < 0 || spec.RetentionBytes < 0) {
			t.Fatalf("%s=%q accepted as retention %v, %d bytes", name, value, spec.RetentionAge, spec.RetentionBytes)
		}
		for _, e := range c.topicConfigs(&service.StreamInfo{}) {
			_ = sameConfig(e, &value)
		}
	})
}
