package persistence

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"
)

func TestAppendReadAcrossRolls(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, smallConfig())
	defer mustClose(t, l)

	next := appendBatches(t, l, 200, 5)
	if got := len(segmentFiles(t, dir, logExt)); got < 5 {
		t.Fatalf("%d segments after %d records in 1 KiB segments, want several", got, next)
	}
	if l.StartOffset() != 0 {
		t.Fatalf("StartOffset = %d, want 0", l.StartOffset())
	}
	readAll(t, l, 0)
	// Start everywhere, including mid-batch and at every segment base.
	for from := range next + 1 {
		page, err := l.Read(from, 3, 0)
		if err != nil {
			t.Fatalf("Read(%d): %v", from, err)
		}
		want := min(3, next-from)
		if uint64(len(page.Records)) != want || (want > 0 && page.Records[0].Offset != from) {
			t.Fatalf("Read(%d, 3): %d records starting %v, want %d from %d", from, len(page.Records), page.Records, want, from)
		}
	}
}

func TestReopenContinuesOffsets(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, smallConfig())
	next := appendBatches(t, l, 60, 4)
	mustClose(t, l)

	l = mustOpen(t, dir, smallConfig())
	if l.NextOffset() != next || l.Synced() != next {
		t.Fatalf("after reopen NextOffset = %d, Synced = %d, want both %d", l.NextOffset(), l.Synced(), next)
	}
	next = appendBatches(t, l, 60, 4)
	readAll(t, l, 0)
	mustClose(t, l)

	l = mustOpen(t, dir, smallConfig())
	defer mustClose(t, l)
	if l.NextOffset() != next {
		t.Fatalf("after second reopen NextOffset = %d, want %d", l.NextOffset(), next)
	}
	readAll(t, l, 0)
}

func TestAppendRefusesWrongBase(t *testing.T) {
	l := mustOpen(t, t.TempDir(), smallConfig())
	defer mustClose(t, l)
	appendBatches(t, l, 3, 3)
	next := l.NextOffset()

	for _, base := range []uint64{0, next - 1, next + 1, next + 100} {
		_, err := l.Append(base, batchOf(base, 1), t0)
		var mismatch *ErrOffsetMismatch
		if !errors.As(err, &mismatch) || mismatch.Want != next || mismatch.Got != base {
			t.Fatalf("Append(%d) at next %d: %v, want ErrOffsetMismatch{Want: %d, Got: %d}", base, next, err, next, base)
		}
	}
	if _, err := l.Append(next, nil, t0); !errors.Is(err, ErrEmptyBatch) {
		t.Fatalf("Append of no records: %v, want ErrEmptyBatch", err)
	}
	if _, err := l.Append(next, [][]byte{make([]byte, maxBatchBytes)}, t0); !errors.Is(err, ErrBatchTooLarge) {
		t.Fatalf("Append of a %d-byte record: %v, want ErrBatchTooLarge", maxBatchBytes, err)
	}
	if l.NextOffset() != next {
		t.Fatalf("refused appends moved NextOffset from %d to %d", next, l.NextOffset())
	}
	readAll(t, l, 0)
}

func TestOversizeBatchGetsItsOwnSegment(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Config{SegmentBytes: 100, Fsync: FsyncNone})
	big := [][]byte{bytes.Repeat([]byte("x"), 500)}
	for base := range uint64(3) {
		if _, err := l.Append(base, big, t0); err != nil {
			t.Fatal(err)
		}
	}
	mustClose(t, l)
	l = mustOpen(t, dir, Config{SegmentBytes: 100})
	defer mustClose(t, l)
	if got := len(segmentFiles(t, dir, logExt)); got != 3 {
		t.Fatalf("%d segments for 3 oversize batches, want 3", got)
	}
	page, err := l.Read(0, 10, 10000)
	if err != nil || len(page.Records) != 3 {
		t.Fatalf("Read: %d records, %v; want 3", len(page.Records), err)
	}
}

func TestReadBoundsAndCaps(t *testing.T) {
	dir := t.TempDir()
	cfg := smallConfig()
	cfg.RetentionBytes = 2048
	l := mustOpen(t, dir, cfg)
	defer mustClose(t, l)
	next := appendBatches(t, l, 100, 6)
	if _, err := l.EnforceRetention(t0); err != nil {
		t.Fatal(err)
	}
	start := l.StartOffset()
	if start == 0 {
		t.Fatal("retention deleted nothing")
	}

	var old *ErrOffsetTooOld
	if _, err := l.Read(start-1, 1, 0); !errors.As(err, &old) || old.Available != start || old.Requested != start-1 {
		t.Fatalf("Read(%d) below start %d: %v, want ErrOffsetTooOld{Available: %d}", start-1, start, err, start)
	}
	var future *ErrOffsetInFuture
	if _, err := l.Read(next+1, 1, 0); !errors.As(err, &future) || future.Available != next {
		t.Fatalf("Read(%d) past next %d: %v, want ErrOffsetInFuture{Available: %d}", next+1, next, err, next)
	}
	if page, err := l.Read(next, 1, 0); err != nil || len(page.Records) != 0 || page.Next != next {
		t.Fatalf("Read at the end: %+v, %v; want an empty page at %d", page, err, next)
	}

	// maxBytes: stop before the record that would exceed it, but always
	// return one.
	page, err := l.Read(start, 0, 1)
	if err != nil || len(page.Records) != 1 {
		t.Fatalf("Read with maxBytes 1: %d records, %v; want exactly 1", len(page.Records), err)
	}
	limit := len(payload(start)) + len(payload(start+1))
	page, err = l.Read(start, 0, limit)
	if err != nil || len(page.Records) != 2 || page.Next != start+2 {
		t.Fatalf("Read with maxBytes %d: %d records, next %d, %v; want 2, next %d", limit, len(page.Records), page.Next, err, start+2)
	}
	page, err = l.Read(start, 5, 0)
	if err != nil || len(page.Records) != 5 {
		t.Fatalf("Read with maxRecords 5: %d records, %v", len(page.Records), err)
	}
	// Defaults read everything retained here in one page.
	page, err = l.Read(start, 0, 0)
	if err != nil || page.Next != next {
		t.Fatalf("Read with defaults: next %d, %v; want %d", page.Next, err, next)
	}
	// Values are the caller's: writing one does not change the log.
	page.Records[0].Value[0] ^= 0xFF
	readAll(t, l, start)
}

func TestCursorPagesAcrossSegments(t *testing.T) {
	l := mustOpen(t, t.TempDir(), smallConfig())
	defer mustClose(t, l)
	next := appendBatches(t, l, 150, 5)
	c, err := l.Cursor(3)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	want := uint64(3)
	for want < next {
		page, err := c.Next(4, 0)
		if err != nil {
			t.Fatalf("Next at %d: %v", want, err)
		}
		for _, r := range page.Records {
			if r.Offset != want || !bytes.Equal(r.Value, payload(want)) {
				t.Fatalf("Next: got offset %d %q, want %d %q", r.Offset, r.Value, want, payload(want))
			}
			want++
		}
	}
	// At the end the cursor waits for nothing and picks up new appends.
	if page, err := c.Next(4, 0); err != nil || len(page.Records) != 0 {
		t.Fatalf("Next at the end: %d records, %v", len(page.Records), err)
	}
	appendBatches(t, l, 1, 1)
	if page, err := c.Next(4, 0); err != nil || len(page.Records) != 1 || page.Records[0].Offset != next {
		t.Fatalf("Next after an append: %+v, %v; want offset %d", page, err, next)
	}
}

func TestOffsetForTime(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, smallConfig())
	// Batch i at t0 + 10ms·i, so the answers are known.
	for i := range 120 {
		base := l.NextOffset()
		if _, err := l.Append(base, batchOf(base, 1+i%3), t0.Add(time.Duration(i)*10*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
	}
	next := l.NextOffset()
	check := func(l *Log) {
		t.Helper()
		for i := range 120 {
			for _, delta := range []time.Duration{-5 * time.Millisecond, 0} {
				at := t0.Add(time.Duration(i)*10*time.Millisecond + delta)
				got, err := l.OffsetForTime(at)
				if err != nil {
					t.Fatal(err)
				}
				page, err := l.Read(got, 1, 0)
				if err != nil || len(page.Records) != 1 || page.Records[0].Time.Before(at) {
					t.Fatalf("OffsetForTime(batch %d%+v) = %d whose record is %+v, %v", i, delta, got, page.Records, err)
				}
				if got > 0 {
					prev, _ := l.Read(got-1, 1, 0)
					if !prev.Records[0].Time.Before(at) {
						t.Fatalf("OffsetForTime(batch %d%+v) = %d, but %d is at %v, not before", i, delta, got, got-1, prev.Records[0].Time)
					}
				}
			}
		}
		if got, _ := l.OffsetForTime(t0.Add(-time.Hour)); got != 0 {
			t.Fatalf("OffsetForTime before everything = %d, want 0", got)
		}
		if got, _ := l.OffsetForTime(t0.Add(time.Hour)); got != next {
			t.Fatalf("OffsetForTime after everything = %d, want %d", got, next)
		}
	}
	check(l)
	mustClose(t, l)
	l = mustOpen(t, dir, smallConfig())
	defer mustClose(t, l)
	check(l)
}

// TestOffsetForTimeBounds: the times at the ends of time.Time's range, whose
// microseconds do not fit an int64, answer like any time before or after
// every record; an empty log answers 0 for any time.
func TestOffsetForTimeBounds(t *testing.T) {
	l := mustOpen(t, t.TempDir(), smallConfig())
	defer mustClose(t, l)
	times := []time.Time{{}, time.UnixMilli(math.MinInt64), t0, time.UnixMilli(math.MaxInt64)}
	for _, at := range times {
		if got, err := l.OffsetForTime(at); err != nil || got != 0 {
			t.Fatalf("OffsetForTime(%v) on an empty log = %d, %v; want 0", at, got, err)
		}
	}
	appendBatches(t, l, 50, 3)
	next := l.NextOffset()
	tests := []struct {
		give time.Time
		want uint64
	}{
		{time.Time{}, 0},
		{time.UnixMilli(math.MinInt64), 0},
		{time.UnixMicro(math.MinInt64), 0},
		{time.UnixMicro(math.MaxInt64), next},
		{time.UnixMilli(math.MaxInt64), next},
		{time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC), next},
	}
	for _, tt := range tests {
		if got, err := l.OffsetForTime(tt.give); err != nil || got != tt.want {
			t.Errorf("OffsetForTime(%v) = %d, %v; want %d", tt.give, got, err, tt.want)
		}
	}
}

func TestTimeNeverGoesBack(t *testing.T) {
	l := mustOpen(t, t.TempDir(), smallConfig())
	defer mustClose(t, l)
	a, err := l.Append(0, batchOf(0, 1), t0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.Append(1, batchOf(1, 1), t0.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if !b.Time.Equal(a.Time) {
		t.Fatalf("append with a clock an hour back stored %v, want it clamped to %v", b.Time, a.Time)
	}
}

func TestPeriodicSyncsWithoutBeingAsked(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Config{Fsync: FsyncPeriodic, SyncInterval: 5 * time.Millisecond})
	defer mustClose(t, l)
	next := appendBatches(t, l, 5, 3)
	deadline := time.Now().Add(eventTimeout)
	for l.Synced() < next {
		if time.Now().After(deadline) {
			t.Fatalf("Synced = %d after %v, want %d", l.Synced(), eventTimeout, next)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestWaitDurableAsksForASync(t *testing.T) {
	for _, policy := range []FsyncPolicy{FsyncNone, FsyncPeriodic} {
		t.Run(policy.String(), func(t *testing.T) {
			fsys := newFaultFS()
			l := mustOpen(t, t.TempDir(), Config{Fsync: policy, SyncInterval: time.Hour}, WithFS(fsys))
			defer mustClose(t, l)
			a, err := l.Append(0, batchOf(0, 3), t0)
			if err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-l.WaitDurable(a.Next):
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(eventTimeout):
				t.Fatal("WaitDurable did not complete")
			}
			if l.Synced() < a.Next {
				t.Fatalf("WaitDurable completed at Synced %d < %d", l.Synced(), a.Next)
			}
			var future *ErrOffsetInFuture
			if err := <-l.WaitDurable(a.Next + 1); !errors.As(err, &future) {
				t.Fatalf("WaitDurable past the end: %v, want ErrOffsetInFuture", err)
			}
		})
	}
}

func TestClosedLogRefusesEverything(t *testing.T) {
	cfg := smallConfig()
	cfg.RetentionBytes = 1 << 30
	l := mustOpen(t, t.TempDir(), cfg)
	appendBatches(t, l, 2, 2)
	c, err := l.Cursor(0)
	if err != nil {
		t.Fatal(err)
	}
	mustClose(t, l)
	checks := map[string]error{
		"Close": l.Close(),
		"Append": func() error {
			_, err := l.Append(l.NextOffset(), batchOf(0, 1), t0)
			return err
		}(),
		"Read":           func() error { _, err := l.Read(0, 1, 0); return err }(),
		"Cursor.Next":    func() error { _, err := c.Next(1, 0); return err }(),
		"WaitDurable":    <-l.WaitDurable(l.NextOffset() + 1),
		"OffsetForTime":  func() error { _, err := l.OffsetForTime(t0); return err }(),
		"Retention":      func() error { _, err := l.EnforceRetention(t0); return err }(),
		"Cursor (again)": func() error { _, err := l.Cursor(0); return err }(),
	}
	for name, err := range checks {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatalf("closing a cursor after its log: %v", err)
	}
}

func TestConcurrentReadersAndAppender(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Config{SegmentBytes: 4096, IndexIntervalBytes: 256, Fsync: FsyncOnCommit})
	defer mustClose(t, l)
	const records = 2000
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	wg.Go(func() {
		for l.NextOffset() < records {
			base := l.NextOffset()
			a, err := l.Append(base, batchOf(base, 1+rand.IntN(4)), t0)
			if err != nil {
				errs <- err
				return
			}
			if base%50 == 0 {
				if err := <-l.WaitDurable(a.Next); err != nil {
					errs <- err
					return
				}
			}
		}
	})
	for range 4 {
		wg.Go(func() {
			next := uint64(0)
			for next < records {
				page, err := l.Read(next, 1+rand.IntN(20), 0)
				if err != nil {
					errs <- err
					return
				}
				for _, r := range page.Records {
					if r.Offset != next || !bytes.Equal(r.Value, payload(next)) {
						errs <- fmt.Errorf("reader got offset %d %q, want %d %q", r.Offset, r.Value, next, payload(next))
						return
					}
					next++
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestNoFileLeaks opens, rolls, reads, deletes and closes logs, and fails
// to open a corrupt one, and checks the process holds no more files than
// before. goleak cannot see a leaked descriptor.
func TestNoFileLeaks(t *testing.T) {
	openFiles := func() int {
		entries, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skip("no /proc/self/fd:", err)
		}
		return len(entries)
	}
	before := openFiles()
	cfg := smallConfig()
	cfg.RetentionBytes = 2048
	for range 3 {
		dir := t.TempDir()
		l := mustOpen(t, dir, cfg)
		appendBatches(t, l, 100, 4)
		c, err := l.Cursor(l.StartOffset())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.EnforceRetention(t0); err != nil {
			t.Fatal(err)
		}
		readAll(t, l, l.StartOffset())
		mustClose(t, l)
		c.Close()
		l = mustOpen(t, dir, cfg)
		mustClose(t, l)

		// A refused Open closes what it opened.
		logs := segmentFiles(t, dir, logExt)
		os.Remove(logs[len(logs)/2])
		if l, err := Open(dir, cfg); err == nil {
			l.Close()
			t.Fatal("Open of a log missing a middle segment succeeded")
		}
	}
	if after := openFiles(); after != before {
		t.Fatalf("%d open files after, %d before", after, before)
	}
}
