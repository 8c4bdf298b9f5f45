package kafka

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"time"

	"github.com/golang/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/getfelix/felix-go/service"
)

// RecordBatch v2 (Kafka's message format): a 61-byte header, then the
// records, possibly compressed, each varint-length-prefixed. The CRC is
// CRC-32C over everything after the crc field (byte 21 on).
const (
	batchHeaderLen = 61
	batchCRCOffset = 17
	batchCRCFrom   = 21
	// batchAttrsOffset is where the attributes (codec, timestamp type)
	// sit, the first bytes the CRC covers.
	batchAttrsOffset = 21

	attrCodecMask     = 0x07
	attrLogAppendTime = 0x08
	attrTransactional = 0x10
	attrControl       = 0x20

	codecNone   = 0
	codecGzip   = 1
	codecSnappy = 2
	codecLZ4    = 3
	codecZstd   = 4
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Errors parseBatch returns. Every one refuses the partition's batch with
// a Kafka error code (batchErrorCode) and writes nothing.
var (
	// ErrCorruptBatch is a batch whose framing, CRC or records are wrong.
	ErrCorruptBatch = errors.New("kafka: corrupt record batch")
	// ErrBatchTooLarge is a batch whose records decompress past the
	// listener's MaxBatchBytes (a decompression bomb, or simply too big).
	ErrBatchTooLarge = errors.New("kafka: record batch too large")
	// ErrUnsupportedBatch is a batch Felix does not take: a control or
	// transactional batch, an unknown codec, or an old message format.
	ErrUnsupportedBatch = errors.New("kafka: unsupported record batch")
)

// producedBatch is one partition's batch of a Produce, parsed.
type producedBatch struct {
	producerID    int64
	producerEpoch int16
	baseSequence  int32
	values        [][]byte
	// attrs are the records' keys, headers and CreateTimes, parallel to
	// values; nil when no record has any.
	attrs []service.RecordAttrs
	// size is the records' bytes once decompressed.
	size int
}

// parseBatch checks and decodes the one RecordBatch a Produce carries for a
// partition: exactly one batch, magic 2, CRC-32C right, not control, not
// transactional, a known codec, record count and offsets consistent, and
// at most max bytes as sent and once decompressed. The values alias raw or a fresh
// decompression buffer.
func parseBatch(raw []byte, max int) (producedBatch, error) {
	var b kmsg.RecordBatch
	if len(raw) < batchHeaderLen {
		return producedBatch{}, fmt.Errorf("%w: %d bytes, shorter than a batch header", ErrCorruptBatch, len(raw))
	}
	if raw[16] != 2 {
		return producedBatch{}, fmt.Errorf("%w: message format v%d (only v2 record batches)", ErrUnsupportedBatch, raw[16])
	}
	// Kafka's message.max.bytes bounds a batch as sent, compressed or
	// not; the same bound is kept before a byte is decompressed.
	if len(raw) > max {
		return producedBatch{}, fmt.Errorf("%w: %d bytes, limit %d", ErrBatchTooLarge, len(raw), max)
	}
	if err := b.ReadFrom(raw); err != nil {
		return producedBatch{}, fmt.Errorf("%w: %v", ErrCorruptBatch, err)
	}
	switch {
	case int(b.Length) != len(raw)-12:
		return producedBatch{}, fmt.Errorf("%w: length %d in %d bytes (one batch per partition)", ErrCorruptBatch, b.Length, len(raw))
	case uint32(b.CRC) != crc32.Checksum(raw[batchCRCFrom:], castagnoli):
		return producedBatch{}, fmt.Errorf("%w: CRC-32C mismatch", ErrCorruptBatch)
	case b.Attributes&attrControl != 0:
		return producedBatch{}, fmt.Errorf("%w: control batch from a client", ErrUnsupportedBatch)
	case b.Attributes&attrTransactional != 0:
		return producedBatch{}, fmt.Errorf("%w: transactional batch", ErrUnsupportedBatch)
	case b.NumRecords < 1 || b.LastOffsetDelta != b.NumRecords-1 || b.FirstOffset != 0:
		return producedBatch{}, fmt.Errorf("%w: %d records, last offset delta %d, first offset %d", ErrCorruptBatch, b.NumRecords, b.LastOffsetDelta, b.FirstOffset)
	}
	records, err := decompress(int(b.Attributes&attrCodecMask), b.Records, max)
	if err != nil {
		return producedBatch{}, err
	}
	// Every record takes at least 7 bytes, so a lying count is refused
	// before anything is allocated for it.
	if int(b.NumRecords) > len(records)/7 {
		return producedBatch{}, fmt.Errorf("%w: %d records in %d bytes", ErrCorruptBatch, b.NumRecords, len(records))
	}
	out := producedBatch{producerID: b.ProducerID, producerEpoch: b.ProducerEpoch, baseSequence: b.FirstSequence, size: len(records)}
	out.values = make([][]byte, 0, b.NumRecords)
	for i := range b.NumRecords {
		var r kmsg.Record
		n, err := readRecord(records, &r)
		if err != nil || r.OffsetDelta != i {
			return producedBatch{}, fmt.Errorf("%w: record %d: %v", ErrCorruptBatch, i, err)
		}
		records = records[n:]
		if r.Value == nil {
			r.Value = []byte{} // a null value (a tombstone) is stored empty
		}
		out.values = append(out.values, r.Value)
		created := createTime(&b, &r)
		if r.Key != nil || len(r.Headers) > 0 || !created.IsZero() {
			if out.attrs == nil {
				out.attrs = make([]service.RecordAttrs, b.NumRecords)
			}
			out.attrs[i] = recordAttrs(&r)
			out.attrs[i].Time = created
		}
	}
	if len(records) != 0 {
		return producedBatch{}, fmt.Errorf("%w: %d bytes after the last record", ErrCorruptBatch, len(records))
	}
	out.markCodec(0, int(b.Attributes&attrCodecMask))
	return out, nil
}

// markCodec records that b's records from index from came compressed with
// codec, as one batch, so a stream without a codec of its own fetches
// them so, and whole.
func (b *producedBatch) markCodec(from, codec int) {
	name := codecNames[codec]
	if name == "" || from >= len(b.values) {
		return
	}
	if b.attrs == nil {
		b.attrs = make([]service.RecordAttrs, len(b.values))
	}
	for i := from; i < len(b.attrs); i++ {
		b.attrs[i].Codec = name
	}
	b.attrs[from].Batch = len(b.attrs) - from
}

// createTime is a produced record's CreateTime: the batch's first
// timestamp plus the record's delta, or none (the zero Time) for a batch
// without timestamps (-1), one marked LogAppendTime (a producer has no
// append time to give) and a time that is negative or past the year 9999
// (no real producer's clock; the log keeps none of them).
func createTime(b *kmsg.RecordBatch, r *kmsg.Record) time.Time {
	if b.Attributes&attrLogAppendTime != 0 || b.FirstTimestamp < 0 {
		return time.Time{}
	}
	ms := b.FirstTimestamp + r.TimestampDelta64
	if ms < 0 || ms > maxRecordTimeMS || (r.TimestampDelta64 > 0 && ms < b.FirstTimestamp) {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// maxRecordTimeMS is the last millisecond of the year 9999, the latest
// record time the log keeps.
const maxRecordTimeMS = 253402300799999

// recordAttrs is r's key and headers as the service takes them.
func recordAttrs(r *kmsg.Record) service.RecordAttrs {
	a := service.RecordAttrs{Key: r.Key}
	if len(r.Headers) > 0 {
		a.Headers = make([]service.Header, len(r.Headers))
		for i, h := range r.Headers {
			a.Headers[i] = service.Header{Key: h.Key, Value: h.Value}
		}
	}
	return a
}

// readRecord reads the varint-length-prefixed record at the front of b
// into r and returns its encoded length.
func readRecord(b []byte, r *kmsg.Record) (int, error) {
	l, n := binary.Varint(b)
	if n <= 0 || l < 0 || l > int64(len(b)-n) {
		return 0, errors.New("bad record length")
	}
	end := n + int(l)
	if err := r.ReadFrom(b[:end]); err != nil {
		return 0, err
	}
	return end, nil
}

// decompress returns src decoded with codec, refusing output past max.
func decompress(codec int, src []byte, max int) ([]byte, error) {
	var out []byte
	var err error
	switch codec {
	case codecNone:
		if len(src) > max {
			return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrBatchTooLarge, len(src), max)
		}
		return src, nil
	case codecGzip:
		var zr *gzip.Reader
		if zr, err = gzip.NewReader(bytes.NewReader(src)); err == nil {
			out, err = readBounded(zr, max)
		}
	case codecSnappy:
		out, err = unsnappy(src, max)
	case codecLZ4:
		out, err = readBounded(lz4.NewReader(bytes.NewReader(src)), max)
	case codecZstd:
		out, err = unzstd(src, max)
	default:
		return nil, fmt.Errorf("%w: compression codec %d", ErrUnsupportedBatch, codec)
	}
	if err != nil {
		if errors.Is(err, ErrBatchTooLarge) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: codec %d: %v", ErrCorruptBatch, codec, err)
	}
	return out, nil
}

// readBounded reads r to its end, failing once it has given more than max
// bytes.
func readBounded(r io.Reader, max int) ([]byte, error) {
	out, err := io.ReadAll(io.LimitReader(r, int64(max)+1))
	if err != nil {
		return nil, err
	}
	if len(out) > max {
		return nil, fmt.Errorf("%w: decompresses past %d bytes", ErrBatchTooLarge, max)
	}
	return out, nil
}

// xerialMagic opens the snappy framing the Java client (and kgo, sarama,
// librdkafka for compatibility) sends: magic, version and compatible
// version, then chunks of `int32 length, snappy block`.
var xerialMagic = []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0}

// unsnappy decodes raw snappy or xerial-framed snappy. Each block's
// decoded length is read from its header before it is allocated.
func unsnappy(src []byte, max int) ([]byte, error) {
	if !bytes.HasPrefix(src, xerialMagic) {
		return snappyBlock(nil, src, max)
	}
	if len(src) < 16 {
		return nil, errors.New("short xerial header")
	}
	src = src[16:]
	var out []byte
	for len(src) > 0 {
		if len(src) < 4 {
			return nil, errors.New("short xerial chunk length")
		}
		n := binary.BigEndian.Uint32(src)
		src = src[4:]
		if uint64(n) > uint64(len(src)) {
			return nil, errors.New("xerial chunk past the end")
		}
		var err error
		if out, err = snappyBlock(out, src[:n], max-len(out)); err != nil {
			return nil, err
		}
		src = src[n:]
	}
	return out, nil
}

// snappyBlock appends the decoding of one snappy block to dst, refusing a
// block that decodes past max.
func snappyBlock(dst, block []byte, max int) ([]byte, error) {
	n, err := snappy.DecodedLen(block)
	if err != nil {
		return nil, err
	}
	if n > max {
		return nil, fmt.Errorf("%w: decompresses past its limit", ErrBatchTooLarge)
	}
	dec, err := snappy.Decode(nil, block)
	if err != nil {
		return nil, err
	}
	return append(dst, dec...), nil
}

// zstdDecoder is shared: DecodeAll is safe for concurrent use. Its memory
// bound is the largest batch any listener accepts; unzstd checks each
// listener's own.
var zstdDecoder, _ = zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(maxBatchBytesLimit))

func unzstd(src []byte, max int) ([]byte, error) {
	out, err := zstdDecoder.DecodeAll(src, nil)
	if errors.Is(err, zstd.ErrDecoderSizeExceeded) || errors.Is(err, zstd.ErrWindowSizeExceeded) || len(out) > max {
		return nil, fmt.Errorf("%w: decompresses past %d bytes", ErrBatchTooLarge, max)
	}
	return out, err
}

// appendBatch appends one RecordBatch v2 holding recs, whose offsets are
// contiguous, to dst; marked LogAppendTime when logAppendTime is set (its
// records then share one time, their max timestamp); its records
// compressed with codec when that makes them smaller.
func appendBatch(dst []byte, recs []service.Record, logAppendTime bool, codec int) []byte {
	start := len(dst)
	first := recs[0].Time.UnixMilli()
	maxTime := first
	dst = binary.BigEndian.AppendUint64(dst, recs[0].Offset)
	dst = append(dst, 0, 0, 0, 0) // length, patched below
	dst = binary.BigEndian.AppendUint32(dst, 0)
	dst = append(dst, 2, 0, 0, 0, 0) // magic, crc patched below
	var attrs uint16
	if logAppendTime {
		attrs |= attrLogAppendTime
	}
	dst = binary.BigEndian.AppendUint16(dst, attrs)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(recs)-1))
	dst = binary.BigEndian.AppendUint64(dst, uint64(first))
	maxAt := len(dst)
	dst = binary.BigEndian.AppendUint64(dst, 0)                 // max timestamp, patched below
	dst = binary.BigEndian.AppendUint64(dst, ^uint64(0))        // producer id -1
	dst = binary.BigEndian.AppendUint16(dst, ^uint16(0))        // producer epoch -1
	dst = binary.BigEndian.AppendUint32(dst, ^uint32(0))        // base sequence -1
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(recs))) // records
	recordsAt := len(dst)
	var body []byte
	for i, r := range recs {
		ts := r.Time.UnixMilli()
		maxTime = max(maxTime, ts)
		body = append(body[:0], 0) // attributes
		body = binary.AppendVarint(body, ts-first)
		body = binary.AppendVarint(body, int64(i))
		body = appendVarBytes(body, r.Key)
		body = appendVarBytes(body, r.Value)
		body = binary.AppendVarint(body, int64(len(r.Headers)))
		for _, h := range r.Headers {
			body = binary.AppendVarint(body, int64(len(h.Key)))
			body = append(body, h.Key...)
			body = appendVarBytes(body, h.Value)
		}
		dst = binary.AppendVarint(dst, int64(len(body)))
		dst = append(dst, body...)
	}
	binary.BigEndian.PutUint64(dst[maxAt:], uint64(maxTime))
	if codec != codecNone {
		if packed := compress(codec, dst[recordsAt:]); len(packed) < len(dst)-recordsAt {
			dst = append(dst[:recordsAt], packed...)
			attrs |= uint16(codec)
			binary.BigEndian.PutUint16(dst[start+batchAttrsOffset:], attrs)
		}
	}
	binary.BigEndian.PutUint32(dst[start+8:], uint32(len(dst)-start-12))
	binary.BigEndian.PutUint32(dst[start+batchCRCOffset:], crc32.Checksum(dst[start+batchCRCFrom:], castagnoli))
	return dst
}

// appendVarBytes appends b with its varint length, -1 for nil (null).
func appendVarBytes(dst, b []byte) []byte {
	if b == nil {
		return binary.AppendVarint(dst, -1)
	}
	dst = binary.AppendVarint(dst, int64(len(b)))
	return append(dst, b...)
}

// codecs are the names streams give Fetch codecs (service.Codecs), as
// RecordBatch attributes.
var codecs = map[string]int{"gzip": codecGzip, "snappy": codecSnappy, "lz4": codecLZ4, "zstd": codecZstd}

// codecProducer is a topic fetched in each record's own codec, what its
// producer sent (compression.type=producer).
const codecProducer = -1

// fetchCodec is the codec a stream's Fetch batches take (its
// service.StreamSpec.Compression).
func fetchCodec(compression string) int {
	if compression == "" {
		return codecProducer
	}
	return codecs[compression] // CompressionNone is codecNone
}

// codecNames are codecs' names by RecordBatch attribute ("" for none or
// one past them).
var codecNames = [attrCodecMask + 1]string{codecGzip: "gzip", codecSnappy: "snappy", codecLZ4: "lz4", codecZstd: "zstd"}

// zstdEncoder is shared: EncodeAll is safe for concurrent use.
var zstdEncoder, _ = zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))

// compress returns src encoded with codec, in the framing every Kafka
// client reads: gzip, snappy in xerial's framing (what the Java client
// writes; librdkafka, kgo and sarama read it too), an lz4 frame, zstd.
func compress(codec int, src []byte) []byte {
	var buf bytes.Buffer
	switch codec {
	case codecGzip:
		w := gzip.NewWriter(&buf)
		_, _ = w.Write(src) // a bytes.Buffer's writes do not fail
		_ = w.Close()
	case codecSnappy:
		return xerialSnappy(src)
	case codecLZ4:
		w := lz4.NewWriter(&buf)
		_, _ = w.Write(src)
		_ = w.Close()
	case codecZstd:
		return zstdEncoder.EncodeAll(src, nil)
	default:
		return src
	}
	return buf.Bytes()
}

// xerialChunk is the input each xerial snappy chunk holds, as the Java
// client's default block size.
const xerialChunk = 32 << 10

// xerialSnappy is src in xerial's framing: the magic, version 1 and
// compatible version 1, then chunks of `int32 length, snappy block`.
func xerialSnappy(src []byte) []byte {
	out := append(append([]byte{}, xerialMagic...), 0, 0, 0, 1, 0, 0, 0, 1)
	for len(src) > 0 {
		n := min(len(src), xerialChunk)
		block := snappy.Encode(nil, src[:n])
		out = binary.BigEndian.AppendUint32(out, uint32(len(block)))
		out = append(out, block...)
		src = src[n:]
	}
	return out
}
