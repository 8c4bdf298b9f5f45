package persistence

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
)

// TruncateEntries removes every entry with Index >= index from the end of
// the log: a raft follower replacing a conflicting uncommitted tail. Whole
// segments go, the segment the cut falls in is truncated and becomes the
// active one, and the indexes, the durable mark, NextOffset (the offset
// after what remains), LastEntry and Synced follow. The next AppendEntry
// may use any index above the last remaining entry's (normally index).
// Removing nothing (index past the last entry, or a log without entries) is
// not an error.
//
// It refuses to cut at or below the floor set with SetEntryFloor
// (ErrBelowFloor: committed entries are never removed), and on a log of
// plain batches (ErrMixedFormats).
//
// Readers: a Cursor that has returned records the cut removed fails with
// ErrTruncated from then on; one that has not carries on where its next
// record now is (see Cursor). An EntryHeaders walk it interrupts fails with
// ErrTruncated; ReadEntries and OffsetForTime read again. A WaitDurable or
// WaitEntryDurable for a removed record or entry receives ErrTruncated.
//
// Crash safety: the mark is lowered and fsynced first, so it never claims
// more than the log will hold; then the removed segments leave the
// directory, which is fsynced; then the cut segment is truncated and
// fsynced. A crash between the steps recovers either the old tail, whole
// and above the mark (the state before the call, which a follower had
// durably and acknowledged nothing beyond), or the cut log, never a gap nor
// a log ending below its mark. Synced batches are removed here, so this is
// the one place where the mark goes down.
//
// It holds the log's lock while it does that I/O, three fsyncs and a
// header read per segment it looks at: readers wait meanwhile, which is
// fine for a call a follower makes only when a leader changes. A failed
// step poisons the log.
func (l *Log) TruncateEntries(index uint64) error {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	done, err := l.truncate(index)
	for _, s := range done {
		// The truncation happened; an unlink that fails leaves a
		// *.deleted file that Open removes.
		_ = s.finalize(l.fs)
	}
	return err
}

// truncate is TruncateEntries under l.mu. It returns the segments whose
// last reference went, for finalize.
func (l *Log) truncate(index uint64) ([]*segment, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.mu.closed:
		return nil, ErrClosed
	case l.mu.err != nil:
		return nil, l.mu.err
	case l.mu.format == formatPlain:
		return nil, ErrMixedFormats
	case l.mu.floor > 0 && index <= l.mu.floor:
		return nil, fmt.Errorf("%w: index %d, entries up to %d are committed", ErrBelowFloor, index, l.mu.floor)
	case !l.mu.hasLast || index > l.mu.last.Index:
		return nil, nil
	}
	c, err := l.findCutLocked(index)
	if err != nil {
		return nil, err
	}
	return l.cutLocked(c)
}

// cut is where TruncateEntries cuts: at byte pos of the log's segment seg,
// which becomes the log's end, at offset next.
type cut struct {
	seg      int
	pos      int64
	next     uint64
	lastTime int64     // time of the batch before pos; 0 for none
	keep     lastEntry // the last entry that stays, when kept
	kept     bool
}

// findCutLocked finds where the first entry with an Index of at least index
// starts. It reads the first header of each segment from the newest back to
// the one that entry lies in, binary-searches that segment's index entries
// (one header read per probe: indexes increase along the log as offsets
// do), and scans forward from the last indexed batch before the entry: a
// few small reads, where a scan from the log's start would read it all.
// REQUIRES: l.mu is held, and the log holds an entry at or past index.
func (l *Log) findCutLocked(index uint64) (cut, error) {
	segs := l.mu.segments
	i := len(segs) - 1
	for ; i >= 0; i-- {
		s := segs[i]
		if s.size == 0 {
			continue
		}
		r := chunkReader{f: s.log, size: s.size}
		v, _, err := r.headerAt(0)
		if err != nil {
			return cut{}, readFailure(s, 0, err)
		}
		if v.meta.Index < index {
			break
		}
	}
	if i < 0 {
		return cut{seg: 0, pos: 0, next: segs[0].base}, nil // every entry goes
	}

	s := segs[i]
	r := chunkReader{f: s.log, size: s.size, chunk: minReadChunk}
	var probeErr error
	k := sort.Search(len(s.entries), func(k int) bool {
		if probeErr != nil {
			return true
		}
		v, _, err := r.headerAt(int64(s.entries[k].pos))
		if err != nil {
			probeErr = readFailure(s, int64(s.entries[k].pos), err)
			return true
		}
		return v.meta.Index >= index
	})
	if probeErr != nil {
		return cut{}, probeErr
	}
	pos, base := int64(0), s.base
	if k > 0 {
		pos, base = int64(s.entries[k-1].pos), s.base+uint64(s.entries[k-1].rel)
	}
	c := cut{seg: i}
	for pos < s.size {
		v, n, err := r.headerAt(pos)
		if err == nil && v.base != base {
			err = &offsetMismatch{got: v.base, want: base}
		}
		if err != nil {
			return cut{}, readFailure(s, pos, err)
		}
		if v.meta.Index >= index {
			break
		}
		c.keep, c.kept, c.lastTime = lastEntryOf(v), true, v.time
		pos += int64(n)
		base = v.next()
	}
	c.pos, c.next = pos, base
	return c, nil
}

// cutLocked makes c the log's end: on the device first, in the order
// TruncateEntries describes, then in memory. It returns the segments whose
// last reference went. REQUIRES: l.mu and l.syncMu are held.
func (l *Log) cutLocked(c cut) ([]*segment, error) {
	var keepIndex uint64
	if c.kept {
		keepIndex = c.keep.Index
	}
	synced := markPoint{offset: min(l.mu.synced, c.next), index: min(l.mu.syncedIndex, keepIndex)}
	if err := l.mark.write(synced); err != nil {
		return nil, l.poisonLocked(&ErrIO{Op: "write and fsync", Path: l.mark.path, Err: err})
	}
	l.mu.synced, l.mu.syncedIndex = synced.offset, synced.index

	epoch := l.truncations.Load() + 1
	var done []*segment
	dropped := len(l.mu.segments) - 1 - c.seg
	for j := len(l.mu.segments) - 1; j > c.seg; j-- {
		gone, err := l.dropSegmentLocked(l.mu.segments[j], epoch)
		done = append(done, gone...)
		if err != nil {
			return done, l.poisonLocked(err)
		}
		l.mu.segments = l.mu.segments[:j]
	}
	if dropped > 0 {
		if err := l.fs.SyncDir(l.dir); err != nil {
			return done, l.poisonLocked(&ErrIO{Op: "fsync", Path: l.dir, Err: err})
		}
	}
	s := l.mu.segments[c.seg]
	if c.pos < s.size {
		// Fsynced now, not by the next pass: otherwise a power loss could
		// bring the old bytes back behind the batches appended in their
		// place.
		if err := s.log.Truncate(c.pos); err != nil {
			return done, l.poisonLocked(&ErrIO{Op: "truncate", Path: s.path(logExt), Err: err})
		}
		if err := s.log.Sync(); err != nil {
			return done, l.poisonLocked(&ErrIO{Op: "fsync", Path: s.path(logExt), Err: err})
		}
	}
	if err := l.reactivateLocked(s, c); err != nil {
		return done, l.poisonLocked(err)
	}

	l.mu.next = c.next
	l.armPeriodicLocked() // the mark follows the cut
	l.mu.lastTime = 0
	for _, s := range l.mu.segments {
		l.mu.lastTime = max(l.mu.lastTime, s.lastTime)
	}
	l.mu.last, l.mu.hasLast, l.mu.anyIndex = c.keep, c.kept, true
	if !c.kept {
		l.mu.format = formatUnknown
	}
	l.failTruncatedWaitersLocked(c.next, keepIndex)
	for cur := range l.mu.cursors {
		cur.cut = min(cur.cut, c.next)
	}
	l.truncations.Store(epoch)
	return done, nil
}

// reactivateLocked makes s, cut at c, the active segment: its size, offsets,
// time and index entries as they now are, and its index files rewritten
// from the entries that stay. REQUIRES: l.mu is held.
func (l *Log) reactivateLocked(s *segment, c cut) error {
	s.size, s.next, s.lastTime = c.pos, c.next, c.lastTime
	n := sort.Search(len(s.entries), func(k int) bool { return int64(s.entries[k].pos) >= c.pos })
	s.entries = s.entries[:n]
	s.lastIndexed = 0
	if n > 0 {
		s.lastIndexed = int64(s.entries[n-1].pos)
	}
	s.closeIndexFiles()
	if err := s.openIndexFiles(l.fs); err != nil {
		return &ErrIO{Op: "write", Path: s.path(indexExt), Err: err}
	}
	return nil
}

// dropSegmentLocked takes s out of the log's files: its log renamed away
// for its last holder to unlink (a name of its own, since a later segment
// may get s's base, and so its name, before then), its indexes removed, the
// syncer's reference dropped. It returns the segments whose last reference
// went. REQUIRES: l.mu is held.
func (l *Log) dropSegmentLocked(s *segment, epoch uint64) ([]*segment, error) {
	path := s.path(logExt) + "." + strconv.FormatUint(epoch, 10) + deletedSuffix
	if err := l.fs.Rename(s.path(logExt), path); err != nil {
		return nil, &ErrIO{Op: "rename", Path: s.path(logExt), Err: err}
	}
	s.deleted, s.deletedPath = true, path
	s.closeIndexFiles()
	for _, ext := range []string{indexExt, timeIndexExt} {
		// Derived files: Open removes index files without a log, and a
		// new segment at this base rewrites them.
		_ = l.fs.Remove(s.path(ext))
	}
	var done []*segment
	if i := slices.Index(l.mu.dirty, s); i >= 0 {
		l.mu.dirty = slices.Delete(l.mu.dirty, i, i+1)
		s.dirty = false
		if l.releaseLocked(s) {
			done = append(done, s)
		}
	}
	if l.releaseLocked(s) {
		done = append(done, s)
	}
	return done, nil
}

// failTruncatedWaitersLocked fails the durability waits for records at or
// past next, or entries past index, which the log no longer holds.
// REQUIRES: l.mu is held.
func (l *Log) failTruncatedWaitersLocked(next, index uint64) {
	kept := l.mu.waiters[:0]
	for _, w := range l.mu.waiters {
		if w.upTo > next || w.index > index {
			w.ch <- ErrTruncated
		} else {
			kept = append(kept, w)
		}
	}
	clear(l.mu.waiters[len(kept):])
	l.mu.waiters = kept
}
