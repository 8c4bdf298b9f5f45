package config

import (
	"runtime"
	"time"
)

// Byte-size units for the defaults and ParseBytes.
const (
	kib int64 = 1 << 10
	mib int64 = 1 << 20
	gib int64 = 1 << 30
)

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

// Default returns the defaults: what a broker runs with when a key is not
// set in the file, the environment or the flags. A comment says why a value
// is what it is where that is not the knob's own help text.
func Default() Config {
	c := Config{
		// Loopback, so a development broker is not open to the network;
		// a deployment names its address.
		Listen:  "127.0.0.1:5000",
		DataDir: "./felix-data",
		// Loopback: the admin endpoint's metrics and probes are open.
		Admin:        "127.0.0.1:5080",
		Auth:         "jwt",
		AuthAudience: "felix",

		DurableFsync:        "periodic",
		DurableSyncInterval: 250 * time.Millisecond,
		DurableSegmentBytes: 256 * mib,
		// Without a bound each open durable shard holds 4 descriptors; a
		// quarter of a common 16384 limit leaves the rest to everything else.
		DurableMaxOpenFiles: 4096,
		// Whole segments go at once, so a check every 10 s is plenty.
		DurableRetentionInterval: 10 * time.Second,
		// An hour of writes stays whole: a watcher that reconnects within
		// it resumes from its version instead of a snapshot.
		CacheResumeWindow: time.Hour,
		LogLevel:          "info",
		// AddrFile, TLSCert and TLSKey stay empty: no address file, and a
		// self-signed certificate generated into DataDir.

		PubQueueDepth:           64,
		PublishQueueWaitTimeout: 2000 * time.Millisecond,
		PublishWindow:           256,

		SubscriberQueueCapacity:      512,
		SubscriberQueueCapacityMax:   4096,
		SubscriberQueueMaxBytes:      64 * mib,
		SubscriberQueueMaxBytesTotal: 0, // off: each queue's own bound holds
		SubscriberQueuePolicy:        "drop_new",
		SubscriberEgressMaxBytes:     256 * mib,
		// A lane forwards deliveries, about a core's worth: four, or one per
		// processor where there are more.
		SubscriberWriterLanes:         max(4, runtime.GOMAXPROCS(0)),
		SubscriberLaneQueueDepth:      64,
		SubscriberLaneQueuePolicy:     "block", // the only choice: drop_new at a shared lane lost healthy subscribers' batches
		SubscriberLaneShard:           "auto",
		SubscriberSingleWriterPerConn: false, // true is only the latency profile's choice

		// Outlasts a reader's pause (a GC, a slow disk);
		// past it publishers see the stalled reader evicted, not a hang.
		SubscriberBlockMaxWait: 30 * time.Second,

		EventBatchMaxEvents: 64,
		EventBatchMaxBytes:  int(64 * kib),
		EventBatchMaxDelay:  250 * time.Microsecond,
		FanoutBatchSize:     64,

		ReplayRingRecords:  1024,
		ReplayRingMaxBytes: 64 * mib,
		// On, so idle rings cannot pin the memory: see defaultRingTotal.
		ReplayRingMaxBytesTotal: defaultRingTotal(),
		// Streams made by a publish were never reclaimed before this.
		StreamIdleTimeout: 10 * time.Minute,
	}
	c.setAdmissionDefaults()
	c.setGroupClusterKafkaDefaults()
	return c
}

// setAdmissionDefaults sets the bounds on what a client may send before
// and after its handshake, and on how many may connect and fail to log in.
func (c *Config) setAdmissionDefaults() {
	c.MaxFrameBytes = int(16 * mib)
	c.PreAuthMaxFrameBytes = int(64 * kib) // an auth frame is small; nothing larger before the handshake
	c.AuthTimeout = 10 * time.Second
	// A slow link still moves a 16 MiB frame in 10 s
	// at 13 Mbit/s, and a trickling client pins a stream for no longer.
	c.FrameReadTimeout = 10 * time.Second

	c.MaxClientConnections = 8192
	c.MaxConnectionsPerIP = 512
	// An eighth of the authenticated bound: a client authenticates
	// within a round trip of its handshake, so the pool only has to
	// hold the connections authenticating at once, and what a flood
	// holds costs about 76 KiB each (8192 held 622 MB).
	c.MaxPreAuthConnections = 1024
	// A host opening a pool of connections at once authenticates them
	// within milliseconds; 64 such is generous.
	c.MaxPreAuthConnectionsPerIP = 64
	// Ten typos, then one check a second: a client retrying with a
	// stale token is slowed, a guesser is held to 1 check/s per
	// address instead of the ~1,000/s a core verifies.
	c.AuthFailureBurst = 10
	c.AuthFailureInterval = time.Second
	c.AuthFailureMaxAddresses = 16384
	// TenantPublishBytesPerSec, TenantPublishMsgsPerSec, TenantMaxStreams,
	// TenantMaxSubscriptions: 0, off: no single number fits every
	// tenant, so an operator who wants one sets it.
}

// setGroupClusterKafkaDefaults sets the consumer groups', the cluster's and
// the Kafka listener's defaults.
func (c *Config) setGroupClusterKafkaDefaults() {
	c.GroupVisibilityTimeout = 30 * time.Second
	c.GroupMaxVisibility = 12 * time.Hour
	c.GroupMaxAttempts = 5
	c.GroupMaxInFlight = 10000
	c.GroupMaxWait = 30 * time.Second
	// A group actor's mailbox, like a shard's, bounds the
	// requests waiting for it.
	c.GroupQueueDepth = 1024

	c.ClusterName = "felix"
	c.ClusterEtcdPrefix = "/felix"
	c.ClusterLeaseTTL = 5 * time.Second
	// The Kafka listener is off (kafka_listen empty); its limits bound
	// one request as read and one partition's batch once decompressed.
	c.KafkaAutoCreateTopics = "refuse"
	c.KafkaAutoCreateShards = 1
	c.KafkaDefaultNamespace = "default"
	c.KafkaMaxRequestBytes = 8 * mib
	c.KafkaMaxBatchBytes = 16 * mib
	c.KafkaMaxInflight = 16
	c.KafkaMaxRequestDecompressedBytes = 32 * mib
	c.KafkaFetchMaxBytes = 50 * mib
	c.KafkaMaxInflightFetchBytes = 64 * mib
	c.KafkaMaxInflightRequestBytes = 16 * mib
	c.KafkaRequestReadTimeout = 30 * time.Second
	c.KafkaIdleTimeout = 10 * time.Minute
}
