package persistence

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// CopyReport says what CopyLog copied: the offsets [Start, End) in
// Segments segment files of Bytes bytes.
type CopyReport struct {
	Start    uint64 `json:"start_offset"`
	End      uint64 `json:"end_offset"`
	Records  int    `json:"records"`
	Segments int    `json:"segments"`
	Bytes    int64  `json:"bytes"`
}

// ErrCopyTarget is CopyLog's refusal of a destination that already holds
// files: a copy never mixes with another log.
var ErrCopyTarget = errors.New("persistence: the copy's destination is not empty")

// CopyLog copies the log in src, which no Log may have open, into the new
// or empty directory dst: a consistent copy ending at the last complete
// batch, the offset Open would continue at. The segment files are copied
// (the indexes are derived: Open rebuilds them), each fsynced, with the
// horizon of the log's last compaction (CompactedBelow) and a durable
// mark at the copy's end, and the copy is then verified as Verify
// reads a log, so a copy that reports no error is one Open accepts in full.
//
// It refuses a log with damage Open refuses (felix log repair first) and
// copies a torn unsynced tail as Open would leave it: cut. Backup and
// restore are both this copy, one way and back.
func CopyLog(src, dst string) (*CopyReport, error) {
	v, err := Verify(src)
	if err != nil {
		return nil, err
	}
	if v.Damaged() {
		return nil, fmt.Errorf("persistence: %s is damaged (%s): felix log verify says where and felix log repair repairs it", src, v.AllProblems()[0])
	}
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return nil, fmt.Errorf("persistence: create %s: %w", dst, err)
	}
	if entries, err := os.ReadDir(dst); err != nil {
		return nil, fmt.Errorf("persistence: read %s: %w", dst, err)
	} else if len(entries) > 0 {
		return nil, fmt.Errorf("%w: %s holds %s", ErrCopyTarget, dst, entries[0].Name())
	}
	rep := &CopyReport{}
	for i, seg := range v.Segments {
		size := seg.Bytes
		for _, p := range seg.Problems {
			if p.Kind == ProblemTornTail {
				size = p.Position
			}
		}
		if size == 0 && i > 0 {
			continue // Open drops an empty segment after a torn tail too
		}
		if err := copyFile(filepath.Join(src, seg.Name), filepath.Join(dst, seg.Name), size); err != nil {
			return nil, err
		}
		if err := rebuildIndexes(dst, seg.First); err != nil {
			return nil, err
		}
		if i == 0 {
			rep.Start = seg.First
		}
		rep.End = seg.Next
		rep.Records += seg.Records
		rep.Segments++
		rep.Bytes += size
	}
	// The horizon of the last compaction goes with the segments, whose
	// gaps it explains: without it the copy's floor would be its start.
	if h, err := ReadCompactedBelow(src); err != nil {
		return nil, err
	} else if h > 0 {
		if err := SetCompactedBelow(dst, h); err != nil {
			return nil, err
		}
	}
	m, err := createMark(osFS{}, dst, markPoint{offset: rep.End, index: markIndex(v)})
	if err != nil {
		return nil, err
	}
	if err := m.close(); err != nil {
		return nil, err
	}
	if err := (osFS{}).SyncDir(dst); err != nil {
		return nil, fmt.Errorf("persistence: fsync %s: %w", dst, err)
	}
	check, err := Verify(dst)
	if err != nil {
		return nil, err
	}
	if probs := check.AllProblems(); len(probs) > 0 || len(check.Segments) != rep.Segments {
		return nil, fmt.Errorf("persistence: the copy in %s does not read back as %s: %v", dst, src, probs)
	}
	return rep, nil
}

// markIndex is the last raft entry's index in a log Verify read whole, 0
// for a log of plain batches: what a mark at its end names.
func markIndex(v *VerifyReport) uint64 {
	if v.last.hasLast {
		return v.last.last.Index
	}
	return 0
}

// copyFile copies the first n bytes of src to the new file dst and fsyncs
// it.
func copyFile(src, dst string, n int64) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("persistence: open %s: %w", src, err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("persistence: create %s: %w", dst, err)
	}
	_, err = io.Copy(out, io.NewSectionReader(in, 0, n))
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("persistence: copy %s: %w", src, err)
	}
	return nil
}
