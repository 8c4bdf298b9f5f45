package persistence

import (
	"testing"
)

// TestFileCacheBoundsDescriptors: twenty logs of several segments each
// share a cache of 8 descriptors (each log held 4 for ever, more
// with sealed segments). Appends, reads, retention under an open cursor
// (the cache follows the rename to *.deleted) and a reopen all work while
// the cache closes and reopens files all the time, idle descriptors never
// exceed the bound, and Close leaves none open.
func TestFileCacheBoundsDescriptors(t *testing.T) {
	fsys := newFaultFS()
	cache := NewFileCache(8)
	cfg := smallConfig()
	cfg.RetentionBytes = 2048
	openFiles := func() int {
		fsys.mu.Lock()
		defer fsys.mu.Unlock()
		return len(fsys.mu.open)
	}
	dirs := make([]string, 20)
	logs := make([]*Log, len(dirs))
	for i := range logs {
		dirs[i] = t.TempDir()
		logs[i] = mustOpen(t, dirs[i], cfg, WithFS(fsys), WithFileCache(cache))
	}
	for range 5 {
		for _, l := range logs {
			appendBatches(t, l, 10, 4)
			// The log's syncer runs its pass on its own goroutine, and files
			// it is using may pass the bound for as long as they are in use
			// (the documented slack): let it finish before counting.
			if err := l.Sync(); err != nil {
				t.Fatal(err)
			}
			if n := openFiles(); n > 8 {
				t.Fatalf("%d files open, bound 8", n)
			}
		}
	}
	for _, l := range logs {
		if err := l.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	cursors := make([]*Cursor, len(logs))
	for i, l := range logs {
		c, err := l.Cursor(l.StartOffset())
		if err != nil {
			t.Fatal(err)
		}
		cursors[i] = c
		if _, err := l.EnforceRetention(t0); err != nil {
			t.Fatal(err)
		}
	}
	for i, l := range logs {
		readAll(t, l, l.StartOffset())
		// The cursor's segment was renamed away under it, and its file
		// closed by the cache meanwhile: it still reads.
		if _, err := cursors[i].Next(3, 0); err != nil {
			t.Fatalf("log %d: cursor on a segment retention removed: %v", i, err)
		}
		if err := cursors[i].Close(); err != nil {
			t.Fatal(err)
		}
	}
	if n := openFiles(); n > 8 || cache.Open() != n {
		t.Fatalf("%d files open (cache counts %d), bound 8", n, cache.Open())
	}
	for i, l := range logs {
		mustClose(t, l)
		logs[i] = mustOpen(t, dirs[i], cfg, WithFS(fsys), WithFileCache(cache))
		readAll(t, logs[i], logs[i].StartOffset())
	}
	for _, l := range logs {
		mustClose(t, l)
	}
	if n := openFiles(); n != 0 || cache.Open() != 0 {
		t.Fatalf("after Close: %d files open, cache counts %d; want none", n, cache.Open())
	}
}
