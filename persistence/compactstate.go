package persistence

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
)

// The compaction file is compaction's journal and its record: the offset
// below which the log was last compacted (CompactedBelow), and, between a
// compaction's commit point and the end of its swap, the bases of the
// segments whose <base>.log.compact replaces <base>.log.
//
//	magic "FXCP", horizon u64, pending u32, pending × base u64, crc u32
//
// It is written whole to compaction.tmp, fsynced and renamed over the old
// one, then the directory is fsynced: a reader sees the old file or the
// new one, never a torn one, so a bad checksum is damage (ErrCorrupt).
const (
	compactStateName = "compaction"
	compactTmpName   = "compaction.tmp"
	compactSuffix    = ".compact" // <base>.log.compact: a compacted segment not yet swapped in
)

var compactMagic = []byte("FXCP")

// maxPendingSegments bounds the bases one compaction file names, so a
// damaged count cannot ask for gigabytes: far more segments than a log of
// maxSegmentBytes segments on one disk holds below any horizon.
const maxPendingSegments = 1 << 20

type compactState struct {
	horizon uint64
	pending []uint64
}

func encodeCompactState(st compactState) []byte {
	b := append([]byte(nil), compactMagic...)
	b = binary.BigEndian.AppendUint64(b, st.horizon)
	b = binary.BigEndian.AppendUint32(b, uint32(len(st.pending)))
	for _, base := range st.pending {
		b = binary.BigEndian.AppendUint64(b, base)
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// errBadCompactState is a compaction file that does not decode.
var errBadCompactState = errors.New("bad compaction file")

func decodeCompactState(b []byte) (compactState, error) {
	const fixed = 4 + 8 + 4
	if len(b) < fixed+4 || string(b[:4]) != string(compactMagic) {
		return compactState{}, errBadCompactState
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return compactState{}, errBadCompactState
	}
	st := compactState{horizon: binary.BigEndian.Uint64(body[4:])}
	n := binary.BigEndian.Uint32(body[12:])
	if n > maxPendingSegments || uint64(len(body)-fixed) != 8*uint64(n) {
		return compactState{}, errBadCompactState
	}
	for i := range n {
		st.pending = append(st.pending, binary.BigEndian.Uint64(body[fixed+8*int(i):]))
	}
	return st, nil
}

// readCompactState reads dir's compaction file; a log never compacted has
// none, which reads as the zero state.
func readCompactState(fsys FS, dir string) (compactState, error) {
	b, err := readWholeFile(fsys, filepath.Join(dir, compactStateName))
	if errors.Is(err, os.ErrNotExist) {
		return compactState{}, nil
	}
	if err != nil {
		return compactState{}, fmt.Errorf("persistence: read %s: %w", compactStateName, err)
	}
	st, err := decodeCompactState(b)
	if err != nil {
		return compactState{}, &ErrCorrupt{Segment: compactStateName, Reason: err.Error()}
	}
	return st, nil
}

// writeCompactState replaces dir's compaction file with st, durably.
func writeCompactState(fsys FS, dir string, st compactState) error {
	tmp := filepath.Join(dir, compactTmpName)
	f, err := fsys.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return &ErrIO{Op: "create", Path: tmp, Err: err}
	}
	_, err = f.WriteAt(encodeCompactState(st), 0)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return &ErrIO{Op: "write", Path: tmp, Err: err}
	}
	if err := fsys.Rename(tmp, filepath.Join(dir, compactStateName)); err != nil {
		return &ErrIO{Op: "rename", Path: tmp, Err: err}
	}
	if err := fsys.SyncDir(dir); err != nil {
		return &ErrIO{Op: "fsync", Path: dir, Err: err}
	}
	return nil
}

// swapCompacted puts each pending base's <base>.log.compact in place of
// <base>.log: its stale indexes removed first (they describe the old
// file), the old log renamed to .deleted (a reader holding it keeps it;
// the cache of descriptors follows the rename, so nothing reopens the new
// file by the old one's name), then the compacted one renamed in. A base
// without a .compact file was swapped already. It is idempotent, so Open
// runs it again after a crash for as long as the journal names the bases.
func swapCompacted(fsys FS, dir string, pending []uint64) error {
	for _, base := range pending {
		for _, ext := range []string{indexExt, timeIndexExt} {
			if err := fsys.Remove(filepath.Join(dir, segmentName(base, ext))); err != nil && !errors.Is(err, os.ErrNotExist) {
				return &ErrIO{Op: "remove", Path: segmentName(base, ext), Err: err}
			}
		}
		logPath := filepath.Join(dir, segmentName(base, logExt))
		if !exists(fsys, logPath+compactSuffix) {
			continue
		}
		if err := fsys.Rename(logPath, logPath+deletedSuffix); err != nil && !errors.Is(err, os.ErrNotExist) {
			return &ErrIO{Op: "rename", Path: logPath, Err: err}
		}
		if err := fsys.Rename(logPath+compactSuffix, logPath); err != nil {
			return &ErrIO{Op: "rename", Path: logPath + compactSuffix, Err: err}
		}
	}
	if err := fsys.SyncDir(dir); err != nil {
		return &ErrIO{Op: "fsync", Path: dir, Err: err}
	}
	return nil
}

func exists(fsys FS, path string) bool {
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return false
	}
	_ = f.Close()
	return true
}

// recoverCompaction runs before Open lists the segments: it finishes a
// swap the journal names, or removes the compacted files of a compaction
// that never reached its commit point, and returns the horizon.
func recoverCompaction(fsys FS, dir string) (uint64, error) {
	st, err := readCompactState(fsys, dir)
	if err != nil {
		return 0, err
	}
	if len(st.pending) > 0 {
		if err := swapCompacted(fsys, dir, st.pending); err != nil {
			return 0, err
		}
		st.pending = nil
		if err := writeCompactState(fsys, dir, st); err != nil {
			return 0, err
		}
	}
	entries, err := fsys.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("persistence: read %s: %w", dir, err)
	}
	for _, e := range entries {
		if name := e.Name(); name == compactTmpName || filepath.Ext(name) == compactSuffix {
			if err := fsys.Remove(filepath.Join(dir, name)); err != nil {
				return 0, fmt.Errorf("persistence: remove %s: %w", name, err)
			}
		}
	}
	return st.horizon, nil
}

// SetCompactedBelow records in dir, the directory of a log no Log has
// open, that the log was compacted below horizon: a copy of another
// log's segments (a replica's snapshot) takes the horizon of the log it
// was copied from, whose gaps it holds. Open reads it as CompactedBelow.
func SetCompactedBelow(dir string, horizon uint64) error {
	return writeCompactState(osFS{}, dir, compactState{horizon: horizon})
}

// ReadCompactedBelow reads the horizon the log in dir was last compacted
// below (0: never) from its compaction file, whether or not a Log has it
// open: a Log writes the file with a new horizon before a compaction's
// swap starts, and swaps no file until it has, so one who reads the same
// horizon before and after reading a segment file read that file as it
// was under that horizon.
func ReadCompactedBelow(dir string) (uint64, error) {
	st, err := readCompactState(osFS{}, dir)
	return st.horizon, err
}
