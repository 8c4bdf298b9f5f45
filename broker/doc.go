// Package broker assembles a Felix broker and implements service.Service.
//
// Assembly (broker.go): New and Start build the actor tree (the registry
// and the streams, subscribers, lanes, connections, sessions and groups
// supervisors, each top-level with WithGuardian and one-for-one), the
// front ends in front of it (felix/1 over QUIC, package transport, and the
// Kafka listener, package kafka, when kafka_listen is set), the admin
// endpoint (package admin) and, with cluster_etcd, the cluster member
// (package cluster for etcd, package member for the peer link and the raft
// side). It is the embedding API: New, Start, Addr, Stop, Metrics,
// optionally inside the host program's own actor system (WithActorSystem;
// WithoutActorCluster for in-process tests and for a host that runs its
// own protoactor remote on that system, since a member's guarded actor
// remote would be a second one).
//
// The service boundary. conn (service.go) is one client's service.Session,
// its methods run on the client's goroutines. Open turns the client's
// token into an auth.Principal (authgate.Gate.Authenticate: the data
// directory's own Ed25519 key, made with admin.token on first start, and
// auth_keys verify it), and the token's tenant must be the one the
// connection names (and, with tls_client_cert_bind_subject, the client
// certificate's subject). Every Session method calls
// conn.authorize(action, scope) first (auth.go, through the gate), before
// any lookup, so a refusal is the same whether the stream exists or not;
// names starting __felix. are refused there, so no client reaches a group
// state stream. The quotas (package quota) come right after: connections
// not yet authenticated when a front end accepts them (admitConnection),
// an address's failed authentications before its token is checked (the
// gate's CheckCredential), authenticated connections in Open, a tenant's
// publish rate in Publish, its subscriptions in Subscribe, its streams in
// the registry. Front ends only carry credentials.
//
// What else lives here: the subscribe handshake (subscribe.go; a cache
// watch's in cachewatch.go); the groups supervisor and the lookups a
// connection lends the calls that live in the packages of their concern,
// stream administration (streamfront), groups, caches (cachefront), range
// reads, time lookups and commit watches (readfront) (fronts.go); shard
// owners and topology (topology.go); idempotent producer ids given out and
// checked (producers.go: stored in metadata.db on a single broker, etcd in
// a cluster; the producers package keeps them); opening a shard's log
// through the durable package, for raft too (durable.go); the registry's
// cluster hooks (cluster.go); the Host the member package is handed
// (member.go); the admin endpoint's side, the admin.Member its routes ask
// (introspection.go); the Kafka listener's wiring (kafka.go,
// kafkacluster.go) and its SCRAM logins' steps under the failed-login
// limiter (kafkausers.go; the users are scramlogin's); the metric hooks,
// which only add to counters, and the latency histograms (counting.go,
// latency.go); the TLS certificates reloaded on SIGHUP (tlsreload.go).
//
// One subscription, one owner. Each connection has a session actor
// (felix/sessions/conn-<id>, the sessions package), the one owner of that
// connection's subscriptions and of its connection writer. The handshake,
// on the caller's goroutine, builds the parts (the event stream opened with
// EventStreamHello and registered with the writer, the feeder spawned with
// its queue held) and hands them to the session; from adoption on only the
// session ends a subscription, through one function (session.end),
// whatever ended it: unsubscribe, the client resetting the stream
// (lanes.StreamFailed), the feeder stopping or the writer stopping (it
// watches both; a stopped writer is replaced by conn-<id>.<gen>), lag, the
// principal's expiry (a timer the session arms, re-armed by
// Reauthenticate), or the connection closing. end removes the subscriber
// from the shard, stops the feeder, finishes or resets the stream, and
// gives the subscription's egress share and quota place back. The shard
// registers the feeder and answers live in one Receive, so every batch from
// live on reaches the queue; Subscribed goes out before any history, so a
// history larger than the stream window cannot deadlock the client.
// Subscribed and the first events travel on different QUIC streams: the
// client pairs them by subscription id.
//
// A session restarted keeps its subscriptions and writer (same instance)
// and loses the message in hand: a subscribe waiting on it times out, an
// end is not applied until the connection closes. Chaos never kills a
// session; if one stops anyway it ends every subscription it had.
//
// Shutdown order (Stop): the admin endpoint reports not ready; the Kafka
// listener closes with its connections and waits for their goroutines;
// the transport closes every connection and waits (each connection's
// Session.Close ends its subscriptions, then stops its writer and
// session); the member leaves the cluster; the sessions, connections,
// lanes, subscribers, groups, registry and streams supervisors stop in
// that order, each after what feeds it; the peer link (member.ClosePeers) closes after the
// shards (they send over it until they stop); then metadata.db, a private
// actor system, and the admin endpoint last. A host's actor system is
// never shut down here.
//
// Lock order: conn.mu (lookup caches) is a leaf.
package broker
