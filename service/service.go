// Package service is the broker as every front end sees it: publish,
// subscribe, range reads and stream administration, on domain types, each
// call taking a context and failing with a typed error (*wire.Error, whose
// code comes from the one table in wire/errors.go, or *wire.CursorError).
//
// felix/1 over QUIC (package transport), the Kafka listener (package
// kafka) and browsers over WebSocket (package webfront) are its front ends. The broker implements Service; front ends convert their protocol to
// these types and back, so nothing behind this boundary knows a wire
// message, and checks that concern every protocol (tenancy, permissions,
// quotas) have one place to live.
package service

import (
	"context"
	"io"
	"net"
	"time"

	"github.com/getfelix/felix-go/wire"
)

// Service opens sessions. It is safe for concurrent use.
type Service interface {
	// Open authenticates a client that completed its handshake and starts
	// its session; an error is unauthenticated (or limit_exceeded) and the
	// client is refused.
	Open(ctx context.Context, c Client) (Session, error)
}

// SCRAMService is the side of a Service that runs SCRAM logins, found by
// type assertion: only the Kafka listener carries SCRAM, so the other
// front ends' services need not have it.
type SCRAMService interface {
	// StartSCRAM begins a SCRAM login (RFC 5802; SCRAM-SHA-256 or
	// SCRAM-SHA-512, RFC 7677) for c, whose Tenant and Token are unused:
	// the exchange names the user, as TENANT/USER. It fails
	// unauthenticated where the broker keeps no users (a cluster member,
	// auth none), and invalid_request for another mechanism.
	StartSCRAM(c Client, mechanism string) (SCRAMLogin, error)
}

// SCRAM mechanisms, as SASL names them.
const (
	MechanismSCRAMSHA256 = "SCRAM-SHA-256"
	MechanismSCRAMSHA512 = "SCRAM-SHA-512"
)

// SCRAMLogin is one SCRAM exchange: the client's first message answered
// with the server's, then the client's final message (its proof) with
// the server's signature and the user's session. It is used by one
// goroutine.
type SCRAMLogin interface {
	// Step takes the client's next message. Any error ends the exchange:
	// it is unauthenticated, the same for an unknown user as for a wrong
	// password, or limit_exceeded for an address that failed too often.
	Step(ctx context.Context, msg []byte) (*SCRAMStep, error)
}

// SCRAMStep is the server's answer to one message of a SCRAM exchange.
type SCRAMStep struct {
	// Reply is the server's message to send back.
	Reply []byte
	// Session is the user's, once the client proved its password (after
	// the final message); nil before.
	Session Session
	// Tenant is the user's tenant, with Session.
	Tenant string
}

// Client describes who a session serves.
type Client struct {
	// ID is unique among the broker's live sessions.
	ID     uint64
	Remote net.Addr
	// Tenant is the tenant the client names; its token must be for it.
	Tenant string
	// Token is the client's credential (a signed JWT); Open verifies it.
	Token string
	// CertSubject is the subject common name of the client's verified
	// TLS certificate (mutual TLS), or empty.
	CertSubject string
	// Offsets asks for event batches that carry their base offset (the
	// felix/1 flag FlagEventBatchOffsets); only durable streams have them.
	Offsets bool
	// Frontend names the front end the client came through (FrontendFelix,
	// FrontendKafka, FrontendBrowser), for the broker's metrics.
	Frontend string
}

// Front end names, as Client.Frontend and the frontend label of metrics.
const (
	FrontendFelix   = "felix1"
	FrontendKafka   = "kafka"
	FrontendBrowser = "browser"
)

// Session serves one client. Its methods may be called from several
// goroutines at once. Close ends every subscription it still has.
type Session interface {
	// Publish admits a publish, waiting for room in the shard's queue at
	// most the broker's publish_queue_wait_timeout_ms (or less, if ctx ends
	// sooner). On nil, done (if set) is called exactly once when the publish
	// was handled; it must not block. On error, done is never called.
	Publish(ctx context.Context, p *Publish, done func(PublishResult)) error
	// Subscribe registers a subscription. open is called once, with the new
	// subscription's id, to open the sink its event batches are written to;
	// the session owns the sink from then on. History (a durable stream's
	// log, an in-memory stream's replay ring) is written after Subscribe
	// returns, so the answer reaches the client before the history does.
	Subscribe(ctx context.Context, req *Subscribe, open OpenSink) (*Subscribed, error)
	// Unsubscribe ends one of this session's subscriptions.
	Unsubscribe(ctx context.Context, id uint64) error
	// Read returns one page of a durable shard's committed records. On a
	// replicated shard it is linearizable (it sees every record committed
	// before it began): only the leader answers, once it confirmed its
	// leadership with a quorum; any other replica refuses not_leader
	// naming the leader, unless req.FollowerMaxLag asks for a follower
	// read.
	Read(ctx context.Context, req *Read) (*Records, error)
	// OffsetForTime returns the offset of a durable shard's first
	// committed record stored at or after t, or the committed end when
	// every committed record is older, so that reading from it gives only
	// records at or after t. A t before every record kept is the oldest
	// offset retention kept. Linearizable on a replicated shard, as Read.
	OffsetForTime(ctx context.Context, scope wire.Scope, shard uint32, t time.Time) (uint64, error)
	// CreateStream creates a stream, or confirms one with the same settings.
	CreateStream(ctx context.Context, spec *StreamSpec) (*StreamInfo, error)
	// Stream describes one stream; it never creates one.
	Stream(ctx context.Context, scope wire.Scope) (*StreamInfo, error)
	// Streams lists a tenant's streams, of one namespace when it is not empty.
	Streams(ctx context.Context, tenant, namespace string) ([]StreamInfo, error)
	// CheckCreateStream makes every check CreateStream makes (the right,
	// the settings, the replicas, the tenant's stream limit) and creates
	// nothing: a front end's dry run (Kafka's validate_only). A stream that
	// exists with the same settings passes, as CreateStream confirms it.
	CheckCreateStream(ctx context.Context, spec *StreamSpec) error
	// DeleteStream deletes a stream and ends its subscriptions.
	DeleteStream(ctx context.Context, scope wire.Scope) error
	// ShardOwners says which member owns each shard of a stream, making an
	// implicit stream on first use as a publish would. A single broker
	// names itself (an empty Addr). It waits a little for shards that are
	// being placed; one still without an owner is reported not Available.
	ShardOwners(ctx context.Context, scope wire.Scope) (*Topology, error)
	// Replication is this member's view of a replicated stream's shards:
	// those whose replica runs here (the leader's view has every
	// replica's progress), and this member's node id. Empty for a stream
	// that is not replicated.
	Replication(ctx context.Context, scope wire.Scope) (node string, shards []wire.ShardReplication, err error)
	// InitProducer gives the session's tenant a new idempotent producer
	// id; its sequences start at 0 on every shard of every stream.
	InitProducer(ctx context.Context) (uint64, error)
	// Reauthenticate replaces the session's credential with a fresh token
	// for the same tenant, before or after the old one expired; on an
	// error the old one stays in force.
	Reauthenticate(ctx context.Context, token string) error
	// Close ends every subscription of the session; the client is gone.
	Close()

	// AuthorizeGroups checks the session's group right on scope's
	// stream, touching nothing: to consume from and describe its groups,
	// or with manage to change and delete them. A front end that keeps
	// consumer groups of its own (the Kafka listener's, whose state is in
	// the tenant's __kafka/offsets) checks it before acting on them.
	AuthorizeGroups(scope wire.Scope, manage bool) error

	// Consumer groups (groups.go). Each needs a durable stream.

	// CreateGroup creates a group at start on every shard; one that exists
	// is left as it is.
	CreateGroup(ctx context.Context, scope wire.Scope, group string, start GroupStart) (*GroupInfo, error)
	// SeekGroup moves an existing group's cursor; claims in flight are
	// dropped, dead letters kept.
	SeekGroup(ctx context.Context, scope wire.Scope, group string, start GroupStart) (*GroupInfo, error)
	// DescribeGroup reports a group's state on every shard.
	DescribeGroup(ctx context.Context, scope wire.Scope, group string) (*GroupInfo, error)
	// DescribeGroupOn is DescribeGroup on only's shards (every shard when
	// empty): a cluster client asks each shard's serving member for its own.
	DescribeGroupOn(ctx context.Context, scope wire.Scope, group string, only []uint32) (*GroupInfo, error)
	// Groups lists a stream's groups.
	Groups(ctx context.Context, scope wire.Scope) ([]string, error)
	// DeleteGroup deletes a group.
	DeleteGroup(ctx context.Context, scope wire.Scope, group string) error
	// DeleteGroupOn deletes a group's parts on only's shards (every shard
	// when empty), as DescribeGroupOn.
	DeleteGroupOn(ctx context.Context, scope wire.Scope, group string, only []uint32) error
	// PollGroup hands out records of one shard, waiting up to req.Wait for
	// some.
	PollGroup(ctx context.Context, req *GroupPoll) ([]GroupRecord, error)
	// SettleGroup settles claims; the ones it could not settle are returned.
	SettleGroup(ctx context.Context, req *GroupSettle) ([]ClaimFailure, error)
	// GroupDeadLetters lists up to max dead letters of a shard from offset from.
	GroupDeadLetters(ctx context.Context, ref GroupRef, from uint64, max int) (*DeadLetters, error)
	// RedriveGroup hands dead letters (offsets, or all) out again;
	// DiscardDeadLetters forgets them. Both return how many they changed.
	RedriveGroup(ctx context.Context, ref GroupRef, offsets []uint64, all bool) (int, error)
	DiscardDeadLetters(ctx context.Context, ref GroupRef, offsets []uint64, all bool) (int, error)
}

// CommitWatcher is a Session that can wake a reader caught up with a
// durable shard when records are committed to it (the Kafka listener's
// long-polling Fetch). It is optional: a front end asserts it, and without
// it waits out its own deadline.
type CommitWatcher interface {
	// WatchCommitted sends on wake, without blocking (give it room for
	// one), whenever the shard's committed end moves (a publish here, or
	// on a replicated shard any applied entry, on a follower too), and at
	// once when it is already past after. cancel must be called when
	// done. It needs the right to read the shard, and the shard served
	// here; a watch past the shard's bound of them is never woken.
	WatchCommitted(ctx context.Context, scope wire.Scope, shard uint32, after uint64, wake chan<- struct{}) (cancel func(), err error)
}

// Publish is one batch of records for one stream.
type Publish struct {
	Scope wire.Scope
	// Key picks the shard through the stream's routing; nil is shard 0.
	Key []byte
	// Shard, when set, is the shard the batch goes to in place of Key's
	// routing (the Kafka listener: partition N is shard N). A shard past
	// the stream's is not_found.
	Shard    *uint32
	Payloads [][]byte
	// ExpectedOffset, when set, makes the publish conditional (publish_if):
	// it is written only if it would start at this offset (durable streams
	// only); otherwise it fails with *wire.RefusedError and nothing is
	// written.
	ExpectedOffset *uint64
	// Attrs, when set, are the records' keys and headers, parallel to
	// Payloads (a zero RecordAttrs for a record without). A durable stream
	// keeps them, and Read gives them back; subscribers and in-memory
	// streams get the payloads only.
	Attrs []RecordAttrs
	// Producer, when set, is an idempotent producer's batch (durable
	// streams only): a re-send of one the shard remembers is answered with
	// its original offset and written nothing; a refusal is a
	// *wire.RefusedError (sequence_gap, unknown_producer, sequence_reused,
	// sequence_expired) and nothing is written.
	Producer *ProducerSeq
}

// RecordAttrs is a record's key (nil: none) and headers.
type RecordAttrs struct {
	Key     []byte
	Headers []Header
	// Time is the record's own time (a Kafka producer's CreateTime), kept
	// to the millisecond unless the stream is LogAppendTime; zero: none,
	// the record's time is its append time.
	Time time.Time
	// Codec is the compression the record came in, one of Codecs ("":
	// none): the Kafka listener fetches it so from a stream without a
	// codec of its own. A durable stream keeps it.
	Codec string
	// Batch, on the first record of records published as one batch (a
	// Kafka producer's compressed one), is how many they are, so a
	// reader can give them back whole; 0 elsewhere. A durable stream
	// keeps it.
	Batch int
}

// Header is one record header (a nil Value is a null one).
type Header struct {
	Key   string
	Value []byte
}

// ProducerSeq is an idempotent producer's id (from InitProducer) and the
// batch's sequence on its shard.
type ProducerSeq struct{ ID, Seq uint64 }

// Bytes sums the payload sizes.
func (p *Publish) Bytes() int64 { return wire.PayloadBytes(p.Payloads) }

// PublishResult is how a publish ended.
type PublishResult struct {
	// Offset is the first record's offset when Durable.
	Offset  uint64
	Durable bool
	// AppendTime is a durable batch's append time, the time its records
	// keep on a LogAppendTime stream; zero for a re-sent batch written
	// before and for an in-memory stream.
	AppendTime time.Time
	Err        error
}

// Start says where a subscription begins.
type Start uint8

// Where a subscription can begin.
const (
	// StartLatest receives what is published after the subscription exists.
	StartLatest Start = iota
	// StartEarliest begins at the oldest record kept: retention's oldest on
	// a durable stream, the replay ring's oldest on an in-memory one.
	StartEarliest
	// StartOffset begins at Subscribe.Offset.
	StartOffset
)

// Subscribe asks for a subscription to one shard of a stream.
type Subscribe struct {
	Scope wire.Scope
	Shard uint32
	// QueueCapacity asks for a subscriber queue of this many batches; zero
	// takes the broker's default. The grant is clamped and reported.
	QueueCapacity int64
	Start         Start
	Offset        uint64
}

// Topology is a stream's shards and who owns each, in shard order.
type Topology struct {
	Scope   wire.Scope
	Shards  uint32
	Routing string // a routing.Routing's name: how keys pick shards
	Durable bool
	Owners  []wire.ShardOwner
}

// Subscribed answers Subscribe.
type Subscribed struct {
	ID            uint64
	QueueCapacity int
	// Durable subscriptions report where they start (StartOffset) and the
	// first offset that comes live from the shard rather than from history.
	Durable     bool
	StartOffset uint64
	LiveOffset  uint64
}

// Sink is where a subscription's event batches are written (a QUIC send
// stream for felix/1). Close ends it cleanly; Abort resets it, telling the
// client the broker ended the subscription; code (a wire.StreamCode*) says
// why.
type Sink interface {
	io.Writer
	Close() error
	Abort(code uint64)
}

// OpenSink opens the sink of subscription id.
type OpenSink func(id uint64) (Sink, error)

// Read asks for one page of a durable shard's committed records.
type Read struct {
	Scope wire.Scope
	Shard uint32
	From  uint64
	// End, when set, stops the page before that offset.
	End *uint64
	// MaxRecords and MaxBytes cap the page below the broker's own caps;
	// zero takes the broker's.
	MaxRecords int
	MaxBytes   int
	// FollowerMaxLag, when not zero, asks for a follower read: any replica
	// of a replicated shard answers from what it applied if it heard from
	// its leader within FollowerMaxLag (at most wire.MaxFollowerLagMS) and
	// applied all the leader said was committed. Zero: a linearizable
	// read, which only the leader answers.
	FollowerMaxLag time.Duration
}

// Record is one record read back.
type Record struct {
	Offset uint64
	// Time is the record's own time when it was published with one
	// (RecordAttrs.Time), else its append time.
	Time  time.Time
	Value []byte
	// Key and Headers are the record's attributes, when it was published
	// with them (Publish.Attrs).
	Key     []byte
	Headers []Header
	// Codec is the compression it was published in (RecordAttrs.Codec);
	// Batch the records of its batch, on the batch's first record
	// (RecordAttrs.Batch).
	Codec string
	Batch int
}

// Records is one page of a range read.
type Records struct {
	Records []Record
	// Next is the offset to read next; Committed the end of what readers
	// may see now (after a follower read: that replica's applied end);
	// Start the oldest offset retention kept.
	Next      uint64
	Committed uint64
	Start     uint64
	// Follower: a follower served the read from its own applied state.
	Follower bool
}

// StreamSpec is what a stream is created with.
type StreamSpec struct {
	Scope   wire.Scope
	Shards  uint32
	Durable bool
	// Routing is how keys pick shards: "" or "modulo", or "jump".
	Routing        string
	RetentionBytes int64
	RetentionAge   time.Duration
	// Replicas is a durable stream's replication factor in a cluster; 0
	// takes the broker's default.
	Replicas int
	// LogAppendTime makes every record's time its append time, as Kafka's
	// message.timestamp.type=LogAppendTime does: a producer's own times
	// (RecordAttrs.Time) are not kept. Durable streams only; without it a
	// record keeps its producer's time where it came with one (CreateTime).
	LogAppendTime bool
	// Compression is the codec the Kafka listener compresses a Fetch's
	// batches with, where that saves bytes (Kafka's compression.type):
	// one of Codecs; CompressionNone for none; "" for the codec each
	// record was produced in (Kafka's "producer"). Durable streams only.
	Compression string
}

// CompressionNone is StreamSpec.Compression fetching every batch
// uncompressed, whatever its producer sent.
const CompressionNone = "none"

// Codecs are the names StreamSpec.Compression and RecordAttrs.Codec
// take. NOTE: logs store a record's codec as its index here plus one, so
// names are only ever appended.
var Codecs = []string{"gzip", "snappy", "lz4", "zstd"}

// StreamInfo describes a stream.
type StreamInfo struct {
	StreamSpec
	// Implicit streams were made by a first publish or subscribe: in
	// memory, one shard, not stored.
	Implicit  bool
	CreatedAt time.Time
	// Cache: the stream is a cache (its records are key writes, not
	// events), made by CreateCache.
	Cache bool
}
