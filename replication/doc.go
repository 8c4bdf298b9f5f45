// Package replication replicates a durable stream's shard with raft
// (go.etcd.io/raft/v3): one raft group per shard, whose leader is
// the shard's owner.
//
// The shard's segmented log is the raft log. Each raft entry is one entry of
// the log (persistence's entry API): a batch of records with its append time
// and producer stamp, or a record-less entry (a new leader's empty entry, a
// conf change). A record is therefore written once per replica, not once to
// a raft WAL and again to the log, and its offset comes out of the entry's
// position: since committed logs are identical, a committed record has the
// same offset on every replica. Only raft's small HardState and ConfState
// live beside the log, in raft.state.
//
// Storage is raft's storage over the log (EntryLog) and raft.state. Replica
// drives a raft.RawNode over a Storage for the shard actor that owns it:
// Propose, Tick, Step, and Ready, which persists, sends, applies and
// advances in the order raft requires. EncodeRecords and DecodeRecords are
// the format of a batch in a raft entry's Data.
//
// Ready's order is the protocol: a leader first sends its appends and
// heartbeats (the followers write while it does; they promise nothing about
// its disk), then appends the entries to the log and makes them durable,
// writes the HardState if term or vote changed, sends the rest (a
// follower's acknowledgements and votes, only now that what they promise is
// on disk), then hands committed entries to the owner in index order. The
// last maxRecentBytes of appended entries stay in memory (recent.go) for
// raft's reads of them, to apply and to send. Elections time out after
// 0.5–1 s of 100 ms ticks; CheckQuorum steps a leader cut off from its
// quorum down, and PreVote keeps a returning member from deposing a
// healthy leader.
//
// An idle group goes quiet (quiesce.go): once every replica holds and has
// committed the whole log, the leader sends a last heartbeat marked to
// quiesce and stops ticking, and each follower that agrees on the leader,
// term and log end stops its election timer. Anything stepped, proposed or
// read wakes it; the owner wakes it when a member leaves (Wake,
// LeaderGone), since a quiet group has no heartbeats to notice a dead
// leader by.
//
// What an acknowledgement promises depends on the log's policy. With
// every append synced, an entry is fsynced before a replica acknowledges
// it, so a committed entry is on a quorum's disks. With SetLazySync
// (durable_fsync periodic or none) a replica acknowledges once the entry is
// in the page cache: it survives a minority's process crash, not a
// quorum's power loss within the sync interval. The HardState is always
// fsynced before a message that depends on it, so no replica votes twice
// in a term.
//
// Failure cases, as the owner sees them: a dead leader is replaced within
// an election timeout by a replica with the longest log, which applies
// everything its predecessor committed before it serves; a leader cut off
// cannot commit, steps down, and its uncommitted tail is truncated when it
// returns (TruncateEntries: offsets are never reused); a follower that was
// down catches up from the leader's log, or from a snapshot; without a
// quorum nothing commits and nothing acknowledged is lost.
//
// A snapshot is the log itself: Storage.Snapshot names the segment files up
// to the applied index with their sizes, plus raft's metadata. A follower
// whose log lacks it gets *SnapshotNeeded from Step instead of raft
// installing it; its owner copies the files into a staged directory, and
// InstallStaged swaps the copy in before the log next opens, crash-safe,
// keeping the follower's term and vote (never lowered). Retention runs only
// over what was applied and moves the compaction point
// (EnforceRetention); CompactBehind stops serving entries far behind the
// applied index (they stay in the log). A restarted replica skips what its
// storage knew committed (Storage.Committed, the lazily written commit
// index) and raft hands over only the entries after (Config.Applied).
package replication
