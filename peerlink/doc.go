// Package peerlink carries messages between cluster members: raft traffic
// of replicated shards, each message tagged with its group (the shard). A
// Link listens on its own QUIC address with ALPN felix-peer/1 and mutual
// TLS: a member accepts only peers whose certificate the cluster's CA
// signed. Each peer has one outbound connection and one bounded queue;
// when the queue is full a message is dropped and counted, never waited
// for: raft resends what it needs, and a slow or dead peer must not hold
// the shards that talk to the others.
package peerlink
