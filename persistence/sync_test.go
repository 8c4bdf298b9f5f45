package persistence

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

// TestGroupCommit appends from many goroutines under FsyncOnCommit and
// checks that fsyncs are far fewer than appends, and that each WaitDurable
// completes only once an fsync has covered its batch's bytes.
func TestGroupCommit(t *testing.T) {
	fsys := newFaultFS()
	dir := t.TempDir()
	l := mustOpen(t, dir, Config{SegmentBytes: 64 << 10, Fsync: FsyncOnCommit}, WithFS(fsys))
	defer mustClose(t, l)
	syncsBefore := fsys.logSyncs()

	const writers, perWriter = 32, 40
	var appendMu sync.Mutex // offsets make appends sequential: the shard's job
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for range writers {
		wg.Go(func() {
			for range perWriter {
				appendMu.Lock()
				base := l.NextOffset()
				a, err := l.Append(base, batchOf(base, 1+rand.IntN(3)), t0)
				var path string
				var end int64
				if err == nil {
					l.mu.Lock()
					s := l.mu.segments[len(l.mu.segments)-1]
					path, end = s.path(logExt), s.size
					l.mu.Unlock()
				}
				appendMu.Unlock()
				if err != nil {
					errs <- err
					return
				}
				select {
				case err := <-l.WaitDurable(a.Next):
					if err != nil {
						errs <- err
						return
					}
				case <-time.After(eventTimeout):
					errs <- fmt.Errorf("WaitDurable(%d) did not complete", a.Next)
					return
				}
				if synced := fsys.syncedLen(path); synced < end {
					errs <- fmt.Errorf("WaitDurable(%d) completed with %s synced to byte %d, its batch ends at %d", a.Next, filepath.Base(path), synced, end)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	appends := writers * perWriter
	syncs := fsys.logSyncs() - syncsBefore
	t.Logf("%d appends, %d fsyncs (%.1f appends per fsync)", appends, syncs, float64(appends)/float64(syncs))
	if syncs > appends/2 {
		t.Fatalf("%d fsyncs for %d appends from %d goroutines: not grouped", syncs, appends, writers)
	}
}

// TestGroupCommitWaitsForTheNextFsync holds an fsync while more appends
// arrive: they are not acknowledged by the fsync that was already running,
// and the next single fsync acknowledges all of them.
func TestGroupCommitWaitsForTheNextFsync(t *testing.T) {
	fsys := newFaultFS()
	l := mustOpen(t, t.TempDir(), Config{Fsync: FsyncOnCommit}, WithFS(fsys))
	defer mustClose(t, l)
	started := make(chan struct{})
	release := make(chan struct{})
	fsys.mu.Lock()
	fsys.mu.beforeSync = func() {
		started <- struct{}{}
		<-release
	}
	fsys.mu.Unlock()
	syncs := fsys.logSyncs()

	first, err := l.Append(0, batchOf(0, 1), t0)
	if err != nil {
		t.Fatal(err)
	}
	firstDone := l.WaitDurable(first.Next)
	<-started // the syncer is inside the fsync for the first batch

	const later = 31
	waits := make([]<-chan error, later)
	for i := range waits {
		base := l.NextOffset()
		a, err := l.Append(base, batchOf(base, 1), t0)
		if err != nil {
			t.Fatal(err)
		}
		waits[i] = l.WaitDurable(a.Next)
	}
	release <- struct{}{}
	if err := <-firstDone; err != nil {
		t.Fatal(err)
	}
	for i, w := range waits {
		select {
		case err := <-w:
			t.Fatalf("append %d acknowledged (%v) by the fsync that started before it", i+1, err)
		default:
		}
	}
	<-started // the next pass
	release <- struct{}{}
	for i, w := range waits {
		select {
		case err := <-w:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(eventTimeout):
			t.Fatalf("append %d not acknowledged after the second fsync", i+1)
		}
	}
	if got := fsys.logSyncs() - syncs; got != 2 {
		t.Fatalf("%d fsyncs for 1 + %d appends, want 2", got, later)
	}
	fsys.mu.Lock()
	fsys.mu.beforeSync = nil
	fsys.mu.Unlock()
}

func TestFsyncFailurePoisons(t *testing.T) {
	fsys := newFaultFS()
	dir := t.TempDir()
	l := mustOpen(t, dir, Config{Fsync: FsyncOnCommit}, WithFS(fsys))
	a, err := l.Append(0, batchOf(0, 2), t0)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-l.WaitDurable(a.Next); err != nil {
		t.Fatal(err)
	}
	synced := l.Synced()

	fsys.setFailSync(syscall.EIO)
	a, err = l.Append(a.Next, batchOf(a.Next, 2), t0)
	if err != nil {
		t.Fatalf("Append before the failing fsync ran: %v", err)
	}
	var wantErr *ErrIO
	select {
	case err := <-l.WaitDurable(a.Next):
		if !errors.As(err, &wantErr) || wantErr.Op != "fsync" || !errors.Is(err, syscall.EIO) || !errors.Is(err, ErrPoisoned) {
			t.Fatalf("WaitDurable across a failed fsync: %v, want ErrIO{fsync} matching EIO and ErrPoisoned", err)
		}
	case <-time.After(eventTimeout):
		t.Fatal("WaitDurable did not complete")
	}
	// The fsync works again, but the log must not believe it: the dirty
	// pages may be gone.
	fsys.setFailSync(nil)
	if _, err := l.Append(a.Next, batchOf(a.Next, 1), t0); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Append after a failed fsync: %v, want the fsync's error", err)
	}
	if err := <-l.WaitDurable(a.Next); !errors.Is(err, syscall.EIO) {
		t.Fatalf("WaitDurable after a failed fsync: %v, want the fsync's error", err)
	}
	if err := l.Sync(); !errors.Is(err, ErrPoisoned) {
		t.Fatalf("Sync after a failed fsync: %v", err)
	}
	if l.Synced() != synced {
		t.Fatalf("Synced moved from %d to %d across a failed fsync", synced, l.Synced())
	}
	if err := l.Close(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Close of a poisoned log: %v, want the poison", err)
	}
	// Reopening recovers from what the files hold.
	l = mustOpen(t, dir, Config{})
	defer mustClose(t, l)
	if l.NextOffset() < synced {
		t.Fatalf("reopened at %d, below the synced %d", l.NextOffset(), synced)
	}
	readAll(t, l, 0)
}

func TestWriteErrorPoisons(t *testing.T) {
	fsys := newFaultFS()
	dir := t.TempDir()
	l := mustOpen(t, dir, Config{Fsync: FsyncNone}, WithFS(fsys))
	next := appendBatches(t, l, 10, 3)

	fsys.mu.Lock()
	fsys.mu.failWrite, fsys.mu.writeQuota = syscall.ENOSPC, 20 // part of the next batch fits
	fsys.mu.failTrunc = syscall.EIO                            // and the disk will not give it back
	fsys.mu.Unlock()
	_, err := l.Append(next, batchOf(next, 3), t0)
	var ioErr *ErrIO
	if !errors.As(err, &ioErr) || ioErr.Op != "write" || !errors.Is(err, syscall.ENOSPC) || !errors.Is(err, ErrPoisoned) {
		t.Fatalf("Append on a full disk: %v, want ErrIO{write} matching ENOSPC and ErrPoisoned", err)
	}
	fsys.mu.Lock()
	fsys.mu.failWrite, fsys.mu.failTrunc = nil, nil
	fsys.mu.Unlock()
	if _, err := l.Append(next, batchOf(next, 1), t0); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Append after a failed write: %v, want the write's error", err)
	}
	if l.NextOffset() != next {
		t.Fatalf("failed append moved NextOffset from %d to %d", next, l.NextOffset())
	}
	// The half-written batch is not part of the log.
	readAll(t, l, 0)
	if page, err := l.Read(next, 0, 0); err != nil || len(page.Records) != 0 {
		t.Fatalf("Read past the failed append: %d records, %v", len(page.Records), err)
	}
	if err := l.Close(); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Close of a poisoned log: %v, want the poison", err)
	}
	// The partial batch is still in the file; Open cuts it as a torn tail.
	logs := segmentFiles(t, dir, logExt)
	if size := fileSize(t, logs[len(logs)-1]); size == 0 {
		t.Fatal("setup: the partial batch did not reach the file")
	}
	l = mustOpen(t, dir, Config{})
	defer mustClose(t, l)
	if l.NextOffset() != next {
		t.Fatalf("reopened at %d, want %d", l.NextOffset(), next)
	}
	if _, err := l.Append(next, batchOf(next, 3), t0); err != nil {
		t.Fatalf("Append after reopening: %v", err)
	}
	readAll(t, l, 0)
}

// TestPowerLossKeepsAcked crashes the way a power cut does, dropping every
// byte no fsync covered (faultFS.powerLoss), and checks that every batch
// WaitDurable acknowledged survives. kill -9 cannot catch an ack before
// fsync (the page cache survives it); this can.
func TestPowerLossKeepsAcked(t *testing.T) {
	for round := range 5 {
		t.Run(fmt.Sprint("round ", round), func(t *testing.T) {
			fsys := newFaultFS()
			dir := t.TempDir()
			l := mustOpen(t, dir, Config{SegmentBytes: 2048, IndexIntervalBytes: 128, Fsync: FsyncOnCommit}, WithFS(fsys))
			var mu sync.Mutex
			var acked uint64
			var wg sync.WaitGroup
			stop := make(chan struct{})
			for range 4 {
				wg.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
						}
						mu.Lock()
						base := l.NextOffset()
						a, err := l.Append(base, batchOf(base, 1+rand.IntN(4)), t0)
						mu.Unlock()
						if err != nil {
							return // closed by the crash
						}
						if err := <-l.WaitDurable(a.Next); err != nil {
							return
						}
						mu.Lock()
						acked = max(acked, a.Next)
						mu.Unlock()
					}
				})
			}
			time.Sleep(time.Duration(20+rand.IntN(60)) * time.Millisecond)
			mu.Lock()
			l.abandon()
			// Only what was acknowledged before the cut counts.
			ackedAtCrash := acked
			fsys.powerLoss(t, dir)
			mu.Unlock()
			close(stop)
			wg.Wait()

			l = mustOpen(t, dir, Config{SegmentBytes: 2048, IndexIntervalBytes: 128, VerifyOnOpen: true})
			defer mustClose(t, l)
			if l.NextOffset() < ackedAtCrash {
				t.Fatalf("recovered to %d, but offsets below %d were acknowledged", l.NextOffset(), ackedAtCrash)
			}
			readAll(t, l, 0)
			t.Logf("acknowledged %d, recovered %d", ackedAtCrash, l.NextOffset())
		})
	}
}

// TestPoisonedLogCloseReleasesFiles: closing a log poisoned by a
// full disk left its written-but-unsynced segments open (the syncer's
// references were never dropped), so deleting the stream did not free the
// disk until the broker restarted. Whatever poisoned it, Close closes every
// file.
func TestPoisonedLogCloseReleasesFiles(t *testing.T) {
	for _, how := range []string{"write", "fsync"} {
		t.Run(how, func(t *testing.T) {
			fsys := newFaultFS()
			l := mustOpen(t, t.TempDir(), smallConfig(), WithFS(fsys))
			next := appendBatches(t, l, 30, 3) // several segments, the last ones unsynced
			fsys.mu.Lock()
			if how == "write" {
				fsys.mu.failWrite, fsys.mu.writeQuota = syscall.ENOSPC, 0
			} else {
				fsys.mu.failSync = syscall.ENOSPC
			}
			fsys.mu.Unlock()
			if how == "write" {
				if _, err := l.Append(next, batchOf(next, 1), t0); !errors.Is(err, syscall.ENOSPC) {
					t.Fatalf("Append on a full disk: %v", err)
				}
			} else if err := l.Sync(); !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("Sync on a full disk: %v", err)
			}
			if err := l.Close(); !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("Close of a poisoned log: %v, want the poison", err)
			}
			fsys.mu.Lock()
			defer fsys.mu.Unlock()
			for f := range fsys.mu.open {
				t.Errorf("%s still open after Close", f.path)
			}
		})
	}
}

// TestPeriodicRunsOnlyWhileDirty: FsyncPeriodic syncs an append one
// interval after it, and a log with nothing to sync has no timer running
// (an idle shard's syncer does not wake); the next append arms it again.
func TestPeriodicRunsOnlyWhileDirty(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const every = time.Second
		l := mustOpen(t, t.TempDir(), Config{Fsync: FsyncPeriodic, SyncInterval: every})
		defer mustClose(t, l)
		armed := func() bool {
			l.mu.Lock()
			defer l.mu.Unlock()
			return l.mu.periodicArmed
		}
		time.Sleep(every) // the pass after opening
		synctest.Wait()
		if armed() {
			t.Fatal("an opened log with nothing appended keeps its periodic timer running")
		}
		for round := range 2 {
			next := appendBatches(t, l, 2, 3)
			if !armed() {
				t.Fatalf("round %d: an append did not arm the periodic timer", round)
			}
			time.Sleep(every - time.Millisecond)
			synctest.Wait()
			if got := l.Synced(); got >= next {
				t.Fatalf("round %d: synced %d before the interval ended, want < %d", round, got, next)
			}
			time.Sleep(time.Millisecond)
			synctest.Wait()
			if got := l.Synced(); got != next {
				t.Fatalf("round %d: synced %d one interval after the append, want %d", round, got, next)
			}
			if armed() {
				t.Fatalf("round %d: the periodic timer still runs with nothing to sync", round)
			}
			time.Sleep(10 * every) // idle
		}
	})
}
