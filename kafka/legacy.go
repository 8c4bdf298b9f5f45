package kafka

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"time"

	"github.com/getfelix/felix-go/service"
)

// Produce v0 to v2 carry message sets of the old formats, magic 0 and 1,
// instead of a RecordBatch. They are served because librdkafka up to
// 2.11.0 decides whether the broker takes gzip, snappy and lz4 by asking
// whether Produce v0 is in the advertised range (rdkafka_msgset_writer.c,
// rd_kafka_broker_ApiVersion_supported(rkb, Produce, 0, 0)); with Produce
// advertised from v3 it logged "Broker does not support compression type
// gzip: not compressing batch" and sent every batch uncompressed. Kafka
// itself advertises v0 for the same reason; here v0 to v2 are advertised
// because they are spoken. librdkafka still produces v3 and up with
// RecordBatches: only clients that choose an old version send these.
//
// A message set is a run of entries:
//
//	offset int64, size int32, then size bytes of message:
//	crc int32 (IEEE, of the rest), magic int8 (0 or 1), attributes int8
//	(codec in bits 0-2, LogAppendTime in bit 3 for magic 1),
//	timestamp int64 (magic 1 only), key bytes, value bytes
//
// bytes being int32 length (-1 null) then the bytes. A compressed message
// (codec != 0) is a wrapper whose value is a compressed message set of
// uncompressed messages; Kafka nests no further. Every limit parseBatch
// applies applies here: max bytes as sent and once decompressed, records
// counted against the bytes before anything is allocated for them.

// Message-set framing sizes.
const (
	legacyEntryHeader = 8 + 4             // offset, size
	legacyMessageMin  = 4 + 1 + 1 + 4 + 4 // crc, magic, attributes, key and value lengths
)

// parseMessageSet decodes a Produce v0-v2 partition's message set.
// Offsets are the client's and are ignored, as Kafka ignores them: the
// shard assigns them. An lz4 message of magic 0 is refused: clients framed
// it with a wrong header checksum (KAFKA-3160) that no lz4 reader accepts.
func parseMessageSet(raw []byte, max int) (producedBatch, error) {
	if len(raw) > max {
		return producedBatch{}, fmt.Errorf("%w: %d bytes, limit %d", ErrBatchTooLarge, len(raw), max)
	}
	out := producedBatch{producerID: -1, producerEpoch: -1, baseSequence: -1}
	if err := out.addMessages(raw, max, true); err != nil {
		return producedBatch{}, err
	}
	if len(out.values) == 0 {
		return producedBatch{}, fmt.Errorf("%w: empty message set", ErrCorruptBatch)
	}
	return out, nil
}

// addMessages appends the messages of set to b; outer says set is the
// request's own (wrappers allowed), not a wrapper's contents. It charges
// every uncompressed entry's bytes to b.size, which max bounds.
func (b *producedBatch) addMessages(set []byte, max int, outer bool) error {
	for len(set) > 0 {
		if len(set) < legacyEntryHeader {
			return fmt.Errorf("%w: %d bytes after the last message", ErrCorruptBatch, len(set))
		}
		size := int32(binary.BigEndian.Uint32(set[8:]))
		if size < legacyMessageMin || int(size) > len(set)-legacyEntryHeader {
			return fmt.Errorf("%w: message of %d bytes in %d", ErrCorruptBatch, size, len(set)-legacyEntryHeader)
		}
		msg := set[legacyEntryHeader : legacyEntryHeader+int(size)]
		set = set[legacyEntryHeader+int(size):]
		m, err := readMessage(msg)
		if err != nil {
			return err
		}
		if m.codec == codecNone {
			// The whole entry is charged, not only its value, so that
			// empty messages cannot make records without bytes.
			b.size += legacyEntryHeader + int(size)
			if b.size > max {
				return fmt.Errorf("%w: messages past %d bytes", ErrBatchTooLarge, max)
			}
			b.addMessage(m)
			continue
		}
		switch {
		case !outer:
			return fmt.Errorf("%w: a compressed message inside a compressed message", ErrCorruptBatch)
		case m.codec == codecLZ4 && m.magic == 0:
			return fmt.Errorf("%w: lz4 in message format v0 (KAFKA-3160's framing); use v1 or a RecordBatch", ErrUnsupportedBatch)
		case m.codec == codecZstd:
			return fmt.Errorf("%w: zstd in message format v%d (only in RecordBatches)", ErrUnsupportedBatch, m.magic)
		}
		inner, err := decompress(m.codec, m.value, max-b.size)
		if err != nil {
			return err
		}
		from := len(b.values)
		if err := b.addMessages(inner, max, false); err != nil {
			return err
		}
		b.markCodec(from, m.codec)
	}
	return nil
}

// legacyMessage is one decoded message; key and value alias the input.
type legacyMessage struct {
	magic      byte
	codec      int
	appendTime bool
	timestamp  int64 // -1 for magic 0
	key, value []byte
}

// readMessage decodes one message (after its offset and size) and checks
// its CRC.
func readMessage(msg []byte) (legacyMessage, error) {
	// The magic first: a RecordBatch has its own at the same place, and
	// is the wrong format before it is a wrong CRC.
	if msg[4] > 1 {
		return legacyMessage{}, fmt.Errorf("%w: message format v%d in a Produce below v3", ErrUnsupportedBatch, msg[4])
	}
	if crc32.ChecksumIEEE(msg[4:]) != binary.BigEndian.Uint32(msg) {
		return legacyMessage{}, fmt.Errorf("%w: message CRC mismatch", ErrCorruptBatch)
	}
	m := legacyMessage{magic: msg[4], codec: int(msg[5] & attrCodecMask), timestamp: -1}
	rest := msg[6:]
	if m.magic == 1 {
		if len(rest) < 8+8 {
			return legacyMessage{}, fmt.Errorf("%w: short v1 message", ErrCorruptBatch)
		}
		m.appendTime = msg[5]&attrLogAppendTime != 0
		m.timestamp = int64(binary.BigEndian.Uint64(rest))
		rest = rest[8:]
	}
	var ok bool
	if m.key, rest, ok = legacyBytes(rest); !ok {
		return legacyMessage{}, fmt.Errorf("%w: message key", ErrCorruptBatch)
	}
	if m.value, rest, ok = legacyBytes(rest); !ok || len(rest) != 0 {
		return legacyMessage{}, fmt.Errorf("%w: message value", ErrCorruptBatch)
	}
	return m, nil
}

// legacyBytes reads int32-length-prefixed bytes (-1: null).
func legacyBytes(b []byte) (v, rest []byte, ok bool) {
	if len(b) < 4 {
		return nil, nil, false
	}
	n := int32(binary.BigEndian.Uint32(b))
	b = b[4:]
	switch {
	case n == -1:
		return nil, b, true
	case n < 0 || int(n) > len(b):
		return nil, nil, false
	}
	return b[:n:n], b[n:], true
}

// addMessage appends one uncompressed message's record: a null value is
// stored empty, and the key and a magic 1 CreateTime go into its attrs.
func (b *producedBatch) addMessage(m legacyMessage) {
	value := m.value
	if value == nil {
		value = []byte{}
	}
	var created time.Time
	if m.magic == 1 && !m.appendTime && m.timestamp >= 0 && m.timestamp <= maxRecordTimeMS {
		created = time.UnixMilli(m.timestamp)
	}
	b.values = append(b.values, value)
	if m.key == nil && created.IsZero() {
		if b.attrs != nil {
			b.attrs = append(b.attrs, service.RecordAttrs{})
		}
		return
	}
	if b.attrs == nil {
		b.attrs = make([]service.RecordAttrs, len(b.values)-1, cap(b.values))
	}
	b.attrs = append(b.attrs, service.RecordAttrs{Key: m.key, Time: created})
}
