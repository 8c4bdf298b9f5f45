package replication

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"

	"go.etcd.io/raft/v3/raftpb"
)

// raft.state holds what raft must find again after a restart besides its
// log: the HardState (term, vote, commit) and the ConfState (the voters).
//
//	magic     "FXRS"
//	version   u8   stateVersion1
//	checksum  u32  CRC-32C (Castagnoli) of the bytes after it
//	hsLength  u32  length of the HardState
//	HardState      protobuf, as raftpb marshals it
//	ConfState      protobuf, the rest of the file
//
// It is replaced whole: written to raft.state.tmp, fsynced, renamed over
// raft.state, and the directory fsynced. A crash leaves either the old file
// or the new one, never a mix, so a vote once written is never forgotten
// (forgetting it would let this replica vote twice in one term). The
// checksum catches what the rename cannot: damage at rest.
const (
	stateName     = "raft.state"
	stateTmpName  = "raft.state.tmp"
	stateVersion1 = 1
	stateHeadLen  = 4 + 1 + 4 + 4
	maxStateBytes = 1 << 20 // a ConfState lists a few voters: far below it
)

var stateMagic = []byte("FXRS")

// ErrCorruptState is returned by OpenStorage when raft.state exists but is
// not a valid state file. The replica must not start: without its vote it
// could vote twice in one term.
type ErrCorruptState struct {
	Path   string
	Reason string
}

func (e *ErrCorruptState) Error() string {
	return fmt.Sprintf("replication: corrupt %s: %s", e.Path, e.Reason)
}

// readState reads dir's raft.state. A missing file is the state of a replica
// that never wrote one: empty, found false.
func readState(dir string) (hs raftpb.HardState, cs raftpb.ConfState, found bool, err error) {
	path := filepath.Join(dir, stateName)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return hs, cs, false, nil
	}
	if err != nil {
		return hs, cs, false, fmt.Errorf("replication: open %s: %w", path, err)
	}
	defer f.Close()
	// One byte more than the limit tells a file over it from one exactly at it.
	b, err := io.ReadAll(io.LimitReader(f, maxStateBytes+1))
	if err != nil {
		return hs, cs, false, fmt.Errorf("replication: read %s: %w", path, err)
	}
	hs, cs, reason := decodeState(b)
	if reason != "" {
		return hs, cs, false, &ErrCorruptState{Path: path, Reason: reason}
	}
	return hs, cs, true, nil
}

// decodeState parses a state file's bytes; reason is empty when they are
// valid.
func decodeState(b []byte) (hs raftpb.HardState, cs raftpb.ConfState, reason string) {
	switch {
	case len(b) > maxStateBytes:
		return hs, cs, fmt.Sprintf("larger than %d bytes", maxStateBytes)
	case len(b) < stateHeadLen:
		return hs, cs, fmt.Sprintf("%d bytes, shorter than the header", len(b))
	case string(b[:4]) != string(stateMagic):
		return hs, cs, "bad magic"
	case b[4] != stateVersion1:
		return hs, cs, fmt.Sprintf("version %d, want %d", b[4], stateVersion1)
	case crc32.Checksum(b[9:], castagnoli) != binary.BigEndian.Uint32(b[5:]):
		return hs, cs, "checksum mismatch"
	}
	body := b[stateHeadLen:]
	hsLen := binary.BigEndian.Uint32(b[9:])
	if uint64(hsLen) > uint64(len(body)) {
		return hs, cs, fmt.Sprintf("HardState of %d bytes, %d left", hsLen, len(body))
	}
	if err := hs.Unmarshal(body[:hsLen]); err != nil {
		return hs, cs, fmt.Sprintf("HardState: %v", err)
	}
	if err := cs.Unmarshal(body[hsLen:]); err != nil {
		return hs, cs, fmt.Sprintf("ConfState: %v", err)
	}
	return hs, cs, ""
}

func encodeState(hs raftpb.HardState, cs raftpb.ConfState) ([]byte, error) {
	hsBytes, err := hs.Marshal()
	if err != nil {
		return nil, err
	}
	csBytes, err := cs.Marshal()
	if err != nil {
		return nil, err
	}
	b := make([]byte, stateHeadLen, stateHeadLen+len(hsBytes)+len(csBytes))
	copy(b, stateMagic)
	b[4] = stateVersion1
	binary.BigEndian.PutUint32(b[9:], uint32(len(hsBytes)))
	b = append(append(b, hsBytes...), csBytes...)
	binary.BigEndian.PutUint32(b[5:], crc32.Checksum(b[9:], castagnoli))
	return b, nil
}

// writeState replaces dir's raft.state atomically and durably (see the
// format's comment).
func writeState(dir string, hs raftpb.HardState, cs raftpb.ConfState) error {
	b, err := encodeState(hs, cs)
	if err != nil {
		return fmt.Errorf("replication: encode %s: %w", stateName, err)
	}
	tmp := filepath.Join(dir, stateTmpName)
	if err := writeSynced(tmp, b); err != nil {
		return fmt.Errorf("replication: write %s: %w", tmp, err)
	}
	path := filepath.Join(dir, stateName)
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("replication: rename %s: %w", path, err)
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("replication: fsync %s: %w", dir, err)
	}
	return nil
}

func writeSynced(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)
