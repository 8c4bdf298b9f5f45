package persistence

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// RepairReport says what Repair did, or, from PlanRepair, would do.
type RepairReport struct {
	Dir string `json:"dir"`
	// Needed is false when the log has nothing Open refuses: then nothing
	// is, or would be, changed.
	Needed      bool   `json:"needed"`
	CutFile     string `json:"cut_file,omitempty"`
	CutPosition int64  `json:"cut_position"`
	// LostFrom is the first offset lost: the log continues there. LostTo
	// is the offset after the last one known lost: past the last good
	// batch found beyond the damage, or the mark's synced offset. A damaged
	// batch's own records may reach further (its count is unreadable), but
	// only when nothing readable and nothing synced follows it.
	LostFrom uint64 `json:"lost_from"`
	LostTo   uint64 `json:"lost_to"`
	// Moved are the files moved into DamagedDir (in a plan: that would be).
	// The cut segment's whole original is among them: its good part is
	// copied back.
	Moved      []string `json:"moved,omitempty"`
	DamagedDir string   `json:"damaged_dir,omitempty"`
	// Mark is the durable mark written: the log's new end.
	Mark    MarkReport `json:"mark"`
	Applied bool       `json:"applied"`
}

// damagedPrefix names the folder a repair moves a damaged tail into, next
// to the segments. Open ignores it: it is not a segment's name.
const damagedPrefix = "damaged-"

// PlanRepair verifies dir and says what Repair would do, changing nothing.
func PlanRepair(dir string) (*RepairReport, *VerifyReport, error) {
	v, err := Verify(dir)
	if err != nil {
		return nil, nil, err
	}
	rep := &RepairReport{Dir: dir}
	c := v.cut
	if c == nil {
		return rep, v, nil
	}
	rep.Needed = true
	seg := v.Segments[c.seg]
	rep.CutFile, rep.CutPosition = seg.Name, c.pos
	rep.LostFrom = c.offset
	rep.LostTo = max(c.offset, v.end)
	if v.Mark != nil {
		rep.LostTo = max(rep.LostTo, v.Mark.Offset)
	}
	rep.Mark = MarkReport{Offset: c.offset}
	if c.st.hasLast {
		rep.Mark.Index = c.st.last.Index
	}
	if c.pos < seg.Bytes {
		rep.Moved = append(rep.Moved, seg.Name)
	}
	for _, s := range v.Segments[c.seg+1:] {
		rep.Moved = append(rep.Moved, s.Name)
	}
	return rep, v, nil
}

// Repair cuts the log in dir at the last good batch before the first
// damage Open refuses: it moves the damaged tail (the cut segment's
// original and every later segment, with their indexes) into a
// damaged-<time> folder in dir, never deleting it, rebuilds the cut
// segment's indexes, and writes a durable mark at the new end, so that
// Open accepts the log and appends continue at RepairReport.LostFrom. The
// old mark is moved aside too. No Log may have dir open.
func Repair(dir string, now time.Time) (*RepairReport, error) {
	rep, v, err := PlanRepair(dir)
	if err != nil || !rep.Needed {
		return rep, err
	}
	c := v.cut
	damaged := filepath.Join(dir, damagedPrefix+now.UTC().Format("20060102T150405Z"))
	if err := os.Mkdir(damaged, 0o755); err != nil {
		return nil, fmt.Errorf("persistence: create the folder for the damaged tail: %w", err)
	}
	rep.DamagedDir = damaged
	seg := v.Segments[c.seg]
	base := seg.First
	switch {
	case c.pos == 0 && c.seg > 0:
		// Nothing of it is good: the log ends with the segment before.
		c.seg--
		base = v.Segments[c.seg].First
		if err := moveSegment(dir, damaged, seg.First); err != nil {
			return nil, err
		}
	case c.pos < seg.Bytes:
		if err := cutSegment(dir, damaged, seg.First, c.pos); err != nil {
			return nil, err
		}
	}
	for _, s := range v.Segments[c.seg+1:] {
		if s.First == seg.First && c.pos == 0 {
			continue // moved above
		}
		if err := moveSegment(dir, damaged, s.First); err != nil {
			return nil, err
		}
	}
	if err := rebuildIndexes(dir, base); err != nil {
		return nil, err
	}
	if err := replaceMark(dir, damaged, markPoint{offset: rep.Mark.Offset, index: rep.Mark.Index}); err != nil {
		return nil, err
	}
	for _, d := range []string{damaged, dir} {
		if err := (osFS{}).SyncDir(d); err != nil {
			return nil, fmt.Errorf("persistence: fsync %s: %w", d, err)
		}
	}
	rep.Applied = true
	return rep, nil
}

// cutSegment keeps the first keep bytes of the segment at base: it copies
// them to a new file, moves the original into damaged and puts the copy in
// its place. The copy is fsynced before the rename, so the name never
// holds a partial copy.
func cutSegment(dir, damaged string, base uint64, keep int64) error {
	name := segmentName(base, logExt)
	path := filepath.Join(dir, name)
	tmp := path + ".repair"
	src, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("persistence: open %s: %w", name, err)
	}
	defer src.Close()
	dst, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("persistence: create %s: %w", tmp, err)
	}
	_, err = io.Copy(dst, io.NewSectionReader(src, 0, keep))
	if err == nil {
		err = dst.Sync()
	}
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("persistence: copy the good part of %s: %w", name, err)
	}
	if err := moveSegment(dir, damaged, base); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("persistence: rename %s: %w", tmp, err)
	}
	return nil
}

// moveSegment moves the segment at base, with whichever index files it
// has, into damaged.
func moveSegment(dir, damaged string, base uint64) error {
	for _, ext := range []string{logExt, indexExt, timeIndexExt} {
		name := segmentName(base, ext)
		err := os.Rename(filepath.Join(dir, name), filepath.Join(damaged, name))
		if err != nil && (ext == logExt || !os.IsNotExist(err)) {
			return fmt.Errorf("persistence: move %s aside: %w", name, err)
		}
	}
	return nil
}

// rebuildIndexes writes the index files of the segment at base afresh from
// its batches. They are derived and never fsynced, as Open writes them.
func rebuildIndexes(dir string, base uint64) error {
	s, err := openSegmentFile(osFS{}, dir, base, os.O_RDONLY)
	if err != nil {
		return err
	}
	defer s.log.Close()
	res, err := scanSegment(s, 0, base, 0, s.size, nil, defaultIndexIntervalBytes, &scanState{})
	if err != nil {
		return fmt.Errorf("persistence: read %s: %w", s.name(), err)
	}
	if res.defect != nil { // Verify found this part good; it changed since
		return &ErrCorrupt{Segment: s.name(), Position: res.defect.pos, Reason: res.defect.reason}
	}
	s.entries = res.entries
	err = s.openIndexFiles(osFS{})
	s.closeIndexFiles()
	if err != nil {
		return fmt.Errorf("persistence: write index of %s: %w", s.name(), err)
	}
	return nil
}

// replaceMark moves the old durable.mark (if any) into damaged and writes
// one holding p.
func replaceMark(dir, damaged string, p markPoint) error {
	err := os.Rename(filepath.Join(dir, markName), filepath.Join(damaged, markName))
	if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("persistence: move %s aside: %w", markName, err)
	}
	m, err := createMark(osFS{}, dir, p)
	if err != nil {
		return err
	}
	return m.close()
}
