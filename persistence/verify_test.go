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
	wantMoved := []string{filepath.Base(target)}
	for _, p := range logs[len(logs)/2+1:] {
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
	if moved, err := os.ReadFile(filepath.Join(got.DamagedDir, filepath.Base(target))); err != nil || !bytes.Equal(moved, original) {
		t.Fatalf("the damaged segment was not moved aside whole: %v", err)
	}
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
