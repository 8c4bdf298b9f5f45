package persistence

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"
)

// specOf is the entry the tests append at index: every kind, conf changes
// with and without control bytes, records entries of 1 to 4 records, every
// third one stamped, and a term that rises every 16 entries.
func specOf(index uint64) (meta EntryMeta, records int, stamped bool) {
	meta = EntryMeta{Index: index, Term: 1 + index/16}
	switch {
	case index%7 == 3:
		meta.Kind = EntryEmpty
	case index%11 == 5:
		meta.Kind, meta.Control = EntryConfChange, fmt.Appendf(nil, "conf-change-%d", index)
	case index%13 == 6:
		meta.Kind = EntryConfChangeV2
		if index%26 != 6 {
			meta.Control = fmt.Appendf(nil, "conf-change-v2-%d", index)
		}
	default:
		return meta, 1 + int(index%4), index%3 == 0
	}
	return meta, 0, false
}

// entryTime is when the tests append the entry at index.
func entryTime(index uint64) time.Time { return t0.Add(time.Duration(index) * time.Millisecond) }

// appendEntryAt appends specOf(index) at the log's next offset, its records
// payload(offset) as readAll expects, and returns the entry as the log must
// give it back.
func appendEntryAt(t testing.TB, l *Log, index uint64) Entry {
	t.Helper()
	return appendEntryInTerm(t, l, index, 0)
}

// appendEntryInTerm is appendEntryAt with the term raised by bump: a new
// leader's entry, told apart from the one it replaces.
func appendEntryInTerm(t testing.TB, l *Log, index, bump uint64) Entry {
	t.Helper()
	meta, n, stamped := specOf(index)
	meta.Term += bump
	base := l.NextOffset()
	var records [][]byte
	if n > 0 {
		records = batchOf(base, n)
	}
	var stamp *Stamp
	if stamped {
		s := stampAt(base)
		stamp = &s
	}
	a, err := l.AppendEntry(meta, records, entryTime(index), stamp)
	if err != nil {
		t.Fatalf("AppendEntry(index %d, %v, %d records): %v", index, meta.Kind, n, err)
	}
	if a.Base != base || a.Next != base+uint64(n) {
		t.Fatalf("AppendEntry(index %d, %d records) = [%d, %d), want [%d, %d)", index, n, a.Base, a.Next, base, base+uint64(n))
	}
	return Entry{EntryMeta: meta, Base: base, Time: a.Time, Stamp: stamp, Records: records}
}

// appendEntryRange appends the entries with indexes [from, to).
func appendEntryRange(t testing.TB, l *Log, from, to uint64) []Entry {
	t.Helper()
	var out []Entry
	for i := from; i < to; i++ {
		out = append(out, appendEntryAt(t, l, i))
	}
	return out
}

// diffEntry says how got differs from want, or "". Records are compared
// when withRecords, else got must have none.
func diffEntry(got, want Entry, withRecords bool) string {
	switch {
	case got.Index != want.Index || got.Term != want.Term || got.Kind != want.Kind:
		return fmt.Sprintf("index/term/kind %d/%d/%v, want %d/%d/%v", got.Index, got.Term, got.Kind, want.Index, want.Term, want.Kind)
	case !bytes.Equal(got.Control, want.Control):
		return fmt.Sprintf("control %q, want %q", got.Control, want.Control)
	case got.Base != want.Base:
		return fmt.Sprintf("base %d, want %d", got.Base, want.Base)
	case !got.Time.Equal(want.Time):
		return fmt.Sprintf("time %v, want %v", got.Time, want.Time)
	case (got.Stamp == nil) != (want.Stamp == nil) || (got.Stamp != nil && *got.Stamp != *want.Stamp):
		return fmt.Sprintf("stamp %v, want %v", got.Stamp, want.Stamp)
	case withRecords && !slices.EqualFunc(got.Records, want.Records, bytes.Equal):
		return fmt.Sprintf("records %q, want %q", got.Records, want.Records)
	case !withRecords && got.Records != nil:
		return fmt.Sprintf("records %q, want none", got.Records)
	}
	return ""
}

func collectHeaders(t testing.TB, l *Log, from uint64) []Entry {
	t.Helper()
	var got []Entry
	if err := l.EntryHeaders(from, func(e Entry) bool { got = append(got, e); return true }); err != nil {
		t.Fatalf("EntryHeaders(%d): %v", from, err)
	}
	return got
}

func expectHeaders(t testing.TB, got, want []Entry, what string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d entries, want %d", what, len(got), len(want))
	}
	for i := range got {
		if d := diffEntry(got[i], want[i], false); d != "" {
			t.Fatalf("%s: entry %d (index %d): %s", what, i, want[i].Index, d)
		}
	}
}

// checkEntries checks everything a log of the entries want must answer:
// LastEntry, EntryHeaders, ReadEntries of each entry and of all, every
// record through Read, Stamps, and NextOffset.
func checkEntries(t testing.TB, l *Log, want []Entry) {
	t.Helper()
	last, ok := l.LastEntry()
	if len(want) == 0 {
		if ok {
			t.Fatalf("LastEntry = %+v, want none", last)
		}
		return
	}
	if !ok {
		t.Fatalf("LastEntry: none, want index %d", want[len(want)-1].Index)
	}
	if d := diffEntry(last, want[len(want)-1], false); d != "" {
		t.Fatalf("LastEntry: %s", d)
	}
	expectHeaders(t, collectHeaders(t, l, l.StartOffset()), want, "EntryHeaders from the start")
	for _, w := range want {
		got, err := l.ReadEntries(w.Base, w.Index, 0)
		if err != nil || len(got) != 1 {
			t.Fatalf("ReadEntries(%d, %d, 0): %d entries, %v; want 1", w.Base, w.Index, len(got), err)
		}
		if d := diffEntry(got[0], w, true); d != "" {
			t.Fatalf("ReadEntries(%d, %d, 0): %s", w.Base, w.Index, d)
		}
	}
	all, err := l.ReadEntries(want[0].Base, want[0].Index, 1<<30)
	if err != nil || len(all) != len(want) {
		t.Fatalf("ReadEntries of everything: %d entries, %v; want %d", len(all), err, len(want))
	}
	for i := range all {
		if d := diffEntry(all[i], want[i], true); d != "" {
			t.Fatalf("ReadEntries of everything: entry %d: %s", i, d)
		}
	}
	readAll(t, l, l.StartOffset())
	var stamps []gotStamp
	next := want[0].Base
	for _, w := range want {
		if w.Stamp != nil {
			stamps = append(stamps, gotStamp{*w.Stamp, w.Base, uint32(len(w.Records))})
		}
		next = w.Base + uint64(len(w.Records))
	}
	if got := collectStamps(t, l, l.StartOffset()); !slices.Equal(got, stamps) {
		t.Fatalf("Stamps:\n got %v\nwant %v", got, stamps)
	}
	if l.NextOffset() != next {
		t.Fatalf("NextOffset = %d, want %d", l.NextOffset(), next)
	}
}

// TestEntryRoundTrip appends entries of every kind across many segments and
// reads them back every way, before and after a reopen, and goes on
// appending after it.
func TestEntryRoundTrip(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, smallConfig())
	want := appendEntryRange(t, l, 1, 200)
	if n := len(segmentFiles(t, dir, logExt)); n < 5 {
		t.Fatalf("setup: %d segments, want several", n)
	}
	checkEntries(t, l, want)
	mustClose(t, l)

	l = mustOpen(t, dir, smallConfig())
	checkEntries(t, l, want)
	want = append(want, appendEntryRange(t, l, 200, 230)...)
	checkEntries(t, l, want)
	mustClose(t, l)
	l = mustOpen(t, dir, Config{VerifyOnOpen: true})
	defer mustClose(t, l)
	checkEntries(t, l, want)
}

// TestEntryKindsRoundTrip writes one entry of each kind and shape and reads
// each back exactly.
func TestEntryKindsRoundTrip(t *testing.T) {
	tests := []struct {
		name    string
		meta    EntryMeta
		records [][]byte
		stamp   *Stamp
	}{
		{"records", EntryMeta{Kind: EntryRecords}, [][]byte{[]byte("a"), {}, []byte("ccc")}, nil},
		{"stamped records", EntryMeta{Kind: EntryRecords}, [][]byte{[]byte("x")}, &Stamp{Producer: 7, Sequence: 8, Digest: 9}},
		{"empty", EntryMeta{Kind: EntryEmpty}, nil, nil},
		{"conf change", EntryMeta{Kind: EntryConfChange, Control: []byte("add node 2")}, nil, nil},
		{"conf change without bytes", EntryMeta{Kind: EntryConfChange}, nil, nil},
		{"conf change v2", EntryMeta{Kind: EntryConfChangeV2, Control: bytes.Repeat([]byte{0xCC}, 3000)}, nil, nil},
		{"conf change v2 leaving joint", EntryMeta{Kind: EntryConfChangeV2}, nil, nil},
	}
	dir := t.TempDir()
	l := mustOpen(t, dir, smallConfig())
	var want []Entry
	for i, tt := range tests {
		meta := tt.meta
		meta.Index, meta.Term = uint64(i+1), 3
		base := l.NextOffset()
		a, err := l.AppendEntry(meta, tt.records, t0, tt.stamp)
		if err != nil {
			t.Fatalf("%s: AppendEntry: %v", tt.name, err)
		}
		if a.Base != base || a.Next != base+uint64(len(tt.records)) {
			t.Fatalf("%s: appended [%d, %d), want [%d, %d)", tt.name, a.Base, a.Next, base, base+uint64(len(tt.records)))
		}
		want = append(want, Entry{EntryMeta: meta, Base: base, Time: a.Time, Stamp: tt.stamp, Records: tt.records})
		got, err := l.ReadEntries(base, meta.Index, 0)
		if err != nil || len(got) != 1 {
			t.Fatalf("%s: ReadEntries: %d entries, %v", tt.name, len(got), err)
		}
		if d := diffEntry(got[0], want[i], true); d != "" {
			t.Fatalf("%s: ReadEntries: %s", tt.name, d)
		}
		// The caller owns what it got: changing it changes nothing.
		if len(got[0].Records) > 0 && len(got[0].Records[0]) > 0 {
			got[0].Records[0][0] ^= 0xFF
		}
		if len(got[0].Control) > 0 {
			got[0].Control[0] ^= 0xFF
		}
	}
	for _, reopen := range []bool{false, true} {
		if reopen {
			mustClose(t, l)
			l = mustOpen(t, dir, smallConfig())
		}
		expectHeaders(t, collectHeaders(t, l, 0), want, fmt.Sprintf("headers (reopened %v)", reopen))
		all, err := l.ReadEntries(0, 1, 1<<20)
		if err != nil || len(all) != len(want) {
			t.Fatalf("ReadEntries of all: %d, %v", len(all), err)
		}
		for i := range all {
			if d := diffEntry(all[i], want[i], true); d != "" {
				t.Fatalf("%s (reopened %v): %s", tests[i].name, reopen, d)
			}
		}
	}
	mustClose(t, l)
}

// TestEntryHeadersFromRememberedBase starts walks at every entry's Base: the
// walk holds that entry and the ones after it, and, before it, only the
// entries without records that share its Base. fn returning false stops it.
func TestEntryHeadersFromRememberedBase(t *testing.T) {
	l := mustOpen(t, t.TempDir(), smallConfig())
	defer mustClose(t, l)
	want := appendEntryRange(t, l, 1, 150)
	// Entries without records at the very end share NextOffset.
	for _, kind := range []EntryKind{EntryEmpty, EntryConfChange} {
		meta := EntryMeta{Index: want[len(want)-1].Index + 1, Term: 20, Kind: kind}
		base := l.NextOffset()
		a, err := l.AppendEntry(meta, nil, t0.Add(time.Hour), nil)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, Entry{EntryMeta: meta, Base: base, Time: a.Time})
	}
	for i, w := range want {
		first := i
		for first > 0 && want[first-1].Base == w.Base {
			first--
		}
		expectHeaders(t, collectHeaders(t, l, w.Base), want[first:], fmt.Sprintf("EntryHeaders(%d) for index %d", w.Base, w.Index))
	}
	calls := 0
	if err := l.EntryHeaders(0, func(Entry) bool { calls++; return calls < 3 }); err != nil || calls != 3 {
		t.Fatalf("EntryHeaders stopped after %d calls, %v; want 3", calls, err)
	}
	if err := l.EntryHeaders(l.NextOffset()+1, func(Entry) bool { return true }); !errors.As(err, new(*ErrOffsetInFuture)) {
		t.Fatalf("EntryHeaders past the end: %v, want ErrOffsetInFuture", err)
	}
}

// TestReadEntriesAcrossSegmentsAndMaxBytes reads runs of entries that span
// segments, capped by maxBytes, and entries the log does not hold.
func TestReadEntriesAcrossSegmentsAndMaxBytes(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, smallConfig())
	defer mustClose(t, l)
	want := appendEntryRange(t, l, 1, 120)
	if len(segmentFiles(t, dir, logExt)) < 4 {
		t.Fatal("setup: want several segments")
	}
	size := func(e Entry) int {
		n := len(e.Control)
		for _, r := range e.Records {
			n += len(r)
		}
		return n
	}
	for i := 0; i < len(want); i += 7 {
		w := want[i]
		got, err := l.ReadEntries(w.Base, w.Index, 1<<30)
		if err != nil || len(got) != len(want)-i {
			t.Fatalf("ReadEntries(%d, %d) to the end: %d entries, %v; want %d", w.Base, w.Index, len(got), err, len(want)-i)
		}
		for j := range got {
			if d := diffEntry(got[j], want[i+j], true); d != "" {
				t.Fatalf("ReadEntries(%d, %d) entry %d: %s", w.Base, w.Index, j, d)
			}
		}
		// maxBytes: as many entries as fit, at least one.
		for _, limit := range []int{0, 1, 40, 200} {
			got, err := l.ReadEntries(w.Base, w.Index, limit)
			fits, total := 1, size(want[i])
			for i+fits < len(want) && total+size(want[i+fits]) <= limit {
				total += size(want[i+fits])
				fits++
			}
			if err != nil || len(got) != fits {
				t.Fatalf("ReadEntries(%d, %d, maxBytes %d): %d entries, %v; want %d", w.Base, w.Index, limit, len(got), err, fits)
			}
		}
		// From an earlier base: the entry is found by reading forward.
		if got, err := l.ReadEntries(want[max(i-10, 0)].Base, w.Index, 0); err != nil || len(got) != 1 || got[0].Index != w.Index {
			t.Fatalf("ReadEntries from an earlier base for index %d: %v, %v", w.Index, got, err)
		}
	}
	last := want[len(want)-1]
	for _, tt := range []struct {
		name        string
		base, index uint64
	}{
		{"past the last entry", last.Base, last.Index + 1},
		{"before the base", want[50].Base, want[10].Index},
	} {
		if _, err := l.ReadEntries(tt.base, tt.index, 0); !errors.Is(err, ErrNoEntry) {
			t.Fatalf("ReadEntries %s: %v, want ErrNoEntry", tt.name, err)
		}
	}
}

// zeroRecordLog appends runs of entries without records between records
// entries, including runs that open the log, open a segment, end a
// segment, and outgrow a segment by themselves, with an index entry due at
// every batch; each entry a millisecond after the last.
func zeroRecordLog(t *testing.T, dir string, cfg Config) (*Log, []Entry) {
	t.Helper()
	l := mustOpen(t, dir, cfg)
	var want []Entry
	index := uint64(1)
	add := func(kind EntryKind, records int) {
		meta := EntryMeta{Index: index, Term: 1 + index/30, Kind: kind}
		if kind == EntryConfChange {
			meta.Control = fmt.Appendf(nil, "cc-%d", index)
		}
		base := l.NextOffset()
		var recs [][]byte
		if records > 0 {
			recs = batchOf(base, records)
		}
		a, err := l.AppendEntry(meta, recs, entryTime(index), nil)
		if err != nil {
			t.Fatalf("AppendEntry(%d, %v): %v", index, kind, err)
		}
		want = append(want, Entry{EntryMeta: meta, Base: base, Time: a.Time, Records: recs})
		index++
	}
	add(EntryEmpty, 0) // a new leader's first entry opens the log
	add(EntryConfChange, 0)
	for round := range 40 {
		add(EntryRecords, 1+round%3)
		for range round % 4 {
			add(EntryEmpty, 0)
		}
		if round%5 == 0 {
			add(EntryConfChange, 0)
		}
	}
	// More entries without records than one segment holds.
	for range 60 {
		add(EntryEmpty, 0)
	}
	add(EntryRecords, 2)
	add(EntryRecords, 1)
	return l, want
}

// TestZeroRecordEntriesBetweenRecords: entries without records take no
// offset, and every reader of records sees the records as if they were not
// there: offsets contiguous, Read and Cursor from every offset,
// OffsetForTime at every entry's time, Stamps; the indexes load without a
// rebuild, before and after a reopen.
func TestZeroRecordEntriesBetweenRecords(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{SegmentBytes: 1024, IndexIntervalBytes: 1, Fsync: FsyncNone}
	l, want := zeroRecordLog(t, dir, cfg)
	logs := segmentFiles(t, dir, logExt)
	if len(logs) < 3 {
		t.Fatalf("setup: %d segments, want several", len(logs))
	}
	startsWithoutRecords, oversize := 0, 0
	for _, path := range logs {
		b, _ := os.ReadFile(path)
		if v, _, err := decodeBatch(b); err == nil && v.count == 0 {
			startsWithoutRecords++
		}
		// A segment of entries without records cannot roll: the next
		// would have its base, hence its name.
		if int64(len(b)) > 2*cfg.SegmentBytes {
			oversize++
		}
	}
	if startsWithoutRecords < 2 || oversize != 1 {
		t.Fatalf("setup: %d segments start with an entry without records (want 2 or more), %d outgrew SegmentBytes (want 1)", startsWithoutRecords, oversize)
	}
	check := func(l *Log) {
		t.Helper()
		checkEntries(t, l, want)
		next := l.NextOffset()
		for from := range next + 1 {
			page, err := l.Read(from, 3, 0)
			if err != nil {
				t.Fatalf("Read(%d): %v", from, err)
			}
			if n := min(3, next-from); uint64(len(page.Records)) != n || (n > 0 && page.Records[0].Offset != from) {
				t.Fatalf("Read(%d, 3): %d records from %v, want %d from %d", from, len(page.Records), page.Records, n, from)
			}
		}
		c, err := l.Cursor(0)
		if err != nil {
			t.Fatal(err)
		}
		for off := uint64(0); off < next; {
			page, err := c.Next(2, 0)
			if err != nil || len(page.Records) == 0 {
				t.Fatalf("Cursor.Next at %d: %d records, %v", off, len(page.Records), err)
			}
			for _, r := range page.Records {
				if r.Offset != off || !bytes.Equal(r.Value, payload(off)) {
					t.Fatalf("Cursor: offset %d %q, want %d", r.Offset, r.Value, off)
				}
				off++
			}
		}
		c.Close()
		for _, w := range want {
			for _, delta := range []time.Duration{-time.Microsecond, 0, time.Microsecond} {
				at := w.Time.Add(delta)
				got, err := l.OffsetForTime(at)
				if wantOff := firstAtOrAfter(t, l, at); err != nil || got != wantOff {
					t.Fatalf("OffsetForTime(entry %d %+v) = %d, %v; want %d", w.Index, delta, got, err, wantOff)
				}
			}
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, s := range l.mu.segments[:len(l.mu.segments)-1] {
			if loaded, ok := loadIndexes(l.fs, s, s.size); !ok || !slices.Equal(loaded, s.entries) {
				t.Fatalf("%s: index files %v (ok %v), want the entries in memory %v", s.name(), loaded, ok, s.entries)
			}
		}
	}
	check(l)
	mustClose(t, l)
	l = mustOpen(t, dir, cfg)
	defer mustClose(t, l)
	check(l)
}

// TestAppendEntryRefusals: gaps, repeats, index 0, shapes that do not go
// together, terms going back, and mixing with plain batches are refused,
// and leave the log as it was, before and after a reopen.
func TestAppendEntryRefusals(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, smallConfig())
	want := appendEntryRange(t, l, 5, 40) // an empty log takes any first index
	last := want[len(want)-1]
	refusals := func(l *Log) {
		t.Helper()
		for _, index := range []uint64{last.Index + 2, last.Index, last.Index - 3, 1} {
			_, err := l.AppendEntry(EntryMeta{Index: index, Term: last.Term, Kind: EntryEmpty}, nil, t0, nil)
			var gap *ErrEntryIndex
			if !errors.As(err, &gap) || gap.Last != last.Index || gap.Got != index {
				t.Fatalf("AppendEntry(index %d) after %d: %v, want ErrEntryIndex{Last: %d, Got: %d}", index, last.Index, err, last.Index, index)
			}
		}
		next := last.Index + 1
		rec := [][]byte{[]byte("r")}
		bad := []struct {
			name    string
			meta    EntryMeta
			records [][]byte
			stamp   *Stamp
		}{
			{"index 0", EntryMeta{Index: 0, Term: last.Term, Kind: EntryEmpty}, nil, nil},
			{"records kind without records", EntryMeta{Index: next, Term: last.Term}, nil, nil},
			{"empty kind with records", EntryMeta{Index: next, Term: last.Term, Kind: EntryEmpty}, rec, nil},
			{"conf change with records", EntryMeta{Index: next, Term: last.Term, Kind: EntryConfChange}, rec, nil},
			{"stamp without records", EntryMeta{Index: next, Term: last.Term, Kind: EntryEmpty}, nil, &Stamp{}},
			{"control on records", EntryMeta{Index: next, Term: last.Term, Control: []byte("x")}, rec, nil},
			{"control on empty", EntryMeta{Index: next, Term: last.Term, Kind: EntryEmpty, Control: []byte("x")}, nil, nil},
			{"unknown kind", EntryMeta{Index: next, Term: last.Term, Kind: 9}, nil, nil},
			{"term going back", EntryMeta{Index: next, Term: last.Term - 1, Kind: EntryEmpty}, nil, nil},
		}
		for _, b := range bad {
			if _, err := l.AppendEntry(b.meta, b.records, t0, b.stamp); !errors.Is(err, ErrBadEntry) {
				t.Fatalf("AppendEntry %s: %v, want ErrBadEntry", b.name, err)
			}
		}
		if _, err := l.AppendEntry(EntryMeta{Index: next, Term: last.Term}, [][]byte{make([]byte, maxBatchBytes)}, t0, nil); !errors.Is(err, ErrBatchTooLarge) {
			t.Fatalf("AppendEntry of a %d-byte record: %v, want ErrBatchTooLarge", maxBatchBytes, err)
		}
		if _, err := l.Append(l.NextOffset(), rec, t0); !errors.Is(err, ErrMixedFormats) {
			t.Fatalf("Append to a log of entries: %v, want ErrMixedFormats", err)
		}
		checkEntries(t, l, want)
	}
	refusals(l)
	mustClose(t, l)
	l = mustOpen(t, dir, smallConfig())
	refusals(l)
	mustClose(t, l)

	// And the other way round: a log of plain batches takes no entry.
	dir = t.TempDir()
	l = mustOpen(t, dir, smallConfig())
	appendBatches(t, l, 5, 3)
	plain := func(l *Log) {
		t.Helper()
		if _, err := l.AppendEntry(EntryMeta{Index: 1, Term: 1, Kind: EntryEmpty}, nil, t0, nil); !errors.Is(err, ErrMixedFormats) {
			t.Fatalf("AppendEntry to a log of plain batches: %v, want ErrMixedFormats", err)
		}
		if err := l.EntryHeaders(0, func(Entry) bool { return true }); !errors.Is(err, ErrMixedFormats) {
			t.Fatalf("EntryHeaders of plain batches: %v, want ErrMixedFormats", err)
		}
		if _, err := l.ReadEntries(0, 1, 0); !errors.Is(err, ErrMixedFormats) {
			t.Fatalf("ReadEntries of plain batches: %v, want ErrMixedFormats", err)
		}
		if err := l.TruncateEntries(1); !errors.Is(err, ErrMixedFormats) {
			t.Fatalf("TruncateEntries of plain batches: %v, want ErrMixedFormats", err)
		}
		if _, ok := l.LastEntry(); ok {
			t.Fatal("LastEntry of plain batches found one")
		}
		readAll(t, l, 0)
	}
	plain(l)
	mustClose(t, l)
	l = mustOpen(t, dir, smallConfig())
	defer mustClose(t, l)
	plain(l)
}

// TestWaitDurableCoversEntriesWithoutRecords: an entry without records is
// durable only once a pass covered it, though its offset already was, and
// each way of waiting for it waits for that pass.
func TestWaitDurableCoversEntriesWithoutRecords(t *testing.T) {
	fsys := newFaultFS()
	l := mustOpen(t, t.TempDir(), Config{Fsync: FsyncNone}, WithFS(fsys))
	defer mustClose(t, l)
	appendEntryRange(t, l, 1, 3)
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	waits := []struct {
		name string
		wait func(index uint64, a Appended) error
	}{
		{"WaitDurable(a.Next)", func(_ uint64, a Appended) error { return <-l.WaitDurable(a.Next) }},
		{"WaitEntryDurable", func(index uint64, _ Appended) error { return <-l.WaitEntryDurable(index) }},
		{"Sync", func(uint64, Appended) error { return l.Sync() }},
	}
	for i, w := range waits {
		index := uint64(3 + i)
		a, err := l.AppendEntry(EntryMeta{Index: index, Term: 1, Kind: EntryConfChange, Control: []byte("cc")}, nil, t0, nil)
		if err != nil {
			t.Fatal(err)
		}
		if l.Synced() != a.Next {
			t.Fatalf("setup: Synced %d, want the entry's offset %d already synced", l.Synced(), a.Next)
		}
		syncs := fsys.logSyncs()
		if err := w.wait(index, a); err != nil {
			t.Fatalf("%s: %v", w.name, err)
		}
		if fsys.logSyncs() == syncs {
			t.Fatalf("%s reported the conf change durable without an fsync", w.name)
		}
	}
	if err := <-l.WaitEntryDurable(9); !errors.Is(err, ErrNoEntry) {
		t.Fatalf("WaitEntryDurable past the last entry: %v, want ErrNoEntry", err)
	}
}

// TestRetentionOnEntries: retention removes whole segments of entries from
// the front; EntryHeaders and ReadEntries then start at StartOffset, a walk
// holding a removed segment finishes it, and LastEntry does not move.
func TestRetentionOnEntries(t *testing.T) {
	dir := t.TempDir()
	cfg := smallConfig()
	cfg.RetentionBytes = 3000
	l := mustOpen(t, dir, cfg)
	want := appendEntryRange(t, l, 1, 150)
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	var walked []Entry
	if err := l.EntryHeaders(0, func(e Entry) bool {
		if len(walked) == 0 {
			if n, err := l.EnforceRetention(t0); n == 0 || err != nil {
				t.Errorf("EnforceRetention under a walk: %d, %v", n, err)
			}
		}
		walked = append(walked, e)
		return true
	}); !errors.As(err, new(*ErrOffsetTooOld)) {
		t.Fatalf("EntryHeaders across retention: %v after %d entries, want ErrOffsetTooOld moving to a removed segment", err, len(walked))
	}
	expectHeaders(t, walked, want[:len(walked)], "the walk through the held segment")
	// Whole segments went: entries without records at the end of the last
	// one share the start offset, and went with it.
	kept := want[segmentFirstIndexes(t, dir)[0]-1:]
	if kept[0].Base != l.StartOffset() {
		t.Fatalf("the first kept entry is at %d, the log starts at %d", kept[0].Base, l.StartOffset())
	}
	check := func(l *Log) {
		t.Helper()
		checkEntries(t, l, kept)
		if _, err := l.ReadEntries(0, 1, 0); !errors.As(err, new(*ErrOffsetTooOld)) {
			t.Fatalf("ReadEntries below the start: %v, want ErrOffsetTooOld", err)
		}
	}
	check(l)
	mustClose(t, l)
	l = mustOpen(t, dir, cfg)
	defer mustClose(t, l)
	check(l)
}

// TestAttributedEntryKeepsAttributes: an entry whose records carry
// attributes is read back as values with their attributes by Read, in its
// stored (joined) form by ReadEntries, and survives a reopen.
func TestAttributedEntryKeepsAttributes(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, smallConfig())
	attrs := [][]byte{EncodeAttrs([]byte("k1"), []Header{{Key: "h", Value: []byte("v")}}), nil}
	stored := JoinRecords([][]byte{[]byte("one"), []byte("two")}, attrs)
	meta := EntryMeta{Index: 1, Term: 1, Kind: EntryRecords, Attributed: true}
	if _, err := l.AppendEntry(meta, stored, time.UnixMicro(1), nil); err != nil {
		t.Fatal(err)
	}
	check := func(l *Log) {
		t.Helper()
		page, err := l.Read(0, 10, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Records) != 2 || string(page.Records[0].Value) != "one" || !bytes.Equal(page.Records[0].Attrs, attrs[0]) ||
			string(page.Records[1].Value) != "two" || len(page.Records[1].Attrs) != 0 {
			t.Fatalf("Read gave %+v", page.Records)
		}
		entries, err := l.ReadEntries(0, 1, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 1 || !entries[0].Attributed || !reflect.DeepEqual(entries[0].Records, stored) {
			t.Fatalf("ReadEntries gave %+v; want the stored form, attributed", entries)
		}
	}
	check(l)
	mustClose(t, l)
	l = mustOpen(t, dir, smallConfig())
	defer mustClose(t, l)
	check(l)
	if _, err := l.AppendEntry(EntryMeta{Index: 2, Term: 1, Kind: EntryEmpty, Attributed: true}, nil, time.Time{}, nil); !errors.Is(err, ErrBadEntry) {
		t.Fatalf("an attributed empty entry: %v; want ErrBadEntry", err)
	}
}

// TestRetentionUpToKeepsEntriesAfterIndex: on a log of raft entries,
// EnforceRetentionUpTo removes a segment only when the next one starts
// with an entry at or below the index, so the log's first entry afterwards
// is one the replica applied; SegmentFiles lists what is left with its
// complete bytes.
func TestRetentionUpToKeepsEntriesAfterIndex(t *testing.T) {
	dir := t.TempDir()
	cfg := smallConfig()
	cfg.RetentionBytes = 1 // every sealed segment may go, by size
	l := mustOpen(t, dir, cfg)
	defer mustClose(t, l)
	appendEntryRange(t, l, 1, 150)
	firsts := segmentFirstIndexes(t, dir)
	if len(firsts) < 4 {
		t.Fatalf("%d segments; the test needs at least 4", len(firsts))
	}
	upTo := firsts[2] // segments 0 and 1 may go; 2 must stay first
	n, err := l.EnforceRetentionUpTo(t0, upTo)
	if err != nil || n != 2 {
		t.Fatalf("EnforceRetentionUpTo(%d) removed %d: %v; want 2", upTo, n, err)
	}
	if got := segmentFirstIndexes(t, dir)[0]; got != upTo {
		t.Fatalf("first entry after retention %d, want %d", got, upTo)
	}
	if n, err := l.EnforceRetentionUpTo(t0, upTo); n != 0 || err != nil {
		t.Fatalf("again: removed %d, %v; want none", n, err)
	}
	files := l.SegmentFiles()
	if len(files) != len(firsts)-2 || !IsSegmentFileName(files[0].Name) {
		t.Fatalf("SegmentFiles = %v", files)
	}
	for _, f := range files {
		st, err := os.Stat(filepath.Join(dir, f.Name))
		if err != nil || st.Size() != f.Size {
			t.Errorf("%s: listed %d bytes, on disk %v %v", f.Name, f.Size, st, err)
		}
	}
}
