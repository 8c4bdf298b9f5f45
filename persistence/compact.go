package persistence

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// Compaction rewrites a log's sealed segments keeping only the records a
// caller chooses, each at its own offset: what is dropped leaves a gap,
// and a read from inside one returns the next record kept. It is how a
// cache's log loses superseded writes.
//
// It runs in two steps so that the slow one runs off the owner's path.
// PrepareCompaction (any goroutine) reads the sealed segments starting
// below a horizon and writes each one's compacted copy to
// <base>.log.compact, fsynced; Commit (the owner, between its appends)
// swaps them in. Crash safety rests on one journal file (compactstate.go):
//
//  1. The copies are written and fsynced, then the directory.
//  2. The journal names the bases being swapped (written to a temporary
//     file, fsynced, renamed over, the directory fsynced): the commit
//     point. A crash before it leaves the old segments, and Open removes
//     the copies.
//  3. Each copy replaces its segment (swapCompacted), then the directory
//     is fsynced and the journal rewritten naming none. A crash in
//     between: Open repeats the swap the journal names before it reads
//     any segment.
//
// So a kill anywhere leaves the old segments or the new ones, never
// neither and never a mix: a mix would be wrong, since what a caller
// keeps below the horizon in one segment may depend on records it drops
// in another (a cache's conditional write above the horizon names a
// version kept below it).
//
// A log of plain batches compacts its batches without stamps or
// attributes (a cache's records), gathering what it keeps into compacted
// batches. A log of raft entries (a replicated cache's) compacts each
// entry of records on its own, into a compacted entry (batch.go's CE) that
// keeps its index, term, kind, stamp and span: the entries still follow
// one another by index and offset, so the replication layer's window of
// indexes and terms, rebuilt from the headers on open, lines up as before.
// Entries without records stay as they are. The caller must keep the
// horizon below what raft may still send or truncate (its compaction
// point, its commit index): a compacted entry is never served again
// (ErrEntryCompacted), and a TruncateEntries between Prepare and Commit
// makes the commit stale. Attributed batches and entries, and stamped
// plain batches, are not compacted: ErrNotCompactable.
type Compaction struct {
	l       *Log
	horizon uint64
	// epoch is l.truncations at Prepare: a TruncateEntries since then may
	// have cut or rewritten what the copies were made from.
	epoch uint64
	// old are the segments rewritten, each holding a reference taken by
	// PrepareCompaction; copies are their replacements, in the same order
	// (nil where nothing was dropped: the segment stays).
	old    []*segment
	copies []*segment
	stats  CompactionStats
	done   bool
}

// CompactionStats is what a compaction removed.
type CompactionStats struct {
	Segments       int   // segments rewritten
	RecordsRemoved int   // records dropped
	BytesRemoved   int64 // bytes the rewritten segments shrank by
}

// Keep decides one record below the horizon: the bytes to keep it as (its
// value, or a rewrite of it), or false to drop it; an error ends the
// compaction with it (a caller cancelling, a record it cannot read). The
// value is the log's; Keep must not keep a reference to it past its
// return.
type Keep func(offset uint64, value []byte) ([]byte, bool, error)

var (
	// ErrNotCompactable is a log holding batches compaction cannot
	// rewrite: stamped plain batches, attributed batches or entries.
	ErrNotCompactable = errors.New("persistence: the log holds batches compaction does not rewrite")
	// ErrCompactionStale is a Commit after the segments it rewrote left
	// the log (retention), TruncateEntries ran, or a compaction at the
	// same horizon or a higher one committed first.
	ErrCompactionStale = errors.New("persistence: the compacted segments changed before the commit")
)

// compactBatchBytes bounds the records gathered into one compacted batch:
// large enough that a cache's one-record batches share headers, small
// enough that a read never decodes much past what it returns.
const compactBatchBytes = 64 << 10

// PrepareCompaction writes the compacted copies of the sealed segments
// that start below horizon, lowered to the active segment's base if it is
// past it (Compaction.Horizon says where it went). Records at or above the
// horizon are kept as they are, without asking keep. The log goes on taking appends and reads
// meanwhile; nothing changes for them until Commit. The caller must
// Commit or Abort the result.
func (l *Log) PrepareCompaction(horizon uint64, keep Keep) (*Compaction, error) {
	c := &Compaction{l: l, horizon: horizon}
	l.mu.Lock()
	switch {
	case l.mu.closed:
		l.mu.Unlock()
		return nil, ErrClosed
	case l.mu.err != nil:
		l.mu.Unlock()
		return nil, l.mu.err
	}
	c.epoch = l.truncations.Load()
	// Every record below the horizon must pass keep: one kept as it is
	// could name what keep dropped (a cache's conditional write names a
	// version). So the horizon stops at the active segment, never
	// rewritten.
	c.horizon = min(horizon, l.mu.segments[len(l.mu.segments)-1].base)
	for _, s := range l.mu.segments[:len(l.mu.segments)-1] {
		if s.base >= c.horizon {
			break
		}
		s.refs++
		c.old = append(c.old, s)
	}
	l.mu.Unlock()
	for _, s := range c.old {
		cp, err := l.compactSegment(s, c.horizon, keep, &c.stats)
		c.copies = append(c.copies, cp)
		if err != nil {
			return nil, errors.Join(err, c.Abort())
		}
	}
	if err := l.fs.SyncDir(l.dir); err != nil {
		return nil, errors.Join(fmt.Errorf("persistence: compaction: fsync %s: %w", l.dir, err), c.Abort())
	}
	return c, nil
}

// Horizon is the offset the compaction was prepared below: every record
// below it passed keep.
func (c *Compaction) Horizon() uint64 { return c.horizon }

// Stats is what the compaction removes once committed.
func (c *Compaction) Stats() CompactionStats { return c.stats }

// compactSegment writes s's compacted copy, or returns nil if keep drops
// nothing of it.
func (l *Log) compactSegment(s *segment, horizon uint64, keep Keep, stats *CompactionStats) (*segment, error) {
	w := &compactWriter{
		horizon: horizon, keep: keep, interval: l.cfg.IndexIntervalBytes,
		cp: &segment{dir: l.dir, base: s.base, next: s.base, refs: 1}, start: s.base, end: s.base,
	}
	l.mu.Lock()
	size := s.size
	l.mu.Unlock()
	r := chunkReader{f: s.log, size: size, chunk: scanChunk}
	for pos := int64(0); pos < size; {
		frame, err := r.frameAt(pos)
		var v batchView
		var n int
		if err == nil {
			v, n, err = decodeBatch(frame)
		}
		if err == nil && v.base != w.end {
			err = &offsetMismatch{got: v.base, want: w.end}
		}
		if err != nil {
			return nil, readFailure(s, pos, err)
		}
		switch {
		case v.attributed || (v.stamp != nil && !v.entry):
			return nil, ErrNotCompactable
		case v.entry:
			err = w.addEntry(v, frame[:n])
		default:
			err = w.add(v)
		}
		if err != nil {
			return nil, err
		}
		pos += int64(n)
	}
	w.flush()
	if !w.changed {
		return nil, nil
	}
	path := compactCopyPath(l.dir, s.base)
	f, err := l.fs.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("persistence: compaction: create %s: %w", path, err)
	}
	w.cp.log = f
	if _, err := f.WriteAt(w.buf, 0); err != nil {
		return w.cp, fmt.Errorf("persistence: compaction: write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return w.cp, fmt.Errorf("persistence: compaction: fsync %s: %w", path, err)
	}
	w.cp.size = int64(len(w.buf))
	stats.Segments++
	stats.RecordsRemoved += w.dropped
	stats.BytesRemoved += size - w.cp.size
	return w.cp, nil
}

// compactWriter gathers one segment's kept records into compacted
// batches, in memory: a segment is at most SegmentBytes, and its copy is
// smaller.
type compactWriter struct {
	horizon  uint64
	keep     Keep
	cp       *segment // its base, next, lastTime, entries grow as batches are cut
	interval int
	buf      []byte
	// pending are the kept records of the batch being gathered, which
	// covers [start, end) and is stamped with its newest batch's time.
	pending    []sparseRecord
	start, end uint64
	time       int64
	bytes      int
	dropped    int
	// changed: a record was dropped or rewritten. A segment whose records
	// all stay as they are is not rewritten; one whose records only lose
	// their conditions is, since what they named may be gone elsewhere.
	changed bool
}

// add takes one batch of the old segment. Every value kept is copied: the
// batch aliases the reader's buffer, which the next batch overwrites.
func (w *compactWriter) add(v batchView) error {
	for off, value := range v.all() {
		if off < w.horizon {
			kept, ok, err := w.keep(off, value)
			if err != nil {
				return err
			}
			if !ok {
				w.dropped++
				w.changed = true
				continue
			}
			w.changed = w.changed || !bytes.Equal(kept, value)
			value = kept
		}
		value = slices.Clone(value)
		w.pending = append(w.pending, sparseRecord{offset: off, value: value})
		w.bytes += sparseHeaderLen + len(value)
	}
	w.end, w.time = v.next(), v.time
	if w.bytes >= compactBatchBytes {
		w.flush()
	}
	return nil
}

// addEntry takes one raft entry of the old segment, frame its encoding:
// kept as it is when compaction changes none of its records (or it has
// none), else written as a compacted entry holding those kept. Entries
// are never gathered: each keeps its own header.
func (w *compactWriter) addEntry(v batchView, frame []byte) error {
	changed := false
	for off, value := range v.stored() {
		if off >= w.horizon {
			w.pending = append(w.pending, sparseRecord{offset: off, value: slices.Clone(value)})
			continue
		}
		kept, ok, err := w.keep(off, value)
		if err != nil {
			return err
		}
		if !ok {
			w.dropped++
			changed = true
			continue
		}
		changed = changed || !bytes.Equal(kept, value)
		w.pending = append(w.pending, sparseRecord{offset: off, value: slices.Clone(kept)})
	}
	pos := int64(len(w.buf))
	if changed {
		w.buf = appendCompactedEntry(w.buf, v.base, v.count, v.time, v.meta, v.stamp, w.pending)
		w.changed = true
	} else {
		w.buf = append(w.buf, frame...)
	}
	if indexDue(pos, w.cp.lastIndexed, w.interval, v.base, w.cp.base, int(v.count)) {
		w.cp.entries = append(w.cp.entries, indexEntry{rel: uint32(v.base - w.cp.base), pos: uint32(pos), time: v.time})
		w.cp.lastIndexed = pos
	}
	w.cp.next, w.cp.lastTime = v.next(), v.time
	w.pending = w.pending[:0]
	w.start, w.end = v.next(), v.next()
	return nil
}

// flush cuts the gathered records into one compacted batch.
func (w *compactWriter) flush() {
	if w.end == w.start {
		return
	}
	pos := int64(len(w.buf))
	w.buf = appendSparseBatch(w.buf, w.start, uint32(w.end-w.start), w.time, w.pending)
	if indexDue(pos, w.cp.lastIndexed, w.interval, w.start, w.cp.base, int(w.end-w.start)) {
		w.cp.entries = append(w.cp.entries, indexEntry{rel: uint32(w.start - w.cp.base), pos: uint32(pos), time: w.time})
		w.cp.lastIndexed = pos
	}
	w.cp.next, w.cp.lastTime = w.end, w.time
	w.pending, w.bytes = w.pending[:0], 0
	w.start = w.end
}

// Abort removes the copies and lets the segments go. Safe to call after
// Commit (it does nothing then).
func (c *Compaction) Abort() error {
	if c.done {
		return nil
	}
	c.done = true
	var err error
	for _, cp := range c.copies {
		if cp == nil || cp.log == nil {
			continue
		}
		err = errors.Join(err, cp.log.Close())
		if rerr := c.l.fs.Remove(compactCopyPath(c.l.dir, cp.base)); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
	}
	for _, s := range c.old {
		err = errors.Join(err, c.l.release(s))
	}
	return err
}

// Commit swaps the copies in, by the steps in Compaction's doc, and
// raises CompactedBelow to the horizon. The log's owner calls it between
// its appends; it fsyncs the journal twice and the directory, holding the
// log's lock, so readers wait for it. A failure after the commit point
// poisons the log: reopening it finishes the swap.
func (c *Compaction) Commit() (CompactionStats, error) {
	if c.done {
		return CompactionStats{}, ErrCompactionStale
	}
	l := c.l
	l.mu.Lock()
	last, err := c.commitLocked()
	l.mu.Unlock()
	for _, s := range last {
		err = errors.Join(err, s.finalize(l.fs))
	}
	if err != nil {
		return CompactionStats{}, err
	}
	return c.stats, nil
}

// commitLocked REQUIRES: l.mu is held. It returns the old segments whose
// last reference went, for finalize.
func (c *Compaction) commitLocked() ([]*segment, error) {
	l := c.l
	switch {
	case l.mu.closed:
		return nil, errors.Join(ErrClosed, c.abortLocked())
	case l.mu.err != nil:
		return nil, errors.Join(l.mu.err, c.abortLocked())
	case c.horizon <= l.mu.compactedBelow, l.truncations.Load() != c.epoch:
		// Horizons strictly rise, so each names one generation of the
		// files (ReadCompactedBelow).
		return nil, errors.Join(ErrCompactionStale, c.abortLocked())
	}
	idx := make([]int, len(c.old))
	for i, s := range c.old {
		if idx[i] = slices.Index(l.mu.segments, s); idx[i] < 0 {
			return nil, errors.Join(ErrCompactionStale, c.abortLocked())
		}
	}
	c.done = true
	var pending []uint64
	for i, cp := range c.copies {
		if cp != nil {
			pending = append(pending, c.old[i].base)
		}
	}
	if err := writeCompactState(l.fs, l.dir, compactState{horizon: c.horizon, pending: pending}); err != nil {
		return nil, l.poisonLocked(err)
	}
	if err := swapCompacted(l.fs, l.dir, pending); err != nil {
		return nil, l.poisonLocked(err)
	}
	var last []*segment
	for i, cp := range c.copies {
		old := c.old[i]
		if cp != nil {
			old.deleted, old.deletedPath = true, old.path(logExt+deletedSuffix)
			l.mu.segments[idx[i]] = cp
			if old.dirty {
				// A pending fsync of the old file is moot now.
				l.mu.dirty = slices.DeleteFunc(l.mu.dirty, func(s *segment) bool { return s == old })
				old.dirty = false
				old.refs--
			}
			old.refs-- // the log's reference: cp holds the log's now
			// The indexes are derived: one that fails to write is
			// rebuilt by the next Open.
			if cp.openIndexFiles(l.fs) == nil {
				cp.closeIndexFiles()
			}
		}
		if l.releaseLocked(old) { // the reference PrepareCompaction took
			last = append(last, old)
		}
	}
	if err := writeCompactState(l.fs, l.dir, compactState{horizon: c.horizon}); err != nil {
		return last, l.poisonLocked(err)
	}
	l.mu.compactedBelow = c.horizon
	return last, nil
}

// abortLocked is Abort for Commit's refusals. REQUIRES: l.mu is held; the
// files are removed and closed after, the references dropped now.
func (c *Compaction) abortLocked() error {
	c.done = true
	var err error
	for _, cp := range c.copies {
		if cp != nil && cp.log != nil {
			err = errors.Join(err, cp.log.Close())
			if rerr := c.l.fs.Remove(compactCopyPath(c.l.dir, cp.base)); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
				err = errors.Join(err, rerr)
			}
		}
	}
	for _, s := range c.old {
		if c.l.releaseLocked(s) { // a segment retention removed meanwhile
			err = errors.Join(err, s.finalize(c.l.fs))
		}
	}
	return err
}

// SealedEnd is the offset below which every record is in a sealed
// segment, the active segment's base: a compaction's horizon stops there.
func (l *Log) SealedEnd() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.segments[len(l.mu.segments)-1].base
}

// CompactedBelow is the horizon of the last compaction committed: offsets
// below it may be gaps. 0 for a log never compacted.
func (l *Log) CompactedBelow() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.compactedBelow
}

// compactCopyPath is the path of a segment's compacted copy.
func compactCopyPath(dir string, base uint64) string {
	return filepath.Join(dir, segmentName(base, logExt)+compactSuffix)
}
