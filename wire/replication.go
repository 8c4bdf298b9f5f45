package wire

// Replication status: replication_status asks a member for its view of a
// replicated stream's shards; replication_status_view answers. Only shards
// whose replica runs on that member are listed; the leader's entry alone
// has every replica's progress, so a client asks each shard's leader
// (shard_owners names it).

const (
	TypeReplicationStatus     MsgType = "replication_status"
	TypeReplicationStatusView MsgType = "replication_status_view"

	// FeatureReplicationStatus: replication_status, answered by
	// replication_status_view.
	FeatureReplicationStatus uint32 = 0x0010_0000
)

// ReplicationStatus asks for the member's view of a stream's replicas.
type ReplicationStatus struct {
	RequestID uint64 `msgpack:"request_id" json:"request_id"`
	Tenant    string `msgpack:"tenant" json:"tenant"`
	Namespace string `msgpack:"namespace" json:"namespace"`
	Stream    string `msgpack:"stream" json:"stream"`
}

// ReplicationStatusView answers ReplicationStatus: Node is the member
// answering, Shards the shards it runs a replica of.
type ReplicationStatusView struct {
	RequestID uint64             `msgpack:"request_id" json:"request_id"`
	Node      string             `msgpack:"node" json:"node"`
	Shards    []ShardReplication `msgpack:"shards" json:"shards"`
}

// ShardReplication is one replica's view of its shard's raft group, at
// most a second old.
type ShardReplication struct {
	Shard uint32 `msgpack:"shard" json:"shard"`
	// Leader is the member leading the group, as this replica knows it
	// ("" while there is none); Term raft's term.
	Leader string `msgpack:"leader" json:"leader"`
	Term   uint64 `msgpack:"term" json:"term"`
	// Commit is raft's commit index; AppliedOffset the end of the records
	// readers see on this replica.
	Commit        uint64 `msgpack:"commit" json:"commit"`
	AppliedOffset uint64 `msgpack:"applied_offset" json:"applied_offset"`
	// Quiet: the group is idle and this replica does not tick (no
	// heartbeats, no election timer) until something wakes it.
	Quiet bool `msgpack:"quiet,omitempty" json:"quiet,omitempty"`
	// Replicas, on the leader only, is each replica's progress.
	Replicas []ReplicaProgress `msgpack:"replicas,omitempty" json:"replicas,omitempty"`
}

// ReplicaProgress is one replica as its leader sees it.
type ReplicaProgress struct {
	Node string `msgpack:"node" json:"node"`
	// Match is the highest raft index known to be in its log; LagRecords
	// how many of the leader's records it lacks.
	Match      uint64 `msgpack:"match" json:"match"`
	LagRecords uint64 `msgpack:"lag_records" json:"lag_records"`
	// Active: the leader heard from it within an election timeout.
	Active bool `msgpack:"active" json:"active"`
}

func (*ReplicationStatus) Type() MsgType          { return TypeReplicationStatus }
func (*ReplicationStatusView) Type() MsgType      { return TypeReplicationStatusView }
func (m *ReplicationStatusView) AnswerTo() uint64 { return m.RequestID }
