package persistence

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"
)

// Open opens the log in dir, creating dir and an empty log if needed, and
// recovers it by the rules in the package documentation. On success the
// whole recovered log is durable and the syncer is running; Close stops it.
func Open(dir string, cfg Config, opts ...Option) (*Log, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	o := options{fs: osFS{}}
	for _, opt := range opts {
		opt(&o)
	}
	if o.cache != nil {
		o.fs = cachingFS{FS: o.fs, c: o.cache}
	}
	l := &Log{
		dir:        dir,
		cfg:        cfg,
		fs:         o.fs,
		wake:       make(chan struct{}, 1),
		stop:       make(chan struct{}),
		syncerDone: make(chan struct{}),
	}
	l.mu.cursors = map[*Cursor]struct{}{}
	if err := l.recover(); err != nil {
		return nil, err
	}
	if cfg.Fsync == FsyncPeriodic {
		// One pass after the first interval, as the log may have come
		// back with something to sync; then only once it is written to.
		l.mu.periodicArmed = true
		l.periodic = time.AfterFunc(cfg.SyncInterval, l.periodicDue)
	}
	go l.runSyncer()
	return l, nil
}

// recover builds the log's state from dir. Nothing runs concurrently with
// it, so it sets l.mu's fields without the lock's help.
func (l *Log) recover() (err error) {
	fsys := l.fs
	if err := fsys.MkdirAll(l.dir, 0o755); err != nil {
		return fmt.Errorf("persistence: create %s: %w", l.dir, err)
	}
	// A compaction's swap finishes before the segments are listed: the
	// list is the one it committed to.
	compactedBelow, err := recoverCompaction(fsys, l.dir)
	if err != nil {
		return err
	}
	bases, err := sweepDir(fsys, l.dir)
	if err != nil {
		return err
	}
	marked, markSeq, markFound, err := readMark(fsys, l.dir)
	if err != nil {
		return err
	}

	var segs []*segment
	var st scanState
	defer func() {
		if err != nil {
			for _, s := range segs {
				_ = s.finalize(fsys) // not deleted: this only closes
			}
		}
	}()
	if segs, st, err = l.initialSegments(bases, marked); err != nil {
		return err
	}

	active := segs[len(segs)-1]
	if active.index == nil { // a new segment has its index files open already
		if err := active.openIndexFiles(fsys); err != nil {
			return fmt.Errorf("persistence: write index of %s: %w", active.name(), err)
		}
	}
	if err := l.syncRecovered(segs, marked); err != nil {
		return err
	}
	end := markPoint{offset: active.next}
	if st.hasLast {
		end.index = st.last.Index
	}
	if err := l.openMark(markFound, markSeq, marked, end); err != nil {
		return err
	}

	l.mu.segments = segs
	l.mu.compactedBelow = compactedBelow
	l.mu.next = end.offset
	l.mu.synced, l.mu.syncedIndex = end.offset, end.index
	l.mu.format, l.mu.last, l.mu.hasLast = st.format, st.last, st.hasLast
	for _, s := range segs {
		l.mu.lastTime = max(l.mu.lastTime, s.lastTime)
	}
	return nil
}

// initialSegments opens the segments at bases and checks them against the
// mark, or creates the first segment of a new log. On an error it returns
// the segments it opened, for the caller to close.
func (l *Log) initialSegments(bases []uint64, marked markPoint) ([]*segment, scanState, error) {
	fsys := l.fs
	if len(bases) == 0 {
		if marked != (markPoint{}) {
			return nil, scanState{}, &ErrCorrupt{Segment: markName, Reason: fmt.Sprintf("offsets below %d and entries up to %d were synced but the log has no segments", marked.offset, marked.index)}
		}
		s, err := createSegment(fsys, l.dir, 0)
		if err != nil {
			return nil, scanState{}, fmt.Errorf("persistence: create the first segment: %w", err)
		}
		return []*segment{s}, scanState{}, nil
	}
	var segs []*segment
	for _, base := range bases {
		s, err := openSegment(fsys, l.dir, base)
		if err != nil {
			return segs, scanState{}, err
		}
		segs = append(segs, s)
	}
	return l.checkSegments(segs, marked)
}

// syncRecovered makes what was recovered durable before the mark says so:
// after a kill -9 the page cache held records no fsync had covered yet. The
// segment that ends at the marked offset may hold entries without records
// after it, which the mark's offset does not cover.
func (l *Log) syncRecovered(segs []*segment, marked markPoint) error {
	active := segs[len(segs)-1]
	for _, s := range segs {
		if s.next >= marked.offset || s == active {
			if err := s.log.Sync(); err != nil {
				return fmt.Errorf("persistence: fsync %s: %w", s.name(), err)
			}
		}
	}
	if err := l.fs.SyncDir(l.dir); err != nil {
		return fmt.Errorf("persistence: fsync %s: %w", l.dir, err)
	}
	return nil
}

// openMark opens the durable mark (or creates it, for a log that had none)
// and moves it to end, what recovery made durable.
func (l *Log) openMark(found bool, seq uint64, marked, end markPoint) error {
	if !found {
		var err error
		l.mark, err = createMark(l.fs, l.dir, end)
		return err
	}
	m, err := openMark(l.fs, l.dir, seq, marked)
	if err != nil {
		return err
	}
	if err := m.write(end); err != nil {
		m.close()
		return fmt.Errorf("persistence: write %s: %w", markName, err)
	}
	l.mark = m
	return nil
}

// sweepDir removes what an interrupted deletion or mark creation left
// behind (*.deleted files, durable.mark.tmp, index files without a log) and
// returns the segment bases in offset order.
func sweepDir(fsys FS, dir string) ([]uint64, error) {
	entries, err := fsys.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("persistence: read %s: %w", dir, err)
	}
	var bases []uint64
	var indexes []string
	logs := map[uint64]bool{}
	for _, e := range entries {
		name := e.Name()
		if strings.HasSuffix(name, deletedSuffix) || name == markTmpName {
			if err := fsys.Remove(filepath.Join(dir, name)); err != nil {
				return nil, fmt.Errorf("persistence: remove %s: %w", name, err)
			}
			continue
		}
		base, ext, ok := parseSegmentName(name)
		switch {
		case !ok:
		case ext == logExt:
			bases = append(bases, base)
			logs[base] = true
		default:
			indexes = append(indexes, name)
		}
	}
	for _, name := range indexes {
		if base, _, _ := parseSegmentName(name); !logs[base] {
			if err := fsys.Remove(filepath.Join(dir, name)); err != nil {
				return nil, fmt.Errorf("persistence: remove %s: %w", name, err)
			}
		}
	}
	slices.Sort(bases)
	return bases, nil
}

// createSegment creates an empty segment at base, its index files open.
// The error is the file system's, which names the file.
func createSegment(fsys FS, dir string, base uint64) (*segment, error) {
	s := &segment{dir: dir, base: base, next: base, refs: 1}
	f, err := fsys.OpenFile(s.path(logExt), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, err
	}
	s.log = f
	if err := s.openIndexFiles(fsys); err != nil {
		s.closeIndexFiles()
		f.Close()
		return nil, err
	}
	return s, nil
}

// openSegment opens an existing segment's log; size is the file's size
// until checkSegments has found where its last complete batch ends.
func openSegment(fsys FS, dir string, base uint64) (*segment, error) {
	s, err := openSegmentFile(fsys, dir, base, os.O_RDWR)
	if err != nil {
		return nil, err
	}
	s.refs = 1
	return s, nil
}

// openSegmentFile opens a segment's log with flag (O_RDWR, or O_RDONLY
// for Verify) and learns its size.
func openSegmentFile(fsys FS, dir string, base uint64, flag int) (*segment, error) {
	s := &segment{dir: dir, base: base, next: base}
	f, err := fsys.OpenFile(s.path(logExt), flag, 0)
	if err != nil {
		return nil, fmt.Errorf("persistence: open %s: %w", s.name(), err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("persistence: stat %s: %w", s.name(), err)
	}
	s.log, s.size = f, fi.Size()
	return s, nil
}

// defect is the first damaged batch a scan met.
type defect struct {
	pos    int64
	offset uint64 // the offset the batch should have started at
	index  uint64 // the raft index it should have had at least; 0 when unknown or not an entry log
	reason string
	// torn: damage a crash can leave (see isFrameError). A checksummed
	// batch that is inconsistent was written that way and is never torn.
	torn bool
}

// checkSegments validates segs in order, truncates a torn tail, removes
// empty segments that follow it, and returns the segments that remain, open
// (also with an error: the caller closes them), and what the scans learned
// of the log's format and last entry.
func (l *Log) checkSegments(segs []*segment, marked markPoint) ([]*segment, scanState, error) {
	var st scanState
	for i := 0; i < len(segs); i++ {
		s := segs[i]
		fileSize := s.size
		laterEmpty := !slices.ContainsFunc(segs[i+1:], func(t *segment) bool { return t.size > 0 })
		canBeTail := i == len(segs)-1 || laterEmpty

		loaded, ok := loadIndexes(l.fs, s, fileSize)
		res, err := l.scanUnsynced(s, loaded, ok, fileSize, marked, &st)
		if err != nil {
			return segs, st, fmt.Errorf("persistence: read %s: %w", s.name(), err)
		}

		if res.defect != nil {
			if err := repairTornTail(s, res, canBeTail, marked, fileSize); err != nil {
				return segs, st, err
			}
		}
		s.size, s.next, s.lastTime = res.size, res.next, res.lastTime
		s.entries, s.lastIndexed = res.entries, res.lastIndexed

		if i < len(segs)-1 && (res.defect != nil || s.next != segs[i+1].base) {
			if res.defect == nil && !(s.next < segs[i+1].base && s.next >= marked.offset && laterEmpty) {
				return segs, st, &ErrCorrupt{Segment: segs[i+1].name(), Reason: fmt.Sprintf("offsets do not continue: %s ends at offset %d", s.name(), s.next)}
			}
			// A torn tail: the empty segments after it were created for
			// batches that never reached the device.
			drop := segs[i+1:]
			segs = segs[:i+1]
			if err := removeSegments(l.fs, drop); err != nil {
				return segs, st, err
			}
		}
		if i < len(segs)-1 && (!ok || !slices.Equal(res.entries, loaded)) {
			if err := s.openIndexFiles(l.fs); err != nil {
				return segs, st, fmt.Errorf("persistence: write index of %s: %w", s.name(), err)
			}
			s.closeIndexFiles()
		}
	}
	return segs, st, checkEnd(segs[len(segs)-1], st, marked)
}

// scanUnsynced scans what the mark does not cover: from the last index
// entry below the mark, so that damage anywhere in unsynced data is
// classified, not only at the very end. Below, not at: the batch the scan
// starts with is then synced, and so are any entries without records
// before it, which share its offset. With no usable index (or
// VerifyOnOpen) the whole segment is scanned.
func (l *Log) scanUnsynced(s *segment, loaded []indexEntry, ok bool, fileSize int64, marked markPoint, st *scanState) (scanResult, error) {
	k := -1
	if ok && !l.cfg.VerifyOnOpen {
		k = sort.Search(len(loaded), func(i int) bool { return s.base+uint64(loaded[i].rel) >= marked.offset }) - 1
	}
	if k >= 0 {
		from := loaded[k]
		return scanSegment(s, int64(from.pos), s.base+uint64(from.rel), from.time, fileSize, loaded[:k+1:k+1], l.cfg.IndexIntervalBytes, st)
	}
	return scanSegment(s, 0, s.base, 0, fileSize, nil, l.cfg.IndexIntervalBytes, st)
}

// repairTornTail truncates the damage the scan found if it is a torn tail:
// unsynced, at the end of the log, with no valid batch after it. Anything
// else is an *ErrCorrupt.
func repairTornTail(s *segment, res scanResult, canBeTail bool, marked markPoint, fileSize int64) error {
	d := res.defect
	corrupt := &ErrCorrupt{Segment: s.name(), Position: d.pos, Reason: d.reason}
	synced := marked.covers(d)
	switch {
	case !d.torn:
		return corrupt
	case synced != "":
		corrupt.Reason += synced
		return corrupt
	case !canBeTail:
		corrupt.Reason += " in a sealed segment"
		return corrupt
	}
	at, found, err := validBatchAfter(s.log, d.pos+1, fileSize)
	if err != nil {
		return fmt.Errorf("persistence: read %s: %w", s.name(), err)
	}
	if found {
		corrupt.Reason += fmt.Sprintf(", followed by a valid batch at byte %d", at)
		return corrupt
	}
	if err := s.log.Truncate(res.size); err != nil {
		return fmt.Errorf("persistence: truncate %s: %w", s.name(), err)
	}
	return nil
}

// checkEnd refuses a log that ends before what the mark says was synced.
func checkEnd(last *segment, st scanState, marked markPoint) error {
	if last.next < marked.offset {
		return &ErrCorrupt{Segment: last.name(), Position: last.size,
			Reason: fmt.Sprintf("log ends at offset %d, but offsets below %d were synced", last.next, marked.offset)}
	}
	if marked.index > 0 && (!st.hasLast || st.last.Index < marked.index) {
		return &ErrCorrupt{Segment: last.name(), Position: last.size,
			Reason: fmt.Sprintf("log ends at entry %d, but entries up to %d were synced", st.last.Index, marked.index)}
	}
	return nil
}

// covers says, as a reason's ending, why the mark covers the damage at d
// (so it cannot be a torn tail), or "" if it does not. A raft entry is
// covered when the mark's index reaches the index it should have had, the
// one after the entry before it: that is what tells a synced entry without
// records, whose offset the mark's offset does not pass, from an unsynced
// one. With no entry before it (the log's first batch) that index is
// unknown, and any marked index covers it: entries are synced in log order,
// so the first one is, unless retention removed every synced one.
func (m markPoint) covers(d *defect) string {
	switch {
	case d.offset < m.offset:
		return fmt.Sprintf(" (offsets below %d were synced)", m.offset)
	case m.index > 0 && (d.index == 0 || d.index <= m.index):
		return fmt.Sprintf(" (entries up to %d were synced)", m.index)
	}
	return ""
}

// removeSegments closes and deletes segments recovery drops.
func removeSegments(fsys FS, segs []*segment) error {
	for _, s := range segs {
		_ = s.finalize(fsys) // a close error on a file being deleted changes nothing
	}
	for _, s := range segs {
		for _, ext := range []string{logExt, indexExt, timeIndexExt} {
			if err := fsys.Remove(s.path(ext)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("persistence: remove %s: %w", segmentName(s.base, ext), err)
			}
		}
	}
	return nil
}

// loadIndexes reads a segment's index files and returns their entries if
// they can be trusted: both files whole (parseIndexes) and the last entry
// pointing at a valid batch with the entry's offset and time. false means
// rebuild from the log.
func loadIndexes(fsys FS, s *segment, logSize int64) ([]indexEntry, bool) {
	offsets, err := readWholeFile(fsys, s.path(indexExt))
	if err != nil {
		return nil, false
	}
	times, err := readWholeFile(fsys, s.path(timeIndexExt))
	if err != nil {
		return nil, false
	}
	entries, err := parseIndexes(offsets, times, logSize)
	if err != nil {
		return nil, false
	}
	if n := len(entries); n > 0 {
		e := entries[n-1]
		r := chunkReader{f: s.log, size: logSize}
		v, _, err := r.batchAt(int64(e.pos))
		if err != nil || v.base != s.base+uint64(e.rel) || v.time != e.time {
			return nil, false
		}
	}
	return entries, true
}

func readWholeFile(fsys FS, path string) ([]byte, error) {
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	buf := make([]byte, fi.Size())
	if _, err := f.ReadAt(buf, 0); err != nil {
		return nil, err
	}
	return buf, nil
}

// scanChunk is recovery's read size: it reads whole segment tails.
const scanChunk = 1 << 20

// scanResult is what scanSegment learned: the segment up to its last
// complete batch, and the first damage after that, if any.
type scanResult struct {
	size        int64
	next        uint64
	lastTime    int64
	entries     []indexEntry
	lastIndexed int64
	defect      *defect
	// batches and records count what was scanned, for Verify's report.
	batches, records int
}

// scanSegment reads s's batches from pos, where the batch at offset off
// starts, to fileSize: it checks each one, rebuilds index entries for the
// ones due (appending to entries), and stops at the first damage. The error
// is an I/O failure; damage is reported as res.defect. st carries the
// format and last entry from the batches before, and is left at the last
// good batch.
func scanSegment(s *segment, pos int64, off uint64, lastTime int64, fileSize int64, entries []indexEntry, interval int, st *scanState) (scanResult, error) {
	res := scanResult{size: pos, next: off, lastTime: lastTime, entries: entries, lastIndexed: pos}
	r := chunkReader{f: s.log, size: fileSize, chunk: scanChunk}
	for pos < fileSize {
		frame, err := r.frameAt(pos)
		var v batchView
		var n int
		if err == nil {
			v, n, err = decodeBatch(frame)
		}
		var reason string
		switch {
		case err != nil && isFrameError(err):
			res.defect = &defect{pos: pos, offset: res.next, index: st.nextIndex(), reason: err.Error(), torn: true}
			return res, nil
		case err == errMalformed:
			reason = err.Error()
		case err != nil:
			return res, err
		case v.base != res.next:
			reason = (&offsetMismatch{got: v.base, want: res.next}).Error()
		case v.time < res.lastTime:
			reason = fmt.Sprintf("batch time %d is before the previous batch's %d", v.time, res.lastTime)
		default:
			reason = st.follows(v)
		}
		if reason != "" {
			res.defect = &defect{pos: pos, offset: res.next, index: st.nextIndex(), reason: reason}
			return res, nil
		}
		st.accept(v)
		if indexDue(pos, res.lastIndexed, interval, v.base, s.base, int(v.count)) {
			res.entries = append(res.entries, indexEntry{rel: uint32(v.base - s.base), pos: uint32(pos), time: v.time})
			res.lastIndexed = pos
		}
		pos += int64(n)
		res.size, res.next, res.lastTime = pos, v.next(), v.time
		res.batches, res.records = res.batches+1, res.records+int(v.held())
	}
	return res, nil
}

// scanState is what recovery carries from batch to batch and from one
// segment to the next: the log's format and its last raft entry.
type scanState struct {
	format  logFormat
	hasLast bool
	last    lastEntry
}

// follows says why v cannot come after the batches scanned so far, or "".
// Only a bug or a hand-edited log breaks these rules, never a crash, so a
// batch that does is corrupt, not torn.
func (st *scanState) follows(v batchView) string {
	switch {
	case st.format == formatPlain && v.entry:
		return "a raft entry among plain batches"
	case st.format == formatEntries && !v.entry:
		return "a plain batch among raft entries"
	case !v.entry || !st.hasLast:
		return ""
	case v.meta.Index <= st.last.Index:
		return fmt.Sprintf("entry index %d after %d", v.meta.Index, st.last.Index)
	case v.meta.Term < st.last.Term:
		return fmt.Sprintf("entry term %d after %d", v.meta.Term, st.last.Term)
	}
	return ""
}

// accept moves st past the good batch v.
func (st *scanState) accept(v batchView) {
	if !v.entry {
		st.format = formatPlain
		return
	}
	st.format, st.hasLast, st.last = formatEntries, true, lastEntryOf(v)
}

// nextIndex is the least index the next entry can have, or 0 when unknown.
func (st *scanState) nextIndex() uint64 {
	if st.hasLast {
		return st.last.Index + 1
	}
	return 0
}

// validBatchAfter looks for a checksummed batch starting anywhere in
// [from, size): its presence is what makes damage "inside" the log rather
// than a torn tail. Only the rest of one segment is searched, and a real
// batch after damage is met within one batch's length.
func validBatchAfter(f File, from, size int64) (int64, bool, error) {
	r := chunkReader{f: f, size: size, chunk: scanChunk}
	for p := from; p+minFrameLen <= size; p++ {
		hdr, err := r.bytes(p, frameHeaderLen)
		if err != nil {
			return 0, false, err
		}
		if _, ok := fixedLen(hdr[0]); !ok {
			continue
		}
		frame, err := r.frameAt(p)
		if err != nil {
			if isFrameError(err) {
				continue
			}
			return 0, false, err
		}
		if _, _, err := decodeBatch(frame); err == nil {
			return p, true, nil
		}
	}
	return 0, false, nil
}
