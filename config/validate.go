package config

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/getfelix/felix-go/wire"
)

// minFrameBytes is the smallest frame cap accepted: below it a handshake or an
// error frame may not fit, and the broker could not even refuse a client.
const minFrameBytes = kib

// choices lists the values a string knob accepts, for Validate and flag help.
var choices = map[string][]string{
	// zerolog's level names.
	"log_level": {"trace", "debug", "info", "warn", "error", "fatal", "panic", "disabled"},
	// drop_old evicts the oldest queued batch for real (not a drop_new
	// under another name).
	"subscriber_queue_policy": {"drop_new", "drop_old", "block"},
	// No drop_new: a lane is shared by many
	// subscriptions, and dropping there lost batches of subscribers that
	// kept up. Only a subscription's own queue drops.
	"subscriber_lane_queue_policy": {"block"},
	"subscriber_lane_shard":        {"auto", "subscriber_id_hash", "connection_id_hash", "round_robin_pin"},
	"kafka_auto_create_topics":     {"refuse", "create"},
}

// Validate refuses values the broker cannot run with. It returns every
// problem joined, each naming its key, so one run shows all the bad keys.
func (c Config) Validate() error {
	ck := &checker{}
	c.validateEdge(ck)
	c.validateSubscribers(ck)
	c.validateDurable(ck)
	c.validateAuth(ck)
	c.validateCluster(ck)
	c.validateKafka(ck)
	c.validateBrowser(ck)
	c.validateGroups(ck)
	return errors.Join(ck.errs...)
}

// checker collects Validate's problems.
type checker struct{ errs []error }

func (ck *checker) raw(err error) { ck.errs = append(ck.errs, err) }

func (ck *checker) bad(key, msg string, args ...any) {
	ck.raw(fmt.Errorf("config: %s: %s", key, fmt.Sprintf(msg, args...)))
}

func (ck *checker) atLeast(key string, v, lo int64) {
	if v < lo {
		ck.bad(key, "must be at least %d, got %d", lo, v)
	}
}

func (ck *checker) atMost(key string, v, hi int64, why string) {
	if v > hi {
		ck.bad(key, "must be at most %d (%s), got %d", hi, why, v)
	}
}

func (ck *checker) notNegative(key string, d time.Duration) {
	if d < 0 {
		ck.bad(key, "must not be negative, got %s", d)
	}
}

func (ck *checker) oneOf(key, v string) {
	if !slices.Contains(choices[key], v) {
		ck.bad(key, "must be one of %s, got %q", strings.Join(choices[key], ", "), v)
	}
}

// validateEdge checks the network edge's knobs and the quotas.
func (c Config) validateEdge(ck *checker) {
	ck.oneOf("log_level", c.LogLevel)
	if (c.TLSCert == "") != (c.TLSKey == "") {
		ck.bad("tls_cert", "and tls_key must be set together (both empty generates a certificate)")
	}

	ck.atLeast("max_frame_bytes", int64(c.MaxFrameBytes), minFrameBytes)
	ck.atLeast("pre_auth_max_frame_bytes", int64(c.PreAuthMaxFrameBytes), minFrameBytes)
	ck.atMost("max_frame_bytes", int64(c.MaxFrameBytes), math.MaxUint32, "a frame's length is 32 bits on the wire")
	if c.PreAuthMaxFrameBytes > c.MaxFrameBytes {
		ck.bad("pre_auth_max_frame_bytes", "%d is larger than max_frame_bytes %d", c.PreAuthMaxFrameBytes, c.MaxFrameBytes)
	}
	if c.AuthTimeout <= 0 {
		ck.bad("auth_timeout_ms", "must be positive, got %s", c.AuthTimeout)
	}
	if c.FrameReadTimeout <= 0 {
		ck.bad("frame_read_timeout_ms", "must be positive, got %s", c.FrameReadTimeout)
	}
	for p := range strings.SplitSeq(c.MetricsStreams, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		if parts := strings.Split(p, "/"); len(parts) != 3 || slices.Contains(parts, "") {
			ck.bad("metrics_streams", "pattern %q: want tenant/namespace/stream, each part a name or *", p)
		}
	}

	// Quotas: 0 turns each off, so only a negative value is a mistake.
	ck.atLeast("max_client_connections", int64(c.MaxClientConnections), 0)
	ck.atLeast("max_connections_per_ip", int64(c.MaxConnectionsPerIP), 0)
	ck.atLeast("tenant_max_connections", int64(c.TenantMaxConnections), 0)
	ck.atLeast("max_preauth_connections", int64(c.MaxPreAuthConnections), 0)
	ck.atLeast("max_preauth_connections_per_ip", int64(c.MaxPreAuthConnectionsPerIP), 0)
	ck.atLeast("auth_failure_burst", int64(c.AuthFailureBurst), 0)
	if c.AuthFailureBurst > 0 {
		if c.AuthFailureInterval <= 0 {
			ck.bad("auth_failure_interval_ms", "must be positive with auth_failure_burst %d, got %s", c.AuthFailureBurst, c.AuthFailureInterval)
		}
		ck.atLeast("auth_failure_max_addresses", int64(c.AuthFailureMaxAddresses), 1)
	}
	ck.atLeast("tenant_publish_bytes_per_sec", c.TenantPublishBytesPerSec, 0)
	ck.atLeast("tenant_publish_msgs_per_sec", c.TenantPublishMsgsPerSec, 0)
	ck.atLeast("tenant_max_streams", int64(c.TenantMaxStreams), 0)
	ck.atLeast("tenant_max_subscriptions", int64(c.TenantMaxSubscriptions), 0)

	ck.atLeast("pub_queue_depth", int64(c.PubQueueDepth), 1)
	ck.notNegative("publish_queue_wait_timeout_ms", c.PublishQueueWaitTimeout) // 0: no wait
	ck.atLeast("publish_window", int64(c.PublishWindow), 0)                    // 0 turns pipelining off
}

// validateSubscribers checks the publish and delivery queues.
func (c Config) validateSubscribers(ck *checker) {
	ck.atLeast("subscriber_queue_capacity", int64(c.SubscriberQueueCapacity), 1)
	ck.atLeast("subscriber_queue_capacity_max", int64(c.SubscriberQueueCapacityMax), 1)
	if c.SubscriberQueueCapacity > c.SubscriberQueueCapacityMax {
		ck.bad("subscriber_queue_capacity", "%d is larger than subscriber_queue_capacity_max %d",
			c.SubscriberQueueCapacity, c.SubscriberQueueCapacityMax)
	}
	ck.atLeast("subscriber_queue_max_bytes", c.SubscriberQueueMaxBytes, 0) // 0: no per-subscriber byte bound
	ck.atLeast("subscriber_queue_max_bytes_total", c.SubscriberQueueMaxBytesTotal, 0)
	// A total below one queue's own bound makes that bound unreachable: almost
	// certainly a unit slip, not a plan.
	if t, one := c.SubscriberQueueMaxBytesTotal, c.SubscriberQueueMaxBytes; t > 0 && t < one {
		ck.bad("subscriber_queue_max_bytes_total", "%d is smaller than subscriber_queue_max_bytes %d", t, one)
	}
	ck.oneOf("subscriber_queue_policy", c.SubscriberQueuePolicy)
	if c.SubscriberBlockMaxWait <= 0 {
		ck.bad("subscriber_block_max_wait_ms", "must be positive, got %s", c.SubscriberBlockMaxWait)
	}
	ck.atLeast("subscriber_egress_max_bytes", c.SubscriberEgressMaxBytes, 0)
	ck.atLeast("subscriber_writer_lanes", int64(c.SubscriberWriterLanes), 1)
	ck.atLeast("subscriber_lane_queue_depth", int64(c.SubscriberLaneQueueDepth), 1)
	if c.SubscriberLaneQueuePolicy == "drop_new" {
		ck.bad("subscriber_lane_queue_policy", "drop_new is not offered: a lane is shared by many subscriptions, and dropping there lost batches of subscribers that kept up; lanes wait (block), and each subscription's own queue applies subscriber_queue_policy. Remove the setting")
	} else {
		ck.oneOf("subscriber_lane_queue_policy", c.SubscriberLaneQueuePolicy)
	}
	ck.oneOf("subscriber_lane_shard", c.SubscriberLaneShard)

	ck.atLeast("event_batch_max_events", int64(c.EventBatchMaxEvents), 1)
	ck.atLeast("event_batch_max_bytes", int64(c.EventBatchMaxBytes), 0)
	ck.notNegative("event_batch_max_delay_us", c.EventBatchMaxDelay) // 0: never wait to fill a batch
	ck.atLeast("fanout_batch_size", int64(c.FanoutBatchSize), 0)     // 0 and 1: single-event mode
	ck.atLeast("replay_ring_records", int64(c.ReplayRingRecords), 1)
	ck.atLeast("replay_ring_max_bytes", c.ReplayRingMaxBytes, 0)
	ck.atLeast("replay_ring_max_bytes_total", c.ReplayRingMaxBytesTotal, 0)
}

// validateDurable checks the durable log's knobs.
func (c Config) validateDurable(ck *checker) {
	switch c.DurableFsync {
	case "none", "periodic", "on_commit":
	default:
		ck.raw(fmt.Errorf("config: durable_fsync %q is not none, periodic or on_commit", c.DurableFsync))
	}
	if c.DurableSyncInterval <= 0 {
		ck.raw(fmt.Errorf("config: durable_sync_interval_ms must be positive, got %s", c.DurableSyncInterval))
	}
	ck.atLeast("durable_segment_bytes", c.DurableSegmentBytes, 64<<10)
	ck.atMost("durable_segment_bytes", c.DurableSegmentBytes, 1<<30, "1 GiB: index positions are 32 bits")
	// A log appending touches its segment, two indexes and its mark at once.
	ck.atLeast("durable_max_open_files", int64(c.DurableMaxOpenFiles), 16)
	ck.atLeast("durable_retention_bytes", c.DurableRetentionBytes, 0)
	ck.notNegative("durable_retention_age_ms", c.DurableRetentionAge)
	ck.notNegative("cache_resume_window_ms", c.CacheResumeWindow)
	if c.DurableRetentionInterval <= 0 {
		ck.raw(fmt.Errorf("config: durable_retention_interval_ms must be positive, got %s", c.DurableRetentionInterval))
	}
	if c.ReplayRingMaxBytesTotal > 0 && c.ReplayRingMaxBytesTotal < c.ReplayRingMaxBytes {
		ck.raw(fmt.Errorf("config: replay_ring_max_bytes_total (%d) is smaller than one ring's replay_ring_max_bytes (%d)", c.ReplayRingMaxBytesTotal, c.ReplayRingMaxBytes))
	}
}

// validateAuth checks authentication and the admin endpoint (and the one
// stream lifecycle knob that fits nowhere else).
func (c Config) validateAuth(ck *checker) {
	if c.StreamIdleTimeout < 0 {
		ck.bad("stream_idle_timeout_ms", "must not be negative (0 never reclaims), got %s", c.StreamIdleTimeout)
	}
	if c.Auth != "jwt" && c.Auth != "none" {
		ck.raw(fmt.Errorf("config: auth %q is not jwt or none", c.Auth))
	}
	if c.Auth == "none" && c.AuthKeys != "" {
		ck.raw(fmt.Errorf("config: auth_keys %q is set but auth is none: keys would be ignored; drop one", c.AuthKeys))
	}
	if c.Auth == "jwt" && c.AuthAudience == "" {
		ck.raw(fmt.Errorf("config: auth_audience is empty; tokens must name an audience (the default is felix)"))
	}
	if c.TLSClientCertBindSubject && c.TLSClientCA == "" {
		ck.raw(fmt.Errorf("config: tls_client_cert_bind_subject needs tls_client_ca: without client certificates there is no subject to bind"))
	}
	if c.Admin != "" {
		if _, _, err := net.SplitHostPort(c.Admin); err != nil {
			ck.raw(fmt.Errorf("config: admin %q is not host:port (empty turns the admin endpoint off): %w", c.Admin, err))
		}
	}
	for _, h := range c.AdminHosts() {
		if !validHostName(h) {
			ck.bad("admin_allowed_hosts", "want comma-separated host names without scheme or port, such as felix-1.internal, got %q", h)
		}
	}
}

// AdminHosts is AdminAllowedHosts as a list, each name trimmed, empty
// entries dropped.
func (c Config) AdminHosts() []string {
	var out []string
	for _, h := range strings.Split(c.AdminAllowedHosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			out = append(out, h)
		}
	}
	return out
}

// validHostName accepts a DNS name: letters, digits, '-', '_' and '.'
// (the admin endpoint compares it with a Host header, nothing resolves it).
func validHostName(h string) bool {
	if len(h) > 253 {
		return false
	}
	for _, r := range h {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
		default:
			return false
		}
	}
	return true
}

func (c Config) validateCluster(ck *checker) {
	c.validatePeer(ck)
	c.validateEtcd(ck)
	if c.ClusterEtcd == "" {
		return
	}
	if c.ClusterName == "" {
		ck.bad("cluster_name", "must not be empty in a cluster")
	}
	if !strings.HasPrefix(c.ClusterEtcdPrefix, "/") {
		ck.bad("cluster_etcd_prefix", "must start with /, got %q", c.ClusterEtcdPrefix)
	}
	if c.ClusterLeaseTTL < 2*time.Second || c.ClusterLeaseTTL%time.Second != 0 {
		// etcd grants leases in whole seconds, and refuses less than its
		// minimum (about 1.5 s with default election timing).
		ck.bad("cluster_lease_ttl_ms", "must be whole seconds, at least 2000, got %s", c.ClusterLeaseTTL)
	}
	if c.ClusterZone != "" && !validNodeID(c.ClusterZone) {
		ck.bad("cluster_zone", "use letters, digits, '-', '_' and '.', at most 64, got %q", c.ClusterZone)
	}
	if c.ClusterNodeID != "" && !validNodeID(c.ClusterNodeID) {
		ck.bad("cluster_node_id", "use letters, digits, '-', '_' and '.', at most 64, got %q", c.ClusterNodeID)
	}
}

// validNodeID keeps node ids usable in etcd keys, actor names and logs.
func validNodeID(id string) bool {
	if len(id) == 0 || len(id) > 64 {
		return false
	}
	for _, r := range id {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
		default:
			return false
		}
	}
	return true
}

// validateKafka checks the Kafka listener's knobs (kafka.Config).
func (c Config) validateKafka(ck *checker) {
	ck.oneOf("kafka_auto_create_topics", c.KafkaAutoCreateTopics)
	ck.atLeast("kafka_auto_create_shards", int64(c.KafkaAutoCreateShards), 1)
	ck.atMost("kafka_auto_create_shards", int64(c.KafkaAutoCreateShards), 1024, "a stream has at most 1024 shards")
	ck.atLeast("kafka_max_request_bytes", c.KafkaMaxRequestBytes, minFrameBytes)
	ck.atMost("kafka_max_request_bytes", c.KafkaMaxRequestBytes, 1<<30, "a request is read whole into memory")
	ck.atLeast("kafka_max_batch_bytes", c.KafkaMaxBatchBytes, minFrameBytes)
	ck.atMost("kafka_max_batch_bytes", c.KafkaMaxBatchBytes, 256*mib, "the decompressor's window is sized for it")
	ck.atLeast("kafka_max_inflight", int64(c.KafkaMaxInflight), 1)
	// NOTE: kafka.ValidateDefaultNamespace applies the same rule; change
	// both together (config does not import kafka).
	if err := wire.ValidateName("namespace", c.KafkaDefaultNamespace); err != nil {
		ck.bad("kafka_default_namespace", "%v", err)
	} else if strings.Contains(c.KafkaDefaultNamespace, ".") || strings.HasPrefix(c.KafkaDefaultNamespace, "__") {
		// A '.' would make the dotless topic and its dotted form name
		// different streams; "__" namespaces are the broker's.
		ck.bad("kafka_default_namespace", "must have no '.' and not start with \"__\", got %q", c.KafkaDefaultNamespace)
	}
	ck.atLeast("kafka_max_request_decompressed_bytes", c.KafkaMaxRequestDecompressedBytes, c.KafkaMaxBatchBytes)
	ck.atLeast("kafka_fetch_max_bytes", c.KafkaFetchMaxBytes, minFrameBytes)
	ck.atMost("kafka_fetch_max_bytes", c.KafkaFetchMaxBytes, 1<<30, "an answer is built whole in memory")
	ck.atLeast("kafka_max_inflight_fetch_bytes", c.KafkaMaxInflightFetchBytes, c.KafkaFetchMaxBytes)
	ck.atLeast("kafka_max_inflight_request_bytes", c.KafkaMaxInflightRequestBytes, c.KafkaMaxRequestBytes)
	ck.atLeast("kafka_request_read_timeout_ms", int64(c.KafkaRequestReadTimeout/time.Millisecond), 1)
	ck.atLeast("kafka_idle_timeout_ms", int64(c.KafkaIdleTimeout/time.Millisecond), 1)
	if c.KafkaListen != "" {
		if _, _, err := net.SplitHostPort(c.KafkaListen); err != nil {
			ck.bad("kafka_listen", "want host:port, such as 127.0.0.1:9092, got %q", c.KafkaListen)
		}
	}
}

// validateBrowser checks the browser front end's knobs (webfront.Config).
func (c Config) validateBrowser(ck *checker) {
	if c.BrowserListen != "" {
		if _, _, err := net.SplitHostPort(c.BrowserListen); err != nil {
			ck.bad("browser_listen", "want host:port, such as 127.0.0.1:7380, got %q", c.BrowserListen)
		}
	}
	if c.BrowserWebTransportListen != "" {
		if _, _, err := net.SplitHostPort(c.BrowserWebTransportListen); err != nil {
			ck.bad("browser_webtransport_listen", "want host:port, such as 127.0.0.1:7381, got %q", c.BrowserWebTransportListen)
		} else if c.BrowserListen == "" {
			ck.bad("browser_webtransport_listen", "needs browser_listen too: WebSocket is the fallback of browsers and networks without WebTransport")
		}
	}
	for _, o := range c.BrowserOrigins() {
		if u, err := url.Parse(o); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" || u.RawQuery != "" || u.User != nil {
			ck.bad("browser_allowed_origins", "want comma-separated origins such as https://app.example.com or http://localhost:8080 (scheme, host, optional port; no path), got %q", o)
		}
	}
}

// BrowserOrigins is BrowserAllowedOrigins as a list, each origin trimmed,
// empty entries dropped.
func (c Config) BrowserOrigins() []string {
	var out []string
	for _, o := range strings.Split(c.BrowserAllowedOrigins, ",") {
		if o = strings.TrimSpace(o); o != "" {
			out = append(out, o)
		}
	}
	return out
}
