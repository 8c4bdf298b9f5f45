// Package kafka is the Kafka front end of the broker: a TCP listener that
// speaks enough of the Kafka protocol for producers, for consumers that
// assign their own partitions and for the classic consumer group protocol,
// and turns each request into calls on the same service.Service the felix/1
// transport uses. Authentication, permissions and quotas stay behind that
// boundary; this package only carries credentials (SASL/PLAIN: username =
// tenant, password = a Felix token) and maps topics, partitions and offsets
// (mapping.go: topic <namespace>.<stream>, split at the first '.';
// partition = shard; offset = offset; service errors to Kafka codes).
//
// Requests are decoded with franz-go's kmsg against the one table of
// advertised versions (apis; a request at another version kmsg still
// speaks is answered UNSUPPORTED_VERSION at that version, versions.go; one
// kmsg does not know, or a Produce with acks 0, closes the connection);
// record batches are checked (CRC-32C, one batch per partition, no control
// or transactional batches, gzip/snappy/lz4/zstd within
// kafka_max_batch_bytes each and kafka_max_request_decompressed_bytes per
// Produce, past which they are refused MESSAGE_TOO_LARGE and
// RECORD_LIST_TOO_LARGE) and built here (batch.go). Fuzzed: FuzzRequest,
// FuzzRecordBatch.
//
// One conn per connection, goroutines rather than actors (they hold no
// broker state): a read loop that admits Produce inline, in wire order,
// runs each Fetch's long poll on its own goroutine (woken through the
// session's service.CommitWatcher, the shard's own commit watch, whenever
// a partition's committed end moves, a replicated shard's follower
// applying its leader's entries included; nothing else but the Fetch's
// max wait), and answers the rest inline; a writer sends answers in
// request order, at most kafka_max_inflight (and
// kafka_max_inflight_request_bytes) read and unanswered, and Fetch
// answers of at most kafka_fetch_max_bytes each and
// kafka_max_inflight_fetch_bytes together (budget.go). Every read has a
// deadline: the login's, then the idle one for a request to start and the
// request one for it to arrive. Only a request past
// kafka_max_request_bytes (or a malformed one) closes the connection.
//
// An idempotent Kafka producer is a Felix idempotent producer: producerMap
// derives Felix's batch sequences from Kafka's record-counted ones (a cache
// re-learnt after a restart by probing the shard with publishes it refuses
// without writing), so the shard's one dedupe check serves both protocols.
// The group coordinator (groups.go) keeps committed offsets in each
// tenant's reserved durable stream __kafka/offsets. In a cluster
// (Config.Cluster) Metadata lists every live member's listener and each
// shard's owner as its partition's leader, and a tenant's coordinator is
// the owner of __kafka/offsets (cluster.go).
//
// Non-obvious behaviour of Kafka clients this package answers:
//
//   - Kafka producer ids are non-negative: the listener draws until one fits (a
//     negative id would make every batch silently non-idempotent).
//   - librdkafka decides SASL support from SASLHandshake v0 in ApiVersions, and
//     reads a nil Fetch `RecordBatches` as a parse failure: v0 is advertised,
//     and an empty slice always sent.
package kafka

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/getfelix/felix-go/service"
)

// Defaults of Config's limits: 8 MiB request, 16 MiB decompressed batch,
// 30 s fetch wait.
const (
	DefaultMaxRequestBytes = 8 << 20
	DefaultMaxBatchBytes   = 16 << 20
	DefaultMaxInflight     = 16
	DefaultMaxFetchWait    = 30 * time.Second
	DefaultAuthTimeout     = 10 * time.Second
	// DefaultMaxRequestDecompressedBytes bounds one Produce's batches
	// together once decompressed: twice the largest batch, so a request
	// of many partitions cannot inflate many times over.
	DefaultMaxRequestDecompressedBytes = 32 << 20
	// DefaultFetchMaxBytes is the Java consumer's fetch.max.bytes default
	// (52428800), the most one Fetch answer carries whatever it asks.
	DefaultFetchMaxBytes = 50 << 20
	// DefaultMaxInflightFetchBytes holds one full-size Fetch answer and
	// a little more per connection: kgo and librdkafka keep one Fetch in
	// flight per broker, so only a pipelining client ever waits.
	DefaultMaxInflightFetchBytes = 64 << 20
	// DefaultMaxInflightRequestBytes is two full-size requests.
	DefaultMaxInflightRequestBytes = 16 << 20
	// DefaultRequestReadTimeout bounds a request once its first byte has
	// arrived: an 8 MiB request must come at 280 KB/s or better.
	DefaultRequestReadTimeout = 30 * time.Second
	// DefaultIdleTimeout is Kafka's connections.max.idle.ms default; Kafka
	// clients reconnect transparently when a broker closes an idle
	// connection.
	DefaultIdleTimeout = 10 * time.Minute
	// DefaultPreAuthMaxRequestBytes bounds a request before the client
	// authenticated: a SASL exchange is small, and a stranger should not
	// make the broker allocate 8 MiB per connection.
	DefaultPreAuthMaxRequestBytes = 64 << 10
	// maxBatchBytesLimit bounds MaxBatchBytes (and sizes the shared zstd
	// decoder's window).
	maxBatchBytesLimit = 256 << 20
)

// Config is a listener's configuration. The zero value of every limit
// takes its default.
type Config struct {
	// Addr is the TCP address to listen on (host:port; port 0 picks one).
	Addr string
	// Advertise is the host:port Metadata gives clients for this broker;
	// empty uses the bound address.
	Advertise string
	// TLS, when set, serves TLS instead of plaintext.
	TLS *tls.Config
	// AutoCreate makes a Produce (or a Metadata that allows it) to an
	// unknown topic create a durable stream with AutoCreateShards shards;
	// otherwise it is refused UNKNOWN_TOPIC_OR_PARTITION.
	AutoCreate       bool
	AutoCreateShards uint32
	// DefaultNamespace is the namespace of a topic named without a '.'
	// (mapping.go); empty is DefaultNamespace, "default".
	DefaultNamespace string
	// AnonymousTenant, when set, serves clients that do not authenticate
	// as this tenant, with the token AnonymousToken returns (under auth
	// none it may return ""). Empty: SASL/PLAIN is required.
	AnonymousTenant string
	AnonymousToken  func() (string, error)
	// SCRAMMechanisms are the SCRAM mechanisms offered beside PLAIN and
	// OAUTHBEARER (service.MechanismSCRAMSHA256, MechanismSCRAMSHA512),
	// run through Service.StartSCRAM. Nil: SCRAM is not offered (the
	// broker keeps no users).
	SCRAMMechanisms []string
	// MaxRequestBytes bounds one request frame (8 MiB); a larger size
	// closes the connection before anything is read.
	MaxRequestBytes int
	// MaxBatchBytes bounds one partition's batch as sent and once
	// decompressed (16 MiB); past it the batch is MESSAGE_TOO_LARGE.
	MaxBatchBytes int
	// MaxRequestDecompressedBytes bounds one Produce's batches together
	// once decompressed (32 MiB, at least MaxBatchBytes); past it every
	// partition of the request is refused RECORD_LIST_TOO_LARGE.
	MaxRequestDecompressedBytes int
	// MaxInflight bounds the requests one connection has read and not yet
	// answered (16); the connection reads no further until one is answered.
	MaxInflight int
	// MaxInflightRequestBytes bounds the bytes of those requests (16 MiB,
	// at least MaxRequestBytes): a request's body is not read until the
	// bytes of the earlier ones, less this, have been answered.
	MaxInflightRequestBytes int
	// FetchMaxBytes caps the records of one Fetch answer (50 MiB): the
	// request's max_bytes and partition_max_bytes are honoured below it,
	// and the first batch is sent whole even past them (KIP-74).
	FetchMaxBytes int
	// MaxInflightFetchBytes bounds the Fetch answers one connection has
	// being built or not yet written (64 MiB, at least FetchMaxBytes): a
	// Fetch reserves its cap before it reads, in request order, and waits
	// while earlier answers hold the budget.
	MaxInflightFetchBytes int
	// RequestReadTimeout closes a connection whose request has not fully
	// arrived this long after its first byte (30 s); IdleTimeout one that
	// starts no request for this long (10 min). Before authenticating,
	// AuthTimeout bounds everything.
	RequestReadTimeout time.Duration
	IdleTimeout        time.Duration
	// DefaultRetentionBytes and DefaultRetentionAge are what a durable
	// stream without retention of its own keeps (the broker's
	// durable_retention_*; zero: everything), as DescribeConfigs reports
	// a topic's retention.bytes and retention.ms.
	DefaultRetentionBytes int64
	DefaultRetentionAge   time.Duration
	// MaxFetchWait caps a Fetch's max_wait (30 s).
	MaxFetchWait time.Duration
	// AuthTimeout closes a connection that has not authenticated within
	// it (10 s); PreAuthMaxRequestBytes bounds its requests until then
	// (64 KiB), unless an anonymous tenant serves it anyway.
	AuthTimeout            time.Duration
	PreAuthMaxRequestBytes int
	// Admit, when set, is asked before a connection is served (the
	// broker's limits on connections not yet authenticated); a refusal
	// closes it. displace closes the connection if the broker needs its
	// place before it authenticates. release is called once the connection
	// has a session (SASL or the anonymous tenant) or has ended,
	// whichever comes first.
	Admit func(remote net.Addr, displace func()) (release func(), err error)
	// Cluster, when set, is the cluster this broker is a member of:
	// Metadata lists every member as a broker and each partition's owner
	// as its leader (cluster.go). Nil: a single broker, node 0.
	Cluster Cluster
	// Hooks receives metric events; nil counts nothing.
	Hooks Hooks
	Log   zerolog.Logger
}

// Hooks are the listener's metric events. Each must not block.
type Hooks interface {
	// Connection is told "accepted", "closed", "refused" (by Admit) or
	// "displaced" (closed unauthenticated to admit a newer connection).
	Connection(event string)
	// Request is told each request's api name and its outcome ("ok", or a
	// Kafka error name, or "closed" when it closed the connection); api
	// "panic" is a handler that panicked (a bug: its connection closed).
	Request(api, outcome string)
	// Bytes counts records' payload bytes "in" (produced) and "out" (fetched).
	Bytes(direction string, n int)
	// Limit is told each time a request meets one of the listener's
	// bounds, by its knob: "kafka_max_request_bytes" (the connection
	// closed), "kafka_max_batch_bytes", "kafka_max_request_decompressed_bytes"
	// (refused), "kafka_fetch_max_bytes" (an answer cut short),
	// "kafka_request_read_timeout_ms", "kafka_idle_timeout_ms" (closed).
	Limit(knob string)
}

type noHooks struct{}

func (noHooks) Connection(string)      {}
func (noHooks) Request(string, string) {}
func (noHooks) Bytes(string, int)      {}
func (noHooks) Limit(string)           {}

func (c Config) withDefaults() Config {
	if c.MaxRequestBytes <= 0 {
		c.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if c.MaxBatchBytes <= 0 {
		c.MaxBatchBytes = DefaultMaxBatchBytes
	}
	c.MaxBatchBytes = min(c.MaxBatchBytes, maxBatchBytesLimit)
	if c.MaxInflight <= 0 {
		c.MaxInflight = DefaultMaxInflight
	}
	if c.MaxRequestDecompressedBytes <= 0 {
		c.MaxRequestDecompressedBytes = DefaultMaxRequestDecompressedBytes
	}
	c.MaxRequestDecompressedBytes = max(c.MaxRequestDecompressedBytes, c.MaxBatchBytes)
	if c.MaxInflightRequestBytes <= 0 {
		c.MaxInflightRequestBytes = DefaultMaxInflightRequestBytes
	}
	c.MaxInflightRequestBytes = max(c.MaxInflightRequestBytes, c.MaxRequestBytes)
	if c.FetchMaxBytes <= 0 {
		c.FetchMaxBytes = DefaultFetchMaxBytes
	}
	if c.MaxInflightFetchBytes <= 0 {
		c.MaxInflightFetchBytes = DefaultMaxInflightFetchBytes
	}
	c.MaxInflightFetchBytes = max(c.MaxInflightFetchBytes, c.FetchMaxBytes)
	if c.RequestReadTimeout <= 0 {
		c.RequestReadTimeout = DefaultRequestReadTimeout
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.MaxFetchWait <= 0 {
		c.MaxFetchWait = DefaultMaxFetchWait
	}
	if c.AuthTimeout <= 0 {
		c.AuthTimeout = DefaultAuthTimeout
	}
	if c.PreAuthMaxRequestBytes <= 0 {
		c.PreAuthMaxRequestBytes = DefaultPreAuthMaxRequestBytes
	}
	if c.AnonymousTenant != "" {
		c.PreAuthMaxRequestBytes = c.MaxRequestBytes
	}
	if c.AutoCreateShards == 0 {
		c.AutoCreateShards = 1
	}
	if c.DefaultNamespace == "" {
		c.DefaultNamespace = DefaultNamespace
	}
	if c.Hooks == nil {
		c.Hooks = noHooks{}
	}
	return c
}

// sessionIDBase keeps the ids of Kafka sessions apart from the felix/1
// transport's, which count up from 1: service.Client.ID must be unique
// among the broker's live sessions.
const sessionIDBase = 1 << 62

// nextSessionID counts for every listener of the process, not each: two
// listeners in front of one service (an embedder's second port) would
// otherwise hand out the same ids, and the second session of an id is
// refused.
var nextSessionID atomic.Uint64

// Listener accepts Kafka connections and serves them.
type Listener struct {
	cfg       Config
	svc       service.Service
	ln        net.Listener
	producers *producerMap
	groups    *coordinator

	wg sync.WaitGroup // the accept loop and one per connection

	mu struct {
		sync.Mutex
		conns  map[*conn]struct{}
		closed bool
	}
}

// Listen starts listening on cfg.Addr and serving connections with svc.
func Listen(svc service.Service, cfg Config) (*Listener, error) {
	cfg = cfg.withDefaults()
	if err := ValidateDefaultNamespace(cfg.DefaultNamespace); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, err
	}
	if cfg.TLS != nil {
		ln = tls.NewListener(ln, cfg.TLS)
	}
	l := &Listener{cfg: cfg, svc: svc, ln: ln, producers: newProducerMap(defaultMaxProducers), groups: newCoordinator()}
	l.mu.conns = make(map[*conn]struct{})
	l.wg.Add(1)
	go l.accept()
	return l, nil
}

// names is the listener's topic mapping.
func (l *Listener) names() topicMapping { return topicMapping{l.cfg.DefaultNamespace} }

// Addr is the bound address.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

// advertised is the host and port Metadata gives.
func (l *Listener) advertised() (string, int32) {
	addr := l.cfg.Advertise
	if addr == "" {
		addr = l.ln.Addr().String()
	}
	return splitHostPort(addr)
}

// accept runs until the listener closes.
func (l *Listener) accept() {
	defer l.wg.Done()
	for {
		nc, err := l.ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				l.cfg.Log.Warn().Err(err).Msg("kafka: accept")
			}
			return
		}
		c := newConn(l, nc, sessionIDBase+nextSessionID.Add(1))
		release := func() {}
		if l.cfg.Admit != nil {
			displace := func() { l.cfg.Hooks.Connection("displaced"); c.close() }
			if release, err = l.cfg.Admit(nc.RemoteAddr(), displace); err != nil {
				l.cfg.Hooks.Connection("refused")
				c.close()
				continue
			}
		}
		c.releasePreAuth = release
		l.mu.Lock()
		if l.mu.closed {
			l.mu.Unlock()
			_ = nc.Close()
			release()
			return
		}
		l.mu.conns[c] = struct{}{}
		l.wg.Add(1)
		l.mu.Unlock()
		l.cfg.Hooks.Connection("accepted")
		go func() {
			defer l.wg.Done()
			defer release()
			c.serve()
			l.mu.Lock()
			delete(l.mu.conns, c)
			l.mu.Unlock()
			l.cfg.Hooks.Connection("closed")
		}()
	}
}

// Close stops accepting, closes every connection and waits for their
// goroutines, or for ctx.
func (l *Listener) Close(ctx context.Context) error {
	l.mu.Lock()
	l.mu.closed = true
	conns := make([]*conn, 0, len(l.mu.conns))
	for c := range l.mu.conns {
		conns = append(conns, c)
	}
	l.mu.Unlock()
	err := l.ln.Close()
	for _, c := range conns {
		c.close()
	}
	done := make(chan struct{})
	go func() { l.wg.Wait(); l.groups.close(); close(done) }()
	select {
	case <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}
