package persistence

import (
	"errors"
	"os"
	"slices"
	"testing"
	"time"
)

// stampAt is the stamp the tests give the batch at base.
func stampAt(base uint64) Stamp {
	return Stamp{Producer: 1 + base%3, Sequence: base, Digest: base * 0x9E3779B97F4A7C15}
}

// gotStamp is one call of a Stamps callback.
type gotStamp struct {
	stamp Stamp
	base  uint64
	count uint32
}

// appendMixed appends count batches, every other one stamped (stampAt), and
// returns the stamped ones.
func appendMixed(t testing.TB, l *Log, count, perBatch int) []gotStamp {
	t.Helper()
	var want []gotStamp
	for i := range count {
		base := l.NextOffset()
		n := 1 + (int(base)+i)%perBatch
		var stamp *Stamp
		if i%2 == 1 {
			s := stampAt(base)
			stamp = &s
			want = append(want, gotStamp{s, base, uint32(n)})
		}
		if _, err := l.AppendStamped(base, batchOf(base, n), t0.Add(time.Duration(base)*time.Millisecond), stamp); err != nil {
			t.Fatalf("AppendStamped(%d, %d records): %v", base, n, err)
		}
	}
	return want
}

func collectStamps(t testing.TB, l *Log, from uint64) []gotStamp {
	t.Helper()
	var got []gotStamp
	if err := l.Stamps(from, func(s Stamp, base uint64, count uint32) bool {
		got = append(got, gotStamp{s, base, count})
		return true
	}); err != nil {
		t.Fatalf("Stamps(%d): %v", from, err)
	}
	return got
}

// TestStampedRoundTrip writes V1 and V2 batches mixed in the same segments:
// every record reads back, Stamps returns exactly the stamped batches, in
// order, and both survive a reopen.
func TestStampedRoundTrip(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, smallConfig())
	want := appendMixed(t, l, 120, 4)
	if len(segmentFiles(t, dir, logExt)) < 3 {
		t.Fatal("setup: want several segments")
	}
	readAll(t, l, 0)
	if got := collectStamps(t, l, 0); !slices.Equal(got, want) {
		t.Fatalf("Stamps:\n got %v\nwant %v", got, want)
	}
	// One segment holds both versions.
	b, err := os.ReadFile(segmentFiles(t, dir, logExt)[0])
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(b[:1], batchMagicV1) || !slices.Contains(b, batchMagicV2) {
		t.Fatal("setup: the first segment should start with a V1 batch and hold a V2 one")
	}
	mustClose(t, l)

	l = mustOpen(t, dir, smallConfig())
	defer mustClose(t, l)
	readAll(t, l, 0)
	if got := collectStamps(t, l, 0); !slices.Equal(got, want) {
		t.Fatalf("Stamps after reopen:\n got %v\nwant %v", got, want)
	}
	// From the middle: batches that end at or before from are left out.
	mid := want[len(want)/2]
	if got := collectStamps(t, l, mid.base); !slices.Equal(got, want[len(want)/2:]) {
		t.Fatalf("Stamps(%d):\n got %v\nwant %v", mid.base, got, want[len(want)/2:])
	}
	// fn returning false stops the walk.
	calls := 0
	if err := l.Stamps(0, func(Stamp, uint64, uint32) bool { calls++; return calls < 3 }); err != nil || calls != 3 {
		t.Fatalf("Stamps stopped after %d calls, %v; want 3", calls, err)
	}
	if got := collectStamps(t, l, l.NextOffset()); len(got) != 0 {
		t.Fatalf("Stamps at the end: %v", got)
	}
	if err := l.Stamps(l.NextOffset()+1, nil); !errors.As(err, new(*ErrOffsetInFuture)) {
		t.Fatal("Stamps beyond the end: want ErrOffsetInFuture")
	}
}

// TestStampsAfterRetention: the walk starts at StartOffset once retention
// removed the oldest segments, and retention running under a walk does not
// break it.
func TestStampsAfterRetention(t *testing.T) {
	cfg := smallConfig()
	cfg.RetentionBytes = 1
	l := mustOpen(t, t.TempDir(), cfg)
	defer mustClose(t, l)
	want := appendMixed(t, l, 150, 4)
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	// Retention runs while the walk holds the first segment.
	var got []gotStamp
	if err := l.Stamps(0, func(s Stamp, base uint64, count uint32) bool {
		if len(got) == 0 {
			if _, err := l.EnforceRetention(t0); err != nil {
				t.Errorf("EnforceRetention: %v", err)
			}
		}
		got = append(got, gotStamp{s, base, count})
		return true
	}); !errors.As(err, new(*ErrOffsetTooOld)) {
		t.Fatalf("Stamps across retention: %v, want ErrOffsetTooOld moving to a removed segment", err)
	}
	start := l.StartOffset()
	if start == 0 {
		t.Fatal("setup: retention deleted nothing")
	}
	var kept []gotStamp
	for _, s := range want {
		if s.base >= start {
			kept = append(kept, s)
		}
	}
	if got := collectStamps(t, l, start); !slices.Equal(got, kept) || len(kept) == 0 {
		t.Fatalf("Stamps(%d) after retention:\n got %v\nwant %v", start, got, kept)
	}
	if err := l.Stamps(0, func(Stamp, uint64, uint32) bool { return true }); !errors.As(err, new(*ErrOffsetTooOld)) {
		t.Fatalf("Stamps(0) after retention: %v, want ErrOffsetTooOld", err)
	}
}

// TestRecoverTornStampedTail cuts the last, stamped, batch anywhere,
// including inside its stamp: Open truncates it as a torn tail, its stamp is
// gone, the ones before it are intact, and appends go on.
func TestRecoverTornStampedTail(t *testing.T) {
	for _, cut := range []int{1, frameHeaderLen + batchFixedLen + 5, frameHeaderLen + batchFixedLen + stampLen + 2, -1} {
		dir := t.TempDir()
		l := mustOpen(t, dir, Config{SegmentBytes: 1 << 20, IndexIntervalBytes: 128, Fsync: FsyncNone})
		want := appendMixed(t, l, 20, 4)
		if err := l.Sync(); err != nil {
			t.Fatal(err)
		}
		durable := l.NextOffset()
		last := stampAt(durable)
		if _, err := l.AppendStamped(durable, batchOf(durable, 3), t0.Add(time.Hour), &last); err != nil {
			t.Fatal(err)
		}
		l.abandon()
		path := segmentFiles(t, dir, logExt)[0]
		starts, bases := batchStarts(t, path)
		if bases[len(bases)-1] != durable {
			t.Fatalf("setup: last batch at %d, want %d", bases[len(bases)-1], durable)
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		size := starts[len(starts)-1] + int64(cut)
		if cut < 0 {
			size = fi.Size() + int64(cut)
		}
		if err := os.Truncate(path, size); err != nil {
			t.Fatal(err)
		}

		l = mustOpen(t, dir, Config{SegmentBytes: 1 << 20, IndexIntervalBytes: 128, Fsync: FsyncNone})
		if l.NextOffset() != durable {
			t.Fatalf("cut %d: next %d after recovery, want %d", cut, l.NextOffset(), durable)
		}
		readAll(t, l, 0)
		if got := collectStamps(t, l, 0); !slices.Equal(got, want) {
			t.Fatalf("cut %d: Stamps:\n got %v\nwant %v", cut, got, want)
		}
		if _, err := l.AppendStamped(durable, batchOf(durable, 2), t0.Add(time.Hour), &last); err != nil {
			t.Fatalf("cut %d: append after recovery: %v", cut, err)
		}
		if got := collectStamps(t, l, durable); !slices.Equal(got, []gotStamp{{last, durable, 2}}) {
			t.Fatalf("cut %d: Stamps after the new append: %v", cut, got)
		}
		mustClose(t, l)
	}
}
