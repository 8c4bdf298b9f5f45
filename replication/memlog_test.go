package replication

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/getfelix/felix-go/persistence"
)

// memLog is an EntryLog in memory that behaves as persistence's will:
// indexes are contiguous, an entry without records occupies no offset, a
// truncation gives the removed entries' offsets back, and the floor refuses
// truncating committed entries. It also models a crash: only what Sync made
// durable survives crash.
//
// Records are copied in and out, as the real log copies them to and from
// its files, so a caller that keeps or changes a slice it passed or got
// cannot pass tests here and fail against the real log.
type memLog struct {
	compactedBelow uint64
	entries        []Entry
	start          uint64 // StartOffset
	next           uint64 // the next record's offset
	last           uint64 // the last entry's index, kept when retention removed every entry
	floor          uint64
	lastTime       time.Time
	// durable is how many of entries a crash keeps: Sync raises it to all,
	// a truncation lowers it (the model makes a truncation durable at once).
	durable int
	syncs   int
	reads   int // ReadEntries calls
	// keep, when not zero, is how many entries retention leaves.
	keep int
}

var (
	errIndexMismatch = errors.New("memlog: entry index is not the last index plus one")
	errKindRecords   = errors.New("memlog: records do not match the entry kind")
	errBelowFloor    = errors.New("memlog: truncation at or below the entry floor")
	errNoEntry       = errors.New("memlog: no such entry")
)

func newMemLog() *memLog { return &memLog{} }

func (l *memLog) AppendEntry(meta EntryMeta, records [][]byte, now time.Time, stamp *Stamp) (persistence.Appended, error) {
	if meta.Index != l.last+1 {
		return persistence.Appended{}, fmt.Errorf("%w: entry %d after %d", errIndexMismatch, meta.Index, l.last)
	}
	if (meta.Kind == EntryRecords) != (len(records) > 0) {
		return persistence.Appended{}, fmt.Errorf("%w: kind %d with %d records", errKindRecords, meta.Kind, len(records))
	}
	e := Entry{EntryMeta: meta, Base: l.next, Records: cloneRecords(records)}
	e.Control = slices.Clone(meta.Control)
	if stamp != nil {
		s := *stamp
		e.Stamp = &s
	}
	if meta.Kind == EntryRecords {
		// As persistence: microseconds, never earlier than the last batch.
		e.Time = time.UnixMicro(max(now.UnixMicro(), l.lastTime.UnixMicro()))
		l.lastTime = e.Time
	}
	l.entries = append(l.entries, e)
	l.next += uint64(len(records))
	l.last = meta.Index
	return persistence.Appended{Base: e.Base, Next: l.next, Time: e.Time}, nil
}

func (l *memLog) TruncateEntries(index uint64) error {
	if index <= l.floor {
		return fmt.Errorf("%w: truncate from %d, floor %d", errBelowFloor, index, l.floor)
	}
	i := slices.IndexFunc(l.entries, func(e Entry) bool { return e.Index >= index })
	if i < 0 {
		return nil
	}
	l.next = l.entries[i].Base
	l.entries = l.entries[:i]
	l.last = index - 1
	l.durable = min(l.durable, i)
	l.lastTime = time.Time{}
	for _, e := range l.entries {
		if e.Kind == EntryRecords {
			l.lastTime = e.Time
		}
	}
	return nil
}

func (l *memLog) SetEntryFloor(index uint64) { l.floor = index }

func (l *memLog) EntryHeaders(from uint64, fn func(Entry) bool) error {
	for _, e := range l.entries {
		if e.Base < from {
			continue
		}
		e.Records = nil
		if !fn(e) {
			return nil
		}
	}
	return nil
}

func (l *memLog) ReadEntries(base, index uint64, maxBytes int) ([]Entry, error) {
	l.reads++
	i := slices.IndexFunc(l.entries, func(e Entry) bool { return e.Index == index })
	if i < 0 || l.entries[i].Base != base {
		return nil, fmt.Errorf("%w: entry %d at offset %d", errNoEntry, index, base)
	}
	var out []Entry
	size := 0
	for _, e := range l.entries[i:] {
		n := recordBytes(e.Records)
		if len(out) > 0 && size+n > maxBytes {
			break
		}
		size += n
		e.Records = cloneRecords(e.Records)
		out = append(out, e)
	}
	return out, nil
}

func (l *memLog) StartOffset() uint64 { return l.start }
func (l *memLog) NextOffset() uint64  { return l.next }

func (l *memLog) Sync() error {
	l.syncs++
	l.durable = len(l.entries)
	return nil
}

// crash drops what was not made durable, as a power cut would.
func (l *memLog) crash() {
	if l.durable == len(l.entries) {
		return
	}
	l.entries = l.entries[:l.durable]
	l.next, l.last = l.start, 0
	if n := len(l.entries); n > 0 {
		e := l.entries[n-1]
		l.next, l.last = e.Base+uint64(len(e.Records)), e.Index
	}
}

// EnforceRetentionUpTo drops the oldest entries past keep, leaving the
// first entry at or below index, as the log's segment rule does.
func (l *memLog) EnforceRetentionUpTo(_ time.Time, index uint64) (int, error) {
	n := 0
	for l.keep > 0 && len(l.entries)-n > l.keep && l.entries[n+1].Index <= index {
		n++
	}
	if n > 0 {
		l.dropHead(n)
	}
	return n, nil
}

func (l *memLog) SegmentFiles() []persistence.SegmentFile {
	return []persistence.SegmentFile{{Name: "00000000000000000000.log", Size: int64(len(l.entries))}}
}

// CompactedBelow: a memLog is never compacted, unless a test says so.
func (l *memLog) CompactedBelow() uint64 { return l.compactedBelow }

// dropHead removes the first n entries, as retention removes the oldest
// segments.
func (l *memLog) dropHead(n int) {
	l.entries = slices.Clone(l.entries[n:])
	l.durable = max(0, l.durable-n)
	if len(l.entries) > 0 {
		l.start = l.entries[0].Base
	} else {
		l.start = l.next
	}
}

func cloneRecords(records [][]byte) [][]byte {
	if records == nil {
		return nil
	}
	out := make([][]byte, len(records))
	for i, r := range records {
		out[i] = slices.Clone(r)
	}
	return out
}

func recordBytes(records [][]byte) int {
	n := 0
	for _, r := range records {
		n += len(r)
	}
	return n
}

// testEntryLog checks the EntryLog behaviour Storage relies on. It runs
// against memLog here, and is meant to run against *persistence.Log as well
// once that has the entry API.
func testEntryLog(t *testing.T, newLog func(t *testing.T) EntryLog) {
	now := time.UnixMicro(1_000_000)
	appendEntry := func(t *testing.T, l EntryLog, index, term uint64, records ...string) persistence.Appended {
		t.Helper()
		meta := EntryMeta{Index: index, Term: term, Kind: EntryEmpty}
		var rs [][]byte
		for _, r := range records {
			rs = append(rs, []byte(r))
		}
		if len(rs) > 0 {
			meta.Kind = EntryRecords
		}
		a, err := l.AppendEntry(meta, rs, now, nil)
		if err != nil {
			t.Fatalf("AppendEntry(index %d, %q): %v", index, records, err)
		}
		return a
	}
	headers := func(t *testing.T, l EntryLog) []string {
		t.Helper()
		var got []string
		if err := l.EntryHeaders(l.StartOffset(), func(e Entry) bool {
			got = append(got, fmt.Sprintf("%d/%d@%d", e.Index, e.Term, e.Base))
			return true
		}); err != nil {
			t.Fatalf("EntryHeaders: %v", err)
		}
		return got
	}

	t.Run("entries without records occupy no offset", func(t *testing.T) {
		l := newLog(t)
		appendEntry(t, l, 1, 1)
		appendEntry(t, l, 2, 1, "a", "b")
		if a := appendEntry(t, l, 3, 2); a.Base != 2 || a.Next != 2 {
			t.Errorf("empty entry after two records appended at [%d, %d), want [2, 2)", a.Base, a.Next)
		}
		appendEntry(t, l, 4, 2, "c")
		want := []string{"1/1@0", "2/1@0", "3/2@2", "4/2@2"}
		if got := headers(t, l); !slices.Equal(got, want) {
			t.Errorf("headers %v, want %v", got, want)
		}
		read, err := l.ReadEntries(2, 3, 1<<20)
		if err != nil || len(read) != 2 || read[1].Index != 4 || string(read[1].Records[0]) != "c" {
			t.Errorf("ReadEntries(2, 3) = %+v, %v; want entries 3 and 4, 4 holding c", read, err)
		}
	})
	t.Run("an index out of sequence is refused", func(t *testing.T) {
		l := newLog(t)
		appendEntry(t, l, 1, 1, "a")
		if _, err := l.AppendEntry(EntryMeta{Index: 3, Term: 1, Kind: EntryEmpty}, nil, now, nil); err == nil {
			t.Error("appending entry 3 after entry 1 succeeded")
		}
	})
	t.Run("truncation gives the offsets back and stops at the floor", func(t *testing.T) {
		l := newLog(t)
		appendEntry(t, l, 1, 1, "a")
		appendEntry(t, l, 2, 1, "b", "c")
		appendEntry(t, l, 3, 1, "d")
		l.SetEntryFloor(1)
		if err := l.TruncateEntries(1); err == nil {
			t.Error("truncating from the floor's index succeeded")
		}
		if err := l.TruncateEntries(2); err != nil {
			t.Fatalf("TruncateEntries(2): %v", err)
		}
		if a := appendEntry(t, l, 2, 2, "x"); a.Base != 1 {
			t.Errorf("entry 2 appended again at offset %d, want 1", a.Base)
		}
		if got, want := headers(t, l), []string{"1/1@0", "2/2@1"}; !slices.Equal(got, want) {
			t.Errorf("headers %v, want %v", got, want)
		}
	})
	t.Run("reads stop at maxBytes after the first entry", func(t *testing.T) {
		l := newLog(t)
		appendEntry(t, l, 1, 1, "aaaa")
		appendEntry(t, l, 2, 1, "bbbb")
		read, err := l.ReadEntries(0, 1, 1)
		if err != nil || len(read) != 1 {
			t.Errorf("ReadEntries(maxBytes 1) = %d entries, %v; want the first one only", len(read), err)
		}
	})
}

func TestMemLogIsAnEntryLog(t *testing.T) {
	testEntryLog(t, func(*testing.T) EntryLog { return newMemLog() })
}

func TestMemLogCrashKeepsWhatWasSynced(t *testing.T) {
	l := newMemLog()
	for i := range uint64(3) {
		if _, err := l.AppendEntry(EntryMeta{Index: i + 1, Term: 1, Kind: EntryRecords}, [][]byte{{byte(i)}}, time.Time{}, nil); err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			l.Sync()
		}
	}
	l.crash()
	if len(l.entries) != 2 || l.next != 2 || l.last != 2 {
		t.Errorf("after a crash: %d entries, next offset %d, last index %d; want 2, 2, 2", len(l.entries), l.next, l.last)
	}
}

// TestPersistenceLogIsAnEntryLog runs the same checks against the shard's
// real log, which Storage uses in the broker.
func TestPersistenceLogIsAnEntryLog(t *testing.T) {
	testEntryLog(t, func(t *testing.T) EntryLog {
		l, err := persistence.Open(t.TempDir(), persistence.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	})
}
