package persistence

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(childEnv); dir != "" {
		runKillChild(dir) // never returns: the parent kills it
	}
	goleak.VerifyTestMain(m)
}

// eventTimeout bounds every wait for the syncer. It is generous because
// -race and a loaded machine slow everything down; a passing test never
// waits for it.
const eventTimeout = 10 * time.Second

// t0 is the time tests append at unless they care about time.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// payload is the deterministic value of the record at off: readers check
// every record they get against it. Lengths vary so that batches straddle
// index intervals and segment ends at varied positions.
func payload(off uint64) []byte {
	b := fmt.Appendf(nil, "record-%d:", off)
	for i := range off % 23 {
		b = append(b, byte('a'+(off+i)%26))
	}
	return b
}

// batchOf returns the records of a batch of n starting at base.
func batchOf(base uint64, n int) [][]byte {
	recs := make([][]byte, n)
	for i := range recs {
		recs[i] = payload(base + uint64(i))
	}
	return recs
}

// smallConfig rolls segments and indexes often, so a few hundred records
// exercise both.
func smallConfig() Config {
	return Config{SegmentBytes: 1024, IndexIntervalBytes: 128, Fsync: FsyncNone}
}

func mustOpen(t testing.TB, dir string, cfg Config, opts ...Option) *Log {
	t.Helper()
	l, err := Open(dir, cfg, opts...)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	return l
}

func mustClose(t testing.TB, l *Log) {
	t.Helper()
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// appendBatches appends count batches of up to perBatch records (varying,
// so batch sizes vary) and returns the next offset.
func appendBatches(t testing.TB, l *Log, count, perBatch int) uint64 {
	t.Helper()
	for i := range count {
		base := l.NextOffset()
		n := 1 + (int(base)+i)%perBatch
		if _, err := l.Append(base, batchOf(base, n), t0.Add(time.Duration(base)*time.Millisecond)); err != nil {
			t.Fatalf("Append(%d, %d records): %v", base, n, err)
		}
	}
	return l.NextOffset()
}

// readAll reads [from, NextOffset) in small pages and checks every record
// against payload and the offsets for gaps.
func readAll(t testing.TB, l *Log, from uint64) {
	t.Helper()
	eachRecord(t, l, from, 7, 300, func(r Record) {
		if !bytes.Equal(r.Value, payload(r.Offset)) {
			t.Fatalf("Read: offset %d holds %q, want %q", r.Offset, r.Value, payload(r.Offset))
		}
	})
}

// eachRecord reads [from, NextOffset) in pages of at most maxRecords and
// maxBytes, checks that the offsets run without a gap and that each page's
// Next follows its last record, and hands each record to check.
func eachRecord(t testing.TB, l *Log, from uint64, maxRecords, maxBytes int, check func(Record)) {
	t.Helper()
	next := from
	for end := l.NextOffset(); next < end; {
		page, err := l.Read(next, maxRecords, maxBytes)
		if err != nil {
			t.Fatalf("Read(%d): %v", next, err)
		}
		if len(page.Records) == 0 {
			t.Fatalf("Read(%d) returned nothing before the end at %d", next, end)
		}
		for _, r := range page.Records {
			if r.Offset != next {
				t.Fatalf("Read: got offset %d, want %d", r.Offset, next)
			}
			check(r)
			next++
		}
		if page.Next != next {
			t.Fatalf("Read: page.Next = %d after offset %d", page.Next, next-1)
		}
	}
}

func segmentFiles(t testing.TB, dir, ext string) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*"+ext))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	return names
}

// copyDir copies a log directory, so one prepared log can be damaged in
// many ways.
func copyDir(t testing.TB, from, to string) {
	t.Helper()
	if err := os.CopyFS(to, os.DirFS(from)); err != nil {
		t.Fatal(err)
	}
}

// abandon stops the log the way a crash would: the syncer stops after its
// current pass, and nothing is fsynced or marked on the way out.
func (l *Log) abandon() {
	l.mu.Lock()
	l.mu.closed = true
	l.mu.Unlock()
	close(l.stop)
	<-l.syncerDone
	l.mu.Lock()
	l.failWaitersLocked(ErrClosed)
	segs := l.mu.segments
	l.mu.segments, l.mu.dirty = nil, nil
	l.mu.Unlock()
	for _, s := range segs {
		s.closeIndexFiles()
		s.log.Close()
	}
	l.mark.close()
}

// faultFS wraps the operating system's files to count fsyncs, fail writes
// and fsyncs on demand, and model what a power loss keeps: for every file,
// the length its last successful fsync covered.
type faultFS struct {
	osFS
	mu struct {
		sync.Mutex
		logSyncs   int   // successful fsyncs of .log files
		failSync   error // fail every fsync of a .log file
		failWrite  error // fail .log writes once writeQuota bytes have been written
		writeQuota int64
		failTrunc  error
		beforeSync func()            // called before each fsync of a .log file, without the lock
		afterRead  func()            // called once, after the next read of a .log file, without the lock
		written    map[string]int64  // per path: the end of the last write
		synced     map[string]int64  // per path: what the last fsync covered
		markSynced map[string][]byte // per mark path: content at its last fsync
		unsynced   map[string]bool   // created since the last directory fsync
		cut        map[string]cutBytes
		open       map[*faultFile]bool
	}
}

func newFaultFS() *faultFS {
	f := &faultFS{}
	f.mu.written = map[string]int64{}
	f.mu.synced = map[string]int64{}
	f.mu.markSynced = map[string][]byte{}
	f.mu.unsynced = map[string]bool{}
	f.mu.cut = map[string]cutBytes{}
	f.mu.open = map[*faultFile]bool{}
	return f
}

func (f *faultFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	file, err := f.osFS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if flag&os.O_CREATE != 0 {
		if _, ok := f.mu.synced[name]; !ok {
			f.mu.unsynced[name] = true
		}
	}
	if flag&os.O_TRUNC != 0 {
		f.mu.written[name] = 0
	}
	ff := &faultFile{File: file, fs: f, path: name}
	f.mu.open[ff] = true
	return ff, nil
}

func (f *faultFS) Rename(oldname, newname string) error {
	if err := f.osFS.Rename(oldname, newname); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, m := range []map[string]int64{f.mu.written, f.mu.synced} {
		if v, ok := m[oldname]; ok {
			m[newname] = v
			delete(m, oldname)
		}
	}
	if v, ok := f.mu.markSynced[oldname]; ok {
		f.mu.markSynced[newname] = v
		delete(f.mu.markSynced, oldname)
	}
	f.mu.unsynced[newname] = true
	delete(f.mu.unsynced, oldname)
	// An open file follows its inode, not its old name.
	for ff := range f.mu.open {
		if ff.path == oldname {
			ff.path = newname
		}
	}
	return nil
}

func (f *faultFS) SyncDir(name string) error {
	if err := f.osFS.SyncDir(name); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.mu.unsynced)
	return nil
}

func (f *faultFS) logSyncs() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mu.logSyncs
}

func (f *faultFS) syncedLen(path string) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mu.synced[path]
}

func (f *faultFS) setFailSync(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.failSync = err
}

// powerLoss makes dir look as a power cut would leave it: files created
// since the last directory fsync vanish, logs lose what no fsync covered
// and get back what a truncation no fsync covered removed, the mark
// returns to its last fsynced content. Index files keep whatever
// they had (they are never fsynced, so anything is possible; recovery must
// not trust them).
func (f *faultFS) powerLoss(t testing.TB, dir string) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for name := range f.mu.unsynced {
		if err := os.Remove(name); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
	}
	for _, name := range segmentFiles(t, dir, logExt) {
		if err := os.Truncate(name, f.mu.synced[name]); err != nil {
			t.Fatal(err)
		}
		if c, ok := f.mu.cut[name]; ok {
			file, err := os.OpenFile(name, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			_, err = file.WriteAt(c.old, c.at)
			file.Close()
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	for name, content := range f.mu.markSynced {
		if err := os.WriteFile(name, content, 0o644); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
	}
}

// cutBytes are synced bytes a truncation removed from a file at offset at:
// until the file's next fsync, a power loss may bring them back.
type cutBytes struct {
	at  int64
	old []byte
}

type faultFile struct {
	File
	fs   *faultFS
	path string // guarded by fs.mu: renames change it
}

// isLog REQUIRES: f.fs.mu is held.
func (f *faultFile) isLog() bool { return strings.HasSuffix(f.path, logExt) }

func (f *faultFile) Close() error {
	f.fs.mu.Lock()
	delete(f.fs.mu.open, f)
	f.fs.mu.Unlock()
	return f.File.Close()
}

func (f *faultFile) WriteAt(b []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	if f.isLog() && f.fs.mu.failWrite != nil {
		if f.fs.mu.writeQuota < int64(len(b)) {
			// A full disk takes part of the write, then refuses.
			n := max(f.fs.mu.writeQuota, 0)
			f.fs.mu.writeQuota = 0
			err := f.fs.mu.failWrite
			f.fs.mu.Unlock()
			if n > 0 {
				f.File.WriteAt(b[:n], off)
			}
			return int(n), err
		}
		f.fs.mu.writeQuota -= int64(len(b))
	}
	f.fs.mu.Unlock()
	n, err := f.File.WriteAt(b, off)
	f.fs.mu.Lock()
	f.fs.mu.written[f.path] = max(f.fs.mu.written[f.path], off+int64(n))
	f.fs.mu.Unlock()
	return n, err
}

func (f *faultFile) ReadAt(b []byte, off int64) (int, error) {
	n, err := f.File.ReadAt(b, off)
	f.fs.mu.Lock()
	var after func()
	if f.isLog() {
		after, f.fs.mu.afterRead = f.fs.mu.afterRead, nil
	}
	f.fs.mu.Unlock()
	if after != nil {
		after()
	}
	return n, err
}

func (f *faultFile) Truncate(size int64) error {
	f.fs.mu.Lock()
	err := f.fs.mu.failTrunc
	if err == nil {
		f.fs.mu.written[f.path] = size
		if synced := f.fs.mu.synced[f.path]; size < synced {
			c := cutBytes{at: size, old: make([]byte, synced-size)}
			if _, rerr := f.File.ReadAt(c.old, size); rerr == nil {
				if prev, ok := f.fs.mu.cut[f.path]; ok {
					c.old = append(c.old, prev.old...) // an earlier cut, at what is synced now, still pending
				}
				f.fs.mu.cut[f.path] = c
			}
			f.fs.mu.synced[f.path] = size
		}
	}
	f.fs.mu.Unlock()
	if err != nil {
		return err
	}
	return f.File.Truncate(size)
}

func (f *faultFile) Sync() error {
	f.fs.mu.Lock()
	covered := f.fs.mu.written[f.path]
	failSync := f.fs.mu.failSync
	isLog, isMark := f.isLog(), filepath.Base(f.path) == markName || filepath.Base(f.path) == markTmpName
	beforeSync := f.fs.mu.beforeSync
	f.fs.mu.Unlock()
	if isLog && beforeSync != nil {
		beforeSync()
	}
	if isLog && failSync != nil {
		return failSync
	}
	if err := f.File.Sync(); err != nil {
		return err
	}
	var content []byte
	if isMark {
		var err error
		if content, err = io.ReadAll(io.NewSectionReader(f.File, 0, 1<<20)); err != nil {
			return err
		}
	}
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if isLog {
		f.fs.mu.logSyncs++
		delete(f.fs.mu.cut, f.path)
	}
	f.fs.mu.synced[f.path] = max(f.fs.mu.synced[f.path], covered)
	if content != nil {
		f.fs.mu.markSynced[f.path] = content
	}
	return nil
}
