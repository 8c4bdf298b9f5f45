package replication

import (
	"errors"
	"fmt"

	"go.etcd.io/raft/v3/raftpb"
)

var (
	// ErrLogMismatch is returned when the log and Storage's view of it
	// disagree: a gap in the entries' indexes, an entry read back with
	// another index or term than was appended, or a raft.state committing
	// beyond the log. Each is damage or a bug, and raft must not go on.
	ErrLogMismatch = errors.New("replication: log does not match the raft log")

	// ErrSnapshotUnsupported is returned by Replica.Ready if raft ever had
	// a snapshot to install: Step hands the owner every snapshot the log
	// does not hold (SnapshotNeeded) instead of raft, so it is a bug.
	ErrSnapshotUnsupported = errors.New("replication: raft was handed a snapshot to install")
)

// ErrNotLeader is returned by Replica.Propose on a replica that is not its
// group's leader: only the leader, the shard's owner, appends.
type ErrNotLeader struct {
	Leader uint64 // the leader's replica id, or 0 when none is known
}

func (e *ErrNotLeader) Error() string {
	if e.Leader == 0 {
		return "replication: not the leader, and no leader is known"
	}
	return fmt.Sprintf("replication: not the leader, replica %d is", e.Leader)
}

// SnapshotNeeded is returned by Replica.Step for a leader's snapshot that
// this replica's log does not hold: it is behind the leader's compaction
// point (retention removed the entries it lacks, or it is far behind). The
// owner copies the leader's segments named in Data (DecodeSnapshotFiles),
// up to the entry at Metadata.Index, into a staged directory, and starts
// the replica again on them (InstallStaged). Until then it ignores further
// snapshots; the leader keeps offering them.
type SnapshotNeeded struct {
	From     uint64 // the leader's replica id
	Metadata raftpb.SnapshotMetadata
	Data     []byte
}

func (e *SnapshotNeeded) Error() string {
	return fmt.Sprintf("replication: replica %d sent a snapshot at index %d term %d that this replica's log does not hold", e.From, e.Metadata.Index, e.Metadata.Term)
}
