// Package cache is a cache's state machine: the key index one shard keeps
// over the records of its log, and the encoding of those records. It does
// no I/O and knows no actor: a shard hands it each record as the record
// commits (Apply), in offset order, and reads from it.
//
// A key's version is the log offset of the record that last changed it, so
// versions are unique per shard and grow with the log, as etcd's mod
// revision and NATS KV's revision do. Conditions (put if absent, put or
// delete if the version equals) travel inside the record and are judged
// when it applies, not when it is written: every replica applies the same
// records in the same order against the same state, so all agree on which
// conditional write won, with no check ahead of the log that a concurrent
// proposal could make stale. A refused record still takes its offset and
// changes nothing.
//
// Time is the writer's: each record carries the clock of the shard that
// wrote it (Record.At), and applying judges expiry by that clock, never by
// the applier's, for the same reason. A key whose expiry has passed is
// absent to reads at once; the shard then writes an expire record (Due
// names the keys), which deletes the key only if it is still at the
// version that expired, and which watchers see as a delete.
//
// Counters are a namespace of their own beside the keys: an add carries a
// delta, not a total, so a retried add that had already applied counts
// twice (at-least-once). A client that cannot afford that keeps a key and
// uses put-if on its version instead.
//
// An atomic commit is one record: an event (bytes for the cache's
// watchers) and up to MaxCommitOps puts and deletes, applied together or,
// if any key would overflow the index, not at all. StateGet reads several
// keys as of one applied offset.
//
// Compaction (Planner) keeps, below a horizon, the newest History records
// that changed each key and the newest counter record folded to its total,
// rewriting each kept record to the effect it had when it applied (no
// condition left to judge again); at and above the horizon every record is
// kept, because a watcher may resume from any version there. A key whose
// newest change below the horizon is a delete loses all its records below
// it, tombstone included: nothing older is kept to resurrect it.
package cache
