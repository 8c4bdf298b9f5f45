package persistence_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/getfelix/felix-go/persistence"
	"github.com/getfelix/felix-go/persistence/errorfs"
)

// The compaction tests live outside the package so they can fail the disk
// with errorfs, which imports persistence.

var compactT0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func compactConfig() persistence.Config {
	return persistence.Config{SegmentBytes: 512, IndexIntervalBytes: 64, Fsync: persistence.FsyncOnCommit}
}

func compactValue(off uint64) []byte { return fmt.Appendf(nil, "value-%d", off) }

// fillLog appends n one-record batches and waits until they are durable.
func fillLog(t *testing.T, l *persistence.Log, n int) {
	t.Helper()
	for range n {
		off := l.NextOffset()
		a, err := l.Append(off, [][]byte{compactValue(off)}, compactT0.Add(time.Duration(off)*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-l.WaitDurable(a.Next):
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("append not durable within 10 s")
		}
	}
}

// dropOdd keeps the even offsets below the horizon, rewritten, so a test
// sees both the gaps and the rewrite.
func dropOdd(off uint64, value []byte) ([]byte, bool, error) {
	if off%2 == 1 {
		return nil, false, nil
	}
	return append([]byte("kept:"), value...), true, nil
}

// wantAfterCompaction is what dropOdd leaves of n records below horizon.
func wantAfterCompaction(n int, horizon uint64) map[uint64]string {
	want := map[uint64]string{}
	for off := range uint64(n) {
		switch {
		case off >= horizon:
			want[off] = string(compactValue(off))
		case off%2 == 0:
			want[off] = "kept:" + string(compactValue(off))
		}
	}
	return want
}

func readAll(t *testing.T, l *persistence.Log, from uint64) map[uint64]string {
	t.Helper()
	got := map[uint64]string{}
	for next := from; next < l.NextOffset(); {
		page, err := l.Read(next, 7, 0)
		if err != nil {
			t.Fatalf("read from %d: %v", next, err)
		}
		if page.Next <= next {
			t.Fatalf("read from %d moved to %d", next, page.Next)
		}
		for _, r := range page.Records {
			got[r.Offset] = string(r.Value)
		}
		next = page.Next
	}
	return got
}

func sameRecords(t *testing.T, what string, got, want map[uint64]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d records, want %d", what, len(got), len(want))
	}
	for off, v := range want {
		if got[off] != v {
			t.Fatalf("%s: offset %d is %q, want %q", what, off, got[off], v)
		}
	}
}

// Compaction keeps every offset where it was: reads from anywhere,
// including from inside a gap, find the next record kept, records at and
// above the horizon are untouched, and a reopened log (indexes rebuilt or
// not) reads the same and remembers the horizon.
func TestCompactionKeepsOffsetsAcrossGaps(t *testing.T) {
	dir := t.TempDir()
	l, err := persistence.Open(dir, compactConfig())
	if err != nil {
		t.Fatal(err)
	}
	const n = 120
	fillLog(t, l, n)
	const horizon = 70
	c, err := l.PrepareCompaction(horizon, dropOdd)
	if err != nil {
		t.Fatal(err)
	}
	if c.Horizon() != horizon {
		t.Fatalf("prepared below %d, want %d", c.Horizon(), horizon)
	}
	st, err := c.Commit()
	if err != nil {
		t.Fatal(err)
	}
	if st.RecordsRemoved != horizon/2 || st.Segments == 0 || st.BytesRemoved <= 0 {
		t.Fatalf("stats %+v; want %d records removed from some segments", st, horizon/2)
	}
	want := wantAfterCompaction(n, horizon)
	sameRecords(t, "after the commit", readAll(t, l, 0), want)
	// From inside a gap: the next record kept.
	page, err := l.Read(1, 1, 0)
	if err != nil || len(page.Records) != 1 || page.Records[0].Offset != 2 {
		t.Fatalf("read from the gap at 1: %+v, %v; want offset 2", page, err)
	}
	fillLog(t, l, 5) // appends go on at the offsets they had
	want = wantAfterCompaction(n+5, horizon)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, cfg := range []persistence.Config{compactConfig(), {SegmentBytes: 512, IndexIntervalBytes: 64, VerifyOnOpen: true}} {
		l, err = persistence.Open(dir, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got := l.CompactedBelow(); got != horizon {
			t.Fatalf("reopened: compacted below %d, want %d", got, horizon)
		}
		sameRecords(t, "reopened", readAll(t, l, 0), want)
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// A second compaction over the compacted segments, higher.
	l, err = persistence.Open(dir, compactConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err = l.PrepareCompaction(100, func(off uint64, v []byte) ([]byte, bool, error) { return v, off%4 == 0, nil })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Commit(); err != nil {
		t.Fatal(err)
	}
	for off, v := range want {
		if off < 100 && off%4 != 0 {
			delete(want, off)
		} else if off >= horizon && off < 100 {
			want[off] = v
		}
	}
	sameRecords(t, "compacted twice", readAll(t, l, 0), want)
}

// A cursor that was reading an old segment when the commit swapped it
// finishes it from the old file.
func TestCompactionLeavesAnOpenCursorItsSegment(t *testing.T) {
	l, err := persistence.Open(t.TempDir(), compactConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	fillLog(t, l, 60)
	cur, err := l.Cursor(0)
	if err != nil {
		t.Fatal(err)
	}
	first, err := cur.Next(1, 0)
	if err != nil || len(first.Records) != 1 {
		t.Fatalf("first record: %+v, %v", first, err)
	}
	c, err := l.PrepareCompaction(l.NextOffset(), dropOdd)
	if err != nil {
		t.Fatal(err)
	}
	// The active segment is never rewritten: the horizon stops at it.
	if end := l.NextOffset(); c.Horizon() == 0 || c.Horizon() >= end {
		t.Fatalf("prepared below %d of a log ending at %d; want the active segment's base", c.Horizon(), end)
	}
	if _, err := c.Commit(); err != nil {
		t.Fatal(err)
	}
	sameRecords(t, "after the commit", readAll(t, l, 0), wantAfterCompaction(60, c.Horizon()))
	page, err := cur.Next(1, 0)
	if err != nil || len(page.Records) != 1 || page.Records[0].Offset != 1 || string(page.Records[0].Value) != string(compactValue(1)) {
		t.Fatalf("the cursor's next record: %+v, %v; want offset 1 from the old segment", page, err)
	}
	if err := cur.Close(); err != nil {
		t.Fatal(err)
	}
}

// entryLogSpec is the entry log the entry compaction tests write: index i
// holds i%3+1 records (every seventh entry is empty, every eleventh a
// conf change: no records), terms rising every 25 entries.
func appendEntryLog(t *testing.T, l *persistence.Log, from, to uint64) {
	t.Helper()
	for i := from; i <= to; i++ {
		meta := persistence.EntryMeta{Index: i, Term: 1 + i/25}
		var records [][]byte
		switch {
		case i%7 == 0:
			meta.Kind = persistence.EntryEmpty
		case i%11 == 0:
			meta.Kind, meta.Control = persistence.EntryConfChange, fmt.Appendf(nil, "conf-%d", i)
		default:
			for range i%3 + 1 {
				records = append(records, compactValue(l.NextOffset()+uint64(len(records))))
			}
		}
		if _, err := l.AppendEntry(meta, records, compactT0.Add(time.Duration(i)*time.Millisecond), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
}

func entryHeaders(t *testing.T, l *persistence.Log) []persistence.Entry {
	t.Helper()
	var out []persistence.Entry
	if err := l.EntryHeaders(l.StartOffset(), func(e persistence.Entry) bool {
		out = append(out, e)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// A log of raft entries compacts entry by entry: every entry stays with
// its index, term, kind, base and span (so a window of indexes and terms
// rebuilt from the headers is the same), an entry whose records changed
// is marked compacted and no longer read as an entry, one whose records
// all went stays holding none, entries without records and those at or
// above the horizon are as written, and a reopened log reads the same and
// takes the next entry.
func TestCompactionOfAnEntryLog(t *testing.T) {
	dir := t.TempDir()
	l, err := persistence.Open(dir, compactConfig())
	if err != nil {
		t.Fatal(err)
	}
	appendEntryLog(t, l, 1, 80)
	n := int(l.NextOffset())
	before := entryHeaders(t, l)
	const horizon = 90
	// Drop the odd offsets, and every record of the entries whose first
	// record is at a multiple of 10.
	drops := map[uint64]bool{}
	for _, e := range before {
		if e.Base%10 == 0 && e.Kind == persistence.EntryRecords {
			for off := e.Base; off < e.Base+uint64(e.Index%3+1); off++ {
				drops[off] = true
			}
		}
	}
	keep := func(off uint64, v []byte) ([]byte, bool, error) {
		if drops[off] {
			return nil, false, nil
		}
		return dropOdd(off, v)
	}
	c, err := l.PrepareCompaction(horizon, keep)
	if err != nil {
		t.Fatal(err)
	}
	if c.Horizon() != horizon {
		t.Fatalf("prepared below %d, want %d", c.Horizon(), horizon)
	}
	if _, err := c.Commit(); err != nil {
		t.Fatal(err)
	}
	want := wantAfterCompaction(n, horizon)
	for off := range drops {
		if off < horizon {
			delete(want, off)
		}
	}
	check := func(what string) {
		t.Helper()
		sameRecords(t, what, readAll(t, l, 0), want)
		after := entryHeaders(t, l)
		if len(after) != len(before) {
			t.Fatalf("%s: %d entries, want %d", what, len(after), len(before))
		}
		emptied := 0
		for i, e := range after {
			b := before[i]
			if e.Index != b.Index || e.Term != b.Term || e.Kind != b.Kind || e.Base != b.Base || string(e.Control) != string(b.Control) {
				t.Fatalf("%s: entry %d is %+v, was %+v", what, i, e, b)
			}
			// Every entry of records starting below the horizon lost or
			// rewrote a record; none at or above it did.
			if wantCompacted := e.Kind == persistence.EntryRecords && e.Base < horizon; e.Compacted != wantCompacted {
				t.Fatalf("%s: entry %d (base %d, kind %v) compacted %v, want %v", what, e.Index, e.Base, e.Kind, e.Compacted, wantCompacted)
			}
			got, err := l.ReadEntries(e.Base, e.Index, 0)
			switch {
			case e.Compacted && !errors.Is(err, persistence.ErrEntryCompacted):
				t.Fatalf("%s: ReadEntries of compacted entry %d: %v, %v; want ErrEntryCompacted", what, e.Index, got, err)
			case !e.Compacted && (err != nil || len(got) != 1 || got[0].Index != e.Index):
				t.Fatalf("%s: ReadEntries of entry %d: %v, %v", what, e.Index, got, err)
			}
			if e.Compacted && drops[e.Base] {
				emptied++
			}
		}
		if emptied == 0 {
			t.Fatalf("%s: no entry lost all its records", what)
		}
		// A read of entries from one left as it was below the horizon (an
		// entry without records) stops before the compacted one after it.
		for i, e := range after[:len(after)-1] {
			if e.Compacted || !after[i+1].Compacted {
				continue
			}
			if got, err := l.ReadEntries(e.Base, e.Index, 1<<20); err != nil || len(got) != 1 {
				t.Fatalf("%s: ReadEntries from entry %d before a compacted one: %d entries, %v; want 1", what, e.Index, len(got), err)
			}
			break
		}
	}
	check("after the commit")
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, cfg := range []persistence.Config{compactConfig(), {SegmentBytes: 512, IndexIntervalBytes: 64, VerifyOnOpen: true}} {
		if l, err = persistence.Open(dir, cfg); err != nil {
			t.Fatal(err)
		}
		if got := l.CompactedBelow(); got != horizon {
			t.Fatalf("reopened: compacted below %d, want %d", got, horizon)
		}
		check("reopened")
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if l, err = persistence.Open(dir, compactConfig()); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// The log goes on: the next entry, then a second compaction over the
	// compacted entries that keeps every fourth offset.
	appendEntryLog(t, l, 81, 120)
	before = entryHeaders(t, l)
	want = readAll(t, l, 0)
	c, err = l.PrepareCompaction(140, func(off uint64, v []byte) ([]byte, bool, error) { return v, off%4 == 0, nil })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Commit(); err != nil {
		t.Fatal(err)
	}
	for off := range want {
		if off < c.Horizon() && off%4 != 0 {
			delete(want, off)
		}
	}
	sameRecords(t, "compacted twice", readAll(t, l, 0), want)
	if after := entryHeaders(t, l); len(after) != len(before) || after[len(after)-1].Index != 120 {
		t.Fatalf("compacted twice: %d entries, want %d ending at 120", len(after), len(before))
	}
}

// Attributed entries are refused, and a compaction that TruncateEntries
// ran under is stale: its copies may hold entries that were cut.
func TestCompactionOfAnEntryLogRefusals(t *testing.T) {
	l, err := persistence.Open(t.TempDir(), compactConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	appendEntryLog(t, l, 1, 60)
	c, err := l.PrepareCompaction(l.NextOffset(), dropOdd)
	if err != nil {
		t.Fatal(err)
	}
	last, _ := l.LastEntry()
	if err := l.TruncateEntries(last.Index); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Commit(); !errors.Is(err, persistence.ErrCompactionStale) {
		t.Fatalf("commit after TruncateEntries: %v, want ErrCompactionStale", err)
	}
	if got := l.CompactedBelow(); got != 0 {
		t.Fatalf("compacted below %d after a stale commit", got)
	}

	a, err := persistence.Open(t.TempDir(), compactConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for i := range uint64(40) {
		joined := persistence.JoinRecords([][]byte{compactValue(i)}, [][]byte{persistence.EncodeAttrs([]byte("k"), nil)})
		if _, err := a.AppendEntry(persistence.EntryMeta{Index: i + 1, Term: 1, Attributed: true}, joined, compactT0, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.PrepareCompaction(a.NextOffset(), dropOdd); !errors.Is(err, persistence.ErrNotCompactable) {
		t.Fatalf("compact attributed entries: %v; want ErrNotCompactable", err)
	}
}

// TestCompactionKilledAtEveryStep fails the disk from the k-th change a
// compaction makes on (a kill there: nothing after it reaches the disk,
// everything before it does, as the page cache survives a kill -9), for
// every k until a compaction gets through, and reopens on a working disk:
// the log holds every record as before, or exactly what compaction kept,
// never a mix or a loss.
func TestCompactionKilledAtEveryStep(t *testing.T) {
	t.Run("plain batches", func(t *testing.T) { testCompactionKilledAtEveryStep(t, false) })
	// A replicated cache's log: one raft entry per record, whose entries
	// must also all stay, in order, with their indexes.
	t.Run("raft entries", func(t *testing.T) { testCompactionKilledAtEveryStep(t, true) })
}

func testCompactionKilledAtEveryStep(t *testing.T, entries bool) {
	const n, horizon = 90, 60
	before := map[uint64]string{}
	for off := range uint64(n) {
		before[off] = string(compactValue(off))
	}
	after := wantAfterCompaction(n, horizon)
	template := t.TempDir()
	l, err := persistence.Open(template, compactConfig())
	if err != nil {
		t.Fatal(err)
	}
	if entries {
		for i := range uint64(n) {
			if _, err := l.AppendEntry(persistence.EntryMeta{Index: i + 1, Term: 1}, [][]byte{compactValue(i)}, compactT0.Add(time.Duration(i)*time.Millisecond), nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.Sync(); err != nil {
			t.Fatal(err)
		}
	} else {
		fillLog(t, l, n)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for k := 1; ; k++ {
		dir := t.TempDir()
		copyDir(t, template, dir)
		disk := &countingFS{FS: errorfs.Wrap(persistence.OSFS)}
		l, err := persistence.Open(dir, compactConfig(), persistence.WithFS(disk))
		if err != nil {
			t.Fatal(err)
		}
		disk.ops.Store(0)
		disk.failAt.Store(int64(k))
		c, err := l.PrepareCompaction(horizon, dropOdd)
		if err == nil {
			_, err = c.Commit()
		}
		survived := disk.ops.Load() < int64(k)
		if survived && err != nil {
			t.Fatalf("k=%d: the disk never failed, yet compaction: %v", k, err)
		}
		_ = l.Close() // fails once the disk does
		l, err = persistence.Open(dir, compactConfig())
		if err != nil {
			t.Fatalf("k=%d: reopen after the kill: %v", k, err)
		}
		got := readAll(t, l, 0)
		compacted := l.CompactedBelow() == horizon
		if entries {
			headers := entryHeaders(t, l)
			if len(headers) != n || headers[0].Index != 1 || headers[n-1].Index != n {
				t.Fatalf("k=%d: %d entries after the kill, want 1 to %d", k, len(headers), n)
			}
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if compacted {
			sameRecords(t, fmt.Sprintf("killed at change %d, compacted", k), got, after)
		} else {
			sameRecords(t, fmt.Sprintf("killed at change %d, not compacted", k), got, before)
		}
		leftovers, _ := filepath.Glob(filepath.Join(dir, "*.compact"))
		if len(leftovers) > 0 {
			t.Fatalf("k=%d: reopening left %v", k, leftovers)
		}
		if survived {
			if !compacted {
				t.Fatalf("k=%d: a compaction that went through is not seen after reopening", k)
			}
			t.Logf("a kill at each of the %d changes of a compaction lost nothing", k-1)
			return
		}
		if k > 1000 {
			t.Fatal("a compaction makes more than 1000 changes to the disk")
		}
	}
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// countingFS counts the changes made through it (creations, writes,
// fsyncs, truncations, renames, removals) and fails the disk from the
// failAt-th on.
type countingFS struct {
	*errorfs.FS
	ops    atomic.Int64
	failAt atomic.Int64 // 0: never
}

func (c *countingFS) change() {
	if n := c.ops.Add(1); c.failAt.Load() > 0 && n >= c.failAt.Load() {
		c.SetFailing(true)
	}
}

func (c *countingFS) OpenFile(name string, flag int, perm fs.FileMode) (persistence.File, error) {
	if flag&(os.O_CREATE|os.O_TRUNC) != 0 {
		c.change()
	}
	f, err := c.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return countingFile{File: f, c: c}, nil
}

func (c *countingFS) Rename(oldname, newname string) error {
	c.change()
	return c.FS.Rename(oldname, newname)
}

func (c *countingFS) Remove(name string) error {
	c.change()
	return c.FS.Remove(name)
}

func (c *countingFS) SyncDir(name string) error {
	c.change()
	return c.FS.SyncDir(name)
}

type countingFile struct {
	persistence.File
	c *countingFS
}

func (f countingFile) WriteAt(b []byte, off int64) (int, error) {
	f.c.change()
	return f.File.WriteAt(b, off)
}

func (f countingFile) Sync() error {
	f.c.change()
	return f.File.Sync()
}

func (f countingFile) Truncate(size int64) error {
	f.c.change()
	return f.File.Truncate(size)
}

// A segment whose records are all kept but rewritten (a cache's records
// losing their conditions) is rewritten too: kept as written, a record
// could name one dropped elsewhere.
func TestCompactionRewritesWhatItOnlyChanges(t *testing.T) {
	l, err := persistence.Open(t.TempDir(), compactConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	fillLog(t, l, 60)
	rewrite := func(_ uint64, v []byte) ([]byte, bool, error) { return append([]byte("kept:"), v...), true, nil }
	c, err := l.PrepareCompaction(l.SealedEnd(), rewrite)
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.Commit()
	if err != nil || st.Segments == 0 || st.RecordsRemoved != 0 {
		t.Fatalf("rewrite only: %+v, %v; want segments rewritten, nothing removed", st, err)
	}
	want := map[uint64]string{}
	for off := range uint64(60) {
		want[off] = string(compactValue(off))
		if off < c.Horizon() {
			want[off] = "kept:" + want[off]
		}
	}
	sameRecords(t, "rewritten", readAll(t, l, 0), want)
}
