package persistence

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
)

// durable.mark records the log's synced point: every record below its
// offset, and every raft entry up to its index, was fsynced before the mark
// was. Recovery uses it to tell a torn tail (never synced, safe to truncate)
// from damage to synced data (ErrCorrupt).
//
// The index is there because a raft entry without records (a new leader's
// empty entry, a conf change) takes no offset: an offset alone cannot say
// whether such an entry at the end of the log was synced, and a conf change a
// follower acknowledged must not be truncated as a torn tail.
//
// The file has two slots, 512 bytes apart so they never share a sector:
//
//	magic "FXMK", sequence u64, synced offset u64, crc u32
//	magic "FXME", sequence u64, synced offset u64, entry index u64, crc u32
//
// The second form is written only while the log holds raft entries (the
// index is not 0), so a log of plain batches keeps the mark it always had.
// Writes alternate between the slots and readers take the valid slot with
// the higher sequence, so a torn write destroys only the slot being written
// and leaves the previous, lower mark, which is safe: records and entries
// between the two marks had not been reported durable yet.
const (
	markName          = "durable.mark"
	markTmpName       = "durable.mark.tmp"
	markSlotSize      = 512
	markEntryLen      = 4 + 8 + 8 + 4
	markIndexEntryLen = 4 + 8 + 8 + 8 + 4
)

// markPoint is what the mark records: the synced offset, and the index of
// the last synced raft entry (0 for none).
type markPoint struct {
	offset, index uint64
}

var (
	markMagic      = []byte("FXMK")
	markIndexMagic = []byte("FXME")
)

type markFile struct {
	f      File
	path   string
	seq    uint64
	synced markPoint // the value last written
}

// readMark returns the synced point and sequence in dir's durable.mark, or
// found=false if there is none. A mark file with no valid slot is
// ErrCorrupt: it was created whole (createMark), so only damage explains it.
func readMark(fsys FS, dir string) (synced markPoint, seq uint64, found bool, err error) {
	path := filepath.Join(dir, markName)
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return markPoint{}, 0, false, nil
	}
	if err != nil {
		return markPoint{}, 0, false, fmt.Errorf("persistence: open %s: %w", markName, err)
	}
	defer f.Close()
	buf := make([]byte, 2*markSlotSize)
	n, err := f.ReadAt(buf, 0)
	if err != nil && err != io.EOF {
		return markPoint{}, 0, false, fmt.Errorf("persistence: read %s: %w", markName, err)
	}
	buf = buf[:n]
	for slot := range 2 {
		p, s, ok := parseMarkSlot(buf[min(slot*markSlotSize, len(buf)):])
		if ok && (!found || s > seq) {
			synced, seq, found = p, s, true
		}
	}
	if !found {
		return markPoint{}, 0, false, &ErrCorrupt{Segment: markName, Reason: "no valid slot in the durable mark (delete it to recover with the weaker torn-tail rule)"}
	}
	return synced, seq, true, nil
}

// parseMarkSlot reads the slot at the start of b, in either form.
func parseMarkSlot(b []byte) (p markPoint, seq uint64, ok bool) {
	n := markEntryLen
	switch {
	case len(b) >= markEntryLen && string(b[:4]) == string(markMagic):
	case len(b) >= markIndexEntryLen && string(b[:4]) == string(markIndexMagic):
		n = markIndexEntryLen
	default:
		return markPoint{}, 0, false
	}
	if crc32.Checksum(b[:n-4], castagnoli) != binary.BigEndian.Uint32(b[n-4:]) {
		return markPoint{}, 0, false
	}
	p.offset = binary.BigEndian.Uint64(b[12:])
	if n == markIndexEntryLen {
		p.index = binary.BigEndian.Uint64(b[20:])
	}
	return p, binary.BigEndian.Uint64(b[4:]), true
}

// createMark writes a new durable.mark holding synced: to a temporary file,
// fsynced, then renamed into place and the directory fsynced, so that a
// durable.mark that exists always held a whole slot.
func createMark(fsys FS, dir string, synced markPoint) (*markFile, error) {
	tmp := filepath.Join(dir, markTmpName)
	f, err := fsys.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("persistence: create %s: %w", markName, err)
	}
	m := &markFile{f: f, path: filepath.Join(dir, markName)}
	if err := m.write(synced); err != nil {
		f.Close()
		return nil, fmt.Errorf("persistence: write %s: %w", markName, err)
	}
	if err := fsys.Rename(tmp, m.path); err != nil {
		f.Close()
		return nil, fmt.Errorf("persistence: rename %s: %w", markName, err)
	}
	if err := fsys.SyncDir(dir); err != nil {
		f.Close()
		return nil, fmt.Errorf("persistence: fsync %s: %w", dir, err)
	}
	return m, nil
}

// openMark opens an existing durable.mark for writing, continuing its
// sequence.
func openMark(fsys FS, dir string, seq uint64, synced markPoint) (*markFile, error) {
	path := filepath.Join(dir, markName)
	f, err := fsys.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("persistence: open %s: %w", markName, err)
	}
	return &markFile{f: f, path: path, seq: seq, synced: synced}, nil
}

// write records synced in the older slot and fsyncs the file. A value
// already recorded is not written again.
func (m *markFile) write(synced markPoint) error {
	if m.seq > 0 && synced == m.synced {
		return nil
	}
	e := make([]byte, 0, markIndexEntryLen)
	if synced.index == 0 {
		e = append(e, markMagic...)
	} else {
		e = append(e, markIndexMagic...)
	}
	e = binary.BigEndian.AppendUint64(e, m.seq+1)
	e = binary.BigEndian.AppendUint64(e, synced.offset)
	if synced.index != 0 {
		e = binary.BigEndian.AppendUint64(e, synced.index)
	}
	e = binary.BigEndian.AppendUint32(e, crc32.Checksum(e, castagnoli))
	if _, err := m.f.WriteAt(e, int64((m.seq+1)%2)*markSlotSize); err != nil {
		return err
	}
	if err := m.f.Sync(); err != nil {
		return err
	}
	m.seq++
	m.synced = synced
	return nil
}

func (m *markFile) close() error { return m.f.Close() }
