package groups

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
)

// A group's durable state is a sequence of small binary records in the
// internal stream beside its data stream, on the same shard number. Each
// record names its group; replaying a shard's records in order rebuilds
// every group's cursor and dead letters there (apply). Claims in flight are
// never written: a restart hands them out again.
//
// Layout: version (1 byte, 1), kind (1 byte), group name length (1 byte)
// and name, then the kind's body: a cursor (8 bytes, big endian) for
// create, cursor and seek (create also the creation time, 8 bytes of unix
// nanoseconds); a count (uvarint) and that many ascending offsets, each a
// uvarint delta from the previous (the first from 0), for dead, redrive and
// remove; nothing for delete.

// recordVersion is the only layout written and read.
const recordVersion = 1

// Kind is what a state record says.
type Kind uint8

// The state record kinds.
const (
	// KindCreate makes the group at Cursor (created at Time).
	KindCreate Kind = iota + 1
	// KindCursor advances the cursor: every offset below it is settled.
	KindCursor
	// KindSeek moves the cursor anywhere; redriven dead letters become
	// plain dead letters again.
	KindSeek
	// KindDead adds Offsets to the dead letters.
	KindDead
	// KindRedrive marks dead letters as handed out again (they stay in the
	// set until acked, so a restart hands them out again).
	KindRedrive
	// KindRemove drops Offsets from the dead letters (acked after a
	// redrive, or discarded).
	KindRemove
	// KindDelete deletes the group.
	KindDelete
	kindEnd
)

// maxRecordOffsets bounds the offsets of one record, so a record stays
// small (about 10 bytes per offset at worst) and a decoder never allocates
// much for a claimed count.
const maxRecordOffsets = 4096

// ErrBadRecord is returned for a state record that cannot be decoded.
var ErrBadRecord = errors.New("groups: bad state record")

// Record is one decoded state record.
type Record struct {
	Kind    Kind
	Group   string
	Cursor  uint64
	Time    int64 // unix nanoseconds, KindCreate only
	Offsets []uint64
}

// AppendRecord encodes r; Offsets must be ascending, at most
// maxRecordOffsets, and the group name at most 255 bytes.
func AppendRecord(b []byte, r *Record) ([]byte, error) {
	if len(r.Group) == 0 || len(r.Group) > 255 {
		return b, fmt.Errorf("%w: group name of %d bytes", ErrBadRecord, len(r.Group))
	}
	if r.Kind == 0 || r.Kind >= kindEnd {
		return b, fmt.Errorf("%w: kind %d", ErrBadRecord, r.Kind)
	}
	if len(r.Offsets) > maxRecordOffsets || !slices.IsSorted(r.Offsets) {
		return b, fmt.Errorf("%w: %d offsets (at most %d, ascending)", ErrBadRecord, len(r.Offsets), maxRecordOffsets)
	}
	b = append(b, recordVersion, byte(r.Kind), byte(len(r.Group)))
	b = append(b, r.Group...)
	switch r.Kind {
	case KindCreate:
		b = binary.BigEndian.AppendUint64(b, r.Cursor)
		b = binary.BigEndian.AppendUint64(b, uint64(r.Time))
	case KindCursor, KindSeek:
		b = binary.BigEndian.AppendUint64(b, r.Cursor)
	case KindDead, KindRedrive, KindRemove:
		b = binary.AppendUvarint(b, uint64(len(r.Offsets)))
		prev := uint64(0)
		for _, o := range r.Offsets {
			b = binary.AppendUvarint(b, o-prev)
			prev = o
		}
	}
	return b, nil
}

// DecodeRecord decodes one state record. It never panics and allocates at
// most what the record's own length allows.
func DecodeRecord(b []byte) (Record, error) {
	var r Record
	if len(b) < 3 || b[0] != recordVersion {
		return r, fmt.Errorf("%w: short, or not version %d", ErrBadRecord, recordVersion)
	}
	r.Kind = Kind(b[1])
	if r.Kind == 0 || r.Kind >= kindEnd {
		return r, fmt.Errorf("%w: kind %d", ErrBadRecord, b[1])
	}
	n := int(b[2])
	b = b[3:]
	if n == 0 || len(b) < n {
		return r, fmt.Errorf("%w: group name of %d bytes", ErrBadRecord, n)
	}
	r.Group, b = string(b[:n]), b[n:]
	var err error
	switch r.Kind {
	case KindCreate:
		if len(b) != 16 {
			return r, fmt.Errorf("%w: create body of %d bytes", ErrBadRecord, len(b))
		}
		r.Cursor, r.Time = binary.BigEndian.Uint64(b), int64(binary.BigEndian.Uint64(b[8:]))
	case KindCursor, KindSeek:
		if len(b) != 8 {
			return r, fmt.Errorf("%w: cursor body of %d bytes", ErrBadRecord, len(b))
		}
		r.Cursor = binary.BigEndian.Uint64(b)
	case KindDead, KindRedrive, KindRemove:
		r.Offsets, err = decodeOffsets(b)
	case KindDelete:
		if len(b) != 0 {
			return r, fmt.Errorf("%w: delete with a body", ErrBadRecord)
		}
	}
	return r, err
}

func decodeOffsets(b []byte) ([]uint64, error) {
	count, n := binary.Uvarint(b)
	// Each offset takes at least one byte: a count past what is left is a
	// lie, refused before anything is allocated for it.
	if n <= 0 || count > maxRecordOffsets || count > uint64(len(b)-n) {
		return nil, fmt.Errorf("%w: offset count", ErrBadRecord)
	}
	b = b[n:]
	out := make([]uint64, 0, count)
	prev := uint64(0)
	for range count {
		d, n := binary.Uvarint(b)
		if n <= 0 || prev+d < prev {
			return nil, fmt.Errorf("%w: offset %d", ErrBadRecord, len(out))
		}
		prev += d
		out = append(out, prev)
		b = b[n:]
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrBadRecord, len(b))
	}
	return out, nil
}

// Names reads a state shard's log and returns the groups that exist on it,
// sorted. Bad records are skipped, as a group actor's replay skips them.
func Names(log Log) ([]string, error) {
	live := make(map[string]bool)
	from, end := log.StartOffset(), log.Committed()
	for from < end {
		page, err := log.Read(from, 4096, 4<<20)
		if err != nil {
			return nil, err
		}
		if len(page.Records) == 0 {
			break
		}
		for _, r := range page.Records {
			rec, err := DecodeRecord(r.Value)
			switch {
			case err != nil:
			case rec.Kind == KindCreate:
				live[rec.Group] = true
			case rec.Kind == KindDelete:
				delete(live, rec.Group)
			}
		}
		from = page.Next
	}
	return slices.Sorted(maps.Keys(live)), nil
}
