// Package replication replicates a durable stream's shard with raft
// (go.etcd.io/raft/v3, issue #14): one raft group per shard, whose leader is
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
// What it is not, yet:
//   - no network transport: Ready hands messages to a send function, and
//     the caller Steps what arrives;
//   - no snapshot data transfer: compaction only moves Storage's window, a
//     snapshot is metadata, and a Replica neither sends nor installs one,
//     so a follower behind the leader's compaction point cannot catch up;
//   - not wired to the shard, and no membership changes beyond the peers a
//     group starts with.
package replication
