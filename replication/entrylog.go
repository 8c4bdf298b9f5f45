package replication

import (
	"time"

	"github.com/getfelix/felix-go/persistence"
)

// EntryLog is the part of a shard's segmented log that Storage uses: the log
// holds raft's entries themselves, so that a record is written once per
// replica (not once to a raft WAL and again to the log). *persistence.Log
// satisfies it.
//
// NOTE: when persistence's entry API lands, add
// `var _ EntryLog = (*persistence.Log)(nil)` here.
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
	// Sync makes everything appended or truncated so far durable.
	Sync() error
}

// Stamp is a producer's stamp on a batch of records: the log stores it, and
// the shard rebuilds its table of idempotent producers from it.
type Stamp = persistence.Stamp

// The types below mirror persistence's entry types, which are being added to
// persistence on another branch. They carry exactly persistence's names and
// fields, so that the swap is mechanical: replace the declarations in this
// file by aliases (type EntryKind = persistence.EntryKind, and so on for
// EntryMeta, Entry and the EntryKind constants) and nothing else changes.

// EntryKind says what a raft entry in the log carries.
type EntryKind uint8

const (
	// EntryRecords is an EntryNormal holding at least one record.
	EntryRecords EntryKind = iota
	// EntryEmpty is an EntryNormal without data: a new leader appends one to
	// commit the entries of earlier terms.
	EntryEmpty
	// EntryConfChange holds a raftpb.ConfChange in Control.
	EntryConfChange
	// EntryConfChangeV2 holds a raftpb.ConfChangeV2 in Control.
	EntryConfChangeV2
)

// EntryMeta is what the log keeps of a raft entry besides its records.
type EntryMeta struct {
	Index, Term uint64
	Kind        EntryKind
	Control     []byte // the conf change's bytes, for the conf change kinds
}

// Entry is a raft entry as the log returns it.
type Entry struct {
	EntryMeta
	// Base is the offset of the entry's first record. An entry without
	// records occupies no offset: its Base is the next offset.
	Base    uint64
	Time    time.Time
	Stamp   *Stamp
	Records [][]byte
}
