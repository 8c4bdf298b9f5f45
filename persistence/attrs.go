package persistence

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// Record attributes: a record's key and headers, kept with it (Kafka
// producers send them to the Kafka listener, and consumers expect them back).
//
// A batch whose records carry attributes has its own magic
// (batchMagicV1A, batchMagicV2A: the V1 and V2 layouts, records encoded as
// below), so a batch without them is written exactly as before, V1 or V2,
// byte for byte. Each record of such a batch is
//
//	attrs length  uvarint
//	attrs         EncodeAttrs' bytes
//	value         the rest
//
// The split of a stored record into (value, attributes) is splitRecord;
// the attributes' own encoding is EncodeAttrs and DecodeAttrs. Both are
// fuzzed (FuzzAttrs). The log checks the split when it decodes a batch; it
// never interprets the attributes, which only their readers decode.

// RecordAttrs is what a record carries besides its value.
type RecordAttrs struct {
	Key     []byte // nil: none
	Headers []Header
	// Time is the record's own time (a Kafka producer's CreateTime), kept
	// to the millisecond; the zero Time is none, and the record's time is
	// its batch's append time.
	Time time.Time
	// Codec is the compression its producer sent it in, a small number
	// the front end gives (1 to maxAttrCodec) and the log never reads;
	// 0 is none.
	Codec uint8
	// Batch is, on the first record of records a front end took as one
	// batch (a Kafka producer's compressed batch), how many they are, at
	// most maxAttrBatch; 0 elsewhere. The log never reads it.
	Batch uint32
}

// Header is one record header: a key and a value (nil: a null value).
type Header struct {
	Key   string
	Value []byte
}

// ErrBadAttrs is attribute bytes that do not decode.
var ErrBadAttrs = errors.New("persistence: malformed record attributes")

// maxHeaders bounds the headers DecodeAttrs allocates for, whatever a
// count says; each takes at least two bytes, so it is also bounded by the
// input.
const maxHeaders = 1 << 16

// EncodeAttrs encodes a key (nil: none) and headers:
//
//	key      uvarint 0 for none, else 1+length, then the bytes
//	headers  uvarint count, then for each: uvarint key length, key,
//	         uvarint 0 for a null value, else 1+length, then the bytes
//	fields   optional, each a uvarint tag and its value:
//	         attrTagTime: varint unix milliseconds (RecordAttrs.Time)
//	         attrTagCodec: uvarint codec (RecordAttrs.Codec)
//	         attrTagBatch: uvarint records (RecordAttrs.Batch)
//	         in increasing tag order, each at most once
//
// No key, no headers, no time and no codec encode as nil: a record without
// attributes. The fields came after the first logs were written: bytes
// written before them end at the headers, and decode as they always did;
// bytes written before the codec and batch end at the time.
func EncodeAttrs(key []byte, headers []Header) []byte {
	return EncodeRecordAttrs(RecordAttrs{Key: key, Headers: headers})
}

// attrTagTime marks a record's own time among the optional fields. A tag
// DecodeRecordAttrs does not know is malformed, not skipped: the fields
// have no lengths, so a later one could not be found past it.
const (
	attrTagTime  = 1
	attrTagCodec = 2
	attrTagBatch = 3
)

// maxAttrBatch bounds RecordAttrs.Batch: far more records than a batch
// within any batch bound holds.
const maxAttrBatch = 1 << 24

// maxAttrCodec bounds RecordAttrs.Codec: Kafka's codecs are 1 to 4, and
// room is left for more.
const maxAttrCodec = 15

// EncodeRecordAttrs is EncodeAttrs with a record's own time and codec. A
// time outside the kept range (minAttrTimeMS to maxAttrTimeMS) and a codec
// past maxAttrCodec are not kept.
func EncodeRecordAttrs(a RecordAttrs) []byte {
	if ms := a.Time.UnixMilli(); ms < minAttrTimeMS || ms > maxAttrTimeMS {
		a.Time = time.Time{}
	}
	if a.Codec > maxAttrCodec {
		a.Codec = 0
	}
	if a.Batch > maxAttrBatch {
		a.Batch = 0
	}
	if a.Key == nil && len(a.Headers) == 0 && a.Time.IsZero() && a.Codec == 0 && a.Batch == 0 {
		return nil
	}
	b := appendOptBytes(nil, a.Key)
	b = binary.AppendUvarint(b, uint64(len(a.Headers)))
	for _, h := range a.Headers {
		b = binary.AppendUvarint(b, uint64(len(h.Key)))
		b = append(b, h.Key...)
		b = appendOptBytes(b, h.Value)
	}
	if !a.Time.IsZero() {
		b = binary.AppendUvarint(b, attrTagTime)
		b = binary.AppendVarint(b, a.Time.UnixMilli())
	}
	if a.Codec != 0 {
		b = binary.AppendUvarint(b, attrTagCodec)
		b = binary.AppendUvarint(b, uint64(a.Codec))
	}
	if a.Batch != 0 {
		b = binary.AppendUvarint(b, attrTagBatch)
		b = binary.AppendUvarint(b, uint64(a.Batch))
	}
	return b
}

func appendOptBytes(b, v []byte) []byte {
	if v == nil {
		return binary.AppendUvarint(b, 0)
	}
	b = binary.AppendUvarint(b, uint64(len(v))+1)
	return append(b, v...)
}

// DecodeAttrs decodes EncodeAttrs' bytes, ignoring a record's time; key
// and header values alias b. Empty b is no key and no headers.
func DecodeAttrs(b []byte) (key []byte, headers []Header, err error) {
	a, err := DecodeRecordAttrs(b)
	return a.Key, a.Headers, err
}

// DecodeRecordAttrs decodes EncodeRecordAttrs' bytes; the key and header
// values alias b. Empty b is a record without attributes.
func DecodeRecordAttrs(b []byte) (RecordAttrs, error) {
	var a RecordAttrs
	if len(b) == 0 {
		return a, nil
	}
	var ok bool
	if a.Key, b, ok = readOptBytes(b); !ok {
		return RecordAttrs{}, fmt.Errorf("%w: key", ErrBadAttrs)
	}
	n, used := binary.Uvarint(b)
	if used <= 0 || n > maxHeaders || n > uint64(len(b)) {
		return RecordAttrs{}, fmt.Errorf("%w: header count", ErrBadAttrs)
	}
	b = b[used:]
	if n > 0 {
		a.Headers = make([]Header, 0, n)
	}
	for range n {
		kl, used := binary.Uvarint(b)
		if used <= 0 || kl > uint64(len(b)-used) {
			return RecordAttrs{}, fmt.Errorf("%w: header key", ErrBadAttrs)
		}
		h := Header{Key: string(b[used : used+int(kl)])}
		if h.Value, b, ok = readOptBytes(b[used+int(kl):]); !ok {
			return RecordAttrs{}, fmt.Errorf("%w: header value", ErrBadAttrs)
		}
		a.Headers = append(a.Headers, h)
	}
	if err := decodeAttrFields(&a, b); err != nil {
		return RecordAttrs{}, err
	}
	return a, nil
}

// decodeAttrFields decodes the optional fields after the headers into a.
func decodeAttrFields(a *RecordAttrs, b []byte) error {
	last := uint64(0)
	for len(b) > 0 {
		tag, used := binary.Uvarint(b)
		if used <= 0 || tag <= last || tag > attrTagBatch {
			return fmt.Errorf("%w: unknown or repeated field after the headers", ErrBadAttrs)
		}
		last, b = tag, b[used:]
		switch tag {
		case attrTagTime:
			ms, n := binary.Varint(b)
			if n <= 0 || ms < minAttrTimeMS || ms > maxAttrTimeMS {
				return fmt.Errorf("%w: record time", ErrBadAttrs)
			}
			a.Time, b = time.UnixMilli(ms), b[n:]
		case attrTagCodec:
			c, n := binary.Uvarint(b)
			if n <= 0 || c == 0 || c > maxAttrCodec {
				return fmt.Errorf("%w: record codec", ErrBadAttrs)
			}
			a.Codec, b = uint8(c), b[n:]
		case attrTagBatch:
			c, n := binary.Uvarint(b)
			if n <= 0 || c == 0 || c > maxAttrBatch {
				return fmt.Errorf("%w: record batch", ErrBadAttrs)
			}
			a.Batch, b = uint32(c), b[n:]
		}
	}
	return nil
}

// The record times kept: Kafka's non-negative milliseconds, below the
// year 10000, so a time read back is never the zero Time (none) and its
// microseconds never overflow.
const (
	minAttrTimeMS = 0
	maxAttrTimeMS = 253402300799999
)

func readOptBytes(b []byte) (v, rest []byte, ok bool) {
	n, used := binary.Uvarint(b)
	if used <= 0 || n > uint64(len(b)-used)+1 {
		return nil, nil, false
	}
	if n == 0 {
		return nil, b[used:], true
	}
	end := used + int(n-1)
	return b[used:end:end], b[end:], true
}

// splitRecord splits a stored record of an attributed batch into its
// value and its attributes' bytes.
func splitRecord(r []byte) (value, attrs []byte, ok bool) {
	n, used := binary.Uvarint(r)
	if used <= 0 || n > uint64(len(r)-used) {
		return nil, nil, false
	}
	end := used + int(n)
	return r[end:], r[used:end], true
}

// JoinRecords is the stored form of records with their attributes (attrs
// parallel to records, nil for none): what AppendEntry takes for an
// EntryMeta.Attributed entry.
func JoinRecords(records, attrs [][]byte) [][]byte { return joinRecords(records, attrs) }

// SplitRecord splits a stored record of an attributed batch into its value
// and its attributes' bytes; ok is false for bytes that do not split.
func SplitRecord(r []byte) (value, attrs []byte, ok bool) { return splitRecord(r) }

// joinRecords encodes the stored records of an attributed batch.
func joinRecords(records, attrs [][]byte) [][]byte {
	out := make([][]byte, len(records))
	for i, v := range records {
		var a []byte
		if i < len(attrs) {
			a = attrs[i]
		}
		r := binary.AppendUvarint(make([]byte, 0, binary.MaxVarintLen64+len(a)+len(v)), uint64(len(a)))
		out[i] = append(append(r, a...), v...)
	}
	return out
}

// AppendAttributed is AppendStamped for records that carry attributes:
// attrs[i] (EncodeAttrs' bytes, nil for none) goes with records[i], and
// Read gives it back as Record.Attrs. stamp may be nil.
func (l *Log) AppendAttributed(base uint64, records, attrs [][]byte, now time.Time, stamp *Stamp) (Appended, error) {
	return l.appendBatch(base, joinRecords(records, attrs), now, stamp, true)
}
