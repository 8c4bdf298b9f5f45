// Package kafka is the Kafka front end of the broker: a TCP listener that
// speaks enough of the Kafka protocol for producers and for consumers that
// assign their own partitions, and turns each request into calls on the
// same service.Service the felix/1 transport uses. Authentication,
// permissions and quotas stay behind that boundary; this package only
// carries credentials (SASL/PLAIN: username = tenant, password = a Felix
// token) and maps topics, partitions and offsets (mapping.go).
//
// Requests are decoded with franz-go's kmsg; record batches are checked
// (CRC-32C, framing, bounded decompression) and built here (batch.go).
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

// Defaults of Config's limits. They follow the reference broker's
// (felix-reference.md §6): 8 MiB request, 16 MiB decompressed batch, 30 s
// fetch wait.
const (
	DefaultMaxRequestBytes = 8 << 20
	DefaultMaxBatchBytes   = 16 << 20
	DefaultMaxInflight     = 16
	DefaultMaxFetchWait    = 30 * time.Second
	DefaultAuthTimeout     = 10 * time.Second
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
	// AnonymousTenant, when set, serves clients that do not authenticate
	// as this tenant, with the token AnonymousToken returns (under auth
	// none it may return ""). Empty: SASL/PLAIN is required.
	AnonymousTenant string
	AnonymousToken  func() (string, error)
	// MaxRequestBytes bounds one request frame (8 MiB); a larger size
	// closes the connection before anything is read.
	MaxRequestBytes int
	// MaxBatchBytes bounds one partition's batch once decompressed (16 MiB).
	MaxBatchBytes int
	// MaxInflight bounds the requests one connection has read and not yet
	// answered (16); the connection reads no further until one is answered.
	MaxInflight int
	// MaxFetchWait caps a Fetch's max_wait (30 s).
	MaxFetchWait time.Duration
	// AuthTimeout closes a connection that has not authenticated within
	// it (10 s); PreAuthMaxRequestBytes bounds its requests until then
	// (64 KiB), unless an anonymous tenant serves it anyway.
	AuthTimeout            time.Duration
	PreAuthMaxRequestBytes int
	// Admit, when set, is asked before a connection is served (the
	// broker's connection limits); a refusal closes it. release is called
	// when the connection ends.
	Admit func(remote net.Addr) (release func(), err error)
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
	// Connection is told "accepted", "closed" or "refused" (by Admit).
	Connection(event string)
	// Request is told each request's api name and its outcome ("ok", or a
	// Kafka error name, or "closed" when it closed the connection); api
	// "panic" is a handler that panicked (a bug: its connection closed).
	Request(api, outcome string)
	// Bytes counts records' payload bytes "in" (produced) and "out" (fetched).
	Bytes(direction string, n int)
}

type noHooks struct{}

func (noHooks) Connection(string)      {}
func (noHooks) Request(string, string) {}
func (noHooks) Bytes(string, int)      {}

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
	if c.Hooks == nil {
		c.Hooks = noHooks{}
	}
	return c
}

// sessionIDBase keeps the ids of Kafka sessions apart from the felix/1
// transport's, which count up from 1: service.Client.ID must be unique
// among the broker's live sessions.
const sessionIDBase = 1 << 62

// Listener accepts Kafka connections and serves them.
type Listener struct {
	cfg       Config
	svc       service.Service
	ln        net.Listener
	producers *producerMap
	groups    *coordinator

	nextID atomic.Uint64
	wg     sync.WaitGroup // the accept loop and one per connection

	mu struct {
		sync.Mutex
		conns  map[*conn]struct{}
		closed bool
	}
}

// Listen starts listening on cfg.Addr and serving connections with svc.
func Listen(svc service.Service, cfg Config) (*Listener, error) {
	cfg = cfg.withDefaults()
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
		release := func() {}
		if l.cfg.Admit != nil {
			if release, err = l.cfg.Admit(nc.RemoteAddr()); err != nil {
				l.cfg.Hooks.Connection("refused")
				_ = nc.Close()
				continue
			}
		}
		c := newConn(l, nc, sessionIDBase+l.nextID.Add(1))
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
