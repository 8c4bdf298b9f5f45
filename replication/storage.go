package replication

import (
	"errors"
	"fmt"
	"os"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// Storage is raft's storage for one replica of a shard: the entries are the
// shard's log (an EntryLog), the HardState and ConfState live in a small
// raft.state file next to it. It implements raft.Storage and adds the writes
// raft leaves to its application: Append, SetHardState, SetConfState and
// Compact.
//
// Storage is not safe for concurrent use: the Replica that owns it, and the
// raft.RawNode inside that Replica, call it from the owner's goroutine.
type Storage struct {
	log EntryLog
	dir string
	hs  raftpb.HardState
	cs  raftpb.ConfState
	w   window
	// lazy: Append leaves the entries in the page cache for the log's own
	// fsync policy (SetLazySync).
	lazy bool
	// lastTime is the latest append time in the log, or later: a new leader
	// stamps its proposals no earlier, so that the log never has to raise a
	// time and every replica stores the time the leader proposed. A
	// truncated tail may leave it too late, which only delays a time by the
	// difference.
	lastTime time.Time
	// applied is the last index the replica handed to its application:
	// where a snapshot is taken, and how far retention and compaction may
	// go. Only the Replica sets it.
	applied uint64
	// recent are the latest entries appended, which raft reads back soon.
	recent recentEntries
}

var _ raft.Storage = (*Storage)(nil)

// entriesReadChunk bounds one ReadEntries call in Entries. raft may ask for
// entries without a size limit (it does when it looks for pending conf
// changes before campaigning), and ReadEntries only stops at a byte limit,
// so without a chunk a read of a few entries could read the whole log.
const entriesReadChunk = 1 << 20

// OpenStorage opens the storage of a replica whose entries are in log and
// whose raft.state is (or will be) in dir. It rebuilds the window of
// entries from the log's headers; a log without entries and a dir without
// raft.state are a new replica.
//
// A raft.state that is missing while the log holds entries is not an error:
// entries are made durable before the HardState, and no message that
// depends on that HardState has been sent (see Replica.Ready), so a crash
// in between lost nothing anyone relies on.
func OpenStorage(log EntryLog, dir string) (*Storage, error) {
	// A new replica's directory may not exist yet: without it the first
	// Ready failed to write raft.state (found by the test over the link).
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("replication: state directory: %w", err)
	}
	hs, cs, _, err := readState(dir)
	if err != nil {
		return nil, err
	}
	s := &Storage{log: log, dir: dir, hs: hs, cs: cs, w: newWindow(0, 0, log.StartOffset())}
	compacted, err := s.rebuildWindow()
	if err != nil {
		return nil, err
	}
	// Compaction rewrites only applied entries, so the last one it
	// rewrote was committed even if raft.state, written lazily, says
	// less; raft needs its commit index at least at the compaction point.
	// (Without a raft.state raft takes the compaction point as committed.)
	if !raft.IsEmptyHardState(hs) && compacted > hs.Commit {
		hs.Commit = compacted
		s.hs = hs
	}
	// raft panics on a commit index outside its log; say why instead.
	if hs.Commit > s.w.lastIndex() || (!raft.IsEmptyHardState(hs) && hs.Commit < s.w.first) {
		return nil, fmt.Errorf("%w: %s commits index %d, the log holds [%d, %d]",
			ErrLogMismatch, stateName, hs.Commit, s.w.first, s.w.lastIndex())
	}
	log.SetEntryFloor(hs.Commit)
	return s, nil
}

// rebuildWindow reads every entry header in the log. When the log no
// longer starts at index 1 (retention removed its head), its first entry
// becomes the compaction point: raft then knows that entry's term, which it
// needs to match the next one. The last entry compaction rewrote (whose
// index it returns, 0 for none) is the compaction point if it is later:
// its records are no longer the ones raft replicated, so neither it nor
// an entry before it is served again, and a follower that lacks them
// copies this replica's segments instead.
func (s *Storage) rebuildWindow() (compacted uint64, err error) {
	first := true
	herr := s.log.EntryHeaders(s.log.StartOffset(), func(e Entry) bool {
		switch {
		case first && e.Index > 1:
			s.w = newWindow(e.Index, e.Term, e.Base)
		case e.Index != s.w.lastIndex()+1:
			err = fmt.Errorf("%w: entry %d follows entry %d", ErrLogMismatch, e.Index, s.w.lastIndex())
			return false
		default:
			s.w.append(e.Term, e.Base)
		}
		if e.Compacted {
			compacted = e.Index
		}
		first = false
		if e.Kind == EntryRecords && e.Time.After(s.lastTime) {
			s.lastTime = e.Time
		}
		return true
	})
	if herr != nil {
		return 0, fmt.Errorf("replication: read entry headers: %w", herr)
	}
	if err == nil && compacted > s.w.first {
		s.w.compact(compacted)
	}
	return compacted, err
}

// Committed is the commit index the storage holds (its HardState's, which
// may be behind what was committed: it is written lazily) and the offset
// after that entry's records: what a replica restarted on this storage has
// applied already, so raft need not hand it those entries again.
func (s *Storage) Committed() (index, end uint64) {
	index = s.hs.Commit
	switch b, ok := s.base(index + 1); {
	case ok:
		return index, b
	case index >= s.w.lastIndex() && !s.empty():
		return s.w.lastIndex(), s.log.NextOffset()
	}
	return 0, s.log.StartOffset()
}

// InitialState implements raft.Storage.
func (s *Storage) InitialState() (raftpb.HardState, raftpb.ConfState, error) {
	return s.hs, s.cs, nil
}

// Entries implements raft.Storage: the entries [lo, hi), at most maxSize
// bytes of them as raft counts (Entry.Size) but at least one. raft compares
// the errors it expects by identity, so ErrCompacted and ErrUnavailable are
// returned unwrapped.
func (s *Storage) Entries(lo, hi, maxSize uint64) ([]raftpb.Entry, error) {
	switch {
	case lo <= s.w.first:
		return nil, raft.ErrCompacted
	case hi > s.w.lastIndex()+1 || lo > hi:
		return nil, raft.ErrUnavailable
	}
	if out, ok := s.recent.get(lo, hi, maxSize); ok {
		return out, nil
	}
	var out []raftpb.Entry
	var size uint64
	for index := lo; index < hi; {
		read, err := s.log.ReadEntries(s.w.at(index).base, index, readLimit(maxSize-size))
		if err != nil {
			return nil, fmt.Errorf("replication: read entries from index %d: %w", index, err)
		}
		if len(read) == 0 {
			return nil, fmt.Errorf("%w: no entry %d in the log", ErrLogMismatch, index)
		}
		for _, le := range read[:min(len(read), int(hi-index))] {
			if le.Index != index || le.Term != s.w.at(index).term {
				return nil, fmt.Errorf("%w: read entry %d term %d for entry %d term %d",
					ErrLogMismatch, le.Index, le.Term, index, s.w.at(index).term)
			}
			e, err := toRaftEntry(le)
			if err != nil {
				return nil, err
			}
			out = append(out, e)
			index++
			// As raft's own limitSize: the first entry always, then as long
			// as the total stays within maxSize.
			if size += uint64(e.Size()); size >= maxSize {
				if size > maxSize && len(out) > 1 {
					out = out[:len(out)-1]
				}
				return out, nil
			}
		}
	}
	return out, nil
}

// readLimit is the byte limit for the next ReadEntries when left bytes of
// the caller's limit remain.
func readLimit(left uint64) int {
	return int(max(1, min(left, entriesReadChunk)))
}

// Term implements raft.Storage.
func (s *Storage) Term(i uint64) (uint64, error) {
	switch {
	case i < s.w.first:
		return 0, raft.ErrCompacted
	case i > s.w.lastIndex():
		return 0, raft.ErrUnavailable
	}
	return s.w.at(i).term, nil
}

// LastIndex implements raft.Storage.
func (s *Storage) LastIndex() (uint64, error) { return s.w.lastIndex(), nil }

// FirstIndex implements raft.Storage.
func (s *Storage) FirstIndex() (uint64, error) { return s.w.firstIndex(), nil }

// Snapshot implements raft.Storage; raft asks on the leader for a
// follower behind the compaction point. The snapshot is the log itself, up
// to the applied index: its metadata is that entry's index and term and
// the ConfState applied with it (exact: conf changes are applied in index
// order), and Data lists the segment files holding it and the horizon the
// log was compacted below (EncodeSnapshotFiles), which the follower copies
// from this replica. The owner's goroutine also commits compactions, so
// the list and the horizon are of one generation of the files.
func (s *Storage) Snapshot() (raftpb.Snapshot, error) {
	index := max(s.applied, s.w.first)
	if index == 0 || !s.w.has(index) {
		return raftpb.Snapshot{}, raft.ErrSnapshotTemporarilyUnavailable
	}
	data, err := EncodeSnapshotFiles(s.log.SegmentFiles(), s.log.CompactedBelow())
	if err != nil {
		return raftpb.Snapshot{}, err
	}
	return raftpb.Snapshot{Data: data, Metadata: raftpb.SnapshotMetadata{
		Index:     index,
		Term:      s.w.at(index).term,
		ConfState: s.cs,
	}}, nil
}

// Append writes entries to the log and returns once they are durable.
// Entries from an index the log already holds replace the log's tail from
// there: raft sends them when this replica's uncommitted tail conflicts
// with the leader's log.
func (s *Storage) Append(entries []raftpb.Entry) error {
	if len(entries) == 0 {
		return nil
	}
	// raft never sends entries below the commit index, hence never below
	// the compaction point; MemoryStorage skips them all the same.
	if entries[0].Index <= s.w.first {
		skip := s.w.first + 1 - entries[0].Index
		if skip >= uint64(len(entries)) {
			return nil
		}
		entries = entries[skip:]
	}
	at := entries[0].Index
	switch last := s.w.lastIndex(); {
	case at > last+1:
		return fmt.Errorf("%w: append at index %d, the log ends at %d", ErrLogMismatch, at, last)
	case at <= last:
		s.recent.truncate(at)
		if err := s.log.TruncateEntries(at); err != nil {
			return fmt.Errorf("replication: truncate the log from index %d: %w", at, err)
		}
		s.w.truncate(at)
	}
	for i, e := range entries {
		if err := s.appendEntry(e); err != nil {
			// What was appended stays in the log; keep the cache to it.
			s.recent.add(entries[:i])
			return err
		}
	}
	s.recent.add(entries)
	if s.lazy {
		return nil
	}
	if err := s.log.Sync(); err != nil {
		return fmt.Errorf("replication: sync the log: %w", err)
	}
	return nil
}

func (s *Storage) appendEntry(e raftpb.Entry) error {
	meta, b, err := toLogEntry(e)
	if err != nil {
		return err
	}
	a, err := s.log.AppendEntry(meta, b.Records, b.Time, b.Stamp)
	if err != nil {
		return fmt.Errorf("replication: append entry %d: %w", e.Index, err)
	}
	s.w.append(e.Term, a.Base)
	if meta.Kind == EntryRecords && a.Time.After(s.lastTime) {
		s.lastTime = a.Time
	}
	return nil
}

// SetLazySync makes Append return once the entries are written, not
// synced: the log's own policy (periodic, or none) makes them durable
// later. raft then counts a replica's acknowledgement of entries in its
// page cache towards the quorum: an entry is acknowledged once a quorum has
// it in memory, and a crash of a quorum within the sync interval can lose
// it. The HardState is still synced before any message that depends on it.
// The default, synced appends, is what on_commit promises: a quorum has
// the entry on disk.
func (s *Storage) SetLazySync(lazy bool) { s.lazy = lazy }

// SetHardState makes hs durable when its term or vote changed, then lets
// the log's entry floor follow the commit index: nothing committed may be
// truncated. A change of the commit index alone is kept in memory and
// written with the next term, vote or ConfState change: raft needs the
// term and vote durable before it sends (a vote must never be cast twice),
// but a commit index that comes back lower after a restart is learned
// again from the leader, and writing it on every Ready cost two fsyncs per
// batch on every replica.
func (s *Storage) SetHardState(hs raftpb.HardState) error {
	if hs.Term != s.hs.Term || hs.Vote != s.hs.Vote {
		if err := writeState(s.dir, hs, s.cs); err != nil {
			return err
		}
	}
	s.hs = hs
	s.log.SetEntryFloor(hs.Commit)
	return nil
}

// SetConfState makes cs durable: the ConfState raft returned from applying
// a conf change.
func (s *Storage) SetConfState(cs raftpb.ConfState) error {
	if err := writeState(s.dir, s.hs, cs); err != nil {
		return err
	}
	s.cs = cs
	return nil
}

// Compact makes index the compaction point: entries up to it are no longer
// served (ErrCompacted) and Snapshot describes it. Only the window moves;
// the log keeps the records until retention removes them, and a Storage
// opened again serves everything the log holds. index must be committed,
// and should be applied (see Snapshot).
func (s *Storage) Compact(index uint64) error {
	switch {
	case index <= s.w.first:
		return raft.ErrCompacted
	case index > s.hs.Commit:
		return fmt.Errorf("replication: compact to index %d above the commit index %d", index, s.hs.Commit)
	}
	s.w.compact(index)
	s.recent.dropThrough(index)
	return nil
}

// compactableEnd is the offset below which the log may be compacted: the
// records of the entries raft no longer serves (up to the compaction
// point, since it answers ErrCompacted below it and sends a snapshot) and
// that the replica applied (so committed: never truncated). The first
// entry after both starts there.
func (s *Storage) compactableEnd() uint64 {
	// The compaction point's slot keeps its entry's base too (an entry
	// of the log whenever the point is past index 0).
	through := min(s.w.first, s.applied)
	if s.w.has(through + 1) {
		return s.w.at(through + 1).base
	}
	if through >= s.w.lastIndex() && !s.empty() {
		return s.log.NextOffset()
	}
	return s.log.StartOffset()
}

// compactBehind moves the compaction point to keep entries behind the
// applied index, when that moves it forward.
func (s *Storage) compactBehind(keep uint64) {
	if s.applied > keep && s.applied-keep > s.w.first {
		s.w.compact(s.applied - keep)
		s.recent.dropThrough(s.applied - keep)
	}
}

// enforceRetention runs the log's retention over the entries up to the
// applied index, then makes the log's new first entry the compaction
// point: the entries before it are gone, and its term is what raft
// matches the next entry against.
func (s *Storage) enforceRetention(now time.Time) (int, error) {
	n, err := s.log.EnforceRetentionUpTo(now, s.applied)
	if n == 0 {
		return n, err
	}
	var first Entry
	found := false
	if herr := s.log.EntryHeaders(s.log.StartOffset(), func(e Entry) bool {
		first, found = e, true
		return false
	}); herr != nil {
		return n, errors.Join(err, fmt.Errorf("replication: read the first entry after retention: %w", herr))
	}
	if found && first.Index > s.w.first && s.w.has(first.Index) {
		s.w.compact(first.Index)
		s.recent.dropThrough(first.Index)
	}
	return n, err
}

// empty reports whether the replica has never stored anything: a new
// replica of a new group.
func (s *Storage) empty() bool {
	return s.w.lastIndex() == 0 && raft.IsEmptyHardState(s.hs)
}

// base returns the log offset of entry index's first record (for an entry
// without records, the offset after the records before it).
func (s *Storage) base(index uint64) (uint64, bool) {
	if !s.w.has(index) || index == s.w.first {
		return 0, false
	}
	return s.w.at(index).base, true
}

// toLogEntry converts a raft entry to what the log stores: an EntryNormal
// with Data becomes its decoded records, time and stamp.
func toLogEntry(e raftpb.Entry) (EntryMeta, Batch, error) {
	meta := EntryMeta{Index: e.Index, Term: e.Term}
	var b Batch
	switch e.Type {
	case raftpb.EntryNormal:
		if len(e.Data) == 0 {
			meta.Kind = EntryEmpty
			return meta, b, nil
		}
		var err error
		if b, err = DecodeRecords(e.Data); err != nil {
			return meta, b, fmt.Errorf("replication: entry %d: %w", e.Index, err)
		}
		meta.Kind, meta.Attributed = EntryRecords, b.Attributed
	case raftpb.EntryConfChange:
		meta.Kind, meta.Control = EntryConfChange, e.Data
	case raftpb.EntryConfChangeV2:
		meta.Kind, meta.Control = EntryConfChangeV2, e.Data
	default:
		return meta, b, fmt.Errorf("replication: entry %d has unknown type %v", e.Index, e.Type)
	}
	return meta, b, nil
}

// toRaftEntry is toLogEntry's inverse.
func toRaftEntry(le Entry) (raftpb.Entry, error) {
	e := raftpb.Entry{Index: le.Index, Term: le.Term}
	switch le.Kind {
	case EntryRecords:
		data, err := EncodeRecords(nil, Batch{Time: le.Time, Stamp: le.Stamp, Records: le.Records, Attributed: le.Attributed})
		if err != nil {
			return e, fmt.Errorf("%w: entry %d: %w", ErrLogMismatch, le.Index, err)
		}
		e.Type, e.Data = raftpb.EntryNormal, data
	case EntryEmpty:
		e.Type = raftpb.EntryNormal
	case EntryConfChange:
		e.Type, e.Data = raftpb.EntryConfChange, le.Control
	case EntryConfChangeV2:
		e.Type, e.Data = raftpb.EntryConfChangeV2, le.Control
	default:
		return e, fmt.Errorf("%w: entry %d has unknown kind %d", ErrLogMismatch, le.Index, le.Kind)
	}
	return e, nil
}
