// Package peerlink carries messages between cluster members: raft traffic
// of replicated shards, each message tagged with its group (the shard). A
// Link listens on its own QUIC address with ALPN felix-peer/1 and mutual
// TLS: a member accepts only peers whose certificate the cluster's CA
// signed, and that certificate is bound to a node id (NamesNode): a
// connection whose hello names another member than its certificate is
// closed, and so is one to an address whose member's certificate is not
// the dialled node's, so one member's key cannot speak as another. Each
// peer has one outbound connection and one bounded queue;
// when the queue is full a message is dropped and counted, never waited
// for: raft resends what it needs, and a slow or dead peer must not hold
// the shards that talk to the others.
//
// Send refuses a message the peer would read as malformed (CheckMessage).
// Frames are (group, data), read with a bounded length and fuzzed
// (FuzzReadFrame). One UDP socket serves listening and dialing, freed by
// Close. The link knows no raft, shard or wire message: what a group means
// is its handler's business (the member's Peers).
package peerlink
