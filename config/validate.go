package config

import (
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"strings"
	"time"
)

// minFrameBytes is the smallest frame cap accepted: below it a handshake or an
// error frame may not fit, and the broker could not even refuse a client.
const minFrameBytes = kib

// choices lists the values a string knob accepts, for Validate and flag help.
var choices = map[string][]string{
	// zerolog's level names.
	"log_level": {"trace", "debug", "info", "warn", "error", "fatal", "panic", "disabled"},
	// drop_old evicts for real here; the reference only emulates it (DESIGN.md).
	"subscriber_queue_policy": {"drop_new", "drop_old", "block"},
	// The reference also has drop_new: a lane is shared by many
	// subscriptions, and dropping there lost batches of subscribers that
	// kept up (issue #11). Only a subscription's own queue drops.
	"subscriber_lane_queue_policy": {"block"},
	"subscriber_lane_shard":        {"auto", "subscriber_id_hash", "connection_id_hash", "round_robin_pin"},
}

// Validate refuses values the broker cannot run with. It returns every
// problem joined, each naming its key, so one run shows all the bad keys.
func (c Config) Validate() error {
	var errs []error
	bad := func(key, msg string, args ...any) {
		errs = append(errs, fmt.Errorf("config: %s: %s", key, fmt.Sprintf(msg, args...)))
	}
	atLeast := func(key string, v, lo int64) {
		if v < lo {
			bad(key, "must be at least %d, got %d", lo, v)
		}
	}
	atMost := func(key string, v, hi int64, why string) {
		if v > hi {
			bad(key, "must be at most %d (%s), got %d", hi, why, v)
		}
	}
	notNegative := func(key string, d time.Duration) {
		if d < 0 {
			bad(key, "must not be negative, got %s", d)
		}
	}
	oneOf := func(key, v string) {
		if !slices.Contains(choices[key], v) {
			bad(key, "must be one of %s, got %q", strings.Join(choices[key], ", "), v)
		}
	}

	oneOf("log_level", c.LogLevel)
	if (c.TLSCert == "") != (c.TLSKey == "") {
		bad("tls_cert", "and tls_key must be set together (both empty generates a certificate)")
	}

	atLeast("max_frame_bytes", int64(c.MaxFrameBytes), minFrameBytes)
	atLeast("pre_auth_max_frame_bytes", int64(c.PreAuthMaxFrameBytes), minFrameBytes)
	atMost("max_frame_bytes", int64(c.MaxFrameBytes), math.MaxUint32, "a frame's length is 32 bits on the wire")
	if c.PreAuthMaxFrameBytes > c.MaxFrameBytes {
		bad("pre_auth_max_frame_bytes", "%d is larger than max_frame_bytes %d", c.PreAuthMaxFrameBytes, c.MaxFrameBytes)
	}
	if c.AuthTimeout <= 0 {
		bad("auth_timeout_ms", "must be positive, got %s", c.AuthTimeout)
	}
	if c.FrameReadTimeout <= 0 {
		bad("frame_read_timeout_ms", "must be positive, got %s", c.FrameReadTimeout)
	}

	// Quotas: 0 turns each off, so only a negative value is a mistake.
	atLeast("max_client_connections", int64(c.MaxClientConnections), 0)
	atLeast("max_connections_per_ip", int64(c.MaxConnectionsPerIP), 0)
	atLeast("tenant_publish_bytes_per_sec", c.TenantPublishBytesPerSec, 0)
	atLeast("tenant_publish_msgs_per_sec", c.TenantPublishMsgsPerSec, 0)
	atLeast("tenant_max_streams", int64(c.TenantMaxStreams), 0)
	atLeast("tenant_max_subscriptions", int64(c.TenantMaxSubscriptions), 0)

	atLeast("pub_queue_depth", int64(c.PubQueueDepth), 1)
	notNegative("publish_queue_wait_timeout_ms", c.PublishQueueWaitTimeout) // 0: no wait
	atLeast("publish_window", int64(c.PublishWindow), 0)                    // 0 turns pipelining off (reference §3.1)

	atLeast("subscriber_queue_capacity", int64(c.SubscriberQueueCapacity), 1)
	atLeast("subscriber_queue_capacity_max", int64(c.SubscriberQueueCapacityMax), 1)
	if c.SubscriberQueueCapacity > c.SubscriberQueueCapacityMax {
		bad("subscriber_queue_capacity", "%d is larger than subscriber_queue_capacity_max %d",
			c.SubscriberQueueCapacity, c.SubscriberQueueCapacityMax)
	}
	atLeast("subscriber_queue_max_bytes", c.SubscriberQueueMaxBytes, 0) // 0: no per-subscriber byte bound
	atLeast("subscriber_queue_max_bytes_total", c.SubscriberQueueMaxBytesTotal, 0)
	// A total below one queue's own bound makes that bound unreachable: almost
	// certainly a unit slip, not a plan.
	if t, one := c.SubscriberQueueMaxBytesTotal, c.SubscriberQueueMaxBytes; t > 0 && t < one {
		bad("subscriber_queue_max_bytes_total", "%d is smaller than subscriber_queue_max_bytes %d", t, one)
	}
	oneOf("subscriber_queue_policy", c.SubscriberQueuePolicy)
	if c.SubscriberBlockMaxWait <= 0 {
		bad("subscriber_block_max_wait_ms", "must be positive, got %s", c.SubscriberBlockMaxWait)
	}
	atLeast("subscriber_egress_max_bytes", c.SubscriberEgressMaxBytes, 0)
	atLeast("subscriber_writer_lanes", int64(c.SubscriberWriterLanes), 1)
	atLeast("subscriber_lane_queue_depth", int64(c.SubscriberLaneQueueDepth), 1)
	if c.SubscriberLaneQueuePolicy == "drop_new" {
		bad("subscriber_lane_queue_policy", "drop_new is not offered: a lane is shared by many subscriptions, and dropping there lost batches of subscribers that kept up; lanes wait (block), and each subscription's own queue applies subscriber_queue_policy. Remove the setting")
	} else {
		oneOf("subscriber_lane_queue_policy", c.SubscriberLaneQueuePolicy)
	}
	oneOf("subscriber_lane_shard", c.SubscriberLaneShard)

	atLeast("event_batch_max_events", int64(c.EventBatchMaxEvents), 1)
	atLeast("event_batch_max_bytes", int64(c.EventBatchMaxBytes), 0)
	notNegative("event_batch_max_delay_us", c.EventBatchMaxDelay) // 0: never wait to fill a batch
	atLeast("fanout_batch_size", int64(c.FanoutBatchSize), 0)     // 0 and 1: single-event mode
	atLeast("replay_ring_records", int64(c.ReplayRingRecords), 1)
	atLeast("replay_ring_max_bytes", c.ReplayRingMaxBytes, 0)
	atLeast("replay_ring_max_bytes_total", c.ReplayRingMaxBytesTotal, 0)
	switch c.DurableFsync {
	case "none", "periodic", "on_commit":
	default:
		errs = append(errs, fmt.Errorf("config: durable_fsync %q is not none, periodic or on_commit", c.DurableFsync))
	}
	if c.DurableSyncInterval <= 0 {
		errs = append(errs, fmt.Errorf("config: durable_sync_interval_ms must be positive, got %s", c.DurableSyncInterval))
	}
	atLeast("durable_segment_bytes", c.DurableSegmentBytes, 64<<10)
	atMost("durable_segment_bytes", c.DurableSegmentBytes, 1<<30, "1 GiB: index positions are 32 bits")
	// A log appending touches its segment, two indexes and its mark at once.
	atLeast("durable_max_open_files", int64(c.DurableMaxOpenFiles), 16)
	atLeast("durable_retention_bytes", c.DurableRetentionBytes, 0)
	notNegative("durable_retention_age_ms", c.DurableRetentionAge)
	if c.DurableRetentionInterval <= 0 {
		errs = append(errs, fmt.Errorf("config: durable_retention_interval_ms must be positive, got %s", c.DurableRetentionInterval))
	}
	if c.ReplayRingMaxBytesTotal > 0 && c.ReplayRingMaxBytesTotal < c.ReplayRingMaxBytes {
		errs = append(errs, fmt.Errorf("config: replay_ring_max_bytes_total (%d) is smaller than one ring's replay_ring_max_bytes (%d)", c.ReplayRingMaxBytesTotal, c.ReplayRingMaxBytes))
	}
	if c.StreamIdleTimeout < 0 {
		bad("stream_idle_timeout_ms", "must not be negative (0 never reclaims), got %s", c.StreamIdleTimeout)
	}
	if c.Auth != "jwt" && c.Auth != "none" {
		errs = append(errs, fmt.Errorf("config: auth %q is not jwt or none", c.Auth))
	}
	if c.Auth == "none" && c.AuthKeys != "" {
		errs = append(errs, fmt.Errorf("config: auth_keys %q is set but auth is none: keys would be ignored; drop one", c.AuthKeys))
	}
	if c.Auth == "jwt" && c.AuthAudience == "" {
		errs = append(errs, fmt.Errorf("config: auth_audience is empty; tokens must name an audience (the default is felix)"))
	}
	if c.TLSClientCertBindSubject && c.TLSClientCA == "" {
		errs = append(errs, fmt.Errorf("config: tls_client_cert_bind_subject needs tls_client_ca: without client certificates there is no subject to bind"))
	}
	if c.Admin != "" {
		if _, _, err := net.SplitHostPort(c.Admin); err != nil {
			errs = append(errs, fmt.Errorf("config: admin %q is not host:port (empty turns the admin endpoint off): %w", c.Admin, err))
		}
	}

	return errors.Join(errs...)
}
