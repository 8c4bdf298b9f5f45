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

// durable.mark records the log's synced offset: every record below it was
// fsynced before the mark was. Recovery uses it to tell a torn tail (never
// synced, safe to truncate) from damage to synced data (ErrCorrupt).
//
// The file has two slots, 512 bytes apart so they never share a sector:
//
//	magic "FXMK", sequence u64, synced offset u64, crc u32
//
// Writes alternate between the slots and readers take the valid slot with
// the higher sequence, so a torn write destroys only the slot being written
// and leaves the previous, lower mark, which is safe: records between the two
// marks had not been reported durable yet.
const (
	markName     = "durable.mark"
	markTmpName  = "durable.mark.tmp"
	markSlotSize = 512
	markEntryLen = 4 + 8 + 8 + 4
)

var markMagic = []byte("FXMK")

type markFile struct {
	f      File
	path   string
	seq    uint64
	synced uint64 // the value last written
}

// readMark returns the synced offset and sequence in dir's durable.mark, or
// found=false if there is none. A mark file with no valid slot is
// ErrCorrupt: it was created whole (createMark), so only damage explains it.
func readMark(fsys FS, dir string) (synced, seq uint64, found bool, err error) {
	path := filepath.Join(dir, markName)
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return 0, 0, false, nil
	}
	if err != nil {
		return 0, 0, false, fmt.Errorf("persistence: open %s: %w", markName, err)
	}
	defer f.Close()
	buf := make([]byte, 2*markSlotSize)
	n, err := f.ReadAt(buf, 0)
	if err != nil && err != io.EOF {
		return 0, 0, false, fmt.Errorf("persistence: read %s: %w", markName, err)
	}
	buf = buf[:n]
	for slot := range 2 {
		at := slot * markSlotSize
		if len(buf) < at+markEntryLen {
			continue
		}
		e := buf[at : at+markEntryLen]
		if string(e[:4]) != string(markMagic) || crc32.Checksum(e[:20], castagnoli) != binary.BigEndian.Uint32(e[20:]) {
			continue
		}
		if s := binary.BigEndian.Uint64(e[4:]); !found || s > seq {
			seq, synced, found = s, binary.BigEndian.Uint64(e[12:]), true
		}
	}
	if !found {
		return 0, 0, false, &ErrCorrupt{Segment: markName, Reason: "no valid slot in the durable mark (delete it to recover with the weaker torn-tail rule)"}
	}
	return synced, seq, true, nil
}

// createMark writes a new durable.mark holding synced: to a temporary file,
// fsynced, then renamed into place and the directory fsynced, so that a
// durable.mark that exists always held a whole slot.
func createMark(fsys FS, dir string, synced uint64) (*markFile, error) {
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
func openMark(fsys FS, dir string, seq, synced uint64) (*markFile, error) {
	path := filepath.Join(dir, markName)
	f, err := fsys.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("persistence: open %s: %w", markName, err)
	}
	return &markFile{f: f, path: path, seq: seq, synced: synced}, nil
}

// write records synced in the older slot and fsyncs the file. A value
// already recorded is not written again.
func (m *markFile) write(synced uint64) error {
	if m.seq > 0 && synced == m.synced {
		return nil
	}
	e := make([]byte, 0, markEntryLen)
	e = append(e, markMagic...)
	e = binary.BigEndian.AppendUint64(e, m.seq+1)
	e = binary.BigEndian.AppendUint64(e, synced)
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
