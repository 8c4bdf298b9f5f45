package persistence

import (
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"time"
)

// EnforceRetention deletes the oldest sealed segments that Config's limits
// no longer keep: while the log is larger than RetentionBytes, or while the
// oldest segment's newest batch is older than now minus RetentionAge. The
// active segment is never deleted, and StartOffset moves forward with each
// deletion. It returns how many segments it deleted.
//
// A deleted segment leaves the log at once: its log file is renamed to
// <name>.deleted and its indexes removed, so a later Open never sees it. But
// a Cursor or OffsetForTime still reading it keeps it open, and the renamed
// file is unlinked only when the last of them lets go (segment.finalize).
// Unlinking an open file would be safe on Linux too; the reference count
// makes the rule explicit, portable and testable.
//
// On a log of raft entries it removes entries whatever raft's commit index
// or snapshots say: the replication layer decides whether to call it, and
// whether its limits may ever reach entries raft still needs.
//
// The log does not call it: the shard does, on its own timer. It renames
// and unlinks but never fsyncs, and it is safe for concurrent use, so a
// caller that must not wait on the file system can run it on a goroutine.
func (l *Log) EnforceRetention(now time.Time) (int, error) {
	return l.enforceRetention(now, math.MaxUint64)
}

// EnforceRetentionUpTo is EnforceRetention for a log of raft entries that
// must keep every entry after index (the replica's applied index): a
// segment goes only when the segment after it starts with an entry at or
// below index. That entry becomes the log's first, the compaction point
// raft matches the next entry's term against, so it must be one raft has
// handed over already.
func (l *Log) EnforceRetentionUpTo(now time.Time, index uint64) (int, error) {
	return l.enforceRetention(now, index)
}

func (l *Log) enforceRetention(now time.Time, keepAfter uint64) (int, error) {
	if l.cfg.RetentionBytes == 0 && l.cfg.RetentionAge == 0 {
		return 0, nil
	}
	cutoff := now.Add(-l.cfg.RetentionAge).UnixMicro()

	l.mu.Lock()
	if l.mu.closed {
		l.mu.Unlock()
		return 0, ErrClosed
	}
	var total int64
	for _, s := range l.mu.segments {
		total += s.size
	}
	var removed, last []*segment
	var err error
	for len(l.mu.segments) > 1 {
		s := l.mu.segments[0]
		tooBig := l.cfg.RetentionBytes > 0 && total > l.cfg.RetentionBytes
		tooOld := l.cfg.RetentionAge > 0 && s.lastTime < cutoff
		if !tooBig && !tooOld {
			break
		}
		if keepAfter != math.MaxUint64 && !l.startsAtOrBeforeLocked(l.mu.segments[1], keepAfter) {
			break
		}
		// The rename happens under l.mu so that the segment list and the
		// directory change together, oldest first: a crash can never leave
		// a gap in the offsets of the files that remain.
		if rerr := l.fs.Rename(s.path(logExt), s.path(logExt+deletedSuffix)); rerr != nil {
			err = fmt.Errorf("persistence: retention: rename %s: %w", s.name(), rerr)
			break
		}
		s.deleted, s.deletedPath = true, s.path(logExt+deletedSuffix)
		l.mu.segments = slices.Delete(l.mu.segments, 0, 1)
		total -= s.size
		removed = append(removed, s)
		if l.releaseLocked(s) {
			last = append(last, s)
		}
		// No point fsyncing a deleted segment: drop the syncer's reference
		// too, unless a pass has already taken it.
		if i := slices.Index(l.mu.dirty, s); i >= 0 {
			l.mu.dirty = slices.Delete(l.mu.dirty, i, i+1)
			s.dirty = false
			if l.releaseLocked(s) {
				last = append(last, s)
			}
		}
	}
	l.mu.Unlock()

	for _, s := range removed {
		for _, ext := range []string{indexExt, timeIndexExt} {
			if rerr := l.fs.Remove(s.path(ext)); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
				err = errors.Join(err, fmt.Errorf("persistence: retention: %w", rerr))
			}
		}
	}
	for _, s := range last {
		if ferr := s.finalize(l.fs); ferr != nil {
			err = errors.Join(err, fmt.Errorf("persistence: retention: %s: %w", s.name(), ferr))
		}
	}
	return len(removed), err
}

// startsAtOrBeforeLocked reports whether segment s's first batch is a raft
// entry at or below index. An empty segment, or one whose first header does
// not read, keeps the segment before it. REQUIRES: l.mu is held.
func (l *Log) startsAtOrBeforeLocked(s *segment, index uint64) bool {
	if s.size == 0 {
		return false
	}
	r := chunkReader{f: s.log, size: s.size}
	v, _, err := r.headerAt(0)
	return err == nil && v.entry && v.meta.Index <= index
}
