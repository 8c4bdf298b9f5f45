package replication

import (
	"errors"
	"fmt"
)

var (
	// ErrLogMismatch is returned when the log and Storage's view of it
	// disagree: a gap in the entries' indexes, an entry read back with
	// another index or term than was appended, or a raft.state committing
	// beyond the log. Each is damage or a bug, and raft must not go on.
	ErrLogMismatch = errors.New("replication: log does not match the raft log")

	// ErrSnapshotUnsupported is returned by Replica.Step for a snapshot
	// message: a snapshot would have to bring the records below the
	// leader's compaction point, and that transfer does not exist yet. The
	// replica refuses it rather than install a log with a hole.
	ErrSnapshotUnsupported = errors.New("replication: snapshots are not supported yet")
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
