package persistence

import (
	"errors"
	"fmt"
)

var (
	// ErrClosed is returned by every call on a log after Close, and to
	// WaitDurable callers still waiting when Close could not make their
	// records durable.
	ErrClosed = errors.New("persistence: log closed")

	// ErrEmptyBatch is returned by Append for a batch without records: a
	// plain batch takes at least one offset, so base offsets strictly
	// increase. (Raft entries without records are AppendEntry's.)
	ErrEmptyBatch = errors.New("persistence: empty batch")

	// ErrBatchTooLarge is returned by Append for a batch whose encoding
	// exceeds maxBatchBytes.
	ErrBatchTooLarge = errors.New("persistence: batch too large")

	// ErrPoisoned is matched (errors.Is) by every error of a log that a failed
	// write or fsync has poisoned. The log refuses appends and durability
	// waits from then on; the caller must Close it and Open the directory
	// again, which recovers from what is really on the device.
	ErrPoisoned = errors.New("persistence: log poisoned, reopen to recover")

	// ErrMixedFormats is returned when raft entries (AppendEntry) and plain
	// batches (Append) would share a log, and by the entry methods on a log
	// of plain batches. A log holds one or the other from its first batch
	// on: a reader of either kind then never meets the other.
	ErrMixedFormats = errors.New("persistence: raft entries and plain batches cannot share a log")

	// ErrBadEntry is returned by AppendEntry for an entry whose kind,
	// records, control bytes and stamp do not go together, or whose term
	// is below the last entry's.
	ErrBadEntry = errors.New("persistence: bad entry")

	// ErrBelowFloor is returned by TruncateEntries when it would remove an
	// entry at or below the floor set by SetEntryFloor: committed entries
	// are never removed.
	ErrBelowFloor = errors.New("persistence: truncation below the entry floor")

	// ErrTruncated is returned to a reader that met TruncateEntries: a
	// Cursor that had returned records it removed (from then on), a wait
	// for a removed record or entry, and an EntryHeaders walk it
	// interrupted.
	ErrTruncated = errors.New("persistence: entries removed by TruncateEntries")

	// ErrNoEntry is returned by ReadEntries and WaitEntryDurable for an
	// index the log does not hold.
	ErrNoEntry = errors.New("persistence: no such entry")

	// ErrEntryCompacted is returned by ReadEntries for an entry whose
	// records compaction thinned (Entry.Compacted): its records are no
	// longer those raft replicated, so it is never served again.
	ErrEntryCompacted = errors.New("persistence: the entry was compacted")
)

// ErrEntryIndex is returned by AppendEntry when the entry's index does not
// follow the last entry's: one more than Last, or after TruncateEntries
// any index above it.
type ErrEntryIndex struct {
	Last uint64 // the last entry's index
	Got  uint64 // the index AppendEntry was given
}

func (e *ErrEntryIndex) Error() string {
	return fmt.Sprintf("persistence: entry index %d does not follow the last entry's %d", e.Got, e.Last)
}

// ErrOffsetMismatch is returned by Append when the batch's base offset is not
// exactly the log's next offset. The shard assigns offsets; the log refuses
// anything that would reuse one or leave a gap.
type ErrOffsetMismatch struct {
	Want uint64 // the log's next offset
	Got  uint64 // the base offset Append was given
}

func (e *ErrOffsetMismatch) Error() string {
	return fmt.Sprintf("persistence: append at offset %d, log is at %d", e.Got, e.Want)
}

// ErrOffsetTooOld is returned for a read below the oldest retained offset.
// Available is the oldest offset that can be read now.
type ErrOffsetTooOld struct {
	Requested uint64
	Available uint64
}

func (e *ErrOffsetTooOld) Error() string {
	return fmt.Sprintf("persistence: offset %d is no longer retained, oldest is %d", e.Requested, e.Available)
}

// ErrOffsetInFuture is returned for a read, or a durability wait, beyond the
// log's next offset. Available is the next offset.
type ErrOffsetInFuture struct {
	Requested uint64
	Available uint64
}

func (e *ErrOffsetInFuture) Error() string {
	return fmt.Sprintf("persistence: offset %d is beyond the log's next offset %d", e.Requested, e.Available)
}

// ErrCorrupt reports damage the log will not repair by itself: Open refuses
// the directory, or a read met a batch that fails its checksum. Segment is a
// file name inside the log directory, Position a byte position in it.
//
// Recovery truncates only a torn tail (see Open); everything else is
// reported, because truncating it could drop acknowledged records.
type ErrCorrupt struct {
	Segment  string
	Position int64
	Reason   string
}

func (e *ErrCorrupt) Error() string {
	return fmt.Sprintf("persistence: corrupt log: %s at byte %d: %s", e.Segment, e.Position, e.Reason)
}

// ErrIO is a failed write, fsync or file operation on the log's files. It
// poisons the log: it matches ErrPoisoned, and the same error is returned by
// every later Append and WaitDurable. Err is the operating system's error, so
// errors.Is(err, syscall.ENOSPC) works.
type ErrIO struct {
	Op   string // "write", "fsync", "create", "truncate", ...
	Path string
	Err  error
}

func (e *ErrIO) Error() string {
	return fmt.Sprintf("persistence: %s %s: %v (log poisoned, reopen to recover)", e.Op, e.Path, e.Err)
}

func (e *ErrIO) Unwrap() error { return e.Err }

// Is makes every ErrIO match ErrPoisoned: the log only returns one when it
// has poisoned itself.
func (e *ErrIO) Is(target error) bool { return target == ErrPoisoned }
