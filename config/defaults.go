package config

import "time"

// Byte-size units for the defaults and ParseBytes.
const (
	kib int64 = 1 << 10
	mib int64 = 1 << 20
	gib int64 = 1 << 30
)

// Default returns the spec's defaults. Each value names where it comes from:
// "spec" is shared/spec (Publish/Subscribe, Internals: Subscribe & Fanout),
// "reference" is the Rust broker's knob tables in shared/notes/felix-reference.md.
// defaultRingTotal is replay_ring_max_bytes_total's default: an eighth of
// the machine's memory, so many idle rings cannot pin the broker's memory
// (one client pinned 2.7 GB with 40 streams and no subscriber when it was
// off), and at least one ring's worth; 1 GiB when the memory is unknown.
func defaultRingTotal() int64 {
	mem := physicalMemory()
	if mem <= 0 {
		return 1 << 30
	}
	return max(mem/8, 64*mib)
}

func Default() Config {
	c := Config{
		// reference §3.1 quic_bind is 0.0.0.0:5000; loopback here until auth
		// exists, so a development broker is not open to the network.
		Listen:  "127.0.0.1:5000",
		DataDir: "./felix-data",
		// Loopback: the admin endpoint's metrics and probes are open (issue 3).
		Admin:        "127.0.0.1:5080",
		Auth:         "jwt",
		AuthAudience: "felix",

		DurableFsync:        "periodic",             // reference §5.3 (default policy)
		DurableSyncInterval: 250 * time.Millisecond, // reference §5.3 FELIX_DURABLE_FSYNC_INTERVAL_MS
		DurableSegmentBytes: 256 * mib,              // reference §5.3 FELIX_DURABLE_SEGMENT_BYTES
		// Ours (issue 11): each durable shard held 4 descriptors for ever; a
		// quarter of a common 16384 limit leaves the rest to everything else.
		DurableMaxOpenFiles: 4096,
		// Ours: whole segments go at once, so a check every 10 s is plenty.
		DurableRetentionInterval: 10 * time.Second,
		LogLevel:                 "info",
		// AddrFile, TLSCert and TLSKey stay empty: no address file, and a
		// self-signed certificate generated into DataDir.

		MaxFrameBytes:        int(16 * mib),    // reference §3.1 Frames / acks: max_frame_bytes
		PreAuthMaxFrameBytes: int(64 * kib),    // reference §7 Security limits: pre-auth frame cap
		AuthTimeout:          10 * time.Second, // reference §7 Security limits: FELIX_AUTH_TIMEOUT_MS
		// Ours (issue #11): a slow link still moves a 16 MiB frame in 10 s
		// at 13 Mbit/s, and a trickling client pins a stream for no longer.
		FrameReadTimeout: 10 * time.Second,

		MaxClientConnections: 8192, // reference §7 Security limits: FELIX_MAX_CLIENT_CONNECTIONS
		MaxConnectionsPerIP:  512,  // reference §7 Security limits: FELIX_MAX_CONNECTIONS_PER_IP
		// TenantPublishBytesPerSec, TenantPublishMsgsPerSec: 0, off (reference
		// §7 Security limits). TenantMaxStreams, TenantMaxSubscriptions: 0,
		// off (ours; the reference has no default to copy).

		PubQueueDepth:           64,                      // spec: Publish/Subscribe, Isolation and backpressure; reference §3.1
		PublishQueueWaitTimeout: 2000 * time.Millisecond, // spec: Publish/Subscribe, Isolation and backpressure; reference §3.1
		PublishWindow:           256,                     // spec: Publish/Subscribe, Acked publishes are pipelined

		SubscriberQueueCapacity:    512,  // spec: Publish/Subscribe, Choosing a queue size ("the 512 default")
		SubscriberQueueCapacityMax: 4096, // spec: Publish/Subscribe, Choosing a queue size
		// spec: Publish/Subscribe, Isolation and backpressure says both 128 MiB and
		// "the 64 MiB default" (reference §13); the design brief picks 64 MiB.
		SubscriberQueueMaxBytes:       64 * mib,
		SubscriberQueueMaxBytesTotal:  0,          // spec: Publish/Subscribe, Isolation and backpressure ("off by default")
		SubscriberQueuePolicy:         "drop_new", // spec: Publish/Subscribe, Isolation and backpressure; reference §5.1
		SubscriberEgressMaxBytes:      256 * mib,  // spec: Publish/Subscribe, Isolation and backpressure
		SubscriberWriterLanes:         4,          // reference §3.1 Subscribe; §5.1 isolation
		SubscriberLaneQueueDepth:      64,         // reference §3.1 Subscribe; §5.1 isolation
		SubscriberLaneQueuePolicy:     "block",    // the spec's drop_new lost healthy subscribers' batches (issue #11)
		SubscriberLaneShard:           "auto",     // spec: Internals: Subscribe & Fanout, Lane assignment
		SubscriberSingleWriterPerConn: false,      // reference §3.1 Subscribe (true is only the latency profile's choice)

		// Ours (issue #9): outlasts a reader's pause (a GC, a slow disk);
		// past it publishers see the stalled reader evicted, not a hang.
		SubscriberBlockMaxWait: 30 * time.Second,

		EventBatchMaxEvents: 64,                     // spec: Publish/Subscribe, Batching, Broker side
		EventBatchMaxBytes:  int(64 * kib),          // spec: Publish/Subscribe, Batching, Broker side
		EventBatchMaxDelay:  250 * time.Microsecond, // spec: Publish/Subscribe, Batching, Broker side
		FanoutBatchSize:     64,                     // reference §3.1 Event batching

		ReplayRingRecords:  1024,     // spec: Publish/Subscribe, Isolation and backpressure (replay ring)
		ReplayRingMaxBytes: 64 * mib, // spec: Publish/Subscribe, Isolation and backpressure (replay ring)
		// The spec has it off; here it is on (issue #11): see defaultRingTotal.
		ReplayRingMaxBytesTotal: defaultRingTotal(),
		// Not in the reference: issue #11 (streams made by a publish were never reclaimed).
		StreamIdleTimeout: 10 * time.Minute,
	}
	c.setGroupClusterKafkaDefaults()
	return c
}

// setGroupClusterKafkaDefaults sets the consumer groups', the cluster's and
// the Kafka listener's defaults.
func (c *Config) setGroupClusterKafkaDefaults() {
	c.GroupVisibilityTimeout = 30 * time.Second // reference §5.6
	c.GroupMaxVisibility = 12 * time.Hour       // reference §5.6
	c.GroupMaxAttempts = 5                      // reference §5.6
	c.GroupMaxInFlight = 10000                  // reference §5.6
	c.GroupMaxWait = 30 * time.Second           // reference §5.6
	// Ours: a group actor's mailbox, like a shard's, bounds the
	// requests waiting for it.
	c.GroupQueueDepth = 1024

	c.ClusterName = "felix"
	c.ClusterEtcdPrefix = "/felix"
	c.ClusterLeaseTTL = 5 * time.Second
	// Kafka listener off; its limits follow the reference (felix-reference.md §6).
	c.KafkaAutoCreateTopics = "refuse"
	c.KafkaAutoCreateShards = 1
	c.KafkaMaxRequestBytes = 8 * mib
	c.KafkaMaxBatchBytes = 16 * mib
	c.KafkaMaxInflight = 16
}
