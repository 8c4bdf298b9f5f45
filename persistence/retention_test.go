package persistence

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// TestRetentionWaitsForReaders deletes the segment a cursor is paging
// through: the cursor keeps reading correct data from it, the segment's file
// outlives the deletion until the cursor lets go, and then it is gone.
func TestRetentionWaitsForReaders(t *testing.T) {
	dir := t.TempDir()
	cfg := smallConfig()
	cfg.RetentionBytes = 1 // everything but the active segment may go
	l := mustOpen(t, dir, cfg)
	defer mustClose(t, l)
	next := appendBatches(t, l, 200, 5)
	logs := segmentFiles(t, dir, logExt)
	first := logs[0]

	c, err := l.Cursor(0)
	if err != nil {
		t.Fatal(err)
	}
	page, err := c.Next(3, 0)
	if err != nil || len(page.Records) != 3 {
		t.Fatalf("first page: %d records, %v", len(page.Records), err)
	}
	// A sync pass holds the segments it fsyncs as a reader does; let it
	// finish so that only the cursor holds anything.
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	deleted, err := l.EnforceRetention(t0)
	if err != nil || deleted != len(logs)-1 {
		t.Fatalf("EnforceRetention deleted %d, %v; want %d (all but the active)", deleted, err, len(logs)-1)
	}
	start := l.StartOffset()
	if start == 0 || len(segmentFiles(t, dir, logExt)) != 1 {
		t.Fatalf("after retention: start %d, segments %v", start, segmentFiles(t, dir, logExt))
	}
	// Segments nobody held are gone at once, indexes included; the held one
	// waits under its .deleted name.
	for _, path := range logs[1 : len(logs)-1] {
		for _, p := range []string{path, path + deletedSuffix, trimExt(path) + indexExt, trimExt(path) + timeIndexExt} {
			if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("%s still exists (%v) though no reader held it", filepath.Base(p), err)
			}
		}
	}
	if _, err := os.Stat(first + deletedSuffix); err != nil {
		t.Fatalf("the segment the cursor holds: %v, want it kept until the cursor moves on", err)
	}
	if _, err := l.Read(0, 1, 0); !errors.As(err, new(*ErrOffsetTooOld)) {
		t.Fatalf("a new Read of the deleted range: %v, want ErrOffsetTooOld", err)
	}

	// The cursor finishes its segment with correct data, then finds the
	// next one gone.
	want := uint64(3)
	for {
		page, err := c.Next(2, 0)
		var old *ErrOffsetTooOld
		if errors.As(err, &old) {
			if old.Available != start || old.Requested != want {
				t.Fatalf("cursor leaving its segment: %v, want ErrOffsetTooOld{Requested: %d, Available: %d}", err, want, start)
			}
			break
		}
		if err != nil {
			t.Fatalf("cursor at %d: %v", want, err)
		}
		for _, r := range page.Records {
			if r.Offset != want || !bytes.Equal(r.Value, payload(want)) {
				t.Fatalf("cursor read offset %d %q, want %d %q", r.Offset, r.Value, want, payload(want))
			}
			want++
		}
	}
	if want == 3 {
		t.Fatal("the cursor read nothing more from its deleted segment")
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(first + deletedSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the held segment after its reader closed: %v, want it gone", err)
	}
	readAll(t, l, start)
	if l.NextOffset() != next {
		t.Fatalf("retention moved NextOffset from %d to %d", next, l.NextOffset())
	}
}

func trimExt(path string) string { return path[:len(path)-len(filepath.Ext(path))] }

func TestRetentionByAge(t *testing.T) {
	dir := t.TempDir()
	cfg := smallConfig()
	cfg.RetentionAge = time.Hour
	l := mustOpen(t, dir, cfg)
	// Old batches, then recent ones.
	for i := range 100 {
		base := l.NextOffset()
		at := t0
		if i >= 50 {
			at = t0.Add(2 * time.Hour)
		}
		if _, err := l.Append(base, batchOf(base, 3), at); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := l.EnforceRetention(t0.Add(30 * time.Minute)); n != 0 || err != nil {
		t.Fatalf("EnforceRetention before anything is an hour old: %d, %v", n, err)
	}
	n, err := l.EnforceRetention(t0.Add(2 * time.Hour))
	if err != nil || n == 0 {
		t.Fatalf("EnforceRetention an hour after the old batches: %d, %v", n, err)
	}
	start := l.StartOffset()
	page, err := l.Read(start, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The first retained segment holds a recent batch; everything before
	// it was old.
	if at, err := l.OffsetForTime(t0.Add(time.Hour)); err != nil || at < start || at > 150 {
		t.Fatalf("OffsetForTime after retention = %d, %v", at, err)
	}
	// Below retention: the oldest record kept, whether the time's records
	// were deleted or never existed.
	for _, at := range []time.Time{t0, t0.Add(-time.Hour)} {
		if got, err := l.OffsetForTime(at); err != nil || got != start {
			t.Fatalf("OffsetForTime(%v) below retention = %d, %v; want the start offset %d", at, got, err, start)
		}
	}
	if page.Records[0].Offset > 150 {
		t.Fatalf("retention by age deleted recent records: start %d", start)
	}
	mustClose(t, l)
	l = mustOpen(t, dir, cfg)
	defer mustClose(t, l)
	if l.StartOffset() != start {
		t.Fatalf("StartOffset after reopen = %d, want %d", l.StartOffset(), start)
	}
	readAll(t, l, start)
}

// TestRetentionRacingReaders runs an appender, retention and several readers
// together: readers never see wrong data, only ErrOffsetTooOld (after which
// they jump to Available), and every deleted file is gone at the end.
func TestRetentionRacingReaders(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{SegmentBytes: 1024, IndexIntervalBytes: 128, Fsync: FsyncNone, RetentionBytes: 4096}
	l := mustOpen(t, dir, cfg)
	const records = 4000
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	done := make(chan struct{})
	wg.Go(func() {
		defer close(done)
		for l.NextOffset() < records {
			base := l.NextOffset()
			if _, err := l.Append(base, batchOf(base, 1+int(base%4)), t0); err != nil {
				errs <- err
				return
			}
			if base%16 == 0 {
				if _, err := l.EnforceRetention(t0); err != nil {
					errs <- err
					return
				}
			}
		}
	})
	for i := range 4 {
		wg.Go(func() {
			c, err := l.Cursor(0)
			if err != nil {
				errs <- err
				return
			}
			defer func() {
				if c == nil {
					return
				}
				if err := c.Close(); err != nil {
					errs <- err
				}
			}()
			for {
				page, err := c.Next(1+i*3, 0)
				var old *ErrOffsetTooOld
				if errors.As(err, &old) {
					c.Close()
					if c, err = l.Cursor(old.Available); errors.As(err, &old) {
						c, err = l.Cursor(l.StartOffset())
					}
					if err != nil {
						errs <- err
						return
					}
					continue
				}
				if err != nil {
					errs <- err
					return
				}
				for _, r := range page.Records {
					if !bytes.Equal(r.Value, payload(r.Offset)) {
						errs <- fmt.Errorf("reader %d: offset %d holds %q", i, r.Offset, r.Value)
						return
					}
				}
				if len(page.Records) == 0 {
					select {
					case <-done:
						return
					default:
						time.Sleep(100 * time.Microsecond)
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n, err := l.EnforceRetention(t0); err != nil {
		t.Fatalf("final retention: %d, %v", n, err)
	}
	mustClose(t, l)
	if left := segmentFiles(t, dir, deletedSuffix); len(left) != 0 {
		t.Fatalf("deleted segments left behind after every reader closed: %v", left)
	}
	l = mustOpen(t, dir, cfg)
	defer mustClose(t, l)
	readAll(t, l, l.StartOffset())
}
