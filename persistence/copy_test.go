package persistence

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCopyLog copies a log of several segments with a torn unsynced tail:
// the copy ends at the last complete batch, leaves the source as it was,
// opens with every batch checked, reads back record for record, and takes
// appends at its end; a second copy into it is refused.
func TestCopyLog(t *testing.T) {
	src := t.TempDir()
	l := mustOpen(t, src, smallConfig())
	end := appendBatches(t, l, 200, 5)
	mustClose(t, l)
	logs := segmentFiles(t, src, logExt)
	appendToFile(t, logs[len(logs)-1], []byte{batchMagicV1, 0, 0})
	before := dirState(t, src)

	dst := filepath.Join(t.TempDir(), "copy")
	rep, err := CopyLog(src, dst)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Start != 0 || rep.End != end || rep.Records != int(end) || rep.Segments != len(logs) {
		t.Fatalf("CopyLog: %+v, want offsets [0, %d) in %d segments", rep, end, len(logs))
	}
	if after := dirState(t, src); !maps.Equal(before, after) {
		t.Fatal("CopyLog changed its source")
	}
	cfg := smallConfig()
	cfg.VerifyOnOpen = true
	c := mustOpen(t, dst, cfg)
	if c.NextOffset() != end || c.Synced() != end {
		t.Fatalf("copy: NextOffset %d, Synced %d, want %d", c.NextOffset(), c.Synced(), end)
	}
	readAll(t, c, 0)
	if _, err := c.Append(end, batchOf(end, 3), t0.Add(time.Hour)); err != nil {
		t.Fatalf("Append at the copy's end: %v", err)
	}
	mustClose(t, c)

	if _, err := CopyLog(src, dst); !errors.Is(err, ErrCopyTarget) {
		t.Fatalf("CopyLog into a log: %v, want ErrCopyTarget", err)
	}
}

// TestCopyLogRefusesDamage: a log Open refuses is not copied, and the
// refusal says what to run.
func TestCopyLogRefusesDamage(t *testing.T) {
	src := t.TempDir()
	l := mustOpen(t, src, smallConfig())
	appendBatches(t, l, 200, 5)
	mustClose(t, l)
	logs := segmentFiles(t, src, logExt)
	flipBit(t, logs[1], batchHeaderLen+2)
	dst := filepath.Join(t.TempDir(), "copy")
	_, err := CopyLog(src, dst)
	if err == nil || !strings.Contains(err.Error(), "felix log repair") {
		t.Fatalf("CopyLog of a damaged log: %v, want a refusal naming felix log repair", err)
	}
	if _, err := os.Stat(dst); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused copy left %s: %v", dst, err)
	}
}

// TestCopyLogKeepsTheCompactionHorizon: a copy of a compacted log holds
// its records, gaps and all, and is compacted below the same horizon.
func TestCopyLogKeepsTheCompactionHorizon(t *testing.T) {
	src := t.TempDir()
	l := mustOpen(t, src, smallConfig())
	appendBatches(t, l, 200, 1)
	c, err := l.PrepareCompaction(150, func(off uint64, v []byte) ([]byte, bool, error) { return v, off%2 == 0, nil })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Commit(); err != nil {
		t.Fatal(err)
	}
	horizon := l.CompactedBelow()
	if horizon == 0 {
		t.Fatal("the log did not compact")
	}
	mustClose(t, l)
	dst := filepath.Join(t.TempDir(), "copy")
	if _, err := CopyLog(src, dst); err != nil {
		t.Fatal(err)
	}
	cp := mustOpen(t, dst, smallConfig())
	defer mustClose(t, cp)
	if got := cp.CompactedBelow(); got != horizon {
		t.Fatalf("the copy is compacted below %d, the log below %d", got, horizon)
	}
	page, err := cp.Read(1, 1, 0)
	if err != nil || len(page.Records) != 1 || page.Records[0].Offset != 2 {
		t.Fatalf("read from the gap at 1 in the copy: %+v, %v; want offset 2", page, err)
	}
}
