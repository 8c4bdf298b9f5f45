// Package config owns the broker's configuration: the knob names and their
// defaults, loaded from a YAML file, FELIX_* environment variables
// and command-line flags, in that order of precedence (flags win).
package config

import "time"

// Config is the broker's effective configuration. YAML keys and FELIX_*
// variables use the knob names (the yaml tag; the variable is
// FELIX_ + upper-case tag). The zero Config is not valid on its own: start
// from Default() or Load().
//
// NOTE: every field needs a yaml tag and a help tag: one line for
// `felix broker --help`, saying the unit where the key does not and what 0
// means where 0 is special. The knob walker panics on a field without one.
type Config struct {
	// Listen is the QUIC listen address (quic_bind). Port 0 picks a free port.
	Listen string `yaml:"listen" help:"QUIC listen address, host:port; port 0 picks a free port"`
	// DataDir holds the generated TLS certificate and key, metadata.db (the
	// stream definitions) and the durable streams' logs under streams/.
	DataDir string `yaml:"data_dir" help:"folder for the generated TLS certificate and key, metadata.db (stream definitions) and the durable streams' logs (streams/)"`
	// AddrFile, when set, receives the bound address once the broker
	// serves: at start, or for a cluster member once it joined the cluster.
	AddrFile string `yaml:"addr_file" help:"write the bound address to this file once the broker serves (a cluster member: once it joined the cluster); empty writes none"`
	// Admin is the admin HTTP address (/metrics, /live, /ready, /debug).
	// Empty turns the endpoint off. Loopback by default: /metrics and the
	// probes are open; /debug needs a token with node.view (chaos
	// node.manage).
	Admin string `yaml:"admin" help:"admin HTTP address: /metrics, /live, /ready open, /debug with a token granting node.view (chaos node.manage); empty turns it off"`
	// AdminAllowedHosts names the hosts the admin endpoint answers to,
	// besides localhost and IP addresses: a comma-separated list of names
	// (any port). A request whose Host header is another name is refused,
	// so a web page whose name was rebound to the broker's address cannot
	// read it. Empty, the default: none beyond those.
	AdminAllowedHosts string `yaml:"admin_allowed_hosts" help:"comma-separated host names the admin endpoint answers to besides localhost and IP addresses (any port); other Host headers are refused (DNS rebinding); empty: none"`
	// Chaos enables the admin endpoint's chaos routes, which crash or stop
	// actors on request. Off by default, so a stray request cannot crash a
	// production broker.
	Chaos bool `yaml:"chaos" help:"enable the admin endpoint's chaos routes, which crash or stop actors on request"`
	// Pprof serves Go's runtime profiles (net/http/pprof) on the admin
	// endpoint under /debug/pprof/, to a node.view token. Off by default:
	// a profile costs CPU while it runs.
	Pprof bool `yaml:"pprof" help:"serve Go's runtime profiles (net/http/pprof) on the admin endpoint under /debug/pprof/ (needs a node.view token)"`
	// MetricsStreams names the streams that get metric series of their
	// own (acked records, ack latency, durable shards' offsets): a
	// comma-separated list of tenant/namespace/stream patterns, each part
	// a name or *. Empty, the default: none, so the series' count does not
	// grow with the streams. At most 256 streams get their own; later ones
	// share series labelled _other.
	MetricsStreams string `yaml:"metrics_streams" help:"streams with metric series of their own: comma-separated tenant/namespace/stream patterns, each part a name or * (at most 256 streams; later ones are labelled _other); empty: none"`
	// LogLevel is a zerolog level name: trace, debug, info, warn, error.
	LogLevel string `yaml:"log_level" help:"log level"`
	// Auth is how clients authenticate: "jwt" (signed tokens, the default;
	// the broker makes a signing key and admin.token in DataDir on first
	// start) or "none" (an open broker: every client gets every right on the
	// tenant it names; refused on a non-loopback listen address unless
	// AuthNoneAnywhere).
	Auth string `yaml:"auth" help:"client authentication: jwt (signed tokens; admin.token is written to the data dir) or none (open, loopback only unless auth_none_anywhere)"`
	// AuthKeys names a file of public keys (PEM or JWKS) whose tokens are
	// accepted besides the local key's; reloaded on SIGHUP.
	AuthKeys string `yaml:"auth_keys" help:"file of trusted public keys (PEM or JWKS) besides the data dir's own; reloaded on SIGHUP"`
	// AuthAudience is the audience a token must name ("felix").
	AuthAudience string `yaml:"auth_audience" help:"audience (aud) every token must name"`
	// AuthNoneAnywhere allows auth none on a non-loopback address.
	AuthNoneAnywhere bool `yaml:"auth_none_anywhere" help:"allow --auth none on a non-loopback listen address (anyone who reaches it gets every right)"`
	// TLSClientCA, when set, names PEM CA certificates: every client must
	// present a certificate they signed (mutual TLS), on top of its token.
	TLSClientCA string `yaml:"tls_client_ca" help:"PEM CA file: when set, clients must present a certificate it signed (mutual TLS)"`
	// TLSClientCertBindSubject requires the client certificate's subject
	// common name to be the tenant the connection names.
	TLSClientCertBindSubject bool `yaml:"tls_client_cert_bind_subject" help:"with tls_client_ca: a client certificate's subject CN must be the tenant it connects as"`
	// TLSCert and TLSKey name a PEM certificate and key; both empty means a
	// self-signed certificate is generated into DataDir.
	TLSCert string `yaml:"tls_cert" help:"PEM certificate file, set with tls_key; both empty generates a self-signed one into the data dir"`
	TLSKey  string `yaml:"tls_key" help:"PEM private key file of tls_cert"`

	// MaxFrameBytes caps a frame after the handshake (16 MiB).
	MaxFrameBytes int `yaml:"max_frame_bytes" help:"largest frame a client may send after the handshake"`
	// PreAuthMaxFrameBytes caps a frame before the handshake (64 KiB).
	PreAuthMaxFrameBytes int `yaml:"pre_auth_max_frame_bytes" help:"largest frame a client may send before the handshake completes"`
	// AuthTimeout closes a connection that has not completed the handshake (10 s).
	AuthTimeout time.Duration `yaml:"auth_timeout_ms" help:"close a connection that has not completed the handshake within this"`
	// FrameReadTimeout bounds how long a frame may take to arrive once its
	// first byte has (10 s); past it the stream is reset and its buffer
	// freed. A stream idle between frames has no deadline.
	FrameReadTimeout time.Duration `yaml:"frame_read_timeout_ms" help:"how long a frame may take to arrive once its first byte has; past it the broker resets the stream"`

	// MaxClientConnections bounds the broker's authenticated client
	// connections, felix/1 and Kafka together (8192); the next one is
	// refused limit_exceeded at its authentication. 0 = no bound.
	MaxClientConnections int `yaml:"max_client_connections" help:"authenticated client connections the broker serves; past it an authentication is refused limit_exceeded; 0 = no bound"`
	// MaxConnectionsPerIP bounds authenticated connections from one IP
	// address (512). 0 = no bound.
	MaxConnectionsPerIP int `yaml:"max_connections_per_ip" help:"authenticated client connections from one IP address; past it an authentication is refused limit_exceeded; 0 = no bound"`
	// TenantMaxConnections bounds one tenant's authenticated connections
	// over every address, so one tenant cannot take every place of
	// max_client_connections from the others. 0 = off.
	TenantMaxConnections int `yaml:"tenant_max_connections" help:"authenticated client connections one tenant may have, from every address; past it an authentication is refused limit_exceeded; 0 = off"`
	// MaxPreAuthConnections bounds connections that have not authenticated
	// yet, apart from the authenticated ones (1024); at the bound the
	// oldest of them is closed to admit a new one. 0 = no bound.
	MaxPreAuthConnections int `yaml:"max_preauth_connections" help:"connections not yet authenticated, in a pool of their own; at the bound the oldest is closed to admit a new one; 0 = no bound"`
	// MaxPreAuthConnectionsPerIP bounds those from one IP address (64);
	// past it a new connection is refused limit_exceeded. 0 = no bound.
	MaxPreAuthConnectionsPerIP int `yaml:"max_preauth_connections_per_ip" help:"connections not yet authenticated from one IP address; past it a new one is refused limit_exceeded; 0 = no bound"`
	// AuthFailureBurst is how many failed authentications (felix/1 auth
	// and re-authentication, Kafka SASL) one address may have checked
	// before it is throttled (10); AuthFailureInterval gives one back (1 s);
	// AuthFailureMaxAddresses bounds the addresses remembered (16384).
	// A throttled address is refused overloaded (auth_throttled) without a
	// check. 0 burst = off.
	AuthFailureBurst        int           `yaml:"auth_failure_burst" help:"failed authentications one address may have checked before it is refused overloaded (auth_throttled) without a check; 0 = off"`
	AuthFailureInterval     time.Duration `yaml:"auth_failure_interval_ms" help:"one failed authentication is forgiven per address every interval (the sustained rate of checks a throttled address gets)"`
	AuthFailureMaxAddresses int           `yaml:"auth_failure_max_addresses" help:"addresses the failed-authentication limiter remembers; when full, the one that failed longest ago is forgotten"`
	// TenantPublishBytesPerSec is each tenant's publish rate in payload
	// bytes, with a burst of one second's worth; past it a publish is
	// refused overloaded (tenant_quota). 0 = off.
	TenantPublishBytesPerSec int64 `yaml:"tenant_publish_bytes_per_sec" help:"payload bytes per second each tenant may publish (burst: one second's worth); past it a publish is refused overloaded (tenant_quota); 0 = off"`
	// TenantPublishMsgsPerSec is each tenant's publish rate in records,
	// with a burst of one second's worth. 0 = off.
	TenantPublishMsgsPerSec int64 `yaml:"tenant_publish_msgs_per_sec" help:"records per second each tenant may publish (burst: one second's worth); past it a publish is refused overloaded (tenant_quota); 0 = off"`
	// TenantMaxStreams bounds a tenant's streams, explicit (created by
	// admin) and implicit (created by a first publish or subscribe)
	// together. 0 = off.
	TenantMaxStreams int `yaml:"tenant_max_streams" help:"streams one tenant may have, explicit and implicit together; past it creating one is refused limit_exceeded; 0 = off"`
	// TenantMaxSubscriptions bounds a tenant's open subscriptions over all
	// its connections. 0 = off.
	TenantMaxSubscriptions int `yaml:"tenant_max_subscriptions" help:"open subscriptions one tenant may have over all its connections; past it a subscribe is refused limit_exceeded; 0 = off"`

	// PubQueueDepth bounds each shard's mailbox of admitted publishes (64).
	PubQueueDepth int `yaml:"pub_queue_depth" help:"publish batches a shard admits ahead of its fanout (its mailbox bound)"`
	// PublishQueueWaitTimeout is how long a publish waits on a full shard
	// before it fails as overloaded (2000 ms).
	PublishQueueWaitTimeout time.Duration `yaml:"publish_queue_wait_timeout_ms" help:"how long a publish waits on a full shard before it fails overloaded; 0 fails at once"`
	// PublishWindow bounds unanswered acked publishes per QUIC stream (256).
	PublishWindow int `yaml:"publish_window" help:"unanswered acked publishes per QUIC stream before the broker stops reading it; 0 turns pipelining off"`

	// SubscriberQueueCapacity is each feeder mailbox's bound in batches (512).
	SubscriberQueueCapacity int `yaml:"subscriber_queue_capacity" help:"batches queued per subscription, unless the subscriber asks for a capacity"`
	// SubscriberQueueCapacityMax clamps a subscriber's requested capacity (4096).
	SubscriberQueueCapacityMax int `yaml:"subscriber_queue_capacity_max" help:"the largest queue capacity, in batches, a subscriber may ask for"`
	// SubscriberQueueMaxBytes bounds each feeder mailbox's payload bytes (64 MiB; 0 = none).
	SubscriberQueueMaxBytes int64 `yaml:"subscriber_queue_max_bytes" help:"payload bytes queued per subscription; 0 = no byte bound"`
	// SubscriberQueueMaxBytesTotal bounds all feeder mailboxes together (0 = off).
	SubscriberQueueMaxBytesTotal int64 `yaml:"subscriber_queue_max_bytes_total" help:"payload bytes held for all subscriptions together; 0 = off"`
	// SubscriberQueuePolicy is drop_new, drop_old or block.
	SubscriberQueuePolicy string `yaml:"subscriber_queue_policy" help:"what a full subscriber queue does with the next batch"`
	// SubscriberBlockMaxWait bounds how long a shard waits on one full
	// subscriber under block; past it the subscriber is evicted (30000 ms).
	SubscriberBlockMaxWait time.Duration `yaml:"subscriber_block_max_wait_ms" help:"under block, how long a shard waits on one full subscriber before it ends that subscription (lagged on a durable stream)"`
	// SubscriberEgressMaxBytes bounds one connection's bytes in lanes and writer (256 MiB).
	SubscriberEgressMaxBytes int64 `yaml:"subscriber_egress_max_bytes" help:"frame bytes one connection's subscriptions may have between their queues and the network; 0 = no bound"`
	// SubscriberWriterLanes is the number of lane actors (4, or GOMAXPROCS
	// when that is more).
	SubscriberWriterLanes int `yaml:"subscriber_writer_lanes" help:"number of writer lane actors"`
	// SubscriberLaneQueueDepth bounds each lane mailbox (64).
	SubscriberLaneQueueDepth int `yaml:"subscriber_lane_queue_depth" help:"deliveries waiting in one writer lane"`
	// SubscriberLaneQueuePolicy is block: a full lane makes the feeder wait.
	// drop_new is refused (a shared hop must not drop for subscribers that
	// keep up).
	SubscriberLaneQueuePolicy string `yaml:"subscriber_lane_queue_policy" help:"what a full writer lane does: block (the feeder waits; lanes never drop)"`
	// SubscriberLaneShard is auto, subscriber_id_hash, connection_id_hash or round_robin_pin.
	SubscriberLaneShard string `yaml:"subscriber_lane_shard" help:"how subscriptions are spread over the writer lanes"`
	// SubscriberSingleWriterPerConn puts every subscription of a connection on one lane.
	SubscriberSingleWriterPerConn bool `yaml:"subscriber_single_writer_per_conn" help:"put every subscription of a connection on one writer lane"`

	// EventBatchMaxEvents, EventBatchMaxBytes and EventBatchMaxDelay bound a
	// feeder's coalesced delivery (64, 64 KiB, 250 µs).
	EventBatchMaxEvents int           `yaml:"event_batch_max_events" help:"publish batches a subscription's feeder coalesces into one delivery"`
	EventBatchMaxBytes  int           `yaml:"event_batch_max_bytes" help:"frame bytes a feeder coalesces into one delivery; 0 sends each batch on its own"`
	EventBatchMaxDelay  time.Duration `yaml:"event_batch_max_delay_us" help:"how long a feeder waits for more to coalesce; 0 never waits"`
	// FanoutBatchSize <= 1 forces single-event mode (64).
	FanoutBatchSize int `yaml:"fanout_batch_size" help:"1 or less turns coalescing off (each batch goes on its own); above 1, event_batch_max_* bound it"`

	// DurableFsync is the durable log's fsync policy: none, periodic or on_commit.
	DurableFsync string `yaml:"durable_fsync" help:"when an acked publish to a durable stream is answered: periodic after the write (fsync every durable_sync_interval_ms), on_commit after its fsync, none never fsyncs"`
	// DurableSyncInterval is the periodic policy's fsync interval (250 ms).
	DurableSyncInterval time.Duration `yaml:"durable_sync_interval_ms" help:"the periodic durable_fsync policy's fsync interval"`
	// DurableSegmentBytes rolls a durable log's segment at this size (256 MiB).
	DurableSegmentBytes int64 `yaml:"durable_segment_bytes" help:"size at which a durable log rolls to a new segment; retention deletes whole segments"`
	// DurableRetentionBytes and DurableRetentionAge are the broker-wide
	// retention of durable shards, by whole segments; 0 keeps everything. A
	// stream's own retention, when set, replaces them.
	DurableRetentionBytes int64         `yaml:"durable_retention_bytes" help:"bytes each durable shard keeps, in whole segments; 0 keeps everything; a stream's own retention replaces it"`
	DurableRetentionAge   time.Duration `yaml:"durable_retention_age_ms" help:"age past which a durable shard's segments are deleted; 0 keeps everything; a stream's own retention replaces it"`
	// DurableMaxOpenFiles bounds the file descriptors every durable log
	// together keeps open (4096): idle segment, index and mark files are
	// closed least recently used first and reopened on demand.
	DurableMaxOpenFiles int `yaml:"durable_max_open_files" help:"file descriptors all durable logs together keep open; idle segment, index and mark files are closed (least recently used first) and reopened when read or written; also capped at the process's limit minus a reserve"`
	// DurableRetentionInterval is how often each durable shard enforces
	// retention (10 s).
	DurableRetentionInterval time.Duration `yaml:"durable_retention_interval_ms" help:"how often each durable shard applies retention"`
	// CacheResumeWindow keeps a durable cache's records newer than this
	// out of compaction, so a watcher can resume past them (1 h; 0: no
	// window, every record in a sealed segment may be compacted).
	CacheResumeWindow time.Duration `yaml:"cache_resume_window_ms" help:"a durable cache's records newer than this are never compacted, so a watch resumes past them; 0 = no window"`

	// ReplayRingRecords and ReplayRingMaxBytes bound each shard's ring (1024, 64 MiB).
	ReplayRingRecords  int   `yaml:"replay_ring_records" help:"records each shard keeps in its replay ring (what --from earliest replays on an in-memory stream)"`
	ReplayRingMaxBytes int64 `yaml:"replay_ring_max_bytes" help:"payload bytes in each shard's replay ring, oldest batches evicted first; 0 = no byte bound"`
	// StreamIdleTimeout stops an in-memory shard with no subscriber and no
	// publish for this long, freeing its ring; an implicit stream is then
	// forgotten (10 min; 0 = never).
	StreamIdleTimeout time.Duration `yaml:"stream_idle_timeout_ms" help:"stop an in-memory stream's shard after this long with no subscriber and no publish, freeing its replay ring (an implicit stream is forgotten); 0 = never"`
	// ReplayRingMaxBytesTotal bounds every shard's ring together (default:
	// an eighth of the machine's memory; 0 = off).
	ReplayRingMaxBytesTotal int64 `yaml:"replay_ring_max_bytes_total" help:"payload bytes in every shard's replay ring together; default an eighth of the machine's memory; 0 = off"`

	// Consumer groups. A claim not settled
	// within GroupVisibilityTimeout is handed out again; after
	// GroupMaxAttempts hand-outs a record is a dead letter.
	GroupVisibilityTimeout time.Duration `yaml:"group_visibility_timeout_ms" help:"how long a consumer group's claim on a record lasts before the record is handed out again (a poll may ask for another)"`
	GroupMaxVisibility     time.Duration `yaml:"group_max_visibility_ms" help:"the longest visibility a poll or an extension may ask for"`
	GroupMaxAttempts       int           `yaml:"group_max_attempts" help:"hand-outs of one record before it becomes a dead letter"`
	GroupMaxInFlight       int           `yaml:"group_max_in_flight" help:"unsettled records per group per shard; past it a poll hands out nothing new until settlements arrive"`
	GroupMaxWait           time.Duration `yaml:"group_max_wait_ms" help:"the longest a group poll waits for records (its wait_ms is capped to it)"`
	GroupQueueDepth        int           `yaml:"group_queue_depth" help:"bound of each group actor's mailbox (polls, settlements); past it they are refused overloaded"`

	// Cluster mode: set ClusterEtcd and the broker joins a cluster whose
	// membership, stream definitions and shard owners live in etcd (see
	// the cluster package doc). Empty: a single broker.
	ClusterEtcd string `yaml:"cluster_etcd" help:"join a cluster: comma-separated etcd client URLs, one scheme (https://host:2379,...; http:// only on loopback unless cluster_etcd_allow_plaintext); empty runs a single broker"`
	// ClusterName names the cluster; members of one etcd prefix must agree.
	ClusterName string `yaml:"cluster_name" help:"the cluster's name; a broker whose name differs from the one in etcd under cluster_etcd_prefix is refused at join"`
	// ClusterEtcdPrefix is the etcd key prefix the cluster keeps its state under.
	ClusterEtcdPrefix string `yaml:"cluster_etcd_prefix" help:"etcd key prefix of the cluster's state; two clusters sharing one etcd need different prefixes"`
	// ClusterNodeID is this member's id; empty uses the id kept in
	// DataDir/node.id, made on first start.
	ClusterNodeID string `yaml:"cluster_node_id" help:"this member's id, unique in the cluster; empty uses the one kept in the data dir (node.id), made on first start"`
	// ClusterZone is this member's failure domain: replica sets spread
	// over zones.
	ClusterZone string `yaml:"cluster_zone" help:"this member's failure domain (a rack, an availability zone); a replicated shard's replicas go to different zones while enough zones are live; empty is none"`
	// ClusterAdvertise is the felix/1 address other members and clients
	// reach this broker at; empty uses the bound listen address.
	ClusterAdvertise string `yaml:"cluster_advertise" help:"felix/1 address (host:port) clients are sent to for this member's shards; empty uses the bound listen address"`
	// ClusterLeaseTTL is the owner lease's time to live, in whole seconds:
	// a member that stops renewing loses its shards after it.
	ClusterLeaseTTL time.Duration `yaml:"cluster_lease_ttl_ms" help:"time to live of this member's etcd lease, whole seconds, at least 2000: its shards move to other members this long after it stops renewing, and it stops acknowledging before that"`
	// ClusterPeerListen is the peer link's UDP address (QUIC, ALPN
	// felix-peer/1), where members send each other replication traffic;
	// empty uses the host of Listen with port 0.
	ClusterPeerListen string `yaml:"cluster_peer_listen" help:"UDP address (host:port) of the peer link members replicate over; empty uses listen's host with a free port"`
	// ClusterPeerAdvertise is the peer address other members dial; empty
	// uses the bound peer address.
	ClusterPeerAdvertise string `yaml:"cluster_peer_advertise" help:"peer link address (host:port) other members dial; empty uses the bound cluster_peer_listen address"`
	// ClusterTLSCA, ClusterTLSCert and ClusterTLSKey are the peer link's
	// mutual TLS: PEM files of the cluster's CA and of this member's
	// certificate (ServerAuth and ClientAuth, signed by the CA) and key.
	// Unset, the peer link does not start, and streams cannot replicate.
	ClusterTLSCA   string `yaml:"cluster_tls_ca" help:"PEM CA file members' peer certificates must chain to; with cluster_tls_cert and cluster_tls_key it starts the peer link (felix cluster certs makes all three)"`
	ClusterTLSCert string `yaml:"cluster_tls_cert" help:"PEM certificate this member presents on the peer link, signed by cluster_tls_ca, with both serverAuth and clientAuth extended key usages"`
	ClusterTLSKey  string `yaml:"cluster_tls_key" help:"PEM private key of cluster_tls_cert"`
	// ClusterEtcdTLSCA makes the member's etcd client speak TLS and verify
	// etcd's certificate against this CA; with https:// endpoints and no
	// CA, the system's roots. ClusterEtcdTLSCert and ClusterEtcdTLSKey are
	// the client certificate it presents (etcd's --client-cert-auth).
	ClusterEtcdTLSCA   string `yaml:"cluster_etcd_tls_ca" help:"PEM CA file etcd's server certificate must chain to; set, the member speaks TLS to etcd and cluster_etcd must be https://"`
	ClusterEtcdTLSCert string `yaml:"cluster_etcd_tls_cert" help:"PEM client certificate (clientAuth) the member presents to etcd, for etcd's --client-cert-auth; set with cluster_etcd_tls_key (a felix cluster certs member certificate does)"`
	ClusterEtcdTLSKey  string `yaml:"cluster_etcd_tls_key" help:"PEM private key of cluster_etcd_tls_cert"`
	// ClusterEtcdUser and ClusterEtcdPasswordFile log the member in to an
	// etcd with auth enabled. The password is only ever read from the
	// file, so it is in no command line, environment or --print-config.
	ClusterEtcdUser         string `yaml:"cluster_etcd_user" help:"etcd user the member logs in as (etcd auth enable); set with cluster_etcd_password_file"`
	ClusterEtcdPasswordFile string `yaml:"cluster_etcd_password_file" help:"file holding cluster_etcd_user's password (its first line; read at start)"`
	// ClusterEtcdAllowPlaintext accepts http:// endpoints on hosts that are
	// not loopback, which are refused otherwise.
	ClusterEtcdAllowPlaintext bool `yaml:"cluster_etcd_allow_plaintext" help:"accept http:// cluster_etcd endpoints on hosts other than loopback: anyone on the path can read and rewrite the cluster's state"`
	// The browser front end (package webfront): WebSocket, off unless
	// BrowserListen is set. BrowserTLS serves wss:// with the felix/1
	// certificate; BrowserAllowedOrigins are the page origins besides the
	// admin endpoint's own that may connect.
	BrowserListen         string `yaml:"browser_listen" help:"WebSocket listener for browsers, host:port (e.g. 127.0.0.1:7380); empty: no browser front end"`
	BrowserTLS            bool   `yaml:"browser_tls" help:"serve wss:// on browser_listen with the broker's certificate (tls_cert/tls_key; a browser refuses the self-signed default)"`
	BrowserAllowedOrigins string `yaml:"browser_allowed_origins" help:"comma-separated page origins (scheme://host[:port]) allowed to connect to browser_listen besides the admin endpoint's own pages; empty: none"`
	// BrowserWebTransportListen serves the same front end over WebTransport
	// (HTTP/3) on a UDP port of its own, beside browser_listen's WebSocket,
	// which stays the fallback and so must be set too.
	BrowserWebTransportListen string `yaml:"browser_webtransport_listen" help:"WebTransport (HTTP/3) listener for browsers, UDP host:port (e.g. 127.0.0.1:7381), beside browser_listen (required with it); with the self-signed default certificate it serves a short-lived one whose hash the admin endpoint's /ui/config gives pages; empty: no WebTransport"`
	// The Kafka listener (package kafka): off unless KafkaListen is set.
	// KafkaListen is its TCP address; KafkaAdvertise the host:port Metadata
	// gives clients (empty: the bound address).
	KafkaListen    string `yaml:"kafka_listen" help:"Kafka listener TCP address, host:port (e.g. 127.0.0.1:9092); empty: no Kafka listener"`
	KafkaAdvertise string `yaml:"kafka_advertise" help:"host:port the Kafka listener tells clients to connect to (Metadata); empty uses the bound address"`
	// KafkaTLS serves TLS on the Kafka listener with the felix/1
	// certificate (tls_cert/tls_key, or the data directory's self-signed one).
	KafkaTLS bool `yaml:"kafka_tls" help:"serve TLS on the Kafka listener, with the broker's certificate (tls_cert/tls_key or the self-signed one in the data dir)"`
	// KafkaAutoCreateTopics: refuse (UNKNOWN_TOPIC_OR_PARTITION) or create
	// a durable stream of KafkaAutoCreateShards shards when a Produce names
	// an unknown topic.
	KafkaAutoCreateTopics string `yaml:"kafka_auto_create_topics" help:"a Produce to an unknown topic: refuse (UNKNOWN_TOPIC_OR_PARTITION) or create (a durable stream of kafka_auto_create_shards shards)"`
	KafkaAutoCreateShards int    `yaml:"kafka_auto_create_shards" help:"shards (partitions) of a durable stream the Kafka listener creates for an unknown topic"`
	// KafkaDefaultNamespace is the namespace of a Kafka topic named
	// without a '.' (default); a topic with one is <namespace>.<stream>.
	KafkaDefaultNamespace string `yaml:"kafka_default_namespace" help:"namespace of a Kafka topic named without a '.' (orders is <this>.orders; a stream of this namespace is listed under its bare name); a Felix name with no '.' and not starting __"`
	// KafkaAnonymousTenant serves Kafka clients that skip SASL as this
	// tenant, with full rights on it; empty requires SASL/PLAIN.
	KafkaAnonymousTenant string `yaml:"kafka_anonymous_tenant" help:"serve Kafka clients that do not authenticate as this tenant, with every right on it; empty requires SASL/PLAIN (username = tenant, password = token)"`
	// KafkaMaxRequestBytes bounds one Kafka request (8 MiB);
	// KafkaMaxBatchBytes one partition's batch, as sent and once
	// decompressed (16 MiB).
	KafkaMaxRequestBytes int64 `yaml:"kafka_max_request_bytes" help:"largest Kafka request frame; a larger one closes the connection before it is read (as Kafka does), logged at warn"`
	KafkaMaxBatchBytes   int64 `yaml:"kafka_max_batch_bytes" help:"largest record batch, as sent and once decompressed; a larger one (a decompression bomb) is refused MESSAGE_TOO_LARGE"`
	// KafkaMaxInflight bounds the requests a Kafka connection has read and
	// not answered (16).
	KafkaMaxInflight int `yaml:"kafka_max_inflight" help:"requests one Kafka connection may have read and not yet answered; it reads no further until one is answered"`
	// KafkaMaxRequestDecompressedBytes bounds one Produce's records once
	// decompressed, every batch together (32 MiB): the per-batch bound
	// alone lets one request of many partitions inflate many times over.
	KafkaMaxRequestDecompressedBytes int64 `yaml:"kafka_max_request_decompressed_bytes" help:"largest total of one Kafka Produce's record batches once decompressed, every partition together; past it the request is refused RECORD_LIST_TOO_LARGE"`
	// KafkaFetchMaxBytes caps one Fetch answer's records (50 MiB, the
	// Java consumer's fetch.max.bytes default); a request asking more gets
	// this. KafkaMaxInflightFetchBytes bounds the Fetch answers one
	// connection has being built or waiting to be written (64 MiB).
	KafkaFetchMaxBytes         int64 `yaml:"kafka_fetch_max_bytes" help:"most record bytes one Kafka Fetch answer carries, whatever the request's max_bytes (at least one batch is always sent, as Kafka does)"`
	KafkaMaxInflightFetchBytes int64 `yaml:"kafka_max_inflight_fetch_bytes" help:"Fetch answer bytes one Kafka connection may have being built or not yet written; a further Fetch waits for earlier answers to be written"`
	// KafkaMaxInflightRequestBytes bounds the request bytes one connection
	// has read (or is reading) and not yet answered (16 MiB, at least
	// kafka_max_request_bytes).
	KafkaMaxInflightRequestBytes int64 `yaml:"kafka_max_inflight_request_bytes" help:"request bytes one Kafka connection may have read and not yet answered; it reads no further until earlier requests are answered"`
	// KafkaRequestReadTimeout bounds reading one request once its first
	// byte has arrived (30 s); KafkaIdleTimeout closes a connection that
	// starts no request for that long (10 min, Kafka's
	// connections.max.idle.ms).
	KafkaRequestReadTimeout time.Duration `yaml:"kafka_request_read_timeout_ms" help:"close a Kafka connection whose request has not fully arrived this long after its first byte"`
	KafkaIdleTimeout        time.Duration `yaml:"kafka_idle_timeout_ms" help:"close a Kafka connection that starts no request for this long"`
}
