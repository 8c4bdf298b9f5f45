package replication

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/getfelix/felix-go/persistence"
)

// A replica behind its leader's compaction point catches up from the
// leader's segments: the leader's snapshot names its segment files
// (EncodeSnapshotFiles), the follower copies each file's complete batches
// into a staged directory beside its own, checks the copy by opening it
// as a log cut at the snapshot's entry, writes the snapshot's metadata
// there last (WriteStagedMeta), and stops. When its replica starts again,
// InstallStaged swaps the staged directory in, with a raft.state that
// keeps the follower's term and vote and commits the snapshot's index.
// Both steps are safe to repeat after a crash at any point.

// StagedSuffix and replacedSuffix name the directories beside a replica's
// directory during a snapshot: the copy being made, and the old log while
// the copy takes its place.
const (
	StagedSuffix   = ".snapshot"
	replacedSuffix = ".replaced"
	stagedMetaName = "snapshot.meta"
)

// maxSnapshotFiles bounds the segment list a snapshot carries (and a
// follower accepts): at the default 64 MiB segments, 4 TiB of log.
const maxSnapshotFiles = 1 << 16

// EncodeSnapshotFiles encodes a snapshot's segment list: a count, then each
// file's name length, name and size, then, for a log compaction rewrote,
// the horizon it was compacted below (u64; absent when 0, so a log never
// compacted encodes as before). The horizon travels with the segments: a
// follower that installs them takes it as its log's own (the floor below
// which a cache's watch may not resume), since the copied segments have
// the gaps compaction left.
func EncodeSnapshotFiles(files []persistence.SegmentFile, compactedBelow uint64) ([]byte, error) {
	if len(files) > maxSnapshotFiles {
		return nil, fmt.Errorf("replication: the log has %d segments, more than a snapshot carries (%d)", len(files), maxSnapshotFiles)
	}
	b := binary.BigEndian.AppendUint32(nil, uint32(len(files)))
	for _, f := range files {
		b = append(b, byte(len(f.Name)))
		b = append(b, f.Name...)
		b = binary.BigEndian.AppendUint64(b, uint64(f.Size))
	}
	if compactedBelow > 0 {
		b = binary.BigEndian.AppendUint64(b, compactedBelow)
	}
	return b, nil
}

// ErrBadSnapshot is returned for a snapshot whose segment list does not
// decode or names something that is not a segment file.
var ErrBadSnapshot = errors.New("replication: malformed snapshot")

// DecodeSnapshotFiles decodes EncodeSnapshotFiles' output, checking that
// every name is a segment file's, in increasing order, with a size that
// fits a file, and that a horizon, if any, is not 0.
func DecodeSnapshotFiles(b []byte) (files []persistence.SegmentFile, compactedBelow uint64, err error) {
	files, rest, err := decodeSnapshotFiles(b)
	switch {
	case err != nil:
		return nil, 0, err
	case len(rest) == 8 && binary.BigEndian.Uint64(rest) > 0:
		return files, binary.BigEndian.Uint64(rest), nil
	case len(rest) != 0:
		return nil, 0, fmt.Errorf("%w: %d bytes after the files", ErrBadSnapshot, len(rest))
	}
	return files, 0, nil
}

// decodeSnapshotFiles decodes the segment list, returning what follows.
func decodeSnapshotFiles(b []byte) ([]persistence.SegmentFile, []byte, error) {
	if len(b) < 4 {
		return nil, nil, fmt.Errorf("%w: %d bytes", ErrBadSnapshot, len(b))
	}
	n := binary.BigEndian.Uint32(b)
	b = b[4:]
	// Each file takes at least 9 bytes: a hostile count allocates nothing.
	if n > maxSnapshotFiles || uint64(n)*9 > uint64(len(b)) {
		return nil, nil, fmt.Errorf("%w: %d files in %d bytes", ErrBadSnapshot, n, len(b))
	}
	files := make([]persistence.SegmentFile, 0, n)
	for range n {
		if len(b) < 1 || len(b) < 1+int(b[0])+8 {
			return nil, nil, fmt.Errorf("%w: truncated file entry", ErrBadSnapshot)
		}
		name := string(b[1 : 1+int(b[0])])
		size := binary.BigEndian.Uint64(b[1+int(b[0]):])
		b = b[1+int(b[0])+8:]
		if !persistence.IsSegmentFileName(name) || size > 1<<62 {
			return nil, nil, fmt.Errorf("%w: file %q of %d bytes", ErrBadSnapshot, name, size)
		}
		if len(files) > 0 && name <= files[len(files)-1].Name {
			return nil, nil, fmt.Errorf("%w: file %q out of order", ErrBadSnapshot, name)
		}
		files = append(files, persistence.SegmentFile{Name: name, Size: int64(size)})
	}
	return files, b, nil
}

// WriteStagedMeta marks the staged copy in staged complete: the snapshot's
// metadata, checksummed, written and synced last.
func WriteStagedMeta(staged string, meta raftpb.SnapshotMetadata) error {
	body, err := meta.Marshal()
	if err != nil {
		return fmt.Errorf("replication: encode snapshot metadata: %w", err)
	}
	b := binary.BigEndian.AppendUint32(nil, crc32.Checksum(body, castagnoli))
	if err := writeSynced(filepath.Join(staged, stagedMetaName), append(b, body...)); err != nil {
		return err
	}
	return syncDir(staged)
}

// readStagedMeta reads a staged copy's metadata; found is false when the
// copy is not complete.
func readStagedMeta(staged string) (meta raftpb.SnapshotMetadata, found bool, err error) {
	b, err := os.ReadFile(filepath.Join(staged, stagedMetaName))
	switch {
	case errors.Is(err, os.ErrNotExist):
		return meta, false, nil
	case err != nil:
		return meta, false, fmt.Errorf("replication: read %s: %w", stagedMetaName, err)
	case len(b) < 4 || crc32.Checksum(b[4:], castagnoli) != binary.BigEndian.Uint32(b):
		return meta, false, nil // torn: written last, so the copy is not complete
	}
	if err := meta.Unmarshal(b[4:]); err != nil {
		return meta, false, nil
	}
	return meta, true, nil
}

// InstallStaged finishes a snapshot in dir, the replica's directory, if one
// was staged beside it, and cleans up after an interrupted one. With a
// complete copy it writes the copy's raft.state (the term and vote of
// dir's, or of the replaced log's after a crash, never lowered, and the
// snapshot's index as the commit index and its ConfState), moves dir aside,
// moves the copy in, and removes the old log. An incomplete copy is
// removed. installed reports a snapshot put in place. Call it before the
// log in dir opens.
func InstallStaged(dir string) (installed bool, err error) {
	staged, replaced := dir+StagedSuffix, dir+replacedSuffix
	meta, complete, err := readStagedMeta(staged)
	if err != nil {
		return false, err
	}
	if !complete {
		return false, errors.Join(os.RemoveAll(staged), os.RemoveAll(replaced))
	}
	source := dir
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		source = replaced // a crash after dir was moved aside
	}
	hs, _, _, err := readState(source)
	if err != nil {
		return false, err
	}
	if meta.Term > hs.Term {
		hs.Term, hs.Vote = meta.Term, 0
	}
	hs.Commit = meta.Index
	if err := writeState(staged, hs, meta.ConfState); err != nil {
		return false, err
	}
	if err := copyFileIfPresent(filepath.Join(source, replicaIDName), filepath.Join(staged, replicaIDName)); err != nil {
		return false, err
	}
	if source == dir {
		if err := os.Rename(dir, replaced); err != nil {
			return false, fmt.Errorf("replication: move the old log aside: %w", err)
		}
	}
	if err := os.Rename(staged, dir); err != nil {
		return false, fmt.Errorf("replication: move the snapshot in: %w", err)
	}
	if err := syncDir(filepath.Dir(dir)); err != nil {
		return false, err
	}
	return true, errors.Join(os.Remove(filepath.Join(dir, stagedMetaName)), os.RemoveAll(replaced))
}

// replicaIDName is the broker's file naming the raft id a replica's data
// belongs to; a snapshot keeps it.
const replicaIDName = "replica.id"

func copyFileIfPresent(from, to string) error {
	b, err := os.ReadFile(from)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return writeSynced(to, b)
}
