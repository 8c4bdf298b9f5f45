package replication

import (
	"time"

	"github.com/getfelix/felix-go/persistence"
)

// EntryLog is the part of a shard's segmented log that Storage uses: the log
// holds raft's entries themselves, so that a record is written once per
// replica (not once to a raft WAL and again to the log). *persistence.Log
// satisfies it.
type EntryLog interface {
	// AppendEntry appends one entry at the log's next offset. meta.Index is
	// the last entry's index plus one. An EntryRecords entry takes
	// len(records) offsets and now is its append time; any other kind takes
	// no offset and carries no time (Storage passes the zero time).
	AppendEntry(meta EntryMeta, records [][]byte, now time.Time, stamp *Stamp) (persistence.Appended, error)
	// TruncateEntries removes the entries whose Index is at least index, and
	// their records. It refuses to remove an entry at or below the floor.
	TruncateEntries(index uint64) error
	// SetEntryFloor protects the entries up to index (the commit index) from
	// TruncateEntries: raft never takes back a committed entry, and the
	// floor makes a bug that tried fail instead of losing acknowledged
	// records.
	SetEntryFloor(index uint64)
	// EntryHeaders calls fn with each entry from offset from on, in order,
	// without its records, until fn returns false.
	EntryHeaders(from uint64, fn func(Entry) bool) error
	// ReadEntries returns consecutive entries starting with the one whose
	// Index is index, found from offset base (the entry's Base), up to about
	// maxBytes of records and at least one entry.
	ReadEntries(base, index uint64, maxBytes int) ([]Entry, error)
	// StartOffset is the oldest offset the log still holds.
	StartOffset() uint64
	// NextOffset is the offset the next record will take.
	NextOffset() uint64
	// Sync makes everything appended or truncated so far durable.
	Sync() error
	// EnforceRetentionUpTo deletes the oldest segments past the log's
	// retention limits, never one whose removal would leave the log
	// starting after entry index.
	EnforceRetentionUpTo(now time.Time, index uint64) (int, error)
	// SegmentFiles lists the segment files and the size of the complete
	// batches in each: what a snapshot copies.
	SegmentFiles() []persistence.SegmentFile
	// CompactedBelow is the horizon of the last compaction of the log, 0
	// for one never compacted: a snapshot carries it with the files.
	CompactedBelow() uint64
}

// Stamp is a producer's stamp on a batch of records: the log stores it, and
// the shard rebuilds its table of idempotent producers from it.
type Stamp = persistence.Stamp

// The log's entry types, under this package's names.
type (
	EntryKind = persistence.EntryKind
	EntryMeta = persistence.EntryMeta
	Entry     = persistence.Entry
)

// What a raft entry in the log carries.
const (
	EntryRecords      = persistence.EntryRecords
	EntryEmpty        = persistence.EntryEmpty
	EntryConfChange   = persistence.EntryConfChange
	EntryConfChangeV2 = persistence.EntryConfChangeV2
)

var _ EntryLog = (*persistence.Log)(nil)
