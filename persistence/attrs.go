package persistence

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// Record attributes: a record's key and headers, kept with it (issue 16:
// Kafka producers send them, and consumers expect them back).
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
//
// No key and no headers encode as nil: a record without attributes.
func EncodeAttrs(key []byte, headers []Header) []byte {
	if key == nil && len(headers) == 0 {
		return nil
	}
	b := appendOptBytes(nil, key)
	b = binary.AppendUvarint(b, uint64(len(headers)))
	for _, h := range headers {
		b = binary.AppendUvarint(b, uint64(len(h.Key)))
		b = append(b, h.Key...)
		b = appendOptBytes(b, h.Value)
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

// DecodeAttrs decodes EncodeAttrs' bytes; key and header values alias b.
// Empty b is no key and no headers.
func DecodeAttrs(b []byte) (key []byte, headers []Header, err error) {
	if len(b) == 0 {
		return nil, nil, nil
	}
	var ok bool
	if key, b, ok = readOptBytes(b); !ok {
		return nil, nil, fmt.Errorf("%w: key", ErrBadAttrs)
	}
	n, used := binary.Uvarint(b)
	if used <= 0 || n > maxHeaders || n > uint64(len(b)) {
		return nil, nil, fmt.Errorf("%w: header count", ErrBadAttrs)
	}
	b = b[used:]
	if n > 0 {
		headers = make([]Header, 0, n)
	}
	for range n {
		kl, used := binary.Uvarint(b)
		if used <= 0 || kl > uint64(len(b)-used) {
			return nil, nil, fmt.Errorf("%w: header key", ErrBadAttrs)
		}
		h := Header{Key: string(b[used : used+int(kl)])}
		if h.Value, b, ok = readOptBytes(b[used+int(kl):]); !ok {
			return nil, nil, fmt.Errorf("%w: header value", ErrBadAttrs)
		}
		headers = append(headers, h)
	}
	if len(b) != 0 {
		return nil, nil, fmt.Errorf("%w: %d bytes after the headers", ErrBadAttrs, len(b))
	}
	return key, headers, nil
}

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
