package cache

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// A cache record is one log record's payload. Layout: version (1 byte, 1),
// kind (1 byte), the writer's clock (8 bytes, big endian unix nanoseconds),
// then the kind's body, every length a uvarint before its bytes:
//
//	put          condition, key, expiry (8 bytes, 0 for none), value
//	delete       condition, key
//	expire       key, version (8 bytes)
//	counter add  key, delta (8 bytes, two's complement)
//	counter set  key, total (8 bytes, two's complement)
//	commit       event, op count, ops: 0 (put) key expiry value, or 1 (delete) key
//
// A condition is one byte: 0 none, 1 absent, 2 version (8 bytes follow).
// Nothing may follow the body: trailing bytes are an error, so a record
// has exactly one reading.

// recordVersion is the only layout written and read.
const recordVersion = 1

// Bounds on one record's parts. They keep a record well under the log's
// batch bound and a decoder from allocating much for a claimed length.
const (
	// MaxKeyBytes bounds a key.
	MaxKeyBytes = 1024
	// MaxValueBytes bounds a value and a commit's event.
	MaxValueBytes = 1 << 20
	// MaxCommitOps bounds the puts and deletes of one commit.
	MaxCommitOps = 64
)

// ErrBadRecord is returned for a cache record that cannot be encoded or
// decoded.
var ErrBadRecord = errors.New("cache: bad record")

// Kind is what a record does.
type Kind uint8

// The record kinds.
const (
	// KindPut sets Key to Value (until Expires, if set) under Cond.
	KindPut Kind = iota + 1
	// KindDelete deletes Key under Cond.
	KindDelete
	// KindExpire deletes Key if it is still at Version: the shard writes
	// it for a key whose expiry passed, and a put since then survives it.
	KindExpire
	// KindCounterAdd adds Delta to counter Key.
	KindCounterAdd
	// KindCounterSet sets counter Key to Delta: compaction writes it for a
	// run of adds it folds.
	KindCounterSet
	// KindCommit applies Ops together and carries Event for watchers.
	KindCommit
	kindEnd
)

var kindNames = [...]string{"", "put", "delete", "expire", "counter-add", "counter-set", "commit"}

func (k Kind) String() string {
	if k == 0 || k >= kindEnd {
		return fmt.Sprintf("kind(%d)", uint8(k))
	}
	return kindNames[k]
}

// CondKind is what a conditional write requires of its key.
type CondKind uint8

// The conditions.
const (
	// CondNone applies unconditionally.
	CondNone CondKind = iota
	// CondAbsent applies only if the key is absent (never set, deleted,
	// or expired by the record's clock).
	CondAbsent
	// CondVersion applies only if the key is present at Version.
	CondVersion
	condEnd
)

// Cond is a write's precondition.
type Cond struct {
	Kind    CondKind
	Version uint64
}

// Op is one put or delete of a commit.
type Op struct {
	Delete  bool
	Key     string
	Value   []byte
	Expires int64 // unix nanoseconds; 0 never
}

// Record is one decoded cache record; which fields count depends on Kind.
type Record struct {
	Kind Kind
	// At is the writer's clock (unix nanoseconds): expiry is judged by it.
	At      int64
	Key     string
	Value   []byte
	Expires int64 // unix nanoseconds; 0 never
	Cond    Cond
	Version uint64 // KindExpire
	Delta   int64  // KindCounterAdd; the total for KindCounterSet
	Event   []byte // KindCommit
	Ops     []Op   // KindCommit
}

// AppendRecord appends r's encoding to b. It refuses what DecodeRecord
// would refuse, so every record written can be read back.
func AppendRecord(b []byte, r *Record) ([]byte, error) {
	if err := r.check(); err != nil {
		return b, err
	}
	b = append(b, recordVersion, byte(r.Kind))
	b = binary.BigEndian.AppendUint64(b, uint64(r.At))
	switch r.Kind {
	case KindPut:
		b = appendCond(b, r.Cond)
		b = appendBytes(b, r.Key)
		b = binary.BigEndian.AppendUint64(b, uint64(r.Expires))
		b = appendBytes(b, r.Value)
	case KindDelete:
		b = appendCond(b, r.Cond)
		b = appendBytes(b, r.Key)
	case KindExpire:
		b = appendBytes(b, r.Key)
		b = binary.BigEndian.AppendUint64(b, r.Version)
	case KindCounterAdd, KindCounterSet:
		b = appendBytes(b, r.Key)
		b = binary.BigEndian.AppendUint64(b, uint64(r.Delta))
	case KindCommit:
		b = appendBytes(b, r.Event)
		b = binary.AppendUvarint(b, uint64(len(r.Ops)))
		for _, op := range r.Ops {
			if op.Delete {
				b = append(b, 1)
				b = appendBytes(b, op.Key)
				continue
			}
			b = append(b, 0)
			b = appendBytes(b, op.Key)
			b = binary.BigEndian.AppendUint64(b, uint64(op.Expires))
			b = appendBytes(b, op.Value)
		}
	}
	return b, nil
}

func (r *Record) check() error {
	if r.Kind == 0 || r.Kind >= kindEnd {
		return fmt.Errorf("%w: kind %d", ErrBadRecord, r.Kind)
	}
	if r.Cond.Kind >= condEnd || (r.Cond.Kind != CondNone && r.Kind != KindPut && r.Kind != KindDelete) {
		return fmt.Errorf("%w: condition %d on a %s", ErrBadRecord, r.Cond.Kind, r.Kind)
	}
	if r.Kind == KindDelete && r.Cond.Kind == CondAbsent {
		return fmt.Errorf("%w: delete if absent", ErrBadRecord)
	}
	if r.Kind == KindCommit {
		if len(r.Event) > MaxValueBytes || len(r.Ops) > MaxCommitOps {
			return fmt.Errorf("%w: commit of %d ops, event of %d bytes (at most %d, %d)", ErrBadRecord, len(r.Ops), len(r.Event), MaxCommitOps, MaxValueBytes)
		}
		for i, op := range r.Ops {
			if err := checkKeyValue(op.Key, op.Value); err != nil {
				return err
			}
			// One op per key: a commit's changes then have no order
			// among themselves for a watcher to depend on.
			for _, prev := range r.Ops[:i] {
				if prev.Key == op.Key {
					return fmt.Errorf("%w: key %q twice in a commit", ErrBadRecord, op.Key)
				}
			}
		}
		return nil
	}
	return checkKeyValue(r.Key, r.Value)
}

func checkKeyValue(key string, value []byte) error {
	if len(key) == 0 || len(key) > MaxKeyBytes {
		return fmt.Errorf("%w: key of %d bytes (1 to %d)", ErrBadRecord, len(key), MaxKeyBytes)
	}
	if len(value) > MaxValueBytes {
		return fmt.Errorf("%w: value of %d bytes (at most %d)", ErrBadRecord, len(value), MaxValueBytes)
	}
	return nil
}

func appendCond(b []byte, c Cond) []byte {
	b = append(b, byte(c.Kind))
	if c.Kind == CondVersion {
		b = binary.BigEndian.AppendUint64(b, c.Version)
	}
	return b
}

func appendBytes[T string | []byte](b []byte, s T) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// DecodeRecord decodes one cache record. It never panics, and it allocates
// at most what the record's own length allows (values alias b).
func DecodeRecord(b []byte) (Record, error) {
	var r Record
	if len(b) < 10 || b[0] != recordVersion {
		return r, fmt.Errorf("%w: short, or not version %d", ErrBadRecord, recordVersion)
	}
	d := decoder{b: b[10:]}
	r.Kind = Kind(b[1])
	r.At = int64(binary.BigEndian.Uint64(b[2:]))
	switch r.Kind {
	case KindPut:
		r.Cond = d.cond()
		r.Key = string(d.bytes(MaxKeyBytes))
		r.Expires = int64(d.u64())
		r.Value = d.bytes(MaxValueBytes)
	case KindDelete:
		r.Cond = d.cond()
		r.Key = string(d.bytes(MaxKeyBytes))
	case KindExpire:
		r.Key = string(d.bytes(MaxKeyBytes))
		r.Version = d.u64()
	case KindCounterAdd, KindCounterSet:
		r.Key = string(d.bytes(MaxKeyBytes))
		r.Delta = int64(d.u64())
	case KindCommit:
		r.Event = d.bytes(MaxValueBytes)
		r.Ops = d.ops()
	default:
		return r, fmt.Errorf("%w: kind %d", ErrBadRecord, b[1])
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	if d.err == nil {
		d.err = r.check()
	}
	return r, d.err
}

// decoder reads a record body; the first error sticks and every later read
// returns zero, so a body is read straight through and checked once.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+format, append([]any{ErrBadRecord}, args...)...)
	}
	d.b = nil
}

func (d *decoder) u64() uint64 {
	if len(d.b) < 8 {
		d.fail("short")
		return 0
	}
	v := binary.BigEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func (d *decoder) byte1() byte {
	if len(d.b) < 1 {
		d.fail("short")
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) bytes(limit int) []byte {
	n, w := binary.Uvarint(d.b)
	if w <= 0 || n > uint64(limit) || n > uint64(len(d.b)-w) {
		d.fail("length")
		return nil
	}
	v := d.b[w : w+int(n) : w+int(n)]
	d.b = d.b[w+int(n):]
	return v
}

func (d *decoder) cond() Cond {
	c := Cond{Kind: CondKind(d.byte1())}
	switch c.Kind {
	case CondNone, CondAbsent:
	case CondVersion:
		c.Version = d.u64()
	default:
		d.fail("condition %d", c.Kind)
	}
	return c
}

func (d *decoder) ops() []Op {
	n, w := binary.Uvarint(d.b)
	// Each op takes at least two bytes: a count past what is left is a
	// lie, refused before anything is allocated for it.
	if w <= 0 || n > MaxCommitOps || n > uint64(len(d.b)-w)/2 {
		d.fail("op count")
		return nil
	}
	d.b = d.b[w:]
	ops := make([]Op, 0, n)
	for range n {
		var op Op
		switch d.byte1() {
		case 0:
			op.Key = string(d.bytes(MaxKeyBytes))
			op.Expires = int64(d.u64())
			op.Value = d.bytes(MaxValueBytes)
		case 1:
			op.Delete = true
			op.Key = string(d.bytes(MaxKeyBytes))
		default:
			d.fail("op kind")
		}
		if d.err != nil {
			return nil
		}
		ops = append(ops, op)
	}
	return ops
}
