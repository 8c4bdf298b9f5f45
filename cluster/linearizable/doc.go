// Package linearizable tests a replicated stream as Jepsen would: three
// `felix broker` processes in network namespaces and an etcd process
// (clustertest), a 1-shard stream with three replicas under durable_fsync
// on_commit, six concurrent clients, and one fault at a time every second
// or so. It has no code of its own; its tests are in the test files.
//
// Four workloads, each on a stream (or cache) of its own:
//
//   - cas: clients publish with PublishIf at the tail they last saw, a
//     value of their own, and read the whole log (ClientFor + Read). The
//     history must be linearizable against the log as a sequence (porcupine,
//     at most 30 s of checking, or the workload's duration when longer; the
//     final replicas' log counts as a last read; on failure the
//     visualization is written to a kept folder whose path the failure
//     names), and no read may see less of the log than an operation done
//     before it began showed.
//   - acknowledged: idempotent and plain producers publish; at the end every
//     replica's log is read: 0 acknowledged records lost (each at its
//     acknowledged offset), an idempotent payload at most once, a plain one
//     at most once per attempt that was acknowledged or of unknown outcome,
//     nothing nobody sent, offsets contiguous, replicas identical.
//   - stale_reads: producers write while clients read through each member
//     and through the ClusterClient; no read may see a committed end short
//     of an acknowledgement that returned before it began.
//   - cache: a durable cache of one shard and three replicas; clients put,
//     get, put-if-absent, put-if at the version they last saw and
//     delete-if on three keys (half of them keeping their connections
//     through a leader's stop, as readers do), two readers get keys
//     through each member directly, and every key is read once the
//     faults are healed. The history must be linearizable
//     against a register per key with versions (porcupine, partitioned by
//     key): a key's version is the offset of the write that set it, so
//     versions grow, each conditional write's outcome agrees with the
//     version it expected, a refusal names the key's version, and a
//     write of unknown outcome that applied gets its version from the
//     first answer that names it. Three ClusterClient watchers of the
//     keys' prefix, started retained before the clients, read through the
//     faults; each watcher's events for a key must come in version order,
//     each at its write's version with its write's value, and every
//     acknowledged write past a watcher's start must reach it as an
//     event or, after a resume the shard could no longer replay, in the
//     snapshot it was sent instead, which must show each key's newest
//     acknowledged write below it.
//
// The faults: SIGKILL of the shard's raft leader (then a restart), SIGSTOP
// of the leader (then SIGCONT; 1.5 s, and in stale_reads 3.5 s, which the
// readers' connections to it outlive),
// SIGKILL of a follower (then a restart), the
// leader cut off from the other members (etcd and clients still reach it),
// and SIGSTOP of etcd past the members' 2 s lease. By default each workload
// runs one round, every fault once in a shuffled order (what CI runs). A
// longer run:
//
//	FELIXTEST_LINEARIZABLE_DURATION=10m FELIXTEST_LINEARIZABLE_SEED=42 \
//	    go test -race -count=1 -timeout 60m -run TestLinearizable -v ./cluster/linearizable/
//
// FELIXTEST_LINEARIZABLE_DURATION is each workload's length (faults cycle
// until it has passed); FELIXTEST_LINEARIZABLE_SEED the faults' order and
// the clients' choices (unset, from the clock; every run logs its seed);
// FELIXTEST_LINEARIZABLE_FAULTS a comma-separated subset of leader-kill,
// leader-stop, follower-kill, leader-partition, etcd-stop, or none. The
// test needs root and iproute2 for the namespaces, and skips without them
// unless FELIXTEST_REQUIRE_NETNS=1 (CI) makes that a failure.
package linearizable
