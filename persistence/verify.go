package persistence

import (
	"errors"
	"fmt"
	"os"
	"slices"
)

// Verify and Repair are the offline tools for a log Open refuses: they read
// a log directory no Log has open. Verify only reads (it never runs the
// sweep Open does, so it may look at a directory a broker is using; what it
// then says about the unsynced end may be out of date). Repair writes, and
// its caller must make sure no broker has the directory (cmd/felix checks
// the data directory's lock).

// Problem kinds. ProblemTornTail and ProblemIndex are what Open fixes by
// itself (an unsynced torn tail is truncated, a bad index rebuilt); the
// others make Open refuse the log.
const (
	ProblemBatch    = "batch"     // a damaged batch that is not a torn tail
	ProblemTornTail = "torn-tail" // damage at the unsynced end: Open truncates it
	ProblemOffsets  = "offsets"   // the segments' offsets do not continue
	ProblemMark     = "mark"      // durable.mark is damaged or claims more than the log holds
	ProblemIndex    = "index"     // a sparse index disagrees with the log: Open rebuilds it
)

// Problem is one thing Verify found wrong, at a byte position of a file and
// the offset the batch there should have started at.
type Problem struct {
	Kind     string `json:"kind"`
	File     string `json:"file"`
	Position int64  `json:"position"`
	Offset   uint64 `json:"offset"`
	Reason   string `json:"reason"`
}

func (p Problem) String() string {
	return fmt.Sprintf("%s: %s at byte %d (offset %d): %s", p.Kind, p.File, p.Position, p.Offset, p.Reason)
}

// SegmentReport is what Verify read in one segment. Batches and Records
// count the good batches, also those after damage (found by looking for the
// next valid batch). Next is the offset after the last good batch.
type SegmentReport struct {
	Name     string    `json:"name"`
	Bytes    int64     `json:"bytes"`
	Batches  int       `json:"batches"`
	Records  int       `json:"records"`
	First    uint64    `json:"first_offset"`
	Next     uint64    `json:"next_offset"`
	Problems []Problem `json:"problems,omitempty"`
}

// VerifyReport is a log directory's check.
type VerifyReport struct {
	Dir      string          `json:"dir"`
	Segments []SegmentReport `json:"segments"`
	// Mark is the durable mark's synced offset and entry index; nil when
	// the log has no readable mark.
	Mark *MarkReport `json:"mark,omitempty"`
	// Problems are those of the log as a whole: the mark, continuity.
	Problems []Problem `json:"problems,omitempty"`

	cut *cutPoint // where Repair cuts; nil when nothing needs cutting
	// end is the offset after the last good batch anywhere, what the
	// damaged part reached at least.
	end uint64
	// last is the state after the last good batch: the format and last
	// raft entry of an undamaged log.
	last scanState
}

// MarkReport is durable.mark's content.
type MarkReport struct {
	Offset uint64 `json:"offset"`
	Index  uint64 `json:"index,omitempty"`
}

// cutPoint is the first damage Open refuses: the log is good before it.
type cutPoint struct {
	seg    int   // index in Segments
	pos    int64 // bytes of the segment to keep
	offset uint64
	st     scanState // format and last entry of what is kept
}

// Damaged reports whether the log has a problem Open refuses.
func (r *VerifyReport) Damaged() bool {
	for _, p := range r.AllProblems() {
		if p.Kind != ProblemTornTail && p.Kind != ProblemIndex {
			return true
		}
	}
	return false
}

// AllProblems lists the log's problems and every segment's, in file order.
func (r *VerifyReport) AllProblems() []Problem {
	var all []Problem
	for _, s := range r.Segments {
		all = append(all, s.Problems...)
	}
	return append(all, r.Problems...)
}

// Verify checks the log in dir without changing it: every batch's framing
// and CRC, the offsets' continuity within and across segments, the sparse
// indexes against the batches they point at, and durable.mark against the
// log's end. The error is an I/O failure; what is damaged is in the report.
func Verify(dir string) (*VerifyReport, error) {
	fsys := osFS{}
	bases, err := segmentBases(dir)
	if err != nil {
		return nil, err
	}
	rep := &VerifyReport{Dir: dir}
	marked, _, found, err := readMark(fsys, dir)
	var corrupt *ErrCorrupt
	switch {
	case errors.As(err, &corrupt):
		rep.Problems = append(rep.Problems, Problem{Kind: ProblemMark, File: markName, Reason: corrupt.Reason})
	case err != nil:
		return nil, err
	case found:
		rep.Mark = &MarkReport{Offset: marked.offset, Index: marked.index}
	}
	var st scanState
	for i, base := range bases {
		if i > 0 && rep.cut == nil {
			if prev := rep.Segments[i-1]; prev.Next != base {
				rep.Problems = append(rep.Problems, Problem{Kind: ProblemOffsets, File: segmentName(base, logExt), Offset: prev.Next,
					Reason: fmt.Sprintf("offsets do not continue: %s ends at offset %d", prev.Name, prev.Next)})
				rep.cut = &cutPoint{seg: i - 1, pos: prev.Bytes, offset: prev.Next, st: st}
			}
		}
		sr, err := verifySegment(fsys, dir, base, i == len(bases)-1, marked, &st, rep)
		if err != nil {
			return nil, err
		}
		rep.Segments = append(rep.Segments, sr)
	}
	rep.checkMark(marked, st)
	rep.last = st
	return rep, nil
}

// checkMark compares the mark with the end of the good log.
func (r *VerifyReport) checkMark(marked markPoint, st scanState) {
	if len(r.Segments) == 0 {
		if marked != (markPoint{}) {
			r.Problems = append(r.Problems, Problem{Kind: ProblemMark, File: markName,
				Reason: fmt.Sprintf("offsets below %d were synced but the log has no segments", marked.offset)})
		}
		return
	}
	if r.cut != nil {
		return // the damage is reported; the mark is rewritten by Repair
	}
	last := r.Segments[len(r.Segments)-1]
	switch {
	case last.Next < marked.offset:
		r.Problems = append(r.Problems, Problem{Kind: ProblemMark, File: markName, Offset: last.Next,
			Reason: fmt.Sprintf("log ends at offset %d, but offsets below %d were synced", last.Next, marked.offset)})
	case marked.index > 0 && (!st.hasLast || st.last.Index < marked.index):
		r.Problems = append(r.Problems, Problem{Kind: ProblemMark, File: markName, Offset: last.Next,
			Reason: fmt.Sprintf("log ends at entry %d, but entries up to %d were synced", st.last.Index, marked.index)})
	default:
		return
	}
	r.cut = &cutPoint{seg: len(r.Segments) - 1, pos: last.Bytes, offset: last.Next, st: st}
}

// segmentBases lists dir's segments in offset order, touching nothing.
func segmentBases(dir string) ([]uint64, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("persistence: read %s: %w", dir, err)
	}
	var bases []uint64
	for _, e := range entries {
		if base, ext, ok := parseSegmentName(e.Name()); ok && ext == logExt && e.Type().IsRegular() {
			bases = append(bases, base)
		}
	}
	slices.Sort(bases)
	return bases, nil
}

// verifySegment scans one segment from its start. At damage it records a
// problem, and the first damage Open refuses becomes rep.cut; then it looks
// for the next valid batch and goes on from there, so that the report
// shows what lies beyond.
func verifySegment(fsys FS, dir string, base uint64, lastSeg bool, marked markPoint, st *scanState, rep *VerifyReport) (SegmentReport, error) {
	s, err := openSegmentFile(fsys, dir, base, os.O_RDONLY)
	if err != nil {
		return SegmentReport{}, err
	}
	defer s.log.Close()
	sr := SegmentReport{Name: s.name(), Bytes: s.size, First: base, Next: base}
	pos, off, lastTime := int64(0), base, int64(0)
	for {
		res, err := scanSegment(s, pos, off, lastTime, s.size, nil, defaultIndexIntervalBytes, st)
		if err != nil {
			return sr, fmt.Errorf("persistence: read %s: %w", s.name(), err)
		}
		sr.Batches, sr.Records = sr.Batches+res.batches, sr.Records+res.records
		if res.batches > 0 {
			sr.Next = res.next
			rep.end = max(rep.end, res.next)
		}
		d := res.defect
		if d == nil {
			break
		}
		at, found, err := validBatchAfter(s.log, d.pos+1, s.size)
		if err != nil {
			return sr, fmt.Errorf("persistence: read %s: %w", s.name(), err)
		}
		p := Problem{Kind: ProblemBatch, File: s.name(), Position: d.pos, Offset: d.offset, Reason: d.reason + marked.covers(d)}
		if d.torn && marked.covers(d) == "" && lastSeg && !found && rep.cut == nil {
			p.Kind = ProblemTornTail
		} else if rep.cut == nil {
			rep.cut = &cutPoint{seg: len(rep.Segments), pos: d.pos, offset: d.offset, st: *st}
		}
		if !found {
			sr.Problems = append(sr.Problems, p)
			break
		}
		v, _, err := (&chunkReader{f: s.log, size: s.size}).batchAt(at)
		if err != nil {
			return sr, fmt.Errorf("persistence: read %s: %w", s.name(), err)
		}
		p.Reason += fmt.Sprintf("; the next valid batch is at byte %d, offset %d", at, v.base)
		sr.Problems = append(sr.Problems, p)
		pos, off, lastTime = at, v.base, v.time
	}
	sr.Problems = append(sr.Problems, verifyIndexes(fsys, s)...)
	return sr, nil
}

// verifyIndexes checks that every entry of s's index files is whole and
// names a batch that starts where it says, at its offset and time. The
// interval the writer used is not known here, so only what the entries
// claim is checked, not whether every due entry is there.
func verifyIndexes(fsys FS, s *segment) []Problem {
	offsets, oerr := readWholeFile(fsys, s.path(indexExt))
	times, terr := readWholeFile(fsys, s.path(timeIndexExt))
	name := segmentName(s.base, indexExt)
	if err := errors.Join(oerr, terr); err != nil {
		return []Problem{{Kind: ProblemIndex, File: name, Reason: fmt.Sprintf("unreadable (%v); Open rebuilds it", err)}}
	}
	entries, err := parseIndexes(offsets, times, s.size)
	if err != nil {
		return []Problem{{Kind: ProblemIndex, File: name, Reason: "damaged or out of order; Open rebuilds it"}}
	}
	r := chunkReader{f: s.log, size: s.size}
	for _, e := range entries {
		off := s.base + uint64(e.rel)
		v, _, err := r.batchAt(int64(e.pos))
		if err != nil || v.base != off || v.time != e.time {
			return []Problem{{Kind: ProblemIndex, File: name, Position: int64(e.pos), Offset: off,
				Reason: "an entry names no batch at its offset and time; Open rebuilds it"}}
		}
	}
	return nil
}
