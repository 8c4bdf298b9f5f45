package kafka

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"

	"github.com/golang/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kmsg"
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
// the bound, whatever the batch, compressed or not (bombs included).
func FuzzRecordBatch(f *testing.F) {
	values := [][]byte{[]byte("a"), bytes.Repeat([]byte("b"), 300), nil}
	for codec := range 5 {
		f.Add(seedBatch(codec, values))
	}
	f.Add(seedBatch(codecZstd, [][]byte{make([]byte, 1<<20)}))
	f.Add(seedBatch(codecGzip, [][]byte{make([]byte, 1<<20)}))
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
		if n > max || len(b.values) == 0 {
			t.Fatalf("accepted %d values of %d bytes, bound %d", len(b.values), n, max)
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

func compress(codec int, b []byte) []byte {
	var buf bytes.Buffer
	switch codec {
	case codecGzip:
		w := gzip.NewWriter(&buf)
		_, _ = w.Write(b)
		_ = w.Close()
	case codecSnappy:
		// xerial framing, as the Java client sends it.
		buf.Write(xerialMagic)
		buf.Write([]byte{0, 0, 0, 1, 0, 0, 0, 1})
		block := snappy.Encode(nil, b)
		_ = binary.Write(&buf, binary.BigEndian, uint32(len(block)))
		buf.Write(block)
	case codecLZ4:
		w := lz4.NewWriter(&buf)
		_, _ = w.Write(b)
		_ = w.Close()
	case codecZstd:
		enc, _ := zstd.NewWriter(nil)
		defer enc.Close()
		return enc.EncodeAll(b, nil)
	default:
		return b
	}
	return buf.Bytes()
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
