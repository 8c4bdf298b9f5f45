package wire

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// MsgType names a control message on the wire.
type MsgType string

// NOTE: when adding a message type, add it to newMessage below, to allTypes
// and allMessages in messages_test.go (the round trips and the fuzz seeds
// come from them), and an answer to Reply.
const (
	TypeAuth                 MsgType = "auth"
	TypeAuthOK               MsgType = "auth_ok"
	TypeSubscribe            MsgType = "subscribe"
	TypeSubscribed           MsgType = "subscribed"
	TypeUnsubscribe          MsgType = "unsubscribe"
	TypeOK                   MsgType = "ok"
	TypeError                MsgType = "error"
	TypeEventStreamHello     MsgType = "event_stream_hello"
	TypeStreamCreate         MsgType = "stream_create"
	TypeStreamGet            MsgType = "stream_get"
	TypeStreamList           MsgType = "stream_list"
	TypeStreamDelete         MsgType = "stream_delete"
	TypeStreamInfo           MsgType = "stream_info"
	TypeStreamInfos          MsgType = "stream_infos"
	TypeStreamRead           MsgType = "stream_read"
	TypeSubscribeCursorError MsgType = "subscribe_cursor_error"
	TypeSubscriptionLagged   MsgType = "subscription_lagged"
	TypeStreamRecords        MsgType = "stream_records"
	TypePublishRefused       MsgType = "publish_refused"
	TypeOffsetForTime        MsgType = "offset_for_time"
	TypeTimeOffset           MsgType = "time_offset"
	TypeProducerInit         MsgType = "producer_init"
	TypeProducerInitOK       MsgType = "producer_init_ok"
	TypeShardOwners          MsgType = "shard_owners"
	TypeShardOwnersView      MsgType = "shard_owners_view"
)

// Reply is a broker answer to a request; AnswerTo is the request's id, which
// the client uses to find the caller waiting for it.
type Reply interface {
	Message
	AnswerTo() uint64
}

func (m *Subscribed) AnswerTo() uint64           { return m.RequestID }
func (m *OK) AnswerTo() uint64                   { return m.RequestID }
func (m *ErrorMsg) AnswerTo() uint64             { return m.RequestID }
func (m *StreamInfo) AnswerTo() uint64           { return m.RequestID }
func (m *StreamInfos) AnswerTo() uint64          { return m.RequestID }
func (m *StreamRecords) AnswerTo() uint64        { return m.RequestID }
func (m *TimeOffset) AnswerTo() uint64           { return m.RequestID }
func (m *SubscribeCursorError) AnswerTo() uint64 { return m.RequestID }
func (m *PublishRefused) AnswerTo() uint64       { return m.RequestID }
func (m *ProducerInitOK) AnswerTo() uint64       { return m.RequestID }
func (m *ShardOwnersView) AnswerTo() uint64      { return m.RequestID }

// PublishRefused answers a conditional or idempotent publish the broker did
// not write, on the publish's stream in its place in order: Reason
// offset_mismatch, with Expected and Tail (the offset the batch would have
// started at); or an idempotent producer's refusal (Reason* constants),
// with Expected the sequence the shard expects on a sequence_gap.
type PublishRefused struct {
	RequestID uint64 `msgpack:"request_id"`
	Reason    string `msgpack:"reason"`
	Expected  uint64 `msgpack:"expected"`
	Tail      uint64 `msgpack:"tail"`
	Message   string `msgpack:"message,omitempty"`
}

func (*PublishRefused) Type() MsgType { return TypePublishRefused }

// Err is the refusal as an error.
func (m *PublishRefused) Err() *RefusedError {
	return &RefusedError{Reason: m.Reason, Expected: m.Expected, Tail: m.Tail, Message: m.Message}
}

// Feature bits say which requests exist. They are negotiated in the
// handshake: the broker answers with the intersection of what the client
// offered and what it supports. The bits are part of felix/1; never
// reassign one.
const (
	FeatureErrorCodes      uint32 = 0x0000_0800
	FeaturePublishPipeline uint32 = 0x0000_8000
	FeatureStreamShards    uint32 = 0x0000_0020
	FeatureSubscribeQueue  uint32 = 0x4000_0000
	// FeaturePublishConditional: publish_if (FlagPublishIf, PublishRefused).
	FeaturePublishConditional uint32 = 0x1000_0000
	// FeatureIdempotentProducer: producer_init and FlagPublishIdempotent.
	FeatureIdempotentProducer uint32 = 0x0000_0200
	// FeatureRedirect: errors may name the shard's owner (ErrorMsg.Owner,
	// FlagPublishAckOwner on a failed binary ack), so a client can go there.
	FeatureRedirect uint32 = 0x0000_0002
	// FeatureShardOwners: shard_owners, answered by shard_owners_view.
	FeatureShardOwners uint32 = 0x0004_0000

	// SupportedFeatures is every feature this version implements.
	SupportedFeatures = FeatureErrorCodes | FeaturePublishPipeline | FeatureSubscribeQueue | FeatureStreamShards |
		FeaturePublishConditional | FeatureIdempotentProducer | FeatureRedirect | FeatureShardOwners |
		FeatureReplicationStatus | FeatureCache | FeatureCacheSnapshotEnd
	// SupportedFlags is every frame flag this version reads and writes.
	SupportedFlags = knownFlags
)

// Message is a msgpack control message.
type Message interface {
	Type() MsgType
}

// Auth opens a connection's first control stream.
type Auth struct {
	Tenant         string `msgpack:"tenant"`
	Token          string `msgpack:"token,omitempty"`
	ClientFlags    uint16 `msgpack:"client_flags"`
	ClientFeatures uint32 `msgpack:"client_features"`
	ClientName     string `msgpack:"client_name,omitempty"`
}

// AuthOK accepts the handshake with the negotiated flags and features.
type AuthOK struct {
	ServerFlags    uint16 `msgpack:"server_flags"`
	ServerFeatures uint32 `msgpack:"server_features"`
	PublishWindow  int    `msgpack:"publish_window"`
	MaxFrameBytes  int    `msgpack:"max_frame_bytes"`
}

// Subscribe asks for a subscription. QueueCapacity 0 takes the stream's
// default; any other value is clamped by the broker.
type Subscribe struct {
	RequestID     uint64 `msgpack:"request_id"`
	Tenant        string `msgpack:"tenant"`
	Namespace     string `msgpack:"namespace"`
	Stream        string `msgpack:"stream"`
	QueueCapacity int64  `msgpack:"queue_capacity,omitempty"`
	Shard         uint32 `msgpack:"shard,omitempty"`
	// Start is latest (""), "earliest" or "offset" (StartOffset is then the
	// first record the client has not seen). Durable streams only.
	Start       string `msgpack:"start,omitempty"`
	StartOffset uint64 `msgpack:"start_offset,omitempty"`
}

// Scope returns the stream the request names.
func (s *Subscribe) Scope() Scope { return Scope{s.Tenant, s.Namespace, s.Stream} }

// Subscribed answers Subscribe once the subscriber is registered; its event
// stream's EventStreamHello names the same subscription id.
type Subscribed struct {
	RequestID      uint64 `msgpack:"request_id"`
	SubscriptionID uint64 `msgpack:"subscription_id"`
	QueueCapacity  int    `msgpack:"queue_capacity"`
	// On a durable stream: the first offset this subscription delivers, and
	// the tail when it registered (below it is history, from it on live).
	StartOffset uint64 `msgpack:"start_offset,omitempty"`
	LiveOffset  uint64 `msgpack:"live_offset,omitempty"`
	Durable     bool   `msgpack:"durable,omitempty"`
}

// SubscribeCursorError refuses a Subscribe whose start offset is in the
// future or below retention; Available is the nearest offset that works.
type SubscribeCursorError struct {
	RequestID uint64 `msgpack:"request_id"`
	Reason    string `msgpack:"reason"` // in_future or too_old
	Requested uint64 `msgpack:"requested"`
	Available uint64 `msgpack:"available"`
}

// SubscriptionLagged is the last frame of a durable subscription's event
// stream when the subscription fell behind its queue: nothing was skipped
// silently; resubscribe from ResumeFrom.
type SubscriptionLagged struct {
	SubscriptionID uint64 `msgpack:"subscription_id"`
	ResumeFrom     uint64 `msgpack:"resume_from"`
}

func (*SubscribeCursorError) Type() MsgType { return TypeSubscribeCursorError }
func (*SubscriptionLagged) Type() MsgType   { return TypeSubscriptionLagged }

// Unsubscribe ends a subscription; the broker answers OK and finishes its event stream.
type Unsubscribe struct {
	RequestID      uint64 `msgpack:"request_id"`
	SubscriptionID uint64 `msgpack:"subscription_id"`
}

// OK answers a request that has no other answer.
type OK struct {
	RequestID uint64 `msgpack:"request_id"`
}

// ErrorMsg answers a request (or, with RequestID 0, a connection) that failed.
type ErrorMsg struct {
	RequestID uint64     `msgpack:"request_id"`
	Code      Code       `msgpack:"code"`
	Retry     RetryClass `msgpack:"retry"`
	Message   string     `msgpack:"message"`
	// Owner, with FeatureRedirect, names the member that owns the shard
	// the request was for (not_leader: go there; shard_unavailable: the
	// member that is gone).
	Owner *Owner `msgpack:"owner,omitempty"`
}

// Err returns the message as an *Error.
func (e *ErrorMsg) Err() *Error {
	return &Error{Code: e.Code, Retry: e.Retry, Message: e.Message, Owner: e.Owner}
}

// Owner names the cluster member that owns a shard and where clients reach
// it over felix/1. Generation is the ownership's fencing epoch: it grows
// with every change of owner, so of two answers naming different owners
// of one shard the larger generation is the newer. Its unit is the
// shard's: the raft term for a replicated shard, the owner key's etcd
// revision for an unreplicated one, so generations of different shards
// do not compare.
type Owner struct {
	NodeID     string `msgpack:"node_id"`
	Addr       string `msgpack:"addr"`
	Generation uint64 `msgpack:"generation"`
}

// ShardOwners asks which member owns each shard of a stream (it makes an
// implicit stream on first use, as a publish would); answered by
// ShardOwnersView.
type ShardOwners struct {
	RequestID uint64 `msgpack:"request_id"`
	Tenant    string `msgpack:"tenant"`
	Namespace string `msgpack:"namespace"`
	Stream    string `msgpack:"stream"`
}

// ShardOwnersView is a stream's shards and their owners, one entry per
// shard in shard order. A single broker names itself with an empty Addr:
// "the broker you asked".
type ShardOwnersView struct {
	RequestID uint64       `msgpack:"request_id"`
	Shards    uint32       `msgpack:"shards"`
	Routing   string       `msgpack:"routing"`
	Durable   bool         `msgpack:"durable"`
	Owners    []ShardOwner `msgpack:"owners"`
}

// ShardOwner is one shard's owner. Available is false when no member can
// serve the shard now: not placed yet, or a durable shard whose member is
// down (Owner then names that member).
type ShardOwner struct {
	Shard     uint32 `msgpack:"shard"`
	Owner     Owner  `msgpack:"owner"`
	Available bool   `msgpack:"available"`
}

func (*ShardOwners) Type() MsgType     { return TypeShardOwners }
func (*ShardOwnersView) Type() MsgType { return TypeShardOwnersView }

// EventStreamHello is the first frame of a subscription's event stream and
// the only one that names the subscription.
type EventStreamHello struct {
	SubscriptionID uint64 `msgpack:"subscription_id"`
}

// StreamCreate creates a stream; creating one that exists with the same
// settings succeeds, with different settings fails. Answered by StreamInfo.
type StreamCreate struct {
	RequestID      uint64 `msgpack:"request_id"`
	Tenant         string `msgpack:"tenant"`
	Namespace      string `msgpack:"namespace"`
	Stream         string `msgpack:"stream"`
	Shards         uint32 `msgpack:"shards"`
	Durable        bool   `msgpack:"durable,omitempty"`
	Routing        string `msgpack:"routing,omitempty"`
	RetentionBytes int64  `msgpack:"retention_bytes,omitempty"`
	RetentionAgeMS int64  `msgpack:"retention_age_ms,omitempty"`
	// Replicas is a durable stream's replication factor in a cluster
	// (0: the broker's default: 3 in a cluster of at least 3 members with
	// a peer link, else 1).
	Replicas uint32 `msgpack:"replicas,omitempty"`
	// LogAppendTime makes every record's time its append time, never a
	// producer's (Kafka's message.timestamp.type=LogAppendTime); durable
	// streams only.
	LogAppendTime bool `msgpack:"log_append_time,omitempty"`
	// Compression is the codec the Kafka listener compresses fetched
	// batches with where that saves bytes (Kafka's compression.type):
	// gzip, snappy, lz4, zstd or none; empty for each batch in the codec
	// its producer sent; durable streams only.
	Compression string `msgpack:"compression,omitempty"`
}

// StreamGet asks for one stream's definition; answered by StreamInfo.
type StreamGet struct {
	RequestID uint64 `msgpack:"request_id"`
	Tenant    string `msgpack:"tenant"`
	Namespace string `msgpack:"namespace"`
	Stream    string `msgpack:"stream"`
}

// StreamList asks for the streams of a tenant, optionally of one namespace;
// answered by StreamInfos.
type StreamList struct {
	RequestID uint64 `msgpack:"request_id"`
	Tenant    string `msgpack:"tenant"`
	Namespace string `msgpack:"namespace,omitempty"`
}

// StreamDelete deletes a stream: its subscriptions end and its shards stop.
// Answered by OK.
type StreamDelete struct {
	RequestID uint64 `msgpack:"request_id"`
	Tenant    string `msgpack:"tenant"`
	Namespace string `msgpack:"namespace"`
	Stream    string `msgpack:"stream"`
}

// StreamInfo describes a stream.
type StreamInfo struct {
	RequestID      uint64 `msgpack:"request_id"`
	Tenant         string `msgpack:"tenant"`
	Namespace      string `msgpack:"namespace"`
	Stream         string `msgpack:"stream"`
	Shards         uint32 `msgpack:"shards"`
	Durable        bool   `msgpack:"durable"`
	Routing        string `msgpack:"routing"`
	RetentionBytes int64  `msgpack:"retention_bytes,omitempty"`
	RetentionAgeMS int64  `msgpack:"retention_age_ms,omitempty"`
	Replicas       uint32 `msgpack:"replicas,omitempty"`
	LogAppendTime  bool   `msgpack:"log_append_time,omitempty"`
	Compression    string `msgpack:"compression,omitempty"`
	// Implicit is true for a stream made by its first publish or subscribe.
	Implicit    bool  `msgpack:"implicit,omitempty"`
	CreatedAtMS int64 `msgpack:"created_at_ms"`
}

// StreamInfos answers StreamList.
type StreamInfos struct {
	RequestID uint64       `msgpack:"request_id"`
	Streams   []StreamInfo `msgpack:"streams"`
}

// StreamRead asks for one page of committed records of a durable shard,
// from From, stopping before End when End is set; it registers nothing.
// On a replicated shard it is linearizable: the leader answers once it
// confirmed its leadership with a quorum, and a follower refuses
// not_leader naming the leader, unless FollowerMaxLagMS asks for a
// follower read. Answered by StreamRecords.
type StreamRead struct {
	RequestID  uint64  `msgpack:"request_id"`
	Tenant     string  `msgpack:"tenant"`
	Namespace  string  `msgpack:"namespace"`
	Stream     string  `msgpack:"stream"`
	Shard      uint32  `msgpack:"shard,omitempty"`
	From       uint64  `msgpack:"from"`
	End        *uint64 `msgpack:"end,omitempty"`
	MaxRecords uint32  `msgpack:"max_records,omitempty"`
	MaxBytes   uint32  `msgpack:"max_bytes,omitempty"`
	// FollowerMaxLagMS, when not zero, asks for a follower read (at most
	// MaxFollowerLagMS): any replica of a replicated shard answers from
	// what it applied, if it heard from its leader within that many
	// milliseconds and applied all the leader said was committed. The
	// answer's Committed is then that replica's applied end, and Follower
	// is set. A broker that predates the field ignores it.
	FollowerMaxLagMS uint32 `msgpack:"follower_max_lag_ms,omitempty"`
}

// MaxFollowerLagMS is the largest FollowerMaxLagMS a broker takes: a
// follower read staler than a minute is refused as invalid_request
// rather than promised.
const MaxFollowerLagMS = 60_000

// StreamRecord is one record of a StreamRecords page. Key and Headers are
// optional fields, present only for a record stored with them (one
// produced through the Kafka listener); a client that does not know them
// reads the payload as before.
type StreamRecord struct {
	Offset  uint64         `msgpack:"offset"`
	TimeMS  int64          `msgpack:"time_ms"`
	Payload []byte         `msgpack:"payload"`
	Key     []byte         `msgpack:"key,omitempty"`
	Headers []StreamHeader `msgpack:"headers,omitempty"`
}

// StreamHeader is one record header of a StreamRecord (a nil Value is a
// null one).
type StreamHeader struct {
	Key   string `msgpack:"key"`
	Value []byte `msgpack:"value"`
}

// StreamRecords answers StreamRead: the records and the offset to read from
// next. Committed is the end of what could be read when the page was made;
// Follower says a follower served it, from its own applied state.
type StreamRecords struct {
	RequestID  uint64         `msgpack:"request_id"`
	Records    []StreamRecord `msgpack:"records"`
	NextOffset uint64         `msgpack:"next_offset"`
	Committed  uint64         `msgpack:"committed"`
	Follower   bool           `msgpack:"follower,omitempty"`
}

func (*StreamRead) Type() MsgType    { return TypeStreamRead }
func (*StreamRecords) Type() MsgType { return TypeStreamRecords }

// OffsetForTime asks where a durable shard's records reach a time: the
// offset of the first committed record stored at or after TimeMS (unix
// milliseconds; a record's time is when the broker appended it). Answered
// by TimeOffset. It never waits and registers nothing.
type OffsetForTime struct {
	RequestID uint64 `msgpack:"request_id"`
	Tenant    string `msgpack:"tenant"`
	Namespace string `msgpack:"namespace"`
	Stream    string `msgpack:"stream"`
	Shard     uint32 `msgpack:"shard,omitempty"`
	TimeMS    int64  `msgpack:"time_ms"`
}

// TimeOffset answers OffsetForTime. Offset is the first committed record
// whose time is at or after the time asked; when every committed record is
// older it is the committed end (the next offset), so a reader starting at
// Offset sees only records at or after the time either way. A time before
// every record kept answers the oldest one retention kept.
type TimeOffset struct {
	RequestID uint64 `msgpack:"request_id"`
	Offset    uint64 `msgpack:"offset"`
}

// ProducerInit asks for a new idempotent producer id for the connection's
// tenant; answered by ProducerInitOK. Each id is given once; its
// sequences start at 0 on every shard.
type ProducerInit struct {
	RequestID uint64 `msgpack:"request_id"`
}

// ProducerInitOK answers ProducerInit with the producer's id.
type ProducerInitOK struct {
	RequestID  uint64 `msgpack:"request_id"`
	ProducerID uint64 `msgpack:"producer_id"`
}

func (*ProducerInit) Type() MsgType   { return TypeProducerInit }
func (*ProducerInitOK) Type() MsgType { return TypeProducerInitOK }

func (*OffsetForTime) Type() MsgType { return TypeOffsetForTime }
func (*TimeOffset) Type() MsgType    { return TypeTimeOffset }

func (*StreamCreate) Type() MsgType { return TypeStreamCreate }
func (*StreamGet) Type() MsgType    { return TypeStreamGet }
func (*StreamList) Type() MsgType   { return TypeStreamList }
func (*StreamDelete) Type() MsgType { return TypeStreamDelete }
func (*StreamInfo) Type() MsgType   { return TypeStreamInfo }
func (*StreamInfos) Type() MsgType  { return TypeStreamInfos }

func (*Auth) Type() MsgType             { return TypeAuth }
func (*AuthOK) Type() MsgType           { return TypeAuthOK }
func (*Subscribe) Type() MsgType        { return TypeSubscribe }
func (*Subscribed) Type() MsgType       { return TypeSubscribed }
func (*Unsubscribe) Type() MsgType      { return TypeUnsubscribe }
func (*OK) Type() MsgType               { return TypeOK }
func (*ErrorMsg) Type() MsgType         { return TypeError }
func (*EventStreamHello) Type() MsgType { return TypeEventStreamHello }

func newMessage(t MsgType) Message {
	switch t {
	case TypeAuth:
		return &Auth{}
	case TypeAuthOK:
		return &AuthOK{}
	case TypeShardOwners:
		return &ShardOwners{}
	case TypeShardOwnersView:
		return &ShardOwnersView{}
	case TypeReplicationStatus:
		return &ReplicationStatus{}
	case TypeReplicationStatusView:
		return &ReplicationStatusView{}
	case TypeSubscribe:
		return &Subscribe{}
	case TypeSubscribed:
		return &Subscribed{}
	case TypeUnsubscribe:
		return &Unsubscribe{}
	case TypeOK:
		return &OK{}
	case TypeError:
		return &ErrorMsg{}
	case TypeEventStreamHello:
		return &EventStreamHello{}
	case TypeStreamCreate:
		return &StreamCreate{}
	case TypeStreamGet:
		return &StreamGet{}
	case TypeStreamList:
		return &StreamList{}
	case TypeStreamDelete:
		return &StreamDelete{}
	case TypeStreamInfo:
		return &StreamInfo{}
	case TypeStreamInfos:
		return &StreamInfos{}
	case TypeStreamRead:
		return &StreamRead{}
	case TypeSubscribeCursorError:
		return &SubscribeCursorError{}
	case TypeSubscriptionLagged:
		return &SubscriptionLagged{}
	case TypeStreamRecords:
		return &StreamRecords{}
	case TypePublishRefused:
		return &PublishRefused{}
	case TypeOffsetForTime:
		return &OffsetForTime{}
	case TypeTimeOffset:
		return &TimeOffset{}
	case TypeProducerInit:
		return &ProducerInit{}
	case TypeProducerInitOK:
		return &ProducerInitOK{}
	}
	if m := newCacheMessage(t); m != nil { // cache.go
		return m
	}
	return newGroupMessage(t) // groups.go
}

// ErrUnknownMessage means a control message of a type this version does not know.
var ErrUnknownMessage = errors.New("wire: unknown message type")

// envelope is the msgpack shape of a control message: [type, body].
type envelope struct {
	// msgpack/v5 reads as_array only from a field named _msgpack.
	_msgpack struct{} `msgpack:",as_array"`
	Type     MsgType
	Body     msgpack.RawMessage
}

// AppendMessage appends a whole control frame (header included).
func AppendMessage(b []byte, m Message) ([]byte, error) {
	body, err := msgpack.Marshal(m)
	if err != nil {
		return b, fmt.Errorf("wire: encode %s: %w", m.Type(), err)
	}
	payload, err := msgpack.Marshal(&envelope{Type: m.Type(), Body: body})
	if err != nil {
		return b, fmt.Errorf("wire: encode %s: %w", m.Type(), err)
	}
	b = AppendHeader(b, 0, len(payload))
	return append(b, payload...), nil
}

// DecodeMessage decodes a control payload (a frame with no flags) of at
// most MaxRequestBytes for its type: what a broker accepts from a client.
func DecodeMessage(payload []byte) (Message, error) {
	if len(payload) > MaxControlBytes {
		if len(payload) > MaxCacheWriteBytes || !carriesValues(peekType(payload)) {
			return nil, fmt.Errorf("%w: control message of %d bytes, cap %d", ErrFrameTooLarge, len(payload), MaxControlBytes)
		}
	}
	return DecodeMessageLimit(payload, MaxCacheWriteBytes)
}

// MaxCacheWriteBytes caps the control messages that carry a cache's
// values (cache_put, cache_commit): a value of up to a cache's 1 MiB, its
// key and conditions, or a commit's ops and event.
const MaxCacheWriteBytes = 2 << 20

// MaxRequestBytes is the largest payload a broker decodes for a request
// of m's type; a client refuses a larger one before sending it, since the
// broker's refusal could not name the request it did not decode.
func MaxRequestBytes(m Message) int {
	if carriesValues(m.Type()) {
		return MaxCacheWriteBytes
	}
	return MaxControlBytes
}

func carriesValues(t MsgType) bool { return t == TypeCachePut || t == TypeCacheCommit }

// peekType reads a control payload's type without decoding its body; ""
// when the payload is not a well-formed envelope.
func peekType(payload []byte) MsgType {
	if checkMsgpack(payload) != nil {
		return ""
	}
	d := msgpack.NewDecoder(bytes.NewReader(payload))
	if n, err := d.DecodeArrayLen(); err != nil || n != 2 {
		return ""
	}
	t, err := d.DecodeString()
	if err != nil {
		return ""
	}
	return MsgType(t)
}

// DecodeMessageLimit decodes a control payload of at most limit bytes. A
// client reading a broker's answers uses the frame cap: a page of records
// is larger than any request.
func DecodeMessageLimit(payload []byte, limit int) (Message, error) {
	if len(payload) > limit {
		return nil, fmt.Errorf("%w: control message of %d bytes, cap %d", ErrFrameTooLarge, len(payload), limit)
	}
	if err := checkMsgpack(payload); err != nil {
		return nil, err
	}
	if t, body, ok := splitEnvelope(payload); ok {
		if m, ok := newMessage(t).(fastBody); ok && m.decodeFast(body) {
			return m.(Message), nil
		}
	}
	var env envelope
	if err := msgpack.Unmarshal(payload, &env); err != nil {
		return nil, fmt.Errorf("%w: control message: %v", ErrMalformed, err)
	}
	m := newMessage(env.Type)
	if m == nil {
		return nil, fmt.Errorf("%w: %.64q", ErrUnknownMessage, env.Type)
	}
	if err := checkIntRanges(env.Body, m); err != nil {
		return nil, err
	}
	if err := msgpack.Unmarshal(env.Body, m); err != nil {
		return nil, fmt.Errorf("%w: %s body: %v", ErrMalformed, env.Type, err)
	}
	return m, nil
}
