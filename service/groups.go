package service

import (
	"time"

	"github.com/getfelix/felix-go/wire"
)

// Consumer groups: a group is a named cursor over each shard of
// a durable stream; records are handed out to consumers (GroupPoll) and
// settled one by one (GroupSettle). The Session methods are in
// service.go's interface; their types are here.

// GroupRef names a group's part on one shard.
type GroupRef struct {
	Scope wire.Scope
	Group string
	Shard uint32
}

// GroupStartKind says where a group's cursor is put.
type GroupStartKind uint8

// Where a group's cursor can be put.
const (
	// GroupStartLatest: only records published from now on.
	GroupStartLatest GroupStartKind = iota
	// GroupStartEarliest: the oldest record retention kept.
	GroupStartEarliest
	// GroupStartOffset: GroupStart.Offset on GroupStart.Shard.
	GroupStartOffset
	// GroupStartTime: the first record stored at or after GroupStart.Time.
	GroupStartTime
)

// GroupStart is where GroupCreate or GroupSeek puts a group's cursor.
type GroupStart struct {
	Kind   GroupStartKind
	Offset uint64
	Shard  uint32
	Time   time.Time
	// Only, when set, limits the create or seek to these shards (a
	// cluster client asks each shard's serving member for its own);
	// empty: every shard.
	Only []uint32
}

// GroupPoll asks one shard of a group for records.
type GroupPoll struct {
	GroupRef
	// MaxRecords (1 to wire.GroupMaxPollRecords) and MaxBytes (up to
	// wire.GroupMaxPollBytes; 0 takes it) bound the answer.
	MaxRecords int
	MaxBytes   int
	// Wait is how long to wait for records when none is available (up
	// to group_max_wait_ms).
	Wait time.Duration
	// Visibility is how long each record handed out stays claimed (0:
	// group_visibility_timeout_ms; up to group_max_visibility_ms).
	Visibility time.Duration
	// Consumer names the caller, for describe; it may be empty.
	Consumer string
}

// GroupRecord is a record handed out. Attempts counts its hand-outs since
// the group actor last started, this one included.
type GroupRecord struct {
	Offset   uint64
	Time     time.Time
	Attempts uint32
	Value    []byte
}

// SettleOp is how GroupSettle settles claims.
type SettleOp uint8

// The settlements.
const (
	SettleAck SettleOp = iota + 1
	SettleNack
	SettleExtend
	SettleDeadLetter
)

// Claim names one hand-out of a record.
type Claim struct {
	Offset  uint64
	Attempt uint32
}

// GroupSettle settles claims of one shard of a group.
type GroupSettle struct {
	GroupRef
	Op     SettleOp
	Claims []Claim
	// Delay (nack) is how long before the record is handed out again.
	Delay time.Duration
	// Visibility (extend) is the claim's new visibility, from now.
	Visibility time.Duration
}

// ClaimFailure is a claim that was not settled, and why.
type ClaimFailure struct {
	Offset uint64
	Err    *wire.Error
}

// GroupShardInfo is a group's state on one shard.
type GroupShardInfo struct {
	Shard uint32
	// Cursor is the first offset not settled in a contiguous run; Next
	// the first never handed out; Committed the shard's committed end.
	Cursor, Next, Committed uint64
	// Lag is Committed - Cursor.
	Lag                                       uint64
	InFlight, Owed, DeadLetters, Redeliveries uint64
	// Waiting counts the polls parked for records.
	Waiting uint64
	// Consumers are the names seen polling in the last 30 s, at most 64:
	// one that exited drops out once silent that long.
	Consumers []string
	CreatedAt time.Time
}

// GroupInfo describes a group on every shard of its stream.
type GroupInfo struct {
	Scope  wire.Scope
	Group  string
	Shards []GroupShardInfo
}

// DeadLetters is one page of a shard's dead letters (offsets, ascending).
type DeadLetters struct {
	Offsets []uint64
	More    bool
}
