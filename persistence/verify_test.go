package persistence

import (
	"bytes"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// dirState is every file under dir and its content, to show that
// something changed nothing.
func dirState(t testing.TB, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		m[p] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestVerifyAndRepairMidLogDamage flips a byte in the middle of a synced
// segment of a log of several: Open refuses it, Verify names the batch,
// PlanRepair changes nothing, and Repair keeps every record before the
// batch, moves the rest aside byte for byte, and leaves a log Open accepts
// and appends continue on at the first lost offset.
func TestVerifyAndRepairMidLogDamage(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, smallConfig())
	end := appendBatches(t, l, 200, 5)
	mustClose(t, l)
	if rep, err := Verify(dir); err != nil || rep.Damaged() || len(rep.AllProblems()) != 0 {
		t.Fatalf("Verify of a clean log: %+v, %v", rep, err)
	}

	logs := segmentFiles(t, dir, logExt)
	if len(logs) < 5 {
		t.Fatalf("want several segments, got %d", len(logs))
	}
	target := logs[len(logs)/2]
	starts, bases := batchStarts(t, target)
	k := len(starts) / 2
	flipBit(t, target, starts[k]+batchHeaderLen+2)
	original, err := os.ReadFile(target)
	if err != nil {
		t.Fatal(err)
	}
	var corrupt *ErrCorrupt
	// Open checks only each segment's unsynced end, unless asked for all.
	strict := smallConfig()
	strict.VerifyOnOpen = true
	if _, err := Open(dir, strict); !errors.As(err, &corrupt) {
		t.Fatalf("Open of the damaged log: %v, want ErrCorrupt", err)
	}

	rep, err := Verify(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Damaged() {
		t.Fatalf("Verify found no damage: %+v", rep)
	}
	p := rep.AllProblems()[0]
	if p.Kind != ProblemBatch || p.File != filepath.Base(target) || p.Position != starts[k] || p.Offset != bases[k] || !strings.Contains(p.Reason, "checksum") {
		t.Fatalf("first problem %v, want a checksum mismatch in %s at byte %d, offset %d", p, filepath.Base(target), starts[k], bases[k])
	}

	before := dirState(t, dir)
	plan, _, err := PlanRepair(dir)
	if err != nil || !plan.Needed || plan.Applied {
		t.Fatalf("PlanRepair: %+v, %v", plan, err)
	}
	if after := dirState(t, dir); !maps.Equal(before, after) {
		t.Fatal("PlanRepair changed the directory")
	}

	got, err := Repair(dir, t0)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Applied || got.LostFrom != bases[k] || got.LostTo != end || got.Mark.Offset != bases[k] {
		t.Fatalf("Repair: %+v, want offsets [%d, %d) lost", got, bases[k], end)
	}
	wantMovedAside(t, got, logs[len(logs)/2:], original)
	if rep, err := Verify(dir); err != nil || len(rep.AllProblems()) != 0 {
		t.Fatalf("Verify after Repair: %+v, %v", rep, err)
	}

	l = mustOpen(t, dir, strict)
	if n := l.NextOffset(); n != bases[k] {
		t.Fatalf("NextOffset after repair = %d, want %d", n, bases[k])
	}
	readAll(t, l, 0)
	if _, err := l.Append(bases[k], batchOf(bases[k], 3), t0.Add(time.Hour)); err != nil {
		t.Fatalf("Append at the first lost offset: %v", err)
	}
	readAll(t, l, 0)
	mustClose(t, l)
	mustClose(t, mustOpen(t, dir, smallConfig()))
}

// wantMovedAside checks Repair moved the damaged segment (the first of
// tail, whose bytes were original) and every later one into its folder.
func wantMovedAside(t *testing.T, got *RepairReport, tail []string, original []byte) {
	t.Helper()
	var wantMoved []string
	for _, p := range tail {
		wantMoved = append(wantMoved, filepath.Base(p))
	}
	if !slices.Equal(got.Moved, wantMoved) {
		t.Fatalf("moved %v, want %v", got.Moved, wantMoved)
	}
	for _, name := range wantMoved {
		if _, err := os.Stat(filepath.Join(got.DamagedDir, name)); err != nil {
			t.Fatalf("the damaged tail: %v", err)
		}
	}
	if moved, err := os.ReadFile(filepath.Join(got.DamagedDir, wantMoved[0])); err != nil || !bytes.Equal(moved, original) {
		t.Fatalf("the damaged segment was not moved aside whole: %v", err)
	}
}

// FuzzVerifyRepair overwrites part of a synced log with arbitrary bytes:
// Verify reports without failing, and after Repair the log opens (every
// batch checked) and holds exactly the offsets Repair says it kept.
func FuzzVerifyRepair(f *testing.F) {
	f.Add(uint16(0), []byte{0})
	f.Add(uint16(300), []byte("garbage"))
	f.Add(uint16(1100), []byte{0xFB, 0, 0, 0, 1})
	f.Add(uint16(2000), make([]byte, 64))
	f.Fuzz(func(t *testing.T, at uint16, junk []byte) {
		dir, cfg, end := damagedLog(t, at, junk)
		if _, err := Verify(dir); err != nil {
			t.Fatalf("Verify: %v", err)
		}
		rep, err := Repair(dir, t0)
		if err != nil {
			t.Fatalf("Repair: %v", err)
		}
		l, err := Open(dir, cfg)
		if err != nil {
			t.Fatalf("Open after Repair %+v: %v", rep, err)
		}
		defer mustClose(t, l)
		want := end
		if rep.Needed {
			want = rep.LostFrom
		}
		if l.NextOffset() != want {
			t.Fatalf("NextOffset %d after Repair %+v, want %d", l.NextOffset(), rep, want)
		}
		readAllValid(t, l)
	})
}

// readAllValid reads the whole log; each record must be the one written
// at its offset.
func readAllValid(t *testing.T, l *Log) {
	t.Helper()
	for next := uint64(0); next < l.NextOffset(); {
		page, err := l.Read(next, 100, 1<<20)
		if err != nil {
			t.Fatalf("Read(%d): %v", next, err)
		}
		for _, r := range page.Records {
			if !bytes.Equal(r.Value, payload(r.Offset)) {
				t.Fatalf("offset %d holds %q", r.Offset, r.Value)
			}
		}
		next = page.Next
	}
}

// TestVerifyEveryBatchVersion reads a log of V1, V2, V1A and V2A batches,
// and one of V3 raft entries (with and without records), as clean, with
// every record counted.
func TestVerifyEveryBatchVersion(t *testing.T) {
	plain := t.TempDir()
	l := mustOpen(t, plain, smallConfig())
	at := t0
	add := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		at = at.Add(time.Millisecond)
	}
	for i := range 20 {
		base := l.NextOffset()
		attrs := [][]byte{EncodeAttrs([]byte("k"), nil), nil}
		stamp := &Stamp{Producer: 1, Sequence: uint64(i), Digest: 7}
		_, err := [](func() (Appended, error)){
			func() (Appended, error) { return l.Append(base, batchOf(base, 2), at) },
			func() (Appended, error) { return l.AppendStamped(base, batchOf(base, 2), at, stamp) },
			func() (Appended, error) { return l.AppendAttributed(base, batchOf(base, 2), attrs, at, nil) },
			func() (Appended, error) { return l.AppendAttributed(base, batchOf(base, 2), attrs, at, stamp) },
		}[i%4]()
		add(err)
	}
	mustClose(t, l)
	expectCleanRecords(t, plain, 40)

	entries := t.TempDir()
	l = mustOpen(t, entries, smallConfig())
	for i := range 20 {
		meta := EntryMeta{Index: uint64(i + 1), Term: 1}
		var recs [][]byte
		if i%5 != 0 {
			recs = batchOf(l.NextOffset(), 2)
		} else {
			meta.Kind = EntryEmpty
		}
		_, err := l.AppendEntry(meta, recs, at, nil)
		add(err)
	}
	mustClose(t, l)
	expectCleanRecords(t, entries, 32)
}

func expectCleanRecords(t *testing.T, dir string, records int) {
	t.Helper()
	rep, err := Verify(dir)
	if err != nil || len(rep.AllProblems()) != 0 {
		t.Fatalf("Verify: %+v, %v", rep, err)
	}
	n := 0
	for _, s := range rep.Segments {
		n += s.Records
	}
	if n != records {
		t.Fatalf("Verify counted %d records, want %d", n, records)
	}
}

// TestRepairCases covers the other cuts: damage at a segment's first batch
// (the segment moves whole), a log shorter than its mark (a synced tail
// gone: the mark is lowered), and what the broker fixes by itself (a bad
// index, a torn unsynced tail), which Repair leaves alone.
func TestRepairCases(t *testing.T) {
	prepared := t.TempDir()
	l := mustOpen(t, prepared, smallConfig())
	end := appendBatches(t, l, 200, 5)
	mustClose(t, l)
	logs := segmentFiles(t, prepared, logExt)
	name := func(i int) string { return filepath.Base(logs[i]) }
	for _, tc := range []struct {
		what    string
		damage  func(dir string)
		kind    string
		needed  bool
		lostTo  uint64
		nextLog int // segments left
	}{
		{"first batch of a segment", func(dir string) { flipBit(t, filepath.Join(dir, name(3)), batchHeaderLen+2) }, ProblemBatch, true, end, 3},
		{"synced tail gone", func(dir string) {
			last := filepath.Join(dir, name(len(logs)-1))
			starts, _ := batchStarts(t, last)
			if err := os.Truncate(last, starts[len(starts)-1]); err != nil {
				t.Fatal(err)
			}
		}, ProblemMark, true, end, len(logs)},
		{"bad index", func(dir string) { flipBit(t, filepath.Join(dir, segmentName(0, indexExt)), 3) }, ProblemIndex, false, 0, len(logs)},
		{"torn unsynced tail", func(dir string) { appendToFile(t, filepath.Join(dir, name(len(logs)-1)), []byte{batchMagicV1, 0, 0}) }, ProblemTornTail, false, 0, len(logs)},
	} {
		t.Run(tc.what, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "log")
			copyDir(t, prepared, dir)
			tc.damage(dir)
			v, err := Verify(dir)
			if err != nil || len(v.AllProblems()) != 1 || v.AllProblems()[0].Kind != tc.kind || v.Damaged() != tc.needed {
				t.Fatalf("Verify: %+v, %v; want one %s problem", v, err, tc.kind)
			}
			rep, err := Repair(dir, t0)
			if err != nil || rep.Needed != tc.needed || (tc.needed && rep.LostTo != tc.lostTo) {
				t.Fatalf("Repair: %+v, %v", rep, err)
			}
			if got := len(segmentFiles(t, dir, logExt)); got != tc.nextLog {
				t.Fatalf("%d segments after Repair, want %d", got, tc.nextLog)
			}
			cfg := smallConfig()
			cfg.VerifyOnOpen = true
			l := mustOpen(t, dir, cfg)
			defer mustClose(t, l)
			if tc.needed && l.NextOffset() != rep.LostFrom {
				t.Fatalf("NextOffset %d, want %d", l.NextOffset(), rep.LostFrom)
			}
			readAll(t, l, 0)
		})
	}
}

// damagedLog writes 30 batches of 4 records to a synced log in a fresh
// directory, then overwrites the bytes of one of its segments from at with
// junk (the fuzzers' damage). It returns the directory, the config the log
// was written with (every batch checked on open) and the end offset.
func damagedLog(t *testing.T, at uint16, junk []byte) (string, Config, uint64) {
	t.Helper()
	dir := t.TempDir()
	cfg := smallConfig()
	cfg.VerifyOnOpen = true
	l := mustOpen(t, dir, cfg)
	end := appendBatches(t, l, 30, 4)
	mustClose(t, l)
	logs := segmentFiles(t, dir, logExt)
	path := logs[int(at)%len(logs)]
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 0 {
		copy(b[int(at)%len(b):], junk)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, cfg, end
}
