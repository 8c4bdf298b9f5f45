package replication

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/getfelix/felix-go/persistence"
)

const noLimit = math.MaxUint64

// recordsEntry is an EntryNormal holding records, stamped with a time
// derived from its index so that times only grow along a log.
func recordsEntry(t *testing.T, index, term uint64, records ...string) raftpb.Entry {
	t.Helper()
	b := Batch{Time: time.UnixMicro(int64(1_000_000 * index))}
	for _, r := range records {
		b.Records = append(b.Records, []byte(r))
	}
	data, err := EncodeRecords(nil, b)
	if err != nil {
		t.Fatal(err)
	}
	return raftpb.Entry{Index: index, Term: term, Type: raftpb.EntryNormal, Data: data}
}

func openTestStorage(t testing.TB, l EntryLog, dir string) *Storage {
	t.Helper()
	s, err := OpenStorage(l, dir)
	if err != nil {
		t.Fatalf("OpenStorage: %v", err)
	}
	return s
}

// fiveEntries is a storage holding entries 1 to 5, entry i of term i and
// record "ri", all committed.
func fiveEntries(t *testing.T) (*Storage, []raftpb.Entry) {
	t.Helper()
	s := openTestStorage(t, newMemLog(), t.TempDir())
	var ents []raftpb.Entry
	for i := range uint64(5) {
		ents = append(ents, recordsEntry(t, i+1, i+1, "r"+string(rune('1'+i))))
	}
	if err := s.Append(ents); err != nil {
		t.Fatal(err)
	}
	if err := s.SetHardState(raftpb.HardState{Term: 5, Commit: 5}); err != nil {
		t.Fatal(err)
	}
	return s, ents
}

// TestStorageTermAroundCompaction follows raft's TestStorageTerm: the
// compaction point's term is kept, below it is ErrCompacted, beyond the
// last index ErrUnavailable.
func TestStorageTermAroundCompaction(t *testing.T) {
	s, _ := fiveEntries(t)
	if err := s.Compact(3); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		give     uint64
		wantTerm uint64
		wantErr  error
	}{
		{give: 2, wantErr: raft.ErrCompacted},
		{give: 3, wantTerm: 3},
		{give: 4, wantTerm: 4},
		{give: 5, wantTerm: 5},
		{give: 6, wantErr: raft.ErrUnavailable},
	}
	for _, tt := range tests {
		term, err := s.Term(tt.give)
		// raft compares these errors by identity, not errors.Is.
		if err != tt.wantErr || term != tt.wantTerm {
			t.Errorf("Term(%d) = %d, %v; want %d, %v", tt.give, term, err, tt.wantTerm, tt.wantErr)
		}
	}
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	if first != 4 || last != 5 {
		t.Errorf("FirstIndex, LastIndex = %d, %d after compacting to 3; want 4, 5", first, last)
	}
}

// TestStorageEntriesAroundCompaction follows raft's TestStorageEntries,
// size limits included.
func TestStorageEntriesAroundCompaction(t *testing.T) {
	s, ents := fiveEntries(t)
	if err := s.Compact(3); err != nil {
		t.Fatal(err)
	}
	size4, size5 := uint64(ents[3].Size()), uint64(ents[4].Size())
	tests := []struct {
		lo, hi, maxSize uint64
		want            []raftpb.Entry
		wantErr         error
	}{
		{lo: 2, hi: 6, maxSize: noLimit, wantErr: raft.ErrCompacted},
		{lo: 3, hi: 4, maxSize: noLimit, wantErr: raft.ErrCompacted},
		{lo: 4, hi: 5, maxSize: noLimit, want: ents[3:4]},
		{lo: 4, hi: 6, maxSize: noLimit, want: ents[3:5]},
		{lo: 4, hi: 7, maxSize: noLimit, wantErr: raft.ErrUnavailable},
		{lo: 4, hi: 6, maxSize: 0, want: ents[3:4]},
		{lo: 4, hi: 6, maxSize: size4 + size5/2, want: ents[3:4]},
		{lo: 4, hi: 6, maxSize: size4 + size5 - 1, want: ents[3:4]},
		{lo: 4, hi: 6, maxSize: size4 + size5, want: ents[3:5]},
		{lo: 5, hi: 5, maxSize: noLimit, want: nil},
	}
	for _, tt := range tests {
		got, err := s.Entries(tt.lo, tt.hi, tt.maxSize)
		if err != tt.wantErr || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Entries(%d, %d, %d) = %v, %v; want %v, %v", tt.lo, tt.hi, tt.maxSize, got, err, tt.want, tt.wantErr)
		}
	}
}

// TestStorageEntriesGiveBackWhatWasAppended: every kind of entry reads
// back exactly as raft appended it, Data included.
func TestStorageEntriesGiveBackWhatWasAppended(t *testing.T) {
	change := raftpb.ConfChange{Type: raftpb.ConfChangeAddNode, NodeID: 2}
	cc, err := change.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	stamped, err := EncodeRecords(nil, Batch{Time: time.UnixMicro(9_000_000), Stamp: &Stamp{Producer: 4, Sequence: 2, Digest: 99}, Records: [][]byte{[]byte("s")}})
	if err != nil {
		t.Fatal(err)
	}
	ents := []raftpb.Entry{
		{Index: 1, Term: 1, Type: raftpb.EntryConfChange, Data: cc},
		{Index: 2, Term: 1, Type: raftpb.EntryConfChangeV2},
		{Index: 3, Term: 2, Type: raftpb.EntryNormal},
		recordsEntry(t, 4, 2, "a", "b"),
		{Index: 5, Term: 2, Type: raftpb.EntryNormal, Data: stamped},
	}
	s := openTestStorage(t, newMemLog(), t.TempDir())
	if err := s.Append(ents); err != nil {
		t.Fatal(err)
	}
	got, err := s.Entries(1, 6, noLimit)
	if err != nil || !reflect.DeepEqual(got, ents) {
		t.Errorf("Entries(1, 6) = %v, %v; want %v", got, err, ents)
	}
	for index, want := range map[uint64]uint64{1: 0, 3: 0, 4: 0, 5: 2} {
		if base, _ := s.base(index); base != want {
			t.Errorf("entry %d has base offset %d, want %d", index, base, want)
		}
	}
}

// TestStorageAppendReplacesAConflictingTail follows raft's
// TestStorageAppend, and checks the log gives the truncated offsets back.
func TestStorageAppendReplacesAConflictingTail(t *testing.T) {
	threeEntries := func(t *testing.T) (*Storage, *memLog) {
		l := newMemLog()
		s := openTestStorage(t, l, t.TempDir())
		if err := s.Append([]raftpb.Entry{recordsEntry(t, 1, 1, "a"), recordsEntry(t, 2, 1, "b"), recordsEntry(t, 3, 1, "c")}); err != nil {
			t.Fatal(err)
		}
		if err := s.SetHardState(raftpb.HardState{Term: 1, Commit: 1}); err != nil {
			t.Fatal(err)
		}
		return s, l
	}
	terms := func(s *Storage) []uint64 {
		var out []uint64
		last, _ := s.LastIndex()
		for i := uint64(1); i <= last; i++ {
			term, _ := s.Term(i)
			out = append(out, term)
		}
		return out
	}

	t.Run("at the end", func(t *testing.T) {
		s, _ := threeEntries(t)
		if err := s.Append([]raftpb.Entry{recordsEntry(t, 4, 2, "d")}); err != nil {
			t.Fatal(err)
		}
		if got := terms(s); !reflect.DeepEqual(got, []uint64{1, 1, 1, 2}) {
			t.Errorf("terms %v, want [1 1 1 2]", got)
		}
	})
	t.Run("over the uncommitted tail", func(t *testing.T) {
		s, l := threeEntries(t)
		if err := s.Append([]raftpb.Entry{recordsEntry(t, 2, 2, "x", "y"), recordsEntry(t, 3, 2, "z")}); err != nil {
			t.Fatal(err)
		}
		if got := terms(s); !reflect.DeepEqual(got, []uint64{1, 2, 2}) {
			t.Errorf("terms %v, want [1 2 2]", got)
		}
		if base, _ := s.base(3); base != 3 || l.next != 4 {
			t.Errorf("entry 3 at offset %d, next offset %d; want 3 and 4 (b and c gave their offsets back)", base, l.next)
		}
		got, err := s.Entries(2, 3, noLimit)
		if err != nil || len(got) != 1 || !bytes.Equal(got[0].Data, recordsEntry(t, 2, 2, "x", "y").Data) {
			t.Errorf("Entries(2, 3) = %v, %v; want the new entry 2", got, err)
		}
	})
	t.Run("over a committed entry", func(t *testing.T) {
		s, _ := threeEntries(t)
		if err := s.Append([]raftpb.Entry{recordsEntry(t, 1, 2, "x")}); !errors.Is(err, errBelowFloor) {
			t.Errorf("replacing committed entry 1: %v, want the log's floor to refuse it", err)
		}
	})
	t.Run("with a gap", func(t *testing.T) {
		s, _ := threeEntries(t)
		if err := s.Append([]raftpb.Entry{recordsEntry(t, 5, 2, "x")}); !errors.Is(err, ErrLogMismatch) {
			t.Errorf("appending entry 5 after entry 3: %v, want ErrLogMismatch", err)
		}
	})
	t.Run("below the compaction point", func(t *testing.T) {
		s, _ := threeEntries(t)
		if err := s.Compact(1); err != nil {
			t.Fatal(err)
		}
		if err := s.Append([]raftpb.Entry{recordsEntry(t, 1, 1, "a")}); err != nil {
			t.Errorf("appending compacted entry 1 again: %v, want it skipped", err)
		}
		if got := terms(s)[1:]; !reflect.DeepEqual(got, []uint64{1, 1}) {
			t.Errorf("terms %v, want [1 1] from index 2", got)
		}
	})
}

func TestStorageAppendRefusesMalformedData(t *testing.T) {
	s := openTestStorage(t, newMemLog(), t.TempDir())
	err := s.Append([]raftpb.Entry{{Index: 1, Term: 1, Type: raftpb.EntryNormal, Data: []byte{batchVersion1, 0}}})
	var malformed *ErrMalformedBatch
	if !errors.As(err, &malformed) {
		t.Errorf("appending an entry with malformed Data: %v, want *ErrMalformedBatch", err)
	}
}

// TestStorageAppendIsDurable: Append returns once the log synced, so a
// crash right after it keeps every entry.
func TestStorageAppendIsDurable(t *testing.T) {
	l := newMemLog()
	s := openTestStorage(t, l, t.TempDir())
	if err := s.Append([]raftpb.Entry{recordsEntry(t, 1, 1, "a"), {Index: 2, Term: 1}}); err != nil {
		t.Fatal(err)
	}
	l.crash()
	if len(l.entries) != 2 {
		t.Errorf("a crash after Append kept %d entries, want 2", len(l.entries))
	}
}

func TestStorageCompact(t *testing.T) {
	s, _ := fiveEntries(t)
	if snap, _ := s.Snapshot(); !raft.IsEmptySnap(snap) {
		t.Errorf("Snapshot before any compaction = %+v, want empty", snap.Metadata)
	}
	cs := raftpb.ConfState{Voters: []uint64{1, 2, 3}}
	if err := s.SetConfState(cs); err != nil {
		t.Fatal(err)
	}
	if err := s.Compact(3); err != nil {
		t.Fatal(err)
	}
	snap, _ := s.Snapshot()
	if want := (raftpb.SnapshotMetadata{Index: 3, Term: 3, ConfState: cs}); !reflect.DeepEqual(snap.Metadata, want) {
		t.Errorf("Snapshot after compacting to 3 = %+v, want %+v", snap.Metadata, want)
	}
	if files, _, err := DecodeSnapshotFiles(snap.Data); err != nil || len(files) == 0 {
		t.Errorf("the snapshot's segment files: %v, %v", files, err)
	}
	// Taken at the applied index once the replica applied past the point.
	s.applied = 4
	if snap, _ := s.Snapshot(); snap.Metadata.Index != 4 || snap.Metadata.Term != s.w.at(4).term {
		t.Errorf("Snapshot with index 4 applied = %+v, want index 4", snap.Metadata)
	}
	if err := s.Compact(3); err != raft.ErrCompacted {
		t.Errorf("Compact(3) twice: %v, want ErrCompacted", err)
	}
	if err := s.Compact(2); err != raft.ErrCompacted {
		t.Errorf("Compact(2) after Compact(3): %v, want ErrCompacted", err)
	}
	if err := s.SetHardState(raftpb.HardState{Term: 5, Commit: 4}); err != nil {
		t.Fatal(err)
	}
	if err := s.Compact(5); err == nil {
		t.Error("Compact(5) above the commit index 4 succeeded")
	}
}

func TestSetHardStateMovesTheFloor(t *testing.T) {
	l := newMemLog()
	s := openTestStorage(t, l, t.TempDir())
	if err := s.Append([]raftpb.Entry{recordsEntry(t, 1, 1, "a"), recordsEntry(t, 2, 1, "b")}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetHardState(raftpb.HardState{Term: 1, Vote: 1, Commit: 2}); err != nil {
		t.Fatal(err)
	}
	if l.floor != 2 {
		t.Errorf("entry floor %d after committing 2, want 2", l.floor)
	}
}

// TestStorageReopenReproducesState: a Storage opened again over the same
// log and directory answers every question as before.
func TestStorageReopenReproducesState(t *testing.T) {
	l := newMemLog()
	dir := t.TempDir()
	s := openTestStorage(t, l, dir)
	ents := []raftpb.Entry{recordsEntry(t, 1, 1, "a"), {Index: 2, Term: 2}, recordsEntry(t, 3, 2, "b", "c")}
	if err := s.Append(ents); err != nil {
		t.Fatal(err)
	}
	hs := raftpb.HardState{Term: 2, Vote: 3, Commit: 2}
	cs := raftpb.ConfState{Voters: []uint64{1, 2, 3}}
	if err := s.SetHardState(hs); err != nil {
		t.Fatal(err)
	}
	if err := s.SetConfState(cs); err != nil {
		t.Fatal(err)
	}
	l.crash()
	l.floor = 0 // the floor lives in memory: a new process starts without it

	again := openTestStorage(t, l, dir)
	gotHS, gotCS, _ := again.InitialState()
	if !reflect.DeepEqual(gotHS, hs) || !reflect.DeepEqual(gotCS, cs) {
		t.Errorf("InitialState after reopening = %+v, %+v; want %+v, %+v", gotHS, gotCS, hs, cs)
	}
	first, _ := again.FirstIndex()
	last, _ := again.LastIndex()
	got, err := again.Entries(first, last+1, noLimit)
	if first != 1 || last != 3 || err != nil || !reflect.DeepEqual(got, ents) {
		t.Errorf("after reopening: entries [%d, %d] = %v, %v; want [1, 3] = %v", first, last, got, err, ents)
	}
	if l.floor != hs.Commit {
		t.Errorf("entry floor %d after reopening, want the commit index %d", l.floor, hs.Commit)
	}
	if !again.lastTime.Equal(time.UnixMicro(3_000_000)) {
		t.Errorf("last append time %v after reopening, want entry 3's", again.lastTime)
	}
}

// TestStorageOpensALogWithoutItsHead: when retention removed the oldest
// entries, the first one left is the compaction point.
func TestStorageOpensALogWithoutItsHead(t *testing.T) {
	s, ents := fiveEntries(t)
	l := s.log.(*memLog)
	l.dropHead(2)
	again := openTestStorage(t, l, s.dir)
	first, _ := again.FirstIndex()
	term, err := again.Term(3)
	if first != 4 || term != 3 || err != nil {
		t.Errorf("FirstIndex = %d, Term(3) = %d, %v; want 4, 3", first, term, err)
	}
	if _, err := again.Entries(3, 4, noLimit); err != raft.ErrCompacted {
		t.Errorf("Entries(3, 4) = %v, want ErrCompacted", err)
	}
	got, err := again.Entries(4, 6, noLimit)
	if err != nil || !reflect.DeepEqual(got, ents[3:]) {
		t.Errorf("Entries(4, 6) = %v, %v; want %v", got, err, ents[3:])
	}
}

func TestOpenStorageRefusesACommitBeyondTheLog(t *testing.T) {
	dir := t.TempDir()
	if err := writeState(dir, raftpb.HardState{Term: 2, Commit: 4}, raftpb.ConfState{}); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenStorage(newMemLog(), dir); !errors.Is(err, ErrLogMismatch) {
		t.Errorf("OpenStorage with commit 4 over an empty log: %v, want ErrLogMismatch", err)
	}
}

// TestStorageEntriesReadInChunks: raft may ask for entries without a size
// limit; the log is read a chunk at a time, so a short range never reads
// much past its end.
func TestStorageEntriesReadInChunks(t *testing.T) {
	l := newMemLog()
	s := openTestStorage(t, l, t.TempDir())
	big := string(bytes.Repeat([]byte{'x'}, entriesReadChunk/2+1))
	if err := s.Append([]raftpb.Entry{recordsEntry(t, 1, 1, big), recordsEntry(t, 2, 1, big), recordsEntry(t, 3, 1, big)}); err != nil {
		t.Fatal(err)
	}
	s.recent.reset() // read from the log, as after a restart
	got, err := s.Entries(1, 2, noLimit)
	if err != nil || len(got) != 1 || l.reads != 1 {
		t.Errorf("Entries(1, 2) = %d entries in %d reads, %v; want 1 in 1", len(got), l.reads, err)
	}
	l.reads = 0
	got, err = s.Entries(1, 4, noLimit)
	if err != nil || len(got) != 3 || l.reads != 3 {
		t.Errorf("Entries(1, 4) = %d entries in %d reads, %v; want 3 in 3 (one chunk holds one entry)", len(got), l.reads, err)
	}
}

// TestStorageLazySyncLeavesEntriesToTheLog: synced appends (on_commit) end
// with the log's fsync; lazy ones (periodic) do not, and the HardState is
// written all the same when the term changes.
func TestStorageLazySyncLeavesEntriesToTheLog(t *testing.T) {
	l := newMemLog()
	s := openTestStorage(t, l, t.TempDir())
	if err := s.Append([]raftpb.Entry{recordsEntry(t, 1, 1, "a")}); err != nil {
		t.Fatal(err)
	}
	if l.syncs != 1 {
		t.Fatalf("synced append: %d fsyncs; want 1", l.syncs)
	}
	s.SetLazySync(true)
	if err := s.Append([]raftpb.Entry{recordsEntry(t, 2, 1, "b")}); err != nil {
		t.Fatal(err)
	}
	if l.syncs != 1 {
		t.Fatalf("lazy append: %d fsyncs; want still 1", l.syncs)
	}
	if err := s.SetHardState(raftpb.HardState{Term: 2, Vote: 1, Commit: 2}); err != nil {
		t.Fatal(err)
	}
	if hs, _, found, err := readState(s.dir); err != nil || !found || hs.Term != 2 || hs.Vote != 1 {
		t.Fatalf("hard state on disk: %+v, %v, %v; want term 2, vote 1", hs, found, err)
	}
}

// TestStorageCommittedIsWhatARestartNeedNotApply: the storage's commit
// index and the offset after its entry, so a replica restarted on it
// starts there; a new storage has applied nothing.
func TestStorageCommittedIsWhatARestartNeedNotApply(t *testing.T) {
	l := newMemLog()
	dir := t.TempDir()
	s := openTestStorage(t, l, dir)
	if index, end := s.Committed(); index != 0 || end != 0 {
		t.Fatalf("new storage: committed %d, end %d; want 0, 0", index, end)
	}
	if err := s.Append([]raftpb.Entry{recordsEntry(t, 1, 1, "a", "b"), recordsEntry(t, 2, 1, "c"), recordsEntry(t, 3, 1, "d")}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetHardState(raftpb.HardState{Term: 1, Vote: 1, Commit: 2}); err != nil {
		t.Fatal(err)
	}
	if index, end := s.Committed(); index != 2 || end != 3 {
		t.Fatalf("committed %d, end %d; want entry 2, offset 3 (a, b, c)", index, end)
	}
	if err := s.SetHardState(raftpb.HardState{Term: 2, Vote: 1, Commit: 3}); err != nil {
		t.Fatal(err)
	}
	s = openTestStorage(t, l, dir)
	if index, end := s.Committed(); index != 3 || end != 4 {
		t.Fatalf("reopened: committed %d, end %d; want entry 3, offset 4 (the whole log)", index, end)
	}
}

// TestStorageServesRecentEntriesWithoutReading: what was just appended is
// read back (to apply it, to send it) without reading the log, the same
// entries the log would give; a truncated tail and compacted entries are
// not served from memory.
func TestStorageServesRecentEntriesWithoutReading(t *testing.T) {
	l := newMemLog()
	s := openTestStorage(t, l, t.TempDir())
	ents := []raftpb.Entry{recordsEntry(t, 1, 1, "a"), recordsEntry(t, 2, 1, "b"), recordsEntry(t, 3, 1, "c")}
	if err := s.Append(ents); err != nil {
		t.Fatal(err)
	}
	got, err := s.Entries(1, 4, noLimit)
	if err != nil || l.reads != 0 || !reflect.DeepEqual(got, ents) {
		t.Fatalf("Entries(1, 4) = %v in %d reads, %v; want the appended entries, no read", got, l.reads, err)
	}
	// A new leader's entry replaces index 3.
	replaced := recordsEntry(t, 3, 2, "C")
	if err := s.Append([]raftpb.Entry{replaced}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Entries(3, 4, noLimit); len(got) != 1 || got[0].Term != 2 || l.reads != 0 {
		t.Fatalf("Entries(3, 4) after the replacement = %v in %d reads", got, l.reads)
	}
	s.recent.reset()
	fromLog, err := s.Entries(1, 4, noLimit)
	if err != nil || !reflect.DeepEqual(fromLog, append(ents[:2:2], replaced)) {
		t.Fatalf("the log gives %v, %v; memory gave the same entries", fromLog, err)
	}
}

// TestStorageReopensACompactedLog: a real log whose first entries
// compaction rewrote reopens with the last rewritten entry as its
// compaction point (it and those before it are never served again: their
// records are not the ones raft replicated), the entries after it served
// as written, and a raft.state whose lazily written commit index is below
// that point raised to it, since compaction only rewrites applied
// entries.
func TestStorageReopensACompactedLog(t *testing.T) {
	dir := t.TempDir()
	cfg := persistence.Config{SegmentBytes: 256, Fsync: persistence.FsyncOnCommit}
	l, err := persistence.Open(filepath.Join(dir, "log"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := openTestStorage(t, l, dir)
	var ents []raftpb.Entry
	for i := uint64(1); i <= 30; i++ {
		ents = append(ents, recordsEntry(t, i, 1+i/10, fmt.Sprintf("key-%d", i%4), fmt.Sprintf("value-%d", i)))
	}
	if err := s.Append(ents); err != nil {
		t.Fatal(err)
	}
	if err := s.SetHardState(raftpb.HardState{Term: 4, Commit: 30}); err != nil {
		t.Fatal(err)
	}
	// raft.state keeps commit 3: only term and vote changes write it.
	if err := writeState(dir, raftpb.HardState{Term: 4, Commit: 3}, raftpb.ConfState{}); err != nil {
		t.Fatal(err)
	}
	// Entry 12 starts at offset 22: compact below it, dropping the
	// even offsets.
	const horizon = 22
	c, err := l.PrepareCompaction(horizon, func(off uint64, v []byte) ([]byte, bool, error) { return v, off%2 == 1, nil })
	if err != nil {
		t.Fatal(err)
	}
	if c.Horizon() < 4 {
		t.Fatalf("compaction prepared below %d: the test's log rewrote nothing", c.Horizon())
	}
	if _, err := c.Commit(); err != nil {
		t.Fatal(err)
	}
	var lastCompacted uint64
	if err := l.EntryHeaders(l.StartOffset(), func(e Entry) bool {
		if e.Compacted {
			lastCompacted = e.Index
		}
		return true
	}); err != nil || lastCompacted == 0 {
		t.Fatalf("no compacted entry after the compaction (%v)", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	if l, err = persistence.Open(filepath.Join(dir, "log"), cfg); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	again := openTestStorage(t, l, dir)
	first, _ := again.FirstIndex()
	last, _ := again.LastIndex()
	if first != lastCompacted+1 || last != 30 {
		t.Fatalf("reopened: entries [%d, %d], want [%d, 30]", first, last, lastCompacted+1)
	}
	if term, err := again.Term(lastCompacted); err != nil || term != ents[lastCompacted-1].Term {
		t.Fatalf("Term(%d) of the compaction point = %d, %v; want %d", lastCompacted, term, err, ents[lastCompacted-1].Term)
	}
	if _, err := again.Entries(lastCompacted, lastCompacted+1, noLimit); err != raft.ErrCompacted {
		t.Fatalf("Entries of the last compacted entry: %v, want ErrCompacted", err)
	}
	got, err := again.Entries(first, last+1, noLimit)
	if err != nil || !reflect.DeepEqual(got, ents[first-1:]) {
		t.Fatalf("Entries(%d, 31) = %v, %v; want the entries as appended", first, got, err)
	}
	if hs, _, _ := again.InitialState(); hs.Commit != lastCompacted || hs.Term != 4 {
		t.Fatalf("InitialState commits %d in term %d, want %d in term 4", hs.Commit, hs.Term, lastCompacted)
	}
	// A snapshot carries the horizon with the files.
	again.applied = 30
	snap, err := again.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if files, h, err := DecodeSnapshotFiles(snap.Data); err != nil || len(files) == 0 || h != l.CompactedBelow() || h == 0 {
		t.Fatalf("snapshot: %d files below %d, %v; want the log's horizon %d", len(files), h, err, l.CompactedBelow())
	}
}

// TestStorageCompactableEnd: the log may be compacted below the first
// entry raft still serves or the replica has not applied, whichever comes
// first; a fresh storage offers nothing.
func TestStorageCompactableEnd(t *testing.T) {
	if got := openTestStorage(t, newMemLog(), t.TempDir()).compactableEnd(); got != 0 {
		t.Fatalf("a fresh storage: compactable below %d, want 0", got)
	}
	s, _ := fiveEntries(t) // entry i holds the record at offset i-1
	for _, c := range []struct {
		applied, compact uint64
		want             uint64
	}{
		{applied: 5, compact: 0, want: 0}, // raft serves every entry
		{applied: 5, compact: 2, want: 2}, // served from entry 3, at offset 2
		{applied: 3, compact: 4, want: 3}, // applied through 3: entry 4 at offset 3
		{applied: 5, compact: 5, want: 5}, // nothing served: the log's end
	} {
		s.applied = c.applied
		if c.compact > s.w.first {
			if err := s.Compact(c.compact); err != nil {
				t.Fatal(err)
			}
		}
		if got := s.compactableEnd(); got != c.want {
			t.Fatalf("applied %d, compacted to %d: compactable below %d, want %d", c.applied, c.compact, got, c.want)
		}
	}
}
