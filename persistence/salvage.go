package persistence

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// Salvage is Repair that keeps what follows the damage. Repair cuts a log
// at its first damaged batch, so one bad batch in the middle of a segment
// costs every record after it; Salvage instead skips each damaged stretch
// (from a batch that fails its checks to the next batch that passes them)
// and keeps the good batches beyond.
//
// The offsets a skipped stretch held are not given to other records: every
// later record keeps its offset, so consumers' positions and group cursors
// stay right. The log has no holes (Open, readers and replicas rely on
// offsets continuing), so Salvage writes in the stretch's place placeholder
// batches, one empty record per lost offset, each record carrying the
// header LostHeader. A reader sees a record at every offset, and can tell
// a lost one by its header. This was chosen over holes in the offsets,
// which every reader of the log would have had to learn to skip.
//
// Damage at the very end of the log, with nothing good after it, is cut as
// Repair cuts it. Salvage refuses a log of raft entries: a placeholder
// would need an entry index and term that only raft can give.

// LostHeader is the header of the placeholder records Salvage writes where
// damaged batches were; its value is LostHeaderValue.
const (
	LostHeader      = "felix-lost"
	LostHeaderValue = "salvage"
)

// LostOffsetsFile is the file in a log directory where Salvage records the
// offsets it lost, one JSON object (a SalvageReport's Lost) per line and
// salvage, appended, never rewritten.
const LostOffsetsFile = "lost-offsets.json"

// maxFillRecords bounds the records of one placeholder batch (26 bytes
// each), so a long lost stretch becomes several batches of at most 1.7 MB,
// far below maxBatchBytes.
const maxFillRecords = 1 << 16

// LostRange is one stretch Salvage skipped: offsets [From, To) are lost
// (To == From when the stretch held no offset the log still counts), and
// Bytes bytes of File from Position were the damage.
type LostRange struct {
	From     uint64 `json:"from"`
	To       uint64 `json:"to"`
	File     string `json:"file"`
	Position int64  `json:"position"`
	Bytes    int64  `json:"bytes"`
	Reason   string `json:"reason"`
	// Tail: damage at the log's end with nothing good after it, cut as
	// Repair cuts it. To is then what is known lost: the damaged batch's
	// own count is unreadable.
	Tail bool `json:"tail,omitempty"`
}

// SalvageReport says what Salvage did, or, from PlanSalvage, would do.
type SalvageReport struct {
	Dir string `json:"dir"`
	// Needed is false when the log has nothing Open refuses.
	Needed bool        `json:"needed"`
	Lost   []LostRange `json:"lost,omitempty"`
	// Kept counts the records in good batches after the first damage:
	// those Repair would have cut and Salvage keeps.
	Kept int `json:"kept_after_damage"`
	// Rewritten are the segments written afresh; their originals, and any
	// segment dropped whole, are moved into DamagedDir.
	Rewritten  []string `json:"rewritten,omitempty"`
	DamagedDir string   `json:"damaged_dir,omitempty"`
	// LostFile is the file the lost ranges are appended to.
	LostFile string `json:"lost_file,omitempty"`
	// Mark is the durable mark written: the log's end.
	Mark    MarkReport `json:"mark"`
	Applied bool       `json:"applied"`
}

// LostOffsets is the number of offsets the report says are lost.
func (r *SalvageReport) LostOffsets() uint64 {
	var n uint64
	for _, l := range r.Lost {
		n += l.To - l.From
	}
	return n
}

// segmentPlan is how Salvage writes one segment: good byte ranges of the
// old file and placeholder batches, in order.
type segmentPlan struct {
	base    uint64
	name    string
	pieces  []piece
	changed bool
	// lastTime is the time of the last good batch or placeholder, for a
	// placeholder appended after them.
	lastTime int64
}

// piece is either bytes [pos, end) of the old segment or, when fill is
// set, placeholders for the offsets [fill.From, fill.To) stamped with time.
type piece struct {
	pos, end int64
	fill     *LostRange
	time     int64
}

// PlanSalvage reads dir and says what Salvage would do, changing nothing.
func PlanSalvage(dir string) (*SalvageReport, error) {
	rep, _, err := planSalvage(dir)
	return rep, err
}

func planSalvage(dir string) (*SalvageReport, []segmentPlan, error) {
	v, err := Verify(dir)
	if err != nil {
		return nil, nil, err
	}
	if !v.Damaged() {
		return &SalvageReport{Dir: dir}, nil, nil // Open fixes a torn tail or an index itself
	}
	bases, err := segmentBases(dir)
	if err != nil {
		return nil, nil, err
	}
	marked, _, _, err := readMark(osFS{}, dir)
	if corrupt := (*ErrCorrupt)(nil); err != nil && !errors.As(err, &corrupt) {
		return nil, nil, err
	}
	// A damaged mark says nothing: the log's own end is written into a new one.
	rep := &SalvageReport{Dir: dir, Needed: true}
	var plan []segmentPlan
	var st scanState
	var next uint64 // the offset the next segment must start at
	for i, base := range bases {
		if i > 0 {
			prev := &plan[i-1]
			switch {
			case base < next:
				return nil, nil, fmt.Errorf("persistence: %s starts at offset %d, inside %s, which reaches %d: salvage cannot keep both; felix log repair without --salvage cuts the log there", segmentName(base, logExt), base, prev.name, next)
			case base > next:
				lost := &LostRange{From: next, To: base, File: prev.name, Position: -1,
					Reason: fmt.Sprintf("offsets do not continue: %s ends at offset %d, %s starts at %d", prev.name, next, segmentName(base, logExt), base)}
				rep.Lost = append(rep.Lost, *lost)
				prev.pieces = append(prev.pieces, piece{fill: lost, time: prev.lastTime})
				prev.changed = true
			}
		}
		following, hasNext := uint64(0), i+1 < len(bases)
		if hasNext {
			following = bases[i+1]
		}
		sp, end, err := planSegment(dir, base, hasNext, following, &st, rep)
		if err != nil {
			return nil, nil, err
		}
		plan = append(plan, sp)
		next = end
	}
	switch n := len(rep.Lost); {
	case n > 0 && rep.Lost[n-1].Tail:
		rep.Lost[n-1].To = max(rep.Lost[n-1].To, marked.offset)
	case marked.offset > next && len(bases) > 0:
		rep.Lost = append(rep.Lost, LostRange{From: next, To: marked.offset, File: markName, Position: -1, Tail: true,
			Reason: fmt.Sprintf("log ends at offset %d, but offsets below %d were synced", next, marked.offset)})
	}
	rep.Mark = MarkReport{Offset: next}
	for _, sp := range plan {
		if sp.changed {
			rep.Rewritten = append(rep.Rewritten, sp.name)
		}
	}
	rep.LostFile = filepath.Join(dir, LostOffsetsFile)
	return rep, plan, nil
}

// planSegment scans the segment at base from its start, skipping each
// damaged stretch to the next valid batch, and returns its plan and the
// offset after its last record, placeholders included. hasNext says
// whether a later segment follows, at offset following: damage running to
// this segment's end is then filled up to it rather than cut.
func planSegment(dir string, base uint64, hasNext bool, following uint64, st *scanState, rep *SalvageReport) (segmentPlan, uint64, error) {
	s, err := openSegmentFile(osFS{}, dir, base, os.O_RDONLY)
	if err != nil {
		return segmentPlan{}, 0, err
	}
	defer s.log.Close()
	sp := segmentPlan{base: base, name: s.name()}
	refuseEntries := fmt.Errorf("persistence: %s holds raft entries: a placeholder would need an entry index and term only raft can give; move the replica to another member instead (felix cluster move-replica)", s.name())
	pos, off := int64(0), base
	for {
		res, err := scanSegment(s, pos, off, sp.lastTime, s.size, nil, defaultIndexIntervalBytes, st)
		if err != nil {
			return sp, 0, fmt.Errorf("persistence: read %s: %w", s.name(), err)
		}
		if res.size > pos {
			sp.pieces = append(sp.pieces, piece{pos: pos, end: res.size})
			sp.lastTime = res.lastTime
		}
		if len(rep.Lost) > 0 {
			rep.Kept += res.records
		}
		off = res.next
		d := res.defect
		if d == nil {
			return sp, off, nil
		}
		if st.format == formatEntries {
			return sp, 0, refuseEntries
		}
		sp.changed = true
		at, found, err := validBatchAfter(s.log, d.pos+1, s.size)
		if err != nil {
			return sp, 0, fmt.Errorf("persistence: read %s: %w", s.name(), err)
		}
		lost := &LostRange{From: d.offset, File: s.name(), Position: d.pos, Bytes: s.size - d.pos, Reason: d.reason}
		if !found && !hasNext {
			lost.To, lost.Tail = d.offset, true // planSalvage adds what the mark says was synced
			rep.Lost = append(rep.Lost, *lost)
			return sp, off, nil
		}
		if !found {
			if following < d.offset {
				return sp, 0, fmt.Errorf("persistence: %s starts at offset %d, before the damaged batch at byte %d of %s (offset %d): salvage cannot keep both; felix log repair without --salvage cuts the log there", segmentName(following, logExt), following, d.pos, s.name(), d.offset)
			}
			lost.To = following
			rep.Lost = append(rep.Lost, *lost)
			if lost.To > lost.From {
				sp.pieces = append(sp.pieces, piece{fill: lost, time: sp.lastTime})
			}
			return sp, following, nil
		}
		v, _, err := (&chunkReader{f: s.log, size: s.size}).batchAt(at)
		if err != nil {
			return sp, 0, fmt.Errorf("persistence: read %s: %w", s.name(), err)
		}
		if v.entry {
			return sp, 0, refuseEntries
		}
		if v.base < d.offset {
			return sp, 0, fmt.Errorf("persistence: the batch after the damage at byte %d of %s starts at offset %d, before the damaged one's %d: salvage cannot keep both; felix log repair without --salvage cuts the log there", d.pos, s.name(), v.base, d.offset)
		}
		lost.To, lost.Bytes = v.base, at-d.pos
		rep.Lost = append(rep.Lost, *lost)
		if lost.To > lost.From {
			// Between the batches around it in time, as scanSegment checks;
			// at a segment's start the next batch's own time.
			t := sp.lastTime
			if t == 0 {
				t = v.time
			}
			sp.pieces = append(sp.pieces, piece{fill: lost, time: t})
		}
		pos, off = at, v.base
	}
}

// Salvage rewrites the log in dir as PlanSalvage says: each segment it
// changes is written afresh beside the old one (good batches copied,
// placeholders in the damaged stretches), fsynced, and renamed into place
// once the old one is moved into a damaged-<time> folder in dir, never
// deleted. Then the indexes are rebuilt, a durable mark is written at the
// log's end (the old one moved aside), and the lost ranges are appended to
// LostOffsetsFile. No Log may have dir open.
func Salvage(dir string, now time.Time) (*SalvageReport, error) {
	rep, plan, err := planSalvage(dir)
	if err != nil || !rep.Needed {
		return rep, err
	}
	damaged := filepath.Join(dir, damagedPrefix+now.UTC().Format("20060102T150405Z"))
	if err := os.Mkdir(damaged, 0o755); err != nil {
		return nil, fmt.Errorf("persistence: create the folder for the damaged segments: %w", err)
	}
	rep.DamagedDir = damaged
	for i, sp := range plan {
		if !sp.changed {
			continue
		}
		if len(sp.pieces) == 0 && i > 0 {
			// Nothing good in the last segment: the log ends with the one before.
			if err := moveSegment(dir, damaged, sp.base); err != nil {
				return nil, err
			}
			rep.Rewritten = removeName(rep.Rewritten, sp.name)
			continue
		}
		if err := rewriteSegment(dir, damaged, sp); err != nil {
			return nil, err
		}
		if err := rebuildIndexes(dir, sp.base); err != nil {
			return nil, err
		}
	}
	if err := replaceMark(dir, damaged, markPoint{offset: rep.Mark.Offset}); err != nil {
		return nil, err
	}
	if err := appendLost(dir, now, rep.Lost); err != nil {
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

func removeName(names []string, name string) []string {
	out := names[:0]
	for _, n := range names {
		if n != name {
			out = append(out, n)
		}
	}
	return out
}

// rewriteSegment writes sp's pieces to a new file, fsyncs it, moves the
// old segment into damaged and puts the new one in its place, so that the
// name never holds a partial file.
func rewriteSegment(dir, damaged string, sp segmentPlan) error {
	path := filepath.Join(dir, sp.name)
	tmp := path + ".salvage"
	src, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("persistence: open %s: %w", sp.name, err)
	}
	defer src.Close()
	dst, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("persistence: create %s: %w", tmp, err)
	}
	err = writePieces(dst, src, sp.pieces)
	if err == nil {
		err = dst.Sync()
	}
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("persistence: write the salvaged %s: %w", sp.name, err)
	}
	if err := moveSegment(dir, damaged, sp.base); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("persistence: rename %s: %w", tmp, err)
	}
	return nil
}

func writePieces(dst io.Writer, src io.ReaderAt, pieces []piece) error {
	for _, p := range pieces {
		if p.fill == nil {
			if _, err := io.Copy(dst, io.NewSectionReader(src, p.pos, p.end-p.pos)); err != nil {
				return err
			}
			continue
		}
		for from := p.fill.From; from < p.fill.To; {
			n := min(p.fill.To-from, maxFillRecords)
			if _, err := dst.Write(placeholderBatch(from, int(n), p.time)); err != nil {
				return err
			}
			from += n
		}
	}
	return nil
}

// placeholderBatch is a V1A batch of n empty records from base, each with
// the header LostHeader.
func placeholderBatch(base uint64, n int, t int64) []byte {
	attrs := EncodeAttrs(nil, []Header{{Key: LostHeader, Value: []byte(LostHeaderValue)}})
	records := make([][]byte, n)
	attrList := make([][]byte, n)
	for i := range records {
		records[i], attrList[i] = []byte{}, attrs
	}
	return appendBatch(nil, base, t, joinRecords(records, attrList), nil, true)
}

// lostEntry is one line of LostOffsetsFile.
type lostEntry struct {
	Time string      `json:"time"`
	Lost []LostRange `json:"lost"`
}

// appendLost appends one line for this salvage to LostOffsetsFile and
// fsyncs it.
func appendLost(dir string, now time.Time, lost []LostRange) error {
	line, err := json.Marshal(lostEntry{Time: now.UTC().Format(time.RFC3339), Lost: lost})
	if err != nil {
		return err
	}
	path := filepath.Join(dir, LostOffsetsFile)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("persistence: open %s: %w", path, err)
	}
	_, err = f.Write(append(line, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("persistence: record the lost offsets in %s: %w", path, err)
	}
	return nil
}
