// Package config owns the broker's configuration: the knob names and
// defaults of the spec, loaded from a YAML file, FELIX_* environment variables
// and command-line flags, in that order of precedence (flags win).
package config

import "time"

// Config is the broker's effective configuration. YAML keys and FELIX_*
// variables use the spec's knob names (the yaml tag; the variable is
// FELIX_ + upper-case tag). The zero Config is not valid on its own: start
// from Default() or Load().
type Config struct {
	// Listen is the QUIC listen address (quic_bind). Port 0 picks a free port.
	Listen string `yaml:"listen"`
	// DataDir holds the generated TLS certificate and, later, durable logs.
	DataDir string `yaml:"data_dir"`
	// AddrFile, when set, receives the bound address once the broker accepts connections.
	AddrFile string `yaml:"addr_file"`
	// Admin is the admin HTTP address (/metrics, /live, /ready). Empty turns
	// the endpoint off. Loopback by default: it has no authentication.
	Admin string `yaml:"admin"`
	// Chaos enables the admin endpoint's chaos routes, which crash or stop
	// actors on request. Off by default, so a stray request cannot crash a
	// production broker.
	Chaos bool `yaml:"chaos"`
	// LogLevel is a zerolog level name: trace, debug, info, warn, error.
	LogLevel string `yaml:"log_level"`
	// TLSCert and TLSKey name a PEM certificate and key; both empty means a
	// self-signed certificate is generated into DataDir.
	TLSCert string `yaml:"tls_cert"`
	TLSKey  string `yaml:"tls_key"`

	// MaxFrameBytes caps a frame after the handshake (16 MiB).
	MaxFrameBytes int `yaml:"max_frame_bytes"`
	// PreAuthMaxFrameBytes caps a frame before the handshake (64 KiB).
	PreAuthMaxFrameBytes int `yaml:"pre_auth_max_frame_bytes"`
	// AuthTimeout closes a connection that has not completed the handshake (10 s).
	AuthTimeout time.Duration `yaml:"auth_timeout_ms"`

	// PubQueueDepth bounds each shard's mailbox of admitted publishes (64).
	PubQueueDepth int `yaml:"pub_queue_depth"`
	// PublishQueueWaitTimeout is how long a publish waits on a full shard
	// before it fails as overloaded (2000 ms).
	PublishQueueWaitTimeout time.Duration `yaml:"publish_queue_wait_timeout_ms"`
	// PublishWindow bounds unanswered acked publishes per QUIC stream (256).
	PublishWindow int `yaml:"publish_window"`

	// SubscriberQueueCapacity is each feeder mailbox's bound in batches (512).
	SubscriberQueueCapacity int `yaml:"subscriber_queue_capacity"`
	// SubscriberQueueCapacityMax clamps a subscriber's requested capacity (4096).
	SubscriberQueueCapacityMax int `yaml:"subscriber_queue_capacity_max"`
	// SubscriberQueueMaxBytes bounds each feeder mailbox's payload bytes (64 MiB; 0 = none).
	SubscriberQueueMaxBytes int64 `yaml:"subscriber_queue_max_bytes"`
	// SubscriberQueueMaxBytesTotal bounds all feeder mailboxes together (0 = off).
	SubscriberQueueMaxBytesTotal int64 `yaml:"subscriber_queue_max_bytes_total"`
	// SubscriberQueuePolicy is drop_new, drop_old or block.
	SubscriberQueuePolicy string `yaml:"subscriber_queue_policy"`
	// SubscriberBlockMaxWait bounds how long a shard waits on one full
	// subscriber under block; past it the subscriber is evicted (30000 ms).
	SubscriberBlockMaxWait time.Duration `yaml:"subscriber_block_max_wait_ms"`
	// SubscriberEgressMaxBytes bounds one connection's bytes in lanes and writer (256 MiB).
	SubscriberEgressMaxBytes int64 `yaml:"subscriber_egress_max_bytes"`
	// SubscriberWriterLanes is the number of lane actors (4).
	SubscriberWriterLanes int `yaml:"subscriber_writer_lanes"`
	// SubscriberLaneQueueDepth bounds each lane mailbox (64).
	SubscriberLaneQueueDepth int `yaml:"subscriber_lane_queue_depth"`
	// SubscriberLaneQueuePolicy is drop_new or block.
	SubscriberLaneQueuePolicy string `yaml:"subscriber_lane_queue_policy"`
	// SubscriberLaneShard is auto, subscriber_id_hash, connection_id_hash or round_robin_pin.
	SubscriberLaneShard string `yaml:"subscriber_lane_shard"`
	// SubscriberSingleWriterPerConn puts every subscription of a connection on one lane.
	SubscriberSingleWriterPerConn bool `yaml:"subscriber_single_writer_per_conn"`

	// EventBatchMaxEvents, EventBatchMaxBytes and EventBatchMaxDelay bound a
	// feeder's coalesced delivery (64, 64 KiB, 250 µs).
	EventBatchMaxEvents int           `yaml:"event_batch_max_events"`
	EventBatchMaxBytes  int           `yaml:"event_batch_max_bytes"`
	EventBatchMaxDelay  time.Duration `yaml:"event_batch_max_delay_us"`
	// FanoutBatchSize <= 1 forces single-event mode (64).
	FanoutBatchSize int `yaml:"fanout_batch_size"`

	// DurableFsync is the durable log's fsync policy: none, periodic or on_commit.
	DurableFsync string `yaml:"durable_fsync"`
	// DurableSyncInterval is the periodic policy's fsync interval (250 ms).
	DurableSyncInterval time.Duration `yaml:"durable_sync_interval_ms"`
	// DurableSegmentBytes rolls a durable log's segment at this size (256 MiB).
	DurableSegmentBytes int64 `yaml:"durable_segment_bytes"`
	// DurableRetentionBytes and DurableRetentionAge are the broker-wide
	// retention of durable shards, by whole segments; 0 keeps everything. A
	// stream's own retention, when set, replaces them.
	DurableRetentionBytes int64         `yaml:"durable_retention_bytes"`
	DurableRetentionAge   time.Duration `yaml:"durable_retention_age_ms"`
	// DurableRetentionInterval is how often each durable shard enforces
	// retention (10 s).
	DurableRetentionInterval time.Duration `yaml:"durable_retention_interval_ms"`

	// ReplayRingRecords and ReplayRingMaxBytes bound each shard's ring (1024, 64 MiB).
	ReplayRingRecords  int   `yaml:"replay_ring_records"`
	ReplayRingMaxBytes int64 `yaml:"replay_ring_max_bytes"`
	// ReplayRingMaxBytesTotal bounds every shard's ring together (0 = off).
	ReplayRingMaxBytesTotal int64 `yaml:"replay_ring_max_bytes_total"`
}
