package persistence

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"
)

// segmentFirstIndexes returns the index of the first entry of each segment
// file in dir, in order; 0 for an empty segment.
func segmentFirstIndexes(t testing.TB, dir string) []uint64 {
	t.Helper()
	var firsts []uint64
	for _, path := range segmentFiles(t, dir, logExt) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) == 0 {
			firsts = append(firsts, 0)
			continue
		}
		v, _, err := decodeBatch(b)
		if err != nil || !v.entry {
			t.Fatalf("%s: first batch %+v, %v; want an entry", path, v, err)
		}
		firsts = append(firsts, v.meta.Index)
	}
	return firsts
}

// entryLogForTruncation is a log of entries 1 to 199 in 1 KiB segments,
// synced up to entry 189: a truncation removes synced and unsynced entries.
func entryLogForTruncation(t *testing.T, dir string) (*Log, []Entry) {
	t.Helper()
	l := mustOpen(t, dir, smallConfig())
	want := appendEntryRange(t, l, 1, 190)
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	want = append(want, appendEntryRange(t, l, 190, 200)...)
	if n := len(segmentFiles(t, dir, logExt)); n < 8 {
		t.Fatalf("setup: %d segments, want 8 or more", n)
	}
	return l, want
}

// TestTruncateEntries cuts in the middle of the active segment, in the
// middle of a sealed one, at a segment boundary, across several segments
// and before everything; then a new leader's entries follow, and the log
// reads the same after reopening, verified or not.
func TestTruncateEntries(t *testing.T) {
	tests := []struct {
		name     string
		pick     func(firsts []uint64) uint64 // the index to cut at, from each segment's first
		boundary bool                         // the cut is at a segment's first entry
	}{
		{"middle of the active segment", func(f []uint64) uint64 { return f[len(f)-1] + 2 }, false},
		{"middle of a sealed segment", func(f []uint64) uint64 { return f[len(f)-2] + 2 }, false},
		{"at a segment boundary", func(f []uint64) uint64 { return f[len(f)-3] }, true},
		{"across several segments", func(f []uint64) uint64 { return f[2] + 2 }, false},
		{"everything", func(f []uint64) uint64 { return f[0] }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			l, want := entryLogForTruncation(t, dir)
			firsts := segmentFirstIndexes(t, dir)
			index := tt.pick(firsts)
			if slices.Contains(firsts, index) != tt.boundary {
				t.Fatalf("setup: the cut at %d, segments starting at %v: want at a boundary %v", index, firsts, tt.boundary)
			}
			left := 0
			for _, first := range firsts {
				if first < index {
					left++
				}
			}
			left = max(left, 1)
			kept := want[:index-want[0].Index]
			if err := l.TruncateEntries(index); err != nil {
				t.Fatalf("TruncateEntries(%d): %v", index, err)
			}
			if got := len(segmentFiles(t, dir, logExt)); got != left {
				t.Fatalf("%d segments after cutting at %d, want %d", got, index, left)
			}
			if left := segmentFiles(t, dir, deletedSuffix); len(left) != 0 {
				t.Fatalf("removed segments no reader holds are still there: %v", left)
			}
			check := func(l *Log, kept []Entry) {
				t.Helper()
				checkEntries(t, l, kept)
				if len(kept) == 0 && l.NextOffset() != 0 {
					t.Fatalf("NextOffset = %d after removing everything, want 0", l.NextOffset())
				}
				if l.Synced() > l.NextOffset() {
					t.Fatalf("Synced %d past NextOffset %d", l.Synced(), l.NextOffset())
				}
			}
			check(l, kept)

			for i := index; i < index+40; i++ {
				kept = append(kept, appendEntryInTerm(t, l, i, 100))
			}
			check(l, kept)
			mustClose(t, l)
			l = mustOpen(t, dir, smallConfig())
			check(l, kept)
			mustClose(t, l)
			l = mustOpen(t, dir, Config{SegmentBytes: 1024, VerifyOnOpen: true})
			defer mustClose(t, l)
			check(l, kept)
		})
	}
}

// TestTruncateEntriesFloorAndNoOps: the floor refuses cuts at or below it,
// only rises, and is forgotten on reopen; cuts past the last entry, or in a
// log without entries, change nothing.
func TestTruncateEntriesFloorAndNoOps(t *testing.T) {
	dir := t.TempDir()
	l, want := entryLogForTruncation(t, dir)
	l.SetEntryFloor(150)
	l.SetEntryFloor(100) // lower: ignored
	for _, index := range []uint64{150, 100, 1} {
		if err := l.TruncateEntries(index); !errors.Is(err, ErrBelowFloor) {
			t.Fatalf("TruncateEntries(%d) under floor 150: %v, want ErrBelowFloor", index, err)
		}
	}
	if err := l.TruncateEntries(want[len(want)-1].Index + 1); err != nil {
		t.Fatalf("TruncateEntries past the last entry: %v", err)
	}
	checkEntries(t, l, want)
	if err := l.TruncateEntries(151); err != nil {
		t.Fatalf("TruncateEntries(151) over floor 150: %v", err)
	}
	want = want[:150]
	checkEntries(t, l, want)
	mustClose(t, l)

	l = mustOpen(t, dir, smallConfig())
	l.SetEntryFloor(120)
	if err := l.TruncateEntries(120); !errors.Is(err, ErrBelowFloor) {
		t.Fatalf("TruncateEntries(120) under floor 120: %v, want ErrBelowFloor", err)
	}
	if err := l.TruncateEntries(121); err != nil {
		t.Fatal(err)
	}
	checkEntries(t, l, want[:120])
	mustClose(t, l)

	l = mustOpen(t, t.TempDir(), smallConfig())
	defer mustClose(t, l)
	if err := l.TruncateEntries(1); err != nil {
		t.Fatalf("TruncateEntries of an empty log: %v", err)
	}
}

// TestAppendEntryAfterTruncationMaySkipIndexes: right after a truncation
// the next entry may skip indexes, never go back; the gap survives a
// reopen, and ReadEntries stops before it.
func TestAppendEntryAfterTruncationMaySkipIndexes(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, smallConfig())
	want := appendEntryRange(t, l, 1, 60)
	if err := l.TruncateEntries(50); err != nil {
		t.Fatal(err)
	}
	want = want[:49]
	var gap *ErrEntryIndex
	if _, err := l.AppendEntry(EntryMeta{Index: 49, Term: 9, Kind: EntryEmpty}, nil, t0, nil); !errors.As(err, &gap) {
		t.Fatalf("AppendEntry(49) after the last entry 49: %v, want ErrEntryIndex", err)
	}
	want = append(want, appendEntryInTerm(t, l, 70, 10))
	if _, err := l.AppendEntry(EntryMeta{Index: 72, Term: 20, Kind: EntryEmpty}, nil, t0, nil); !errors.As(err, &gap) {
		t.Fatalf("AppendEntry(72) after 70: %v, want ErrEntryIndex: only the first entry after a truncation may skip", err)
	}
	want = append(want, appendEntryInTerm(t, l, 71, 10))
	for _, reopen := range []bool{false, true} {
		if reopen {
			mustClose(t, l)
			l = mustOpen(t, dir, Config{VerifyOnOpen: true})
		}
		expectHeaders(t, collectHeaders(t, l, 0), want, "headers around the gap")
		before := want[len(want)-3]
		if got, err := l.ReadEntries(before.Base, before.Index, 1<<30); err != nil || len(got) != 1 {
			t.Fatalf("ReadEntries up to the gap: %d entries, %v; want 1", len(got), err)
		}
		after := want[len(want)-2]
		if got, err := l.ReadEntries(after.Base, after.Index, 1<<30); err != nil || len(got) != 2 {
			t.Fatalf("ReadEntries after the gap: %d entries, %v; want 2", len(got), err)
		}
	}
	mustClose(t, l)
}

// TestTruncateEntriesUnderReaders: a cursor that returned removed records
// fails with ErrTruncated and keeps failing, and the segment it holds is
// unlinked when it closes; cursors that did not carry on into the records
// appended after the cut; an EntryHeaders walk it interrupts fails.
func TestTruncateEntriesUnderReaders(t *testing.T) {
	dir := t.TempDir()
	l, want := entryLogForTruncation(t, dir)
	firsts := segmentFirstIndexes(t, dir)
	index := firsts[len(firsts)-3] + 2 // the last two segments go whole
	cutAt := want[index-want[0].Index].Base
	end := l.NextOffset()

	readTo := func(c *Cursor, to uint64) {
		t.Helper()
		for c.Offset() < to {
			page, err := c.Next(int(to-c.Offset()), 0)
			if err != nil || len(page.Records) == 0 {
				t.Fatalf("setup: cursor at %d: %d records, %v", c.Offset(), len(page.Records), err)
			}
		}
	}
	past, _ := l.Cursor(0)
	readTo(past, end)
	before, _ := l.Cursor(0)
	readTo(before, 5)
	at, _ := l.Cursor(0)
	readTo(at, cutAt)

	var walked int
	err := l.EntryHeaders(0, func(Entry) bool {
		if walked++; walked == 1 {
			if err := l.TruncateEntries(index); err != nil {
				t.Errorf("TruncateEntries(%d) under a walk: %v", index, err)
			}
		}
		return true
	})
	if !errors.Is(err, ErrTruncated) {
		t.Fatalf("EntryHeaders across TruncateEntries: %v after %d entries, want ErrTruncated", err, walked)
	}
	if l.NextOffset() != cutAt {
		t.Fatalf("NextOffset = %d after the cut, want %d", l.NextOffset(), cutAt)
	}
	if held := segmentFiles(t, dir, deletedSuffix); len(held) != 1 {
		t.Fatalf("removed segments still on disk: %v, want the one the past cursor holds", held)
	}
	for range 2 {
		if page, err := past.Next(10, 0); !errors.Is(err, ErrTruncated) {
			t.Fatalf("Next of a cursor past the cut: %d records, %v; want ErrTruncated", len(page.Records), err)
		}
	}
	if err := past.Close(); err != nil {
		t.Fatal(err)
	}
	if held := segmentFiles(t, dir, deletedSuffix); len(held) != 0 {
		t.Fatalf("removed segments still on disk after their reader closed: %v", held)
	}

	// The records appended after the cut, told apart from the removed ones.
	newValue := func(off uint64) []byte { return fmt.Appendf(nil, "new-%d", off) }
	for i := index; i < index+30; i++ {
		off := l.NextOffset()
		if _, err := l.AppendEntry(EntryMeta{Index: i, Term: 99}, [][]byte{newValue(off)}, t0, nil); err != nil {
			t.Fatal(err)
		}
	}
	newEnd := l.NextOffset()
	for name, c := range map[string]*Cursor{"before the cut": before, "at the cut": at} {
		from := c.Offset()
		for off := from; off < newEnd; {
			page, err := c.Next(7, 0)
			if err != nil || len(page.Records) == 0 {
				t.Fatalf("cursor %s at %d: %d records, %v", name, off, len(page.Records), err)
			}
			for _, r := range page.Records {
				want := payload(off)
				if off >= cutAt {
					want = newValue(off)
				}
				if r.Offset != off || !bytes.Equal(r.Value, want) {
					t.Fatalf("cursor %s: offset %d %q, want %d %q", name, r.Offset, r.Value, off, want)
				}
				off++
			}
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	mustClose(t, l)
	l = mustOpen(t, dir, smallConfig())
	defer mustClose(t, l)
	if l.NextOffset() != newEnd {
		t.Fatalf("reopened at %d, want %d", l.NextOffset(), newEnd)
	}
}

// TestTruncateEntriesDuringARead cuts the log while a Cursor's page is
// being read: the records at and past the cut leave the page, the cursor
// is not failed (it returned none of them), and it goes on with what is
// appended after.
func TestTruncateEntriesDuringARead(t *testing.T) {
	fsys := newFaultFS()
	dir := t.TempDir()
	l := mustOpen(t, dir, smallConfig(), WithFS(fsys))
	defer mustClose(t, l)
	want := appendEntryRange(t, l, 1, 100)
	firsts := segmentFirstIndexes(t, dir)
	index := firsts[0] + 3 // inside the segment the cursor's first page reads
	cutAt := want[index-1].Base
	c, err := l.Cursor(0)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The cursor's first read takes the whole first segment, old bytes
	// and all; the truncation runs right after it, before the page is
	// decoded.
	var truncErr error
	fsys.mu.Lock()
	fsys.mu.afterRead = func() { truncErr = l.TruncateEntries(index) }
	fsys.mu.Unlock()
	page, err := c.Next(1000, 1<<20)
	if truncErr != nil {
		t.Fatalf("TruncateEntries: %v", truncErr)
	}
	if err != nil || len(page.Records) == 0 || page.Next != cutAt || c.Offset() != cutAt {
		t.Fatalf("Next across a truncation: %d records, next %d, cursor at %d, %v; want the records before the cut at %d", len(page.Records), page.Next, c.Offset(), err, cutAt)
	}
	for _, r := range page.Records {
		if r.Offset >= cutAt {
			t.Fatalf("page holds offset %d, at or past the cut at %d", r.Offset, cutAt)
		}
	}
	kept := appendEntryInTerm(t, l, index, 100)
	page, err = c.Next(1000, 1<<20)
	if err != nil || len(page.Records) != len(kept.Records) || page.Records[0].Offset != cutAt {
		t.Fatalf("Next after a new entry: %+v, %v; want its %d records from %d", page, err, len(kept.Records), cutAt)
	}
}

// TestTruncateEntriesFailsRemovedWaiters: waits for records or entries the
// cut removed receive ErrTruncated; a wait for an entry it kept completes.
func TestTruncateEntriesFailsRemovedWaiters(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Config{Fsync: FsyncNone})
	defer mustClose(t, l)
	appendEntryRange(t, l, 1, 20)
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	// Holding syncMu keeps every pass out, so the waits stay pending; the
	// test then truncates as TruncateEntries does under it.
	l.syncMu.Lock()
	appendEntryAt(t, l, 20)
	kept := l.WaitEntryDurable(20)
	a := appendEntryAt(t, l, 21)
	byOffset := l.WaitDurable(a.Base + uint64(len(a.Records)))
	byIndex := l.WaitEntryDurable(21)
	done, err := l.truncate(21)
	for _, s := range done {
		s.finalize(l.fs)
	}
	l.syncMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	for name, ch := range map[string]<-chan error{"WaitDurable": byOffset, "WaitEntryDurable": byIndex} {
		if err := <-ch; !errors.Is(err, ErrTruncated) {
			t.Fatalf("%s for a removed entry: %v, want ErrTruncated", name, err)
		}
	}
	select {
	case err := <-kept:
		if err != nil {
			t.Fatalf("WaitEntryDurable for a kept entry: %v", err)
		}
	case <-time.After(eventTimeout):
		t.Fatal("WaitEntryDurable for a kept entry did not complete")
	}
}
