package persistence

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// tornLog is a log prepared for damage: several sealed segments, and a last
// segment whose final two batches were appended after the last fsync, then
// abandoned as a crash would leave them.
type tornLog struct {
	dir     string
	last    string   // path of the last segment
	starts  []int64  // batch positions in the last segment
	bases   []uint64 // and their base offsets
	size    int64    // the last segment's size
	durable uint64   // the durable mark: the last two batches are above it
	next    uint64   // the log's next offset
}

func prepareTornLog(t *testing.T) tornLog {
	t.Helper()
	dir := t.TempDir()
	l := mustOpen(t, dir, Config{SegmentBytes: 2048, IndexIntervalBytes: 128, Fsync: FsyncNone})
	appendBatches(t, l, 60, 5)
	// Fill the active segment with a few more batches, leaving room for
	// two more without a roll.
	for {
		l.mu.Lock()
		size := l.mu.segments[len(l.mu.segments)-1].size
		l.mu.Unlock()
		if size > 600 && size < 2048-2*400 {
			break
		}
		appendBatches(t, l, 1, 5)
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	durable := l.NextOffset()
	segments := len(segmentFiles(t, dir, logExt))
	next := appendBatches(t, l, 2, 5)
	if got := len(segmentFiles(t, dir, logExt)); got != segments || segments < 3 {
		t.Fatalf("setup: %d segments, then %d: want the last two batches in the same, third or later segment", segments, got)
	}
	l.abandon()

	tl := tornLog{dir: dir, durable: durable, next: next}
	logs := segmentFiles(t, dir, logExt)
	tl.last = logs[len(logs)-1]
	tl.starts, tl.bases = batchStarts(t, tl.last)
	tl.size = fileSize(t, tl.last)
	if n := len(tl.bases); n < 4 || tl.bases[n-2] != durable {
		t.Fatalf("setup: last segment batches at offsets %v, want the last two from %d", tl.bases, durable)
	}
	return tl
}

// clone copies the prepared log to a fresh directory and returns the path
// of the copy's file named like path.
func (tl tornLog) clone(t *testing.T) (dir, last string) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "log")
	copyDir(t, tl.dir, dir)
	return dir, filepath.Join(dir, filepath.Base(tl.last))
}

// batchStarts lists the positions and base offsets of the batches in a
// segment file, which must be whole.
func batchStarts(t testing.TB, path string) (starts []int64, bases []uint64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for pos := 0; pos < len(b); {
		v, n, err := decodeBatch(b[pos:])
		if err != nil {
			t.Fatalf("%s at %d: %v", path, pos, err)
		}
		starts = append(starts, int64(pos))
		bases = append(bases, v.base)
		pos += n
	}
	return starts, bases
}

func fileSize(t testing.TB, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

func flipBit(t testing.TB, path string, pos int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[pos] ^= 0x10
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func appendToFile(t testing.TB, path string, data []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
}

// expectRecovered opens dir and checks it holds exactly [0, next) with the
// right content, then that appends continue at next.
func expectRecovered(t *testing.T, dir string, next uint64, what string) {
	t.Helper()
	l, err := Open(dir, Config{SegmentBytes: 2048, IndexIntervalBytes: 128, Fsync: FsyncNone})
	if err != nil {
		t.Fatalf("%s: Open: %v", what, err)
	}
	defer mustClose(t, l)
	if l.NextOffset() != next {
		t.Fatalf("%s: recovered to next offset %d, want %d", what, l.NextOffset(), next)
	}
	readAll(t, l, 0)
	if _, err := l.Append(next, batchOf(next, 2), t0); err != nil {
		t.Fatalf("%s: Append after recovery: %v", what, err)
	}
	readAll(t, l, 0)
}

func expectCorrupt(t *testing.T, dir string, cfg Config, segment, reason, what string) {
	t.Helper()
	l, err := Open(dir, cfg)
	if err == nil {
		l.Close()
		t.Fatalf("%s: Open succeeded, want ErrCorrupt", what)
	}
	var corrupt *ErrCorrupt
	if !errors.As(err, &corrupt) || corrupt.Segment != segment || !strings.Contains(corrupt.Reason, reason) {
		t.Fatalf("%s: Open: %v, want ErrCorrupt in %s mentioning %q", what, err, segment, reason)
	}
}

func TestTornTailAtEveryByte(t *testing.T) {
	tl := prepareTornLog(t)
	n := len(tl.starts)
	secondLast, last := tl.starts[n-2], tl.starts[n-1]
	for cut := secondLast; cut <= tl.size; cut++ {
		want := tl.durable // only the synced batches survive a cut in the second-to-last
		switch {
		case cut == tl.size:
			want = tl.next
		case cut >= last:
			want = tl.bases[n-1]
		}
		dir, path := tl.clone(t)
		if err := os.Truncate(path, cut); err != nil {
			t.Fatal(err)
		}
		expectRecovered(t, dir, want, "truncated at byte "+itoa(cut))

		if cut%7 == 0 && cut < tl.size {
			// A preallocated file, or one the file system extended
			// without its data: the rest of the batch reads as zeros.
			dir, path := tl.clone(t)
			b, _ := os.ReadFile(path)
			clear(b[cut:])
			os.WriteFile(path, b, 0o644)
			expectRecovered(t, dir, want, "zero-filled from byte "+itoa(cut))
		}
	}
}

func TestGarbageAfterLastBatch(t *testing.T) {
	tl := prepareTornLog(t)
	rng := rand.New(rand.NewPCG(1, 2))
	garbage := map[string][]byte{
		"zeros":          make([]byte, 300),
		"one byte":       {0x42},
		"magic only":     {batchMagicV1},
		"a frame header": {batchMagicV1, 0, 0, 0, 40, 1, 2, 3, 4},
	}
	for _, n := range []int{5, 29, 100, 4096} {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		garbage["random "+itoa(int64(n))] = b
	}
	for name, g := range garbage {
		dir, path := tl.clone(t)
		appendToFile(t, path, g)
		expectRecovered(t, dir, tl.next, "garbage: "+name)
	}

	// A whole, checksummed batch that repeats an offset is never a torn
	// write: it was written, and the log refuses it.
	dir, path := tl.clone(t)
	b, _ := os.ReadFile(path)
	appendToFile(t, path, b[tl.starts[len(tl.starts)-1]:])
	expectCorrupt(t, dir, Config{}, filepath.Base(path), "expected", "a repeated batch")
}

func TestBitFlips(t *testing.T) {
	tl := prepareTornLog(t)
	n := len(tl.starts)
	lastName := filepath.Base(tl.last)
	logs := segmentFiles(t, tl.dir, logExt)
	firstSealed := filepath.Base(logs[0])
	secondSealed := filepath.Base(logs[1])
	bodyOf := func(start int64) int64 { return start + batchHeaderLen + 2 }

	t.Run("last batch, never synced: a torn tail", func(t *testing.T) {
		dir, path := tl.clone(t)
		flipBit(t, path, bodyOf(tl.starts[n-1]))
		expectRecovered(t, dir, tl.bases[n-1], "flip in the last, unsynced batch")
	})
	t.Run("unsynced batch followed by a valid one", func(t *testing.T) {
		dir, path := tl.clone(t)
		flipBit(t, path, bodyOf(tl.starts[n-2]))
		expectCorrupt(t, dir, Config{}, lastName, "followed by a valid batch", "flip before the last batch")
	})
	t.Run("synced batch", func(t *testing.T) {
		dir, path := tl.clone(t)
		// The last synced batch, so every batch after it is unsynced:
		// only the mark tells this from a torn tail.
		flipBit(t, path, bodyOf(tl.starts[n-3]))
		os.Truncate(path, tl.starts[n-2])
		expectCorrupt(t, dir, Config{}, lastName, "were synced", "flip in the last synced batch")
	})
	t.Run("synced batch, no mark: the weaker rule truncates it", func(t *testing.T) {
		dir, path := tl.clone(t)
		flipBit(t, path, bodyOf(tl.starts[n-3]))
		os.Truncate(path, tl.starts[n-2])
		os.Remove(filepath.Join(dir, markName))
		expectRecovered(t, dir, tl.bases[n-3], "flip in the last batch without a mark")
	})
	t.Run("sealed segment's last batch", func(t *testing.T) {
		dir, _ := tl.clone(t)
		path := filepath.Join(dir, secondSealed)
		starts, _ := batchStarts(t, path)
		flipBit(t, path, bodyOf(starts[len(starts)-1]))
		expectCorrupt(t, dir, Config{}, secondSealed, "synced", "flip at a sealed segment's end")
	})
	t.Run("inside a sealed segment: found on read, or on open when verifying", func(t *testing.T) {
		dir, _ := tl.clone(t)
		path := filepath.Join(dir, firstSealed)
		flipBit(t, path, bodyOf(0))
		expectCorrupt(t, dir, Config{VerifyOnOpen: true}, firstSealed, "checksum", "flip inside a sealed segment, verified")

		l := mustOpen(t, dir, Config{})
		defer mustClose(t, l)
		var corrupt *ErrCorrupt
		if _, err := l.Read(0, 1, 0); !errors.As(err, &corrupt) || corrupt.Segment != firstSealed || corrupt.Position != 0 {
			t.Fatalf("Read of the flipped batch: %v, want ErrCorrupt at %s byte 0", err, firstSealed)
		}
		// The index skips the damage: later records are still served.
		_, bases := batchStarts(t, filepath.Join(dir, secondSealed))
		readAll(t, l, bases[0])
	})
	t.Run("inside the last segment, verifying", func(t *testing.T) {
		dir, path := tl.clone(t)
		flipBit(t, path, bodyOf(tl.starts[0]))
		expectCorrupt(t, dir, Config{VerifyOnOpen: true}, lastName, "were synced", "flip at the last segment's start")
	})
}

func TestOffsetsMustContinue(t *testing.T) {
	tl := prepareTornLog(t)
	logs := segmentFiles(t, tl.dir, logExt)

	t.Run("missing middle segment", func(t *testing.T) {
		dir, _ := tl.clone(t)
		os.Remove(filepath.Join(dir, filepath.Base(logs[1])))
		expectCorrupt(t, dir, Config{}, filepath.Base(logs[2]), "offsets do not continue", "a segment deleted from the middle")
	})
	t.Run("segment renamed to the wrong base", func(t *testing.T) {
		dir, path := tl.clone(t)
		renamed := filepath.Join(dir, segmentName(tl.bases[0]+1, logExt))
		os.Rename(path, renamed)
		expectCorrupt(t, dir, Config{}, filepath.Base(renamed), "offsets do not continue", "a renamed segment")
	})
	t.Run("synced batches cut off cleanly", func(t *testing.T) {
		dir, path := tl.clone(t)
		os.Truncate(path, tl.starts[len(tl.starts)-3])
		expectCorrupt(t, dir, Config{}, filepath.Base(path), "were synced", "synced batches removed at a batch boundary")
	})
	t.Run("last segment deleted", func(t *testing.T) {
		dir, path := tl.clone(t)
		os.Remove(path)
		expectCorrupt(t, dir, Config{}, filepath.Base(logs[len(logs)-2]), "were synced", "the last segment deleted")
	})
}

// A power cut right after a roll can leave a sealed segment short of its
// last batches and the new segment empty: that is a torn tail too, as long
// as nothing in it was synced.
func TestTornSealedSegmentBeforeEmptyOnes(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Config{SegmentBytes: 1024, IndexIntervalBytes: 128, Fsync: FsyncNone})
	appendBatches(t, l, 10, 3)
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	durable := l.NextOffset()
	segments := len(segmentFiles(t, dir, logExt))
	for len(segmentFiles(t, dir, logExt)) < segments+2 {
		appendBatches(t, l, 1, 3)
	}
	l.abandon()
	// Rolls wake the syncer under every policy; put the mark back where the
	// power cut would have found it.
	os.Remove(filepath.Join(dir, markName))
	if m, err := createMark(osFS{}, dir, markPoint{offset: durable}); err != nil {
		t.Fatal(err)
	} else {
		m.close()
	}
	logs := segmentFiles(t, dir, logExt)
	sealed := logs[len(logs)-2]
	starts, bases := batchStarts(t, sealed)
	i := len(starts) - 1
	for bases[i] < durable {
		t.Fatalf("setup: the sealed segment's last batch at %d is below the mark %d", bases[i], durable)
	}
	os.Truncate(sealed, starts[i]+5)
	os.Truncate(logs[len(logs)-1], 0)
	expectRecovered(t, dir, bases[i], "torn sealed segment followed by an empty one")
	if got := len(segmentFiles(t, dir, logExt)); got != len(logs)-1 {
		t.Fatalf("%d segments after recovery, want %d: the empty one removed", got, len(logs)-1)
	}
}

func TestDurableMark(t *testing.T) {
	tl := prepareTornLog(t)
	markPath := func(dir string) string { return filepath.Join(dir, markName) }

	t.Run("both slots damaged", func(t *testing.T) {
		dir, _ := tl.clone(t)
		flipBit(t, markPath(dir), 6)
		flipBit(t, markPath(dir), markSlotSize+6)
		expectCorrupt(t, dir, Config{}, markName, "no valid slot", "a damaged mark")
	})
	t.Run("one slot damaged: the other is used", func(t *testing.T) {
		dir, path := tl.clone(t)
		b, _ := os.ReadFile(markPath(dir))
		// Damage the newer slot: the older mark is lower, which only makes
		// more of the tail truncatable.
		newer, older := 0, markSlotSize
		if binary.BigEndian.Uint64(b[markSlotSize+4:]) > binary.BigEndian.Uint64(b[4:]) {
			newer, older = markSlotSize, 0
		}
		if binary.BigEndian.Uint64(b[older+12:]) > tl.durable {
			t.Fatalf("setup: older slot marks %d, above %d", binary.BigEndian.Uint64(b[older+12:]), tl.durable)
		}
		flipBit(t, markPath(dir), int64(newer+6))
		os.Truncate(path, tl.starts[len(tl.starts)-1]+3)
		expectRecovered(t, dir, tl.bases[len(tl.bases)-1], "one damaged slot")
	})
	t.Run("missing mark is recreated", func(t *testing.T) {
		dir, _ := tl.clone(t)
		os.Remove(markPath(dir))
		expectRecovered(t, dir, tl.next, "no mark")
		if _, _, found, err := readMark(osFS{}, dir); !found || err != nil {
			t.Fatalf("mark after recovery: found %v, %v", found, err)
		}
	})
	t.Run("a torn write of one slot", func(t *testing.T) {
		dir := t.TempDir()
		m, err := createMark(osFS{}, dir, markPoint{offset: 10})
		if err != nil {
			t.Fatal(err)
		}
		m.write(markPoint{offset: 20})
		m.close()
		// Tear the next write: half a slot of new bytes over the older one.
		b, _ := os.ReadFile(markPath(dir))
		e := append([]byte{}, markMagic...)
		e = binary.BigEndian.AppendUint64(e, 3)
		e = binary.BigEndian.AppendUint64(e, 30)
		e = binary.BigEndian.AppendUint32(e, crc32.Checksum(e, castagnoli))
		copy(b[markSlotSize:], e[:10])
		os.WriteFile(markPath(dir), b, 0o644)
		if synced, _, _, err := readMark(osFS{}, dir); err != nil || synced.offset != 20 {
			t.Fatalf("mark after a torn write: %d, %v; want the previous value 20", synced, err)
		}
	})
}

func TestIndexesRebuilt(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{SegmentBytes: 2048, IndexIntervalBytes: 128, Fsync: FsyncNone}
	l := mustOpen(t, dir, cfg)
	appendBatches(t, l, 150, 5)
	mustClose(t, l)
	reference := map[string][]byte{}
	for _, ext := range []string{indexExt, timeIndexExt} {
		for _, path := range segmentFiles(t, dir, ext) {
			b, _ := os.ReadFile(path)
			if len(b) == 0 {
				t.Fatalf("setup: %s is empty", path)
			}
			reference[filepath.Base(path)] = b
		}
	}

	damage := map[string]func(path string, b []byte) []byte{
		"deleted":        func(string, []byte) []byte { return nil },
		"empty":          func(string, []byte) []byte { return []byte{} },
		"cut mid-entry":  func(_ string, b []byte) []byte { return b[:len(b)-3] },
		"flipped middle": func(_ string, b []byte) []byte { b[len(b)/2] ^= 1; return b },
		"flipped last":   func(_ string, b []byte) []byte { b[len(b)-2] ^= 1; return b },
		"entry past end": func(_ string, b []byte) []byte { return append(b, b[len(b)-offsetEntryLen:]...) },
		"last misplaced": func(path string, b []byte) []byte {
			if !strings.HasSuffix(path, indexExt) {
				return b
			}
			// A well-formed entry, checksum and all, pointing one byte
			// past its batch.
			e := b[len(b)-offsetEntryLen:]
			pos := binary.BigEndian.Uint32(e[4:])
			binary.BigEndian.PutUint32(e[4:], pos+1)
			binary.BigEndian.PutUint32(e[8:], crc32.Checksum(e[:8], castagnoli))
			return b
		},
	}
	for name, fn := range damage {
		for _, ext := range []string{indexExt, timeIndexExt} {
			t.Run(name+" "+ext, func(t *testing.T) {
				d := filepath.Join(t.TempDir(), "log")
				copyDir(t, dir, d)
				for _, path := range segmentFiles(t, d, ext) {
					b, _ := os.ReadFile(path)
					if b = fn(path, b); b == nil {
						os.Remove(path)
					} else {
						os.WriteFile(path, b, 0o644)
					}
				}
				l := mustOpen(t, d, cfg)
				readAll(t, l, 0)
				for _, ms := range []int{0, 37, 100, 101, 250} {
					at := t0.Add(time.Duration(ms) * time.Millisecond)
					if off, err := l.OffsetForTime(at); err != nil || off != firstAtOrAfter(t, l, at) {
						t.Fatalf("OffsetForTime(t0+%dms) = %d, %v; want %d", ms, off, err, firstAtOrAfter(t, l, at))
					}
				}
				mustClose(t, l)
				for base, want := range reference {
					got, err := os.ReadFile(filepath.Join(d, base))
					if err != nil || !bytes.Equal(got, want) {
						t.Fatalf("%s after recovery: %d bytes (%v), want the original %d bytes", base, len(got), err, len(want))
					}
				}
			})
		}
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// firstAtOrAfter finds OffsetForTime's answer the slow way.
func firstAtOrAfter(t *testing.T, l *Log, at time.Time) uint64 {
	t.Helper()
	page, err := l.Read(l.StartOffset(), 0, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range page.Records {
		if !r.Time.Before(at) {
			return r.Offset
		}
	}
	return page.Next
}

// entryTornConfig keeps a torn-entry log in one segment.
func entryTornConfig() Config {
	return Config{SegmentBytes: 1 << 20, IndexIntervalBytes: 128, Fsync: FsyncNone}
}

// tornEntryLog writes entries 1 to 40, syncs, then appends three more, a
// records entry, a conf change and an empty one, and abandons the log as a
// crash would. It returns every entry and the positions of the last three.
func tornEntryLog(t *testing.T) (dir, path string, want []Entry, starts []int64) {
	t.Helper()
	dir = t.TempDir()
	l := mustOpen(t, dir, entryTornConfig())
	want = appendEntryRange(t, l, 1, 41)
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []EntryKind{EntryRecords, EntryConfChange, EntryEmpty} {
		meta := EntryMeta{Index: uint64(len(want) + 1), Term: 9, Kind: kind}
		var records [][]byte
		if kind == EntryRecords {
			records = batchOf(l.NextOffset(), 3)
		} else if kind == EntryConfChange {
			meta.Control = []byte("add a learner")
		}
		base := l.NextOffset()
		a, err := l.AppendEntry(meta, records, t0.Add(time.Hour), nil)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, Entry{EntryMeta: meta, Base: base, Time: a.Time, Records: records})
	}
	l.abandon()
	logs := segmentFiles(t, dir, logExt)
	if len(logs) != 1 {
		t.Fatalf("setup: %d segments, want 1", len(logs))
	}
	all, _ := batchStarts(t, logs[0])
	return dir, logs[0], want, all[len(all)-3:]
}

// expectEntriesRecovered opens dir and checks it holds exactly want, then
// that the next entry appends.
func expectEntriesRecovered(t *testing.T, dir string, want []Entry, what string) {
	t.Helper()
	l, err := Open(dir, entryTornConfig())
	if err != nil {
		t.Fatalf("%s: Open: %v", what, err)
	}
	defer mustClose(t, l)
	checkEntries(t, l, want)
	next := uint64(1)
	if len(want) > 0 {
		next = want[len(want)-1].Index + 1
	}
	want = append(want[:len(want):len(want)], appendEntryInTerm(t, l, next, 50))
	checkEntries(t, l, want)
}

// TestTornEntryTailAtEveryByte cuts the three unsynced entries at every byte,
// and zero-fills them from every seventh: the log recovers to the last whole
// entry, whatever its kind.
func TestTornEntryTailAtEveryByte(t *testing.T) {
	dir, path, want, starts := tornEntryLog(t)
	size := fileSize(t, path)
	for cut := starts[0]; cut <= size; cut++ {
		whole := len(want) - 3
		for _, s := range starts[1:] {
			if cut >= s {
				whole++
			}
		}
		if cut == size {
			whole = len(want)
		}
		for _, zero := range []bool{false, true} {
			if zero && (cut%7 != 0 || cut == size) {
				continue
			}
			d := filepath.Join(t.TempDir(), "log")
			copyDir(t, dir, d)
			p := filepath.Join(d, filepath.Base(path))
			if zero {
				b, _ := os.ReadFile(p)
				if !slices.ContainsFunc(b[cut:], func(c byte) bool { return c != 0 }) {
					continue // an entry without records ends in zeros: nothing to damage
				}
				clear(b[cut:])
				os.WriteFile(p, b, 0o644)
			} else {
				os.Truncate(p, cut)
			}
			expectEntriesRecovered(t, d, want[:whole], fmt.Sprintf("cut at byte %d (zero-filled %v)", cut, zero))
		}
	}
}

// TestEntryBitFlips: damage to a synced entry is ErrCorrupt even when the
// entry has no records, so the mark's offset cannot see it (its index can);
// damage to the unsynced tail is a torn tail.
func TestEntryBitFlips(t *testing.T) {
	setup := func(t *testing.T) (dir, path string, want []Entry, starts []int64) {
		// Entries 1 to 40, the last synced one a conf change: then two
		// unsynced ones.
		dir = t.TempDir()
		l := mustOpen(t, dir, entryTornConfig())
		want = appendEntryRange(t, l, 1, 40)
		cc := EntryMeta{Index: 40, Term: 9, Kind: EntryConfChange, Control: []byte("remove node 3")}
		base := l.NextOffset()
		a, err := l.AppendEntry(cc, nil, t0.Add(time.Hour), nil)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, Entry{EntryMeta: cc, Base: base, Time: a.Time})
		if err := l.Sync(); err != nil {
			t.Fatal(err)
		}
		want = append(want, appendEntryInTerm(t, l, 41, 9), appendEntryInTerm(t, l, 42, 9))
		l.abandon()
		path = segmentFiles(t, dir, logExt)[0]
		starts, _ = batchStarts(t, path)
		return dir, path, want, starts
	}
	bodyOf := func(start int64) int64 { return start + batchHeaderLen + 2 }
	n := func(starts []int64) int { return len(starts) }

	t.Run("synced conf change, unsynced tail cut before it", func(t *testing.T) {
		dir, path, _, starts := setup(t)
		flipBit(t, path, bodyOf(starts[n(starts)-3]))
		os.Truncate(path, starts[n(starts)-2]+7)
		expectCorrupt(t, dir, Config{}, filepath.Base(path), "entries up to 40 were synced", "a flip in the last synced entry, which has no records")
		// Refused before anything was truncated: the damage is left for
		// whoever looks into it.
		if got := fileSize(t, path); got != starts[n(starts)-2]+7 {
			t.Fatalf("a refused Open changed the segment from %d to %d bytes", starts[n(starts)-2]+7, got)
		}
	})
	t.Run("synced conf change, no mark: the weaker rule truncates it", func(t *testing.T) {
		dir, path, want, starts := setup(t)
		flipBit(t, path, bodyOf(starts[n(starts)-3]))
		os.Truncate(path, starts[n(starts)-2])
		os.Remove(filepath.Join(dir, markName))
		expectEntriesRecovered(t, dir, want[:39], "a flip in the last entry without a mark")
	})
	t.Run("synced conf change cut off cleanly", func(t *testing.T) {
		dir, path, _, starts := setup(t)
		os.Truncate(path, starts[n(starts)-3])
		expectCorrupt(t, dir, Config{}, filepath.Base(path), "log ends at entry 39, but entries up to 40 were synced", "a synced entry without records removed whole")
	})
	t.Run("unsynced entries cut off cleanly", func(t *testing.T) {
		dir, path, want, starts := setup(t)
		os.Truncate(path, starts[n(starts)-2])
		expectEntriesRecovered(t, dir, want[:40], "the unsynced entries removed whole")
	})
	t.Run("last, unsynced entry flipped: a torn tail", func(t *testing.T) {
		dir, path, want, starts := setup(t)
		flipBit(t, path, bodyOf(starts[n(starts)-1]))
		expectEntriesRecovered(t, dir, want[:41], "a flip in the last, unsynced entry")
	})
	t.Run("unsynced entry followed by a valid one", func(t *testing.T) {
		dir, path, _, starts := setup(t)
		flipBit(t, path, bodyOf(starts[n(starts)-2]))
		expectCorrupt(t, dir, Config{}, filepath.Base(path), "followed by a valid batch", "a flip before the last entry")
	})
	t.Run("the log's first entry, synced", func(t *testing.T) {
		dir, path, _, starts := setup(t)
		flipBit(t, path, bodyOf(starts[0]))
		os.Truncate(path, starts[1])
		expectCorrupt(t, dir, Config{}, filepath.Base(path), "were synced", "a flip in the first entry, everything after it cut")
	})
	t.Run("a synced entry, verifying", func(t *testing.T) {
		dir, path, _, starts := setup(t)
		flipBit(t, path, bodyOf(starts[5]))
		expectCorrupt(t, dir, Config{VerifyOnOpen: true}, filepath.Base(path), "were synced", "a flip inside, verified")
	})
}

// TestTruncateEntriesThenCrash crashes right after a truncation, after
// appends that followed it, and (by hand) between the truncation's steps:
// every state recovers, as the cut log or as the log before the cut, never
// as corrupt.
func TestTruncateEntriesThenCrash(t *testing.T) {
	prepare := func(t *testing.T, fsys *faultFS) (dir string, l *Log, want []Entry, index uint64) {
		dir = t.TempDir()
		var opts []Option
		if fsys != nil {
			opts = append(opts, WithFS(fsys))
		}
		l = mustOpen(t, dir, smallConfig(), opts...)
		want = appendEntryRange(t, l, 1, 120)
		if err := l.Sync(); err != nil {
			t.Fatal(err)
		}
		want = append(want, appendEntryRange(t, l, 120, 130)...)
		firsts := segmentFirstIndexes(t, dir)
		return dir, l, want, firsts[len(firsts)-4] + 2 // synced and unsynced entries, several segments
	}
	reopen := func(t *testing.T, dir string, want []Entry, what string) {
		t.Helper()
		l, err := Open(dir, smallConfig())
		if err != nil {
			t.Fatalf("%s: Open: %v", what, err)
		}
		defer mustClose(t, l)
		checkEntries(t, l, want)
	}

	t.Run("kill right after", func(t *testing.T) {
		dir, l, want, index := prepare(t, nil)
		if err := l.TruncateEntries(index); err != nil {
			t.Fatal(err)
		}
		l.abandon()
		reopen(t, dir, want[:index-1], "killed after the truncation")
	})
	t.Run("kill after appends that followed", func(t *testing.T) {
		dir, l, want, index := prepare(t, nil)
		if err := l.TruncateEntries(index); err != nil {
			t.Fatal(err)
		}
		want = want[:index-1]
		for i := index; i < index+30; i++ {
			want = append(want, appendEntryInTerm(t, l, i, 100))
		}
		l.abandon()
		reopen(t, dir, want, "killed after new appends")
	})
	t.Run("power loss after appends, some synced", func(t *testing.T) {
		fsys := newFaultFS()
		dir, l, want, index := prepare(t, fsys)
		if err := l.TruncateEntries(index); err != nil {
			t.Fatal(err)
		}
		want = want[:index-1]
		for i := index; i < index+20; i++ {
			want = append(want, appendEntryInTerm(t, l, i, 100))
		}
		if err := l.Sync(); err != nil {
			t.Fatal(err)
		}
		for i := index + 20; i < index+40; i++ {
			want = append(want, appendEntryInTerm(t, l, i, 100))
		}
		l.abandon()
		fsys.powerLoss(t, dir)
		// Rolls wake the syncer under every policy, so some of the last
		// twenty may have been synced too: the log keeps a prefix of them.
		l = mustOpen(t, dir, smallConfig())
		defer mustClose(t, l)
		last, ok := l.LastEntry()
		if !ok || last.Index < index+19 {
			t.Fatalf("after a power loss: last entry %d (%v), want at least the synced %d", last.Index, ok, index+19)
		}
		checkEntries(t, l, want[:last.Index])
	})
	t.Run("power loss right after", func(t *testing.T) {
		fsys := newFaultFS()
		dir, l, want, index := prepare(t, fsys)
		if err := l.TruncateEntries(index); err != nil {
			t.Fatal(err)
		}
		l.abandon()
		fsys.powerLoss(t, dir)
		reopen(t, dir, want[:index-1], "power loss after the truncation")
	})
	t.Run("crash between the steps", func(t *testing.T) {
		dir, l, want, index := prepare(t, nil)
		if err := l.Sync(); err != nil {
			t.Fatal(err)
		}
		l.abandon()
		// What the truncation writes, learned from a copy that does it.
		done := filepath.Join(t.TempDir(), "done")
		copyDir(t, dir, done)
		l = mustOpen(t, done, smallConfig())
		if err := l.TruncateEntries(index); err != nil {
			t.Fatal(err)
		}
		mustClose(t, l)
		lowered, _, _, err := readMark(osFS{}, done)
		if err != nil {
			t.Fatal(err)
		}
		kept := segmentFiles(t, done, logExt)

		// Step 1 only: the mark lowered, the files whole.
		markOnly := filepath.Join(t.TempDir(), "mark-only")
		copyDir(t, dir, markOnly)
		writeMark(t, markOnly, lowered)
		reopen(t, markOnly, want, "crashed after lowering the mark")
		// Steps 1 and 2: the later segments gone, the cut one whole.
		noTail := filepath.Join(t.TempDir(), "segments-gone")
		copyDir(t, dir, noTail)
		writeMark(t, noTail, lowered)
		cutSegment := filepath.Base(kept[len(kept)-1])
		for _, path := range segmentFiles(t, noTail, logExt) {
			if filepath.Base(path) > cutSegment {
				os.Remove(path)
			}
		}
		l = mustOpen(t, noTail, smallConfig())
		last, ok := l.LastEntry()
		if !ok || last.Index < index-1 || last.Index >= want[len(want)-1].Index {
			t.Fatalf("crashed after removing segments: last entry %d (%v), want the cut segment's whole tail", last.Index, ok)
		}
		checkEntries(t, l, want[:last.Index])
		mustClose(t, l)
	})
}

// writeMark replaces dir's durable.mark with one holding p.
func writeMark(t *testing.T, dir string, p markPoint) {
	t.Helper()
	os.Remove(filepath.Join(dir, markName))
	m, err := createMark(osFS{}, dir, p)
	if err != nil {
		t.Fatal(err)
	}
	m.close()
}
