package wire

import "strings"

// Consumer groups: the control messages of a group's
// consumers (group_poll, group_settle) and of its administration
// (group_create, group_seek, group_describe, group_list, group_delete,
// group_dead_letters, group_redrive, group_discard). A group is named per
// stream; its cursor, dead letters and claims are kept per shard.

// NOTE: when adding a group message type, add it to newGroupMessage below,
// to groupMessages in groups_test.go, and an answer to Reply.
const (
	TypeGroupCreate      MsgType = "group_create"
	TypeGroupSeek        MsgType = "group_seek"
	TypeGroupDescribe    MsgType = "group_describe"
	TypeGroupInfo        MsgType = "group_info"
	TypeGroupList        MsgType = "group_list"
	TypeGroupNames       MsgType = "group_names"
	TypeGroupDelete      MsgType = "group_delete"
	TypeGroupPoll        MsgType = "group_poll"
	TypeGroupRecords     MsgType = "group_records"
	TypeGroupSettle      MsgType = "group_settle"
	TypeGroupSettled     MsgType = "group_settled"
	TypeGroupDeadLetters MsgType = "group_dead_letters"
	TypeGroupDeadList    MsgType = "group_dead_list"
	TypeGroupRedrive     MsgType = "group_redrive"
	TypeGroupDiscard     MsgType = "group_discard"
	TypeGroupCount       MsgType = "group_count"
)

// How group_settle settles its claims.
const (
	SettleAck        = "ack"
	SettleNack       = "nack"
	SettleExtend     = "extend"
	SettleDeadLetter = "dead_letter"
)

// Limits of one group poll.
const (
	GroupMaxPollRecords = 1000
	GroupMaxPollBytes   = 4 << 20
	// GroupMaxClaims bounds the claims of one group_settle, so the request
	// stays well inside MaxControlBytes.
	GroupMaxClaims = 1000
)

// GroupStreamPrefix starts the name of the internal stream that keeps a
// durable stream's groups' state (<prefix><stream>). Stream names a client
// gives are refused with it (IsReservedStream), so no client can publish
// to it, subscribe to it or see it listed.
const GroupStreamPrefix = "__felix.groups."

// IsReservedStream reports whether a stream name is the broker's own.
func IsReservedStream(name string) bool { return strings.HasPrefix(name, "__felix.") }

// ValidateGroupName checks a group's name: the rules of stream names.
func ValidateGroupName(name string) error { return ValidateName("group", name) }

// GroupCreate creates a group at Start ("earliest", "latest" (default),
// "offset" with StartOffset on Shard, or "time" with StartTimeMS), on
// every shard. A group that exists is left as it is (create if new).
// Answered by GroupInfo.
type GroupCreate struct {
	RequestID   uint64 `msgpack:"request_id"`
	Tenant      string `msgpack:"tenant"`
	Namespace   string `msgpack:"namespace"`
	Stream      string `msgpack:"stream"`
	Group       string `msgpack:"group"`
	Start       string `msgpack:"start,omitempty"`
	StartOffset uint64 `msgpack:"start_offset,omitempty"`
	StartTimeMS int64  `msgpack:"start_time_ms,omitempty"`
	Shard       uint32 `msgpack:"shard,omitempty"`
	// OnlyShards, when set, limits the request to these shards (a cluster
	// client asks each shard's serving member for its own); empty: every
	// shard.
	OnlyShards []uint32 `msgpack:"only_shards,omitempty"`
}

// GroupSeek moves an existing group's cursor (its claims in flight are
// dropped; dead letters are kept). Start as GroupCreate; an offset applies
// to Shard, the others to every shard. Answered by GroupInfo.
type GroupSeek GroupCreate

// GroupDescribe asks for a group's state on every shard; answered by GroupInfo.
type GroupDescribe struct {
	RequestID uint64 `msgpack:"request_id"`
	Tenant    string `msgpack:"tenant"`
	Namespace string `msgpack:"namespace"`
	Stream    string `msgpack:"stream"`
	Group     string `msgpack:"group"`
	// OnlyShards as GroupCreate's.
	OnlyShards []uint32 `msgpack:"only_shards,omitempty"`
}

// GroupDelete deletes a group (answered by OK).
type GroupDelete GroupDescribe

// GroupShard is a group's state on one shard.
type GroupShard struct {
	Shard        uint32   `msgpack:"shard"`
	Cursor       uint64   `msgpack:"cursor"`
	Committed    uint64   `msgpack:"committed"`
	Lag          uint64   `msgpack:"lag"`
	InFlight     uint64   `msgpack:"in_flight"`
	Owed         uint64   `msgpack:"owed"`
	DeadLetters  uint64   `msgpack:"dead_letters"`
	Consumers    []string `msgpack:"consumers,omitempty"`
	Redeliveries uint64   `msgpack:"redeliveries"`
	CreatedAtMS  int64    `msgpack:"created_at_ms"`
	Next         uint64   `msgpack:"next"`
	Waiting      uint64   `msgpack:"waiting,omitempty"`
}

// GroupInfo answers GroupCreate, GroupSeek and GroupDescribe.
type GroupInfo struct {
	RequestID uint64       `msgpack:"request_id"`
	Group     string       `msgpack:"group"`
	Shards    []GroupShard `msgpack:"shards"`
}

// GroupList asks for the groups of a stream; answered by GroupNames.
type GroupList struct {
	RequestID uint64 `msgpack:"request_id"`
	Tenant    string `msgpack:"tenant"`
	Namespace string `msgpack:"namespace"`
	Stream    string `msgpack:"stream"`
}

// GroupNames answers GroupList.
type GroupNames struct {
	RequestID uint64   `msgpack:"request_id"`
	Groups    []string `msgpack:"groups"`
}

// GroupPoll asks for up to MaxRecords records (and about MaxBytes) of one
// shard, waiting up to WaitMS for some when none is available. Each record
// handed out is claimed for VisibilityMS (0: the broker's default).
// Answered by GroupRecords.
type GroupPoll struct {
	RequestID    uint64 `msgpack:"request_id"`
	Tenant       string `msgpack:"tenant"`
	Namespace    string `msgpack:"namespace"`
	Stream       string `msgpack:"stream"`
	Group        string `msgpack:"group"`
	Shard        uint32 `msgpack:"shard,omitempty"`
	MaxRecords   uint32 `msgpack:"max_records,omitempty"`
	MaxBytes     uint32 `msgpack:"max_bytes,omitempty"`
	WaitMS       uint32 `msgpack:"wait_ms,omitempty"`
	VisibilityMS uint32 `msgpack:"visibility_ms,omitempty"`
	Consumer     string `msgpack:"consumer,omitempty"`
}

// GroupRecords answers GroupPoll (possibly with none, at wait_ms): record
// i is at Offsets[i], stored at TimesMS[i], handed out for the
// Attempts[i]-th time (this one included), with Payloads[i]; a settlement
// names it by (offset, attempts). Columns rather than a list of maps: a
// poll's 1000 records cost no field names and no map each, to encode and
// to check (Valid: the columns are equally long).
type GroupRecords struct {
	RequestID uint64   `msgpack:"request_id"`
	Offsets   []uint64 `msgpack:"offsets"`
	TimesMS   []int64  `msgpack:"times_ms"`
	Attempts  []uint32 `msgpack:"attempts"`
	Payloads  [][]byte `msgpack:"payloads"`
}

// Valid reports whether the columns are equally long.
func (m *GroupRecords) Valid() bool {
	n := len(m.Offsets)
	return len(m.TimesMS) == n && len(m.Attempts) == n && len(m.Payloads) == n
}

// GroupSettle settles claims of one shard: claim i is the hand-out of
// Offsets[i] for the Attempts[i]-th time (equally long columns). Op is
// ack, nack (the record is handed out again after DelayMS), extend (the
// claim lasts VisibilityMS from now) or dead_letter. Answered by
// GroupSettled.
type GroupSettle struct {
	RequestID    uint64   `msgpack:"request_id"`
	Tenant       string   `msgpack:"tenant"`
	Namespace    string   `msgpack:"namespace"`
	Stream       string   `msgpack:"stream"`
	Group        string   `msgpack:"group"`
	Shard        uint32   `msgpack:"shard,omitempty"`
	Op           string   `msgpack:"op"`
	Offsets      []uint64 `msgpack:"offsets"`
	Attempts     []uint32 `msgpack:"attempts"`
	DelayMS      uint32   `msgpack:"delay_ms,omitempty"`
	VisibilityMS uint32   `msgpack:"visibility_ms,omitempty"`
}

// ClaimFailure is a claim group_settle could not settle, and why.
type ClaimFailure struct {
	Offset  uint64 `msgpack:"offset"`
	Code    Code   `msgpack:"code"`
	Message string `msgpack:"message"`
}

// Err is the failure as an error.
func (f *ClaimFailure) Err() *Error { return NewError(f.Code, "offset %d: %s", f.Offset, f.Message) }

// GroupSettled answers GroupSettle: every claim not in Failures was settled.
type GroupSettled struct {
	RequestID uint64         `msgpack:"request_id"`
	Failures  []ClaimFailure `msgpack:"failures,omitempty"`
}

// GroupDeadLetters lists up to Max (at most 10000) of a shard's dead
// letters from offset From; answered by GroupDeadList.
type GroupDeadLetters struct {
	RequestID uint64 `msgpack:"request_id"`
	Tenant    string `msgpack:"tenant"`
	Namespace string `msgpack:"namespace"`
	Stream    string `msgpack:"stream"`
	Group     string `msgpack:"group"`
	Shard     uint32 `msgpack:"shard,omitempty"`
	From      uint64 `msgpack:"from,omitempty"`
	Max       uint32 `msgpack:"max,omitempty"`
}

// GroupDeadList answers GroupDeadLetters: the dead letters' offsets,
// ascending; More says there are others past the last.
type GroupDeadList struct {
	RequestID uint64   `msgpack:"request_id"`
	Offsets   []uint64 `msgpack:"offsets"`
	More      bool     `msgpack:"more,omitempty"`
}

// GroupRedrive hands dead letters of a shard out again (Offsets, or every
// one when All); GroupDiscard forgets them. Both are answered by GroupCount.
type GroupRedrive struct {
	RequestID uint64   `msgpack:"request_id"`
	Tenant    string   `msgpack:"tenant"`
	Namespace string   `msgpack:"namespace"`
	Stream    string   `msgpack:"stream"`
	Group     string   `msgpack:"group"`
	Shard     uint32   `msgpack:"shard,omitempty"`
	Offsets   []uint64 `msgpack:"offsets,omitempty"`
	All       bool     `msgpack:"all,omitempty"`
}

// GroupDiscard: see GroupRedrive.
type GroupDiscard GroupRedrive

// GroupCount answers GroupRedrive and GroupDiscard: how many dead letters
// they changed.
type GroupCount struct {
	RequestID uint64 `msgpack:"request_id"`
	Count     uint64 `msgpack:"count"`
}

func (*GroupCreate) Type() MsgType      { return TypeGroupCreate }
func (*GroupSeek) Type() MsgType        { return TypeGroupSeek }
func (*GroupDescribe) Type() MsgType    { return TypeGroupDescribe }
func (*GroupInfo) Type() MsgType        { return TypeGroupInfo }
func (*GroupList) Type() MsgType        { return TypeGroupList }
func (*GroupNames) Type() MsgType       { return TypeGroupNames }
func (*GroupDelete) Type() MsgType      { return TypeGroupDelete }
func (*GroupPoll) Type() MsgType        { return TypeGroupPoll }
func (*GroupRecords) Type() MsgType     { return TypeGroupRecords }
func (*GroupSettle) Type() MsgType      { return TypeGroupSettle }
func (*GroupSettled) Type() MsgType     { return TypeGroupSettled }
func (*GroupDeadLetters) Type() MsgType { return TypeGroupDeadLetters }
func (*GroupDeadList) Type() MsgType    { return TypeGroupDeadList }
func (*GroupRedrive) Type() MsgType     { return TypeGroupRedrive }
func (*GroupDiscard) Type() MsgType     { return TypeGroupDiscard }
func (*GroupCount) Type() MsgType       { return TypeGroupCount }

func (m *GroupInfo) AnswerTo() uint64     { return m.RequestID }
func (m *GroupNames) AnswerTo() uint64    { return m.RequestID }
func (m *GroupRecords) AnswerTo() uint64  { return m.RequestID }
func (m *GroupSettled) AnswerTo() uint64  { return m.RequestID }
func (m *GroupDeadList) AnswerTo() uint64 { return m.RequestID }
func (m *GroupCount) AnswerTo() uint64    { return m.RequestID }

// Scope of each group request.
func (m *GroupCreate) Scope() Scope      { return Scope{m.Tenant, m.Namespace, m.Stream} }
func (m *GroupDescribe) Scope() Scope    { return Scope{m.Tenant, m.Namespace, m.Stream} }
func (m *GroupList) Scope() Scope        { return Scope{m.Tenant, m.Namespace, m.Stream} }
func (m *GroupPoll) Scope() Scope        { return Scope{m.Tenant, m.Namespace, m.Stream} }
func (m *GroupSettle) Scope() Scope      { return Scope{m.Tenant, m.Namespace, m.Stream} }
func (m *GroupDeadLetters) Scope() Scope { return Scope{m.Tenant, m.Namespace, m.Stream} }
func (m *GroupRedrive) Scope() Scope     { return Scope{m.Tenant, m.Namespace, m.Stream} }

func newGroupMessage(t MsgType) Message {
	switch t {
	case TypeGroupCreate:
		return &GroupCreate{}
	case TypeGroupSeek:
		return &GroupSeek{}
	case TypeGroupDescribe:
		return &GroupDescribe{}
	case TypeGroupInfo:
		return &GroupInfo{}
	case TypeGroupList:
		return &GroupList{}
	case TypeGroupNames:
		return &GroupNames{}
	case TypeGroupDelete:
		return &GroupDelete{}
	case TypeGroupPoll:
		return &GroupPoll{}
	case TypeGroupRecords:
		return &GroupRecords{}
	case TypeGroupSettle:
		return &GroupSettle{}
	case TypeGroupSettled:
		return &GroupSettled{}
	case TypeGroupDeadLetters:
		return &GroupDeadLetters{}
	case TypeGroupDeadList:
		return &GroupDeadList{}
	case TypeGroupRedrive:
		return &GroupRedrive{}
	case TypeGroupDiscard:
		return &GroupDiscard{}
	case TypeGroupCount:
		return &GroupCount{}
	}
	return nil
}
