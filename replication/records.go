package replication

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// Batch is what the Data of an EntryNormal holding records carries: the
// records a shard appends together, their append time and the producer's
// stamp, if any. Every replica appends it to its log as one entry.
type Batch struct {
	// Time is the append time the leader chose, to the microsecond, which is
	// the precision the log keeps: a replica that reads an entry back from
	// its log encodes exactly the Data the leader proposed.
	Time    time.Time
	Stamp   *Stamp // nil: not from an idempotent producer
	Records [][]byte
	// Attributed: each record is stored joined with its attributes (a
	// key and headers: persistence.JoinRecords), and the log keeps them so.
	Attributed bool
}

// The Data of an EntryNormal holding records, version 1:
//
//	version   u8       batchVersion1
//	flags     u8       flagStamped, flagAttributed, or 0; other bits are
//	                   refused
//	time      varint   unix microseconds (zig-zag)
//	(stamped) producer uvarint, sequence uvarint, digest u64 big-endian
//	count     uvarint  records, at least 1
//	count × { length uvarint, value }
//
// Varints keep a batch of small records small: most lengths take one byte,
// where the log's own frame spends four. The digest is a hash, so a varint
// would make it longer, not shorter. Every varint must be minimal, so a
// batch has exactly one encoding and decoding then encoding gives the same
// bytes back (the fuzz test relies on it).
//
// There is no checksum: the log checksums the entry on disk, and the
// transport's encryption authenticates it on the wire.
const (
	batchVersion1  byte = 1
	flagStamped    byte = 1 << 0
	flagAttributed byte = 1 << 1
	digestLen           = 8
)

// ErrNoRecords is returned by EncodeRecords for a batch without records: an
// entry without records is an empty EntryNormal, with no Data at all.
var ErrNoRecords = errors.New("replication: batch without records")

// ErrMalformedBatch is returned by DecodeRecords for data that is not a
// valid encoding: At is the byte position where decoding stopped.
type ErrMalformedBatch struct {
	At     int
	Reason string
}

func (e *ErrMalformedBatch) Error() string {
	return fmt.Sprintf("replication: malformed batch at byte %d: %s", e.At, e.Reason)
}

// ErrUnsupportedBatchVersion is returned by DecodeRecords for data written
// in a version this replica does not know: a newer replica proposed it.
type ErrUnsupportedBatchVersion struct {
	Version byte
}

func (e *ErrUnsupportedBatchVersion) Error() string {
	return fmt.Sprintf("replication: batch version %d, this replica reads version %d", e.Version, batchVersion1)
}

// EncodeRecords appends b's encoding to dst. Only the microseconds of
// b.Time are kept.
func EncodeRecords(dst []byte, b Batch) ([]byte, error) {
	if len(b.Records) == 0 {
		return dst, ErrNoRecords
	}
	var flags byte
	if b.Stamp != nil {
		flags |= flagStamped
	}
	if b.Attributed {
		flags |= flagAttributed
	}
	dst = append(dst, batchVersion1, flags)
	dst = binary.AppendVarint(dst, b.Time.UnixMicro())
	if b.Stamp != nil {
		dst = binary.AppendUvarint(dst, b.Stamp.Producer)
		dst = binary.AppendUvarint(dst, b.Stamp.Sequence)
		dst = binary.BigEndian.AppendUint64(dst, b.Stamp.Digest)
	}
	dst = binary.AppendUvarint(dst, uint64(len(b.Records)))
	for _, r := range b.Records {
		dst = binary.AppendUvarint(dst, uint64(len(r)))
		dst = append(dst, r...)
	}
	return dst, nil
}

// DecodeRecords decodes data written by EncodeRecords. The records alias
// data. It never panics, and allocates only for what data really holds: a
// count or length is checked against the bytes that remain before use.
func DecodeRecords(data []byte) (Batch, error) {
	d := decoder{data: data}
	version := d.byte("version")
	if d.err == nil && version != batchVersion1 {
		return Batch{}, &ErrUnsupportedBatchVersion{Version: version}
	}
	flags := d.byte("flags")
	if d.err == nil && flags&^(flagStamped|flagAttributed) != 0 {
		d.fail("unknown flags %#x", flags)
	}
	b := Batch{Attributed: flags&flagAttributed != 0}
	b.Time = time.UnixMicro(d.varint("time"))
	if flags&flagStamped != 0 {
		b.Stamp = &Stamp{Producer: d.uvarint("producer"), Sequence: d.uvarint("sequence"), Digest: d.uint64("digest")}
	}
	count := d.uvarint("count")
	switch {
	case d.err != nil:
	case count == 0:
		d.fail("no records")
	case count > uint64(d.left()):
		// Each record takes at least its one-byte length.
		d.fail("%d records in %d bytes", count, d.left())
	default:
		b.Records = make([][]byte, 0, count)
		for range count {
			b.Records = append(b.Records, d.bytes("record"))
		}
	}
	if d.err == nil && d.left() > 0 {
		d.fail("%d bytes after the last record", d.left())
	}
	if d.err != nil {
		return Batch{}, d.err
	}
	return b, nil
}

// decoder reads data front to back. After the first failure every read
// returns zero and err keeps the first failure, so DecodeRecords can read
// field after field and check once.
type decoder struct {
	data []byte
	at   int
	err  *ErrMalformedBatch
}

func (d *decoder) left() int { return len(d.data) - d.at }

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = &ErrMalformedBatch{At: d.at, Reason: fmt.Sprintf(format, args...)}
	}
}

func (d *decoder) byte(field string) byte {
	if d.err != nil {
		return 0
	}
	if d.left() < 1 {
		d.fail("short %s", field)
		return 0
	}
	d.at++
	return d.data[d.at-1]
}

func (d *decoder) uint64(field string) uint64 {
	if d.err != nil {
		return 0
	}
	if d.left() < digestLen {
		d.fail("short %s", field)
		return 0
	}
	d.at += digestLen
	return binary.BigEndian.Uint64(d.data[d.at-digestLen:])
}

func (d *decoder) uvarint(field string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.data[d.at:])
	d.checkVarint(field, n)
	return v
}

func (d *decoder) varint(field string) int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.data[d.at:])
	d.checkVarint(field, n)
	return v
}

// checkVarint advances past a varint of n bytes (binary.Uvarint's n), or
// fails: short, too long for 64 bits, or not minimal (a last byte of zero
// adds nothing, so a shorter encoding exists).
func (d *decoder) checkVarint(field string, n int) {
	switch {
	case n == 0:
		d.fail("short %s", field)
	case n < 0:
		d.fail("%s overflows 64 bits", field)
	case n > 1 && d.data[d.at+n-1] == 0:
		d.fail("%s is not minimally encoded", field)
	default:
		d.at += n
	}
}

func (d *decoder) bytes(field string) []byte {
	n := d.uvarint(field + " length")
	if d.err != nil {
		return nil
	}
	if n > uint64(d.left()) {
		d.fail("%s of %d bytes, %d left", field, n, d.left())
		return nil
	}
	d.at += int(n)
	return d.data[d.at-int(n) : d.at : d.at]
}
