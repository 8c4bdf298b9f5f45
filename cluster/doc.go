// Package cluster makes brokers one cluster on etcd: membership, stream
// definitions and producer ids, shard placement, and the owner leases that
// fence a shard's owner. Everything the members must agree on lives in
// etcd under cluster_etcd_prefix; nothing is a home-made protocol:
//
//	<prefix>/name                        the cluster's name (the first member writes it; a member with another is refused)
//	<prefix>/members/<node>              member record {addr, admin, peer_addr, kafka_addr, actor_addr, lease}, on the member's lease
//	<prefix>/drain/<node>                present while an operator drains the member
//	<prefix>/streams/<t>/<ns>/<s>        stream definition (explicit and implicit)
//	<prefix>/owners/<t>/<ns>/<s>/<n>     owner record {node, addr, lease}, on the owner's lease; its mod revision is the fencing epoch
//	<prefix>/homes/<t>/<ns>/<s>/<n>      the member holding a durable shard's data
//	<prefix>/replicas/<t>/<ns>/<s>/<n>   a replicated shard's replica set [{id, node}]
//	<prefix>/producers/<id>              an idempotent producer id's tenant
//
// Membership. Node joins in the background: a broker whose etcd is
// unreachable starts, logs it every second, and refuses everything
// clustered with shard_unavailable not_ready until it connects. At join it
// checks the cluster name (a mismatch is fatal), takes a lease
// (cluster_lease_ttl_ms, whole seconds) and writes its member record on
// it, refusing while a live member holds its node id (kept in
// <data_dir>/node.id). One etcd watch mirrors every record into the node's
// state; only the node's loop goroutine changes it. A member with
// cluster_tls_* also serves protoactor's remote over mutual TLS, its
// address in the member record, and runs a node actor (felix-node) that
// answers other members' tree requests (Trees); a guard refuses every
// other message and method (guard.go). Data never takes protoactor's
// remote: placement follows the lease-bound member records, because those
// leases are what fences an owner.
//
// etcd access (etcdclient.go, etcdlogin.go). The node's one etcd client
// speaks TLS when EtcdTLS is set (an http:// endpoint is then refused, as
// etcd's client would drop the TLS for it) and carries EtcdUser's token on
// every request. The login happens when a request first needs a token, not
// when the client is made, so a member whose etcd is down still starts; a
// token etcd stops taking is dropped and the next request logs in again.
// Every key is under <prefix>/, so an etcd role granted that prefix is all
// a member needs.
//
// Placement. Every member runs the same loop, on every change and once a
// second: a shard without an owner record gets one, chosen by rendezvous
// hashing (xxhash of member id and shard) over live members that are not
// draining, written on the chosen member's lease in a transaction that
// succeeds only if the shard still has no owner. An owner record lives
// exactly as long as its owner's lease: when a member dies its shards are
// placed on the others once the lease expires; when it stops cleanly it
// revokes the lease and they move at once. A shard never moves to a member
// that joins (in-memory shards would lose their ring for nothing). A
// durable shard's first placement writes its home, and it is placed only
// there afterwards: while the home is down it is shard_unavailable
// owner_unavailable, unless it is replicated. Drain hands each in-memory
// shard to the rendezvous choice among the others, rewriting its owner
// record on the new owner's lease, conditional on the old record's
// revision.
//
// Fencing. A shard serves only with this member's Ownership (Place, asked
// by the registry; it never blocks), and the shard checks it
// (Ownership.Check) before it takes a publish and again before it
// acknowledges. The check fails when the ownership was revoked (not_leader
// naming the new owner, or shard_unavailable moving) or when the lease may
// have expired: the member renews every third of the TTL and keeps a
// deadline of send time of the last confirmed renewal + TTL − 500 ms. etcd
// expires the lease no sooner than TTL after it took that renewal, which
// was after the send, so the old owner stops acknowledging before etcd can
// delete its owner record. A member frozen past its TTL wakes past its
// deadline, acknowledges nothing, drops every shard and joins again with a
// new lease. An acknowledgement that fails the second check becomes
// leadership_lost (outcome unknown).
//
// Replicated shards (replicas.go). The first placement round writes the
// replica set: the rendezvous top R of the live, non-draining members, each
// with a raft id 1..R, create-if-absent. It does not follow membership (a
// member that dies stays in it and catches up when it returns); only a replica
// move (MoveReplica: the new member gets the next id, never reused;
// FinishMove) changes it. Each member in a set runs its replica whatever
// clients ask (Hooks.Replica, every round). Such a shard has no
// lease-bound ownership: its raft leader writes the owner record on its own
// lease with its term (ClaimLeader, never over a later term), again on
// every status tick while the mirror lacks it (an etcd outage past the TTL
// expires the lease and the record with it), and that record only routes. A consumer group's state shard is placed with its
// data shard (groups.go): the same home, or a copy of its replica set.
//
// Routing. A member refuses a shard it does not own with not_leader and
// the owner (node id, address, generation = epoch); any member answers who
// owns a stream's shards (Owners), waiting up to 3 s for a new stream's
// placement. For a replicated shard whose record is missing or of an
// earlier term than this member's replica knows (Config.RaftLeader), the
// answer is raft's leader, so clients find it while etcd is away. There is no forwarding. Only ownership moves with a shard: an
// in-memory shard starts empty on its new owner. Definitions and producer
// ids are in etcd, so every member has them.
//
// Non-obvious behaviour of what this package is built on:
//
//   - protoactor's remote delivers whatever arrives (a system message to any
//     actor, a message to another address, which it forwards) and its
//     unimplemented gRPC methods panic, ending the process: the cluster's guard
//     (`cluster/guard.go`) checks every message before protoactor reads it.
//     In-process tests use `WithoutActorCluster` (no remote on a shared system).
//   - etcd leases are whole seconds, at least ~1.5 s: `cluster_lease_ttl_ms` is validated so.
//   - etcd's client takes TLS from each endpoint's scheme: it drops a configured
//     TLS for `http://` and dials every endpoint as the first one says, so config
//     refuses both. Given a user, it logs in inside `clientv3.New` and fails it
//     while etcd is down: the member logs in itself, when a request needs it.
package cluster
