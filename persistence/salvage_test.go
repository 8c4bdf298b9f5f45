package persistence

import (
	"bytes"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// batch64Config holds about 30 batches of 64 records per segment: the
// broker's batch size, with batches on both sides of a damaged one.
func batch64Config() Config {
	return Config{SegmentBytes: 64 << 10, IndexIntervalBytes: 4096, Fsync: FsyncNone}
}

// append64 appends n batches of 64 records and returns the next offset.
func append64(t testing.TB, l *Log, n int) uint64 {
	t.Helper()
	for range n {
		base := l.NextOffset()
		if _, err := l.Append(base, batchOf(base, 64), t0.Add(time.Duration(base)*time.Millisecond)); err != nil {
			t.Fatalf("Append(%d): %v", base, err)
		}
	}
	return l.NextOffset()
}

// readSalvaged reads the whole log and checks that every offset in lost
// holds a placeholder (an empty value with the LostHeader header) and
// every other offset its payload, with no offset missing.
func readSalvaged(t testing.TB, l *Log, lost []LostRange) {
	t.Helper()
	isLost := func(off uint64) bool {
		return slices.ContainsFunc(lost, func(r LostRange) bool { return off >= r.From && off < r.To })
	}
	eachRecord(t, l, l.StartOffset(), 500, 0, func(r Record) {
		if isLost(r.Offset) {
			_, headers, err := DecodeAttrs(r.Attrs)
			want := []Header{{Key: LostHeader, Value: []byte(LostHeaderValue)}}
			if err != nil || len(r.Value) != 0 || len(headers) != 1 || headers[0].Key != want[0].Key || !bytes.Equal(headers[0].Value, want[0].Value) {
				t.Fatalf("lost offset %d holds value %q, headers %v (%v), want an empty placeholder with %s: %s", r.Offset, r.Value, headers, err, LostHeader, LostHeaderValue)
			}
		} else if !bytes.Equal(r.Value, payload(r.Offset)) || r.Attrs != nil {
			t.Fatalf("offset %d holds %q (attrs %x), want %q", r.Offset, r.Value, r.Attrs, payload(r.Offset))
		}
	})
}

// TestSalvageMidSegmentBatch damages one 64-record batch in the middle of
// a segment in the middle of the log: Repair would cut every record after
// it, Salvage loses exactly that batch's 64 offsets, keeps every later
// record at its offset, records the loss in its report and in
// LostOffsetsFile, and leaves a log Open accepts in full and appends
// continue on at its old end.
func TestSalvageMidSegmentBatch(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, batch64Config())
	end := append64(t, l, 120)
	mustClose(t, l)
	logs := segmentFiles(t, dir, logExt)
	if len(logs) < 3 {
		t.Fatalf("want at least 3 segments, got %d", len(logs))
	}
	target := logs[len(logs)/2]
	starts, bases := batchStarts(t, target)
	k := len(starts) / 2
	flipBit(t, target, starts[k]+batchHeaderLen+10)
	original, err := os.ReadFile(target)
	if err != nil {
		t.Fatal(err)
	}

	repairPlan, _, err := PlanRepair(dir)
	if err != nil || repairPlan.LostTo-repairPlan.LostFrom <= 64 {
		t.Fatalf("PlanRepair: %+v, %v; want it to lose far more than the batch", repairPlan, err)
	}
	before := dirState(t, dir)
	plan, err := PlanSalvage(dir)
	if err != nil || !plan.Needed || plan.Applied {
		t.Fatalf("PlanSalvage: %+v, %v", plan, err)
	}
	if after := dirState(t, dir); !maps.Equal(before, after) {
		t.Fatal("PlanSalvage changed the directory")
	}

	rep, err := Salvage(dir, t0)
	if err != nil {
		t.Fatal(err)
	}
	wantLost := []LostRange{{From: bases[k], To: bases[k+1]}}
	if !rep.Applied || len(rep.Lost) != 1 || rep.Lost[0].From != wantLost[0].From || rep.Lost[0].To != wantLost[0].To ||
		rep.Lost[0].File != filepath.Base(target) || rep.Lost[0].Position != starts[k] || rep.Lost[0].Bytes != starts[k+1]-starts[k] {
		t.Fatalf("Salvage: %+v, want offsets [%d, %d) lost from byte %d of %s", rep, bases[k], bases[k+1], starts[k], filepath.Base(target))
	}
	if n := rep.LostOffsets(); n != 64 {
		t.Fatalf("Salvage lost %d offsets, want the batch's 64", n)
	}
	if want := int(end - bases[k+1]); rep.Kept != want {
		t.Fatalf("Salvage kept %d records after the damage, want %d", rep.Kept, want)
	}
	if rep.Mark.Offset != end || !slices.Equal(rep.Rewritten, []string{filepath.Base(target)}) {
		t.Fatalf("Salvage: mark %d, rewritten %v; want mark %d, %s rewritten", rep.Mark.Offset, rep.Rewritten, end, filepath.Base(target))
	}
	if got, err := os.ReadFile(filepath.Join(rep.DamagedDir, filepath.Base(target))); err != nil || !bytes.Equal(got, original) {
		t.Fatalf("the damaged original in %s: %v, equal %v", rep.DamagedDir, err, bytes.Equal(got, original))
	}
	wantLostFile(t, dir, rep.Lost)
	if v, err := Verify(dir); err != nil || len(v.AllProblems()) != 0 {
		t.Fatalf("Verify after Salvage: %+v, %v", v, err)
	}

	strict := batch64Config()
	strict.VerifyOnOpen = true
	l = mustOpen(t, dir, strict)
	if n := l.NextOffset(); n != end {
		t.Fatalf("NextOffset after Salvage = %d, want %d", n, end)
	}
	readSalvaged(t, l, rep.Lost)
	if _, err := l.Append(end, batchOf(end, 3), t0.Add(time.Hour)); err != nil {
		t.Fatalf("Append at the old end: %v", err)
	}
	readSalvaged(t, l, rep.Lost)
	mustClose(t, l)
}

// wantLostFile checks LostOffsetsFile's last line names lost.
func wantLostFile(t *testing.T, dir string, lost []LostRange) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, LostOffsetsFile))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	var got lostEntry
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &got); err != nil {
		t.Fatalf("%s: %v\n%s", LostOffsetsFile, err, b)
	}
	if got.Time != t0.Format(time.RFC3339) || !slices.Equal(got.Lost, lost) {
		t.Fatalf("%s's last line = %+v, want time %s and %+v", LostOffsetsFile, got, t0.Format(time.RFC3339), lost)
	}
}

// TestSalvageCases damages a log of 64-record batches in the places a
// salvage handles differently and checks, each time, which offsets are
// lost, that no other is, and that Open then accepts the whole log.
func TestSalvageCases(t *testing.T) {
	prepared := t.TempDir()
	l := mustOpen(t, prepared, batch64Config())
	end := append64(t, l, 120)
	mustClose(t, l)
	logs := segmentFiles(t, prepared, logExt)
	if len(logs) < 4 {
		t.Fatalf("want at least 4 segments, got %d", len(logs))
	}
	seg := func(dir string, i int) string { return filepath.Join(dir, filepath.Base(logs[i])) }
	starts := make([][]int64, len(logs))
	bases := make([][]uint64, len(logs))
	for i, p := range logs {
		starts[i], bases[i] = batchStarts(t, p)
	}
	last := len(logs) - 1
	for _, tc := range []struct {
		what   string
		damage func(dir string)
		lost   []LostRange // From and To only
		end    uint64      // NextOffset after
	}{
		{"first batch of a segment", func(dir string) { flipBit(t, seg(dir, 1), batchHeaderLen+2) },
			[]LostRange{{From: bases[1][0], To: bases[1][1]}}, end},
		{"last batch of a segment", func(dir string) { flipBit(t, seg(dir, 1), starts[1][len(starts[1])-1]+batchHeaderLen+2) },
			[]LostRange{{From: bases[1][len(bases[1])-1], To: bases[2][0]}}, end},
		{"two batches of one segment", func(dir string) {
			flipBit(t, seg(dir, 2), starts[2][3]+batchHeaderLen+2)
			flipBit(t, seg(dir, 2), starts[2][7]+batchHeaderLen+2)
		}, []LostRange{{From: bases[2][3], To: bases[2][4]}, {From: bases[2][7], To: bases[2][8]}}, end},
		{"a segment gone", func(dir string) {
			if err := os.Remove(seg(dir, 1)); err != nil {
				t.Fatal(err)
			}
		}, []LostRange{{From: bases[1][0], To: bases[2][0]}}, end},
		{"synced last batch damaged", func(dir string) { flipBit(t, seg(dir, last), starts[last][len(starts[last])-1]+batchHeaderLen+2) },
			[]LostRange{{From: bases[last][len(bases[last])-1], To: end}}, bases[last][len(bases[last])-1]},
	} {
		t.Run(tc.what, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "log")
			copyDir(t, prepared, dir)
			// The mark says everything was synced, so no damage is a torn tail.
			writeMarkAt(t, dir, end)
			tc.damage(dir)
			rep, err := Salvage(dir, t0)
			if err != nil {
				t.Fatal(err)
			}
			var got []LostRange
			for _, r := range rep.Lost {
				got = append(got, LostRange{From: r.From, To: r.To})
			}
			if !rep.Applied || !slices.Equal(got, tc.lost) {
				t.Fatalf("Salvage lost %+v, want %+v\nreport: %+v", got, tc.lost, rep)
			}
			wantLostFile(t, dir, rep.Lost)
			cfg := batch64Config()
			cfg.VerifyOnOpen = true
			l := mustOpen(t, dir, cfg)
			defer mustClose(t, l)
			if l.NextOffset() != tc.end || rep.Mark.Offset != tc.end {
				t.Fatalf("NextOffset %d, mark %d, want %d", l.NextOffset(), rep.Mark.Offset, tc.end)
			}
			var fills []LostRange
			for _, r := range rep.Lost {
				if !r.Tail {
					fills = append(fills, r)
				}
			}
			readSalvaged(t, l, fills)
		})
	}
}

// writeMarkAt replaces dir's durable mark with one at offset.
func writeMarkAt(t testing.TB, dir string, offset uint64) {
	t.Helper()
	m, err := createMark(osFS{}, dir, markPoint{offset: offset})
	if err == nil {
		err = m.close()
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestSalvageNothingToDo: a clean log, and one whose only problems Open
// fixes itself, are left as they are.
func TestSalvageNothingToDo(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, batch64Config())
	append64(t, l, 40)
	mustClose(t, l)
	logs := segmentFiles(t, dir, logExt)
	appendToFile(t, logs[len(logs)-1], []byte{batchMagicV1, 0, 0}) // a torn unsynced tail
	before := dirState(t, dir)
	rep, err := Salvage(dir, t0)
	if err != nil || rep.Needed || rep.Applied || len(rep.Lost) != 0 {
		t.Fatalf("Salvage: %+v, %v; want nothing needed", rep, err)
	}
	if after := dirState(t, dir); !maps.Equal(before, after) {
		t.Fatal("Salvage changed a log that needed nothing")
	}
}

// TestSalvageRefusesEntries: a log of raft entries is refused, and left
// as it was.
func TestSalvageRefusesEntries(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, smallConfig())
	appendEntryRange(t, l, 1, 60)
	mustClose(t, l)
	logs := segmentFiles(t, dir, logExt)
	starts, _ := batchStarts(t, logs[1])
	flipBit(t, logs[1], starts[len(starts)/2]+batchHeaderLen+2)
	before := dirState(t, dir)
	_, err := Salvage(dir, t0)
	if err == nil || !strings.Contains(err.Error(), "raft entries") {
		t.Fatalf("Salvage of an entry log: %v, want a refusal naming raft entries", err)
	}
	if after := dirState(t, dir); !maps.Equal(before, after) {
		t.Fatal("a refused Salvage changed the directory")
	}
}

// FuzzVerifySalvage overwrites part of a synced log with arbitrary bytes:
// Salvage either refuses, changing nothing, or leaves a log Open accepts
// with every batch checked, whose every offset holds the record written
// there or, in a range it reports lost, a placeholder.
func FuzzVerifySalvage(f *testing.F) {
	f.Add(uint16(0), []byte{0})
	f.Add(uint16(300), []byte("garbage"))
	f.Add(uint16(1100), []byte{0xFB, 0, 0, 0, 1})
	f.Add(uint16(2000), make([]byte, 64))
	f.Fuzz(func(t *testing.T, at uint16, junk []byte) {
		dir, cfg, end := damagedLog(t, at, junk)
		before := dirState(t, dir)
		rep, err := Salvage(dir, t0)
		if err != nil {
			if !strings.Contains(err.Error(), "salvage cannot keep both") {
				t.Fatalf("Salvage: %v", err)
			}
			if after := dirState(t, dir); !maps.Equal(before, after) {
				t.Fatalf("a refused Salvage (%v) changed the directory", err)
			}
			return
		}
		l, err := Open(dir, cfg)
		if err != nil {
			t.Fatalf("Open after Salvage %+v: %v", rep, err)
		}
		defer mustClose(t, l)
		want := end
		if rep.Needed {
			want = rep.Mark.Offset
		}
		if l.NextOffset() != want {
			t.Fatalf("NextOffset %d after Salvage %+v, want %d", l.NextOffset(), rep, want)
		}
		var fills []LostRange
		for _, r := range rep.Lost {
			if !r.Tail {
				fills = append(fills, r)
			}
		}
		readSalvaged(t, l, fills)
	})
}
