package persistence

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// File names inside a log directory. A segment is named by its base offset,
// zero-padded so that names sort as offsets do.
const (
	logExt       = ".log"
	indexExt     = ".index"
	timeIndexExt = ".timeindex"
	// deletedSuffix marks a segment retention has removed from the log but a
	// reader still holds. Open removes leftovers.
	deletedSuffix = ".deleted"
)

func segmentName(base uint64, ext string) string { return fmt.Sprintf("%020d%s", base, ext) }

// parseSegmentName reads "<20 digits><ext>" for the three segment files.
func parseSegmentName(name string) (base uint64, ext string, ok bool) {
	stem, ext, found := strings.Cut(name, ".")
	if !found || len(stem) != 20 {
		return 0, "", false
	}
	ext = "." + ext
	if ext != logExt && ext != indexExt && ext != timeIndexExt {
		return 0, "", false
	}
	base, err := strconv.ParseUint(stem, 10, 64)
	return base, ext, err == nil
}

// segment is one file of batches with consecutive offsets, plus its indexes.
//
// Lifetime: the log holds one reference while the segment is part of it;
// each Cursor, OffsetForTime call and pending sync holds another. Retention
// removes a segment from the log and renames its .log away at once, but the
// file is closed and unlinked only when the last reference goes, so a reader
// never sees its data vanish mid-read (release).
type segment struct {
	dir  string
	base uint64
	log  File

	// index and timeIndex are open only while the segment is active; sealed
	// segments answer from entries, kept in memory.
	index, timeIndex File

	// Guarded by Log.mu.
	size        int64  // bytes of complete batches: readers never look past it
	next        uint64 // offset after the last batch
	lastTime    int64  // time of the last batch, unix µs; 0 while empty
	entries     []indexEntry
	lastIndexed int64 // position of the last entry, 0 for none
	refs        int
	dirty       bool // written since the syncer last took it
	// deleted: renamed to deletedPath by retention or TruncateEntries; the
	// last release unlinks it.
	deleted     bool
	deletedPath string
}

func (s *segment) path(ext string) string { return filepath.Join(s.dir, segmentName(s.base, ext)) }
func (s *segment) name() string           { return segmentName(s.base, logExt) }

// openIndexFiles opens both index files for appending and writes them afresh
// from entries, whatever they held.
func (s *segment) openIndexFiles(fsys FS) error {
	var err error
	if s.index, err = fsys.OpenFile(s.path(indexExt), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644); err != nil {
		return err
	}
	if s.timeIndex, err = fsys.OpenFile(s.path(timeIndexExt), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644); err != nil {
		return err
	}
	var offsets, times []byte
	for _, e := range s.entries {
		offsets = appendOffsetEntry(offsets, e)
		times = appendTimeEntry(times, e)
	}
	if _, err := s.index.WriteAt(offsets, 0); err != nil {
		return err
	}
	_, err = s.timeIndex.WriteAt(times, 0)
	return err
}

// writeIndexEntryLocked appends e to both index files. REQUIRES: Log.mu is held and
// s is active.
func (s *segment) writeIndexEntryLocked(e indexEntry) error {
	var buf [timeEntryLen]byte
	n := int64(len(s.entries))
	if _, err := s.index.WriteAt(appendOffsetEntry(buf[:0], e), n*offsetEntryLen); err != nil {
		return &ErrIO{Op: "write", Path: s.path(indexExt), Err: err}
	}
	if _, err := s.timeIndex.WriteAt(appendTimeEntry(buf[:0], e), n*timeEntryLen); err != nil {
		return &ErrIO{Op: "write", Path: s.path(timeIndexExt), Err: err}
	}
	return nil
}

// closeIndexFiles closes the index files when the segment is sealed. Their
// close errors are dropped on purpose: the indexes are derived, and a
// damaged one is rebuilt on the next Open.
func (s *segment) closeIndexFiles() {
	for _, f := range []File{s.index, s.timeIndex} {
		if f != nil {
			_ = f.Close()
		}
	}
	s.index, s.timeIndex = nil, nil
}

// locateLocked returns where to start reading for offset off: the position and
// base offset of the last indexed batch at or before it.
// REQUIRES: Log.mu is held.
func (s *segment) locateLocked(off uint64) (pos int64, base uint64) {
	if off <= s.base {
		return 0, s.base
	}
	if e, ok := floorByOffset(s.entries, off-s.base); ok {
		return int64(e.pos), s.base + uint64(e.rel)
	}
	return 0, s.base
}

// locateBeforeLocked is where to start reading for the first batch whose
// base is at least off: the last indexed batch below off. locateLocked may
// answer the indexed batch at off itself, past raft entries without records
// that share its base; readers of entries must not skip those.
// REQUIRES: Log.mu is held.
func (s *segment) locateBeforeLocked(off uint64) (pos int64, base uint64) {
	if off <= s.base {
		return 0, s.base
	}
	return s.locateLocked(off - 1)
}

// finalize runs when the last reference is released: it closes the files
// and, for a segment retention or TruncateEntries removed, unlinks its
// renamed log file.
func (s *segment) finalize(fsys FS) error {
	s.closeIndexFiles()
	err := s.log.Close()
	if s.deleted {
		if rerr := fsys.Remove(s.deletedPath); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
	}
	return err
}

// readError turns a read that ended early into errShortFrame: the file is
// shorter than its recorded size, which is damage, not an I/O failure.
func readError(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errShortFrame
	}
	return err
}
