package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/wire"
)

// Topic administration: CreateTopics, DeleteTopics and CreatePartitions on
// durable streams, through the session's stream calls, so that the
// stream.manage right, the tenant's stream limit and a cluster's replica
// rules are checked where they are for felix/1. A topic is a durable
// stream (partitions = shards, replication factor = replicas); its
// configs are what a stream has (topicconfigs.go).
//
// Shards cannot be added to a stream: keys are routed over the shard
// count, so more shards would move keys between partitions under running
// consumers. CreatePartitions is answered INVALID_PARTITIONS saying so.

// maxTopicPartitions is the most shards a stream may have (the
// registry's bound, streams.MaxShards; this package does not import it).
const maxTopicPartitions = 1024

// maxAdminItems bounds the topics, resources or groups one admin request
// acts on: each asks the registry (in a cluster, etcd) from the
// connection's read loop, and an 8 MiB request can name hundreds of
// thousands, which would hold the connection (and the registry) for
// minutes. Those past it are refused INVALID_REQUEST unread.
const maxAdminItems = 1000

// tooMany refuses the items of an admin request past maxAdminItems.
func tooMany(i int) *adminError {
	if i < maxAdminItems {
		return nil
	}
	return refusal(kerr.InvalidRequest.Code, "at most %d topics, resources or groups per admin request; send the rest in another", maxAdminItems)
}

// adminError is a refusal with Kafka's code and the message a client
// shows.
type adminError struct {
	code int16
	msg  string
}

func (e *adminError) Error() string { return e.msg }

func refusal(code int16, format string, args ...any) *adminError {
	return &adminError{code: code, msg: fmt.Sprintf(format, args...)}
}

// adminRefusal maps a service error of a topic's administration.
func adminRefusal(err error) *adminError {
	var ae *adminError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, wire.ErrLimitExceeded):
		return refusal(kerr.PolicyViolation.Code, "%v", err)
	}
	return refusal(topicCode(err), "%v", err)
}

// handleCreateTopics creates each topic, or with validate_only checks it.
func (c *conn) handleCreateTopics(h header, r *kmsg.CreateTopicsRequest) *pending {
	resp := r.ResponseKind().(*kmsg.CreateTopicsResponse)
	seen := make(map[string]int, len(r.Topics))
	for _, t := range r.Topics {
		seen[t.Topic]++
	}
	worst := int16(0)
	for i, t := range r.Topics {
		rt := kmsg.NewCreateTopicsResponseTopic()
		rt.Topic = t.Topic
		var info *service.StreamInfo
		err := refusal(kerr.InvalidRequest.Code, "topic %q is named more than once in the request", t.Topic)
		if e := tooMany(i); e != nil {
			err = e
		} else if seen[t.Topic] == 1 {
			info, err = c.createTopic(c.ctx, t, r.ValidateOnly)
		}
		if err != nil {
			rt.ErrorCode, rt.ErrorMessage = err.code, &err.msg
			worst = cmp0(worst, err.code)
		} else {
			rt.NumPartitions, rt.ReplicationFactor = int32(info.Shards), int16(max(info.Replicas, 1))
			for _, e := range c.topicConfigs(info) {
				rc := kmsg.NewCreateTopicsResponseTopicConfig()
				rc.Name, rc.Value, rc.ReadOnly, rc.Source = e.name, kmsg.StringPtr(e.value), e.readOnly, int8(e.source)
				rt.Configs = append(rt.Configs, rc)
			}
		}
		resp.Topics = append(resp.Topics, rt)
	}
	c.count(h.key, worst)
	return answered(h.correlation, resp)
}

// cmp0 keeps the first non-zero code, for the request's count.
func cmp0(have, code int16) int16 {
	if have != 0 {
		return have
	}
	return code
}

// createTopic makes one topic's stream (or checks it, dryRun) and
// describes it.
func (c *conn) createTopic(ctx context.Context, t kmsg.CreateTopicsRequestTopic, dryRun bool) (*service.StreamInfo, *adminError) {
	spec, err := c.topicSpec(t)
	if err != nil {
		return nil, err
	}
	if _, serr := c.sess.Stream(ctx, spec.Scope); serr == nil {
		return nil, refusal(kerr.TopicAlreadyExists.Code, "Topic '%s' already exists.", t.Topic)
	} else if !errors.Is(serr, wire.ErrNotFound) {
		return nil, adminRefusal(serr)
	}
	if dryRun {
		if serr := c.sess.CheckCreateStream(ctx, spec); serr != nil {
			return nil, adminRefusal(serr)
		}
		return &service.StreamInfo{StreamSpec: *spec}, nil
	}
	info, serr := c.sess.CreateStream(ctx, spec)
	if serr != nil {
		return nil, adminRefusal(serr)
	}
	delete(c.topics, t.Topic)
	return info, nil
}

// topicSpec is the stream a CreateTopics entry asks for, or why it
// cannot be one.
func (c *conn) topicSpec(t kmsg.CreateTopicsRequestTopic) (*service.StreamSpec, *adminError) {
	scope, ok := c.l.names().scope(c.tenant, t.Topic)
	if !ok {
		return nil, refusal(kerr.InvalidTopicException.Code, "%v: %q", errInvalidTopic, t.Topic)
	}
	spec := &service.StreamSpec{Scope: scope, Durable: true, Shards: c.l.cfg.AutoCreateShards}
	switch {
	case len(t.ReplicaAssignment) > 0:
		return nil, refusal(kerr.InvalidRequest.Code, "manual replica assignment is not supported: Felix places every shard itself")
	case t.NumPartitions == 0 || t.NumPartitions < -1:
		return nil, refusal(kerr.InvalidPartitions.Code, "Number of partitions was set to an invalid non-positive value.")
	case t.NumPartitions > maxTopicPartitions:
		return nil, refusal(kerr.InvalidPartitions.Code, "a topic has at most %d partitions (shards), not %d", maxTopicPartitions, t.NumPartitions)
	case t.NumPartitions > 0:
		spec.Shards = uint32(t.NumPartitions)
	}
	brokers := len(c.l.view().brokers)
	switch {
	case t.ReplicationFactor == 0 || t.ReplicationFactor < -1:
		return nil, refusal(kerr.InvalidReplicationFactor.Code, "Replication factor must be larger than 0, or -1 to use the default value.")
	case int(t.ReplicationFactor) > brokers:
		return nil, refusal(kerr.InvalidReplicationFactor.Code, "Replication factor: %d larger than available brokers: %d.", t.ReplicationFactor, brokers)
	case t.ReplicationFactor > 0:
		spec.Replicas = int(t.ReplicationFactor)
	}
	for _, cfg := range t.Configs {
		if err := c.applyTopicConfig(spec, cfg.Name, cfg.Value); err != nil {
			return nil, err
		}
	}
	return spec, nil
}

// applyTopicConfig sets one CreateTopics config on spec. Only what a
// stream has is accepted (see topicconfigs.go); anything else is
// INVALID_CONFIG, as Kafka answers an unknown config, so that no setting
// is taken and then silently not applied.
func (c *conn) applyTopicConfig(spec *service.StreamSpec, name string, value *string) *adminError {
	if value == nil {
		return refusal(kerr.InvalidConfig.Code, "Null value not supported for topic configs: %s", name)
	}
	v := *value
	switch name {
	case configCleanupPolicy:
		return checkCleanupPolicy(v)
	case configRetentionMs:
		ms, err := retentionValue(name, v)
		if err != nil {
			return err
		}
		if ms > int64(maxRetentionAge/time.Millisecond) {
			return refusal(kerr.InvalidConfig.Code, "Invalid value %s for configuration %s: at most %d", v, name, int64(maxRetentionAge/time.Millisecond))
		}
		spec.RetentionAge = time.Duration(ms) * time.Millisecond
	case configRetentionBytes:
		n, err := retentionValue(name, v)
		if err != nil {
			return err
		}
		spec.RetentionBytes = n
	case configCompressionType:
		return setCompression(spec, v)
	case configTimestampType:
		switch v {
		case timestampCreateTime:
			spec.LogAppendTime = false
		case timestampAppendTime:
			spec.LogAppendTime = true
		default:
			return refusal(kerr.InvalidConfig.Code, "Invalid value %s for configuration %s: String must be one of: %s, %s", v, name, timestampCreateTime, timestampAppendTime)
		}
	case configMaxMessageBytes:
		if v != strconv.Itoa(c.l.cfg.MaxBatchBytes) {
			return refusal(kerr.InvalidConfig.Code, "Invalid value %s for configuration %s: Felix keeps no per-topic value; every topic takes the broker's kafka_max_batch_bytes (%d)", v, name, c.l.cfg.MaxBatchBytes)
		}
	default:
		return refusal(kerr.InvalidConfig.Code, "Unknown topic config name: %s", name)
	}
	return nil
}

// setCompression sets a stream's Fetch codec from compression.type:
// producer (each batch in its producer's codec) is the stream's default,
// "", and Kafka's uncompressed is none.
func setCompression(spec *service.StreamSpec, v string) *adminError {
	switch {
	case v == compressionProducer:
		spec.Compression = ""
	case v == service.CompressionNone || v == "uncompressed":
		spec.Compression = service.CompressionNone
	case slices.Contains(service.Codecs, v):
		spec.Compression = v
	default:
		return refusal(kerr.InvalidConfig.Code, "Invalid value %s for configuration %s: String must be one of: %s, %s, %s", v, configCompressionType,
			compressionProducer, service.CompressionNone, strings.Join(service.Codecs, ", "))
	}
	return nil
}

// maxRetentionAge keeps a retention.ms from overflowing a duration (an
// overflow once wrapped to a fraction of a millisecond): about 292 years
// would fit; a century is plenty.
const maxRetentionAge = 100 * 365 * 24 * time.Hour

// retentionValue reads retention.ms or retention.bytes: a positive
// number, or -1 (Kafka's unlimited) for 0, which a stream reads as "no
// bound of its own".
func retentionValue(name, v string) (int64, *adminError) {
	n, err := strconv.ParseInt(v, 10, 64)
	switch {
	case err != nil:
		return 0, refusal(kerr.InvalidConfig.Code, "Invalid value %s for configuration %s: Not a number of type LONG", v, name)
	case n == -1:
		return 0, nil
	case n <= 0:
		return 0, refusal(kerr.InvalidConfig.Code, "Invalid value %s for configuration %s: a positive number, or -1 for no bound", v, name)
	}
	return n, nil
}

// checkCleanupPolicy accepts delete, the only policy a stream has.
func checkCleanupPolicy(v string) *adminError {
	if strings.TrimSpace(v) == "delete" {
		return nil
	}
	if strings.Contains(v, "compact") {
		return refusal(kerr.InvalidConfig.Code, "Invalid value %s for configuration cleanup.policy: compaction is not supported; Felix streams only delete by retention (cleanup.policy=delete)", v)
	}
	return refusal(kerr.InvalidConfig.Code, "Invalid value %s for configuration cleanup.policy: String must be one of: compact, delete", v)
}

// handleDeleteTopics deletes each named topic's stream; topics named by
// id (v6) are UNKNOWN_TOPIC_ID, as Felix streams have none.
func (c *conn) handleDeleteTopics(h header, r *kmsg.DeleteTopicsRequest) *pending {
	resp := r.ResponseKind().(*kmsg.DeleteTopicsResponse)
	names := make([]*string, 0, len(r.TopicNames)+len(r.Topics))
	if r.Version < 6 {
		for i := range r.TopicNames {
			names = append(names, &r.TopicNames[i])
		}
	} else {
		for _, t := range r.Topics {
			names = append(names, t.Topic)
		}
	}
	worst := int16(0)
	for i, name := range names {
		rt := kmsg.NewDeleteTopicsResponseTopic()
		rt.Topic = name
		err := tooMany(i)
		switch {
		case err != nil:
		case name == nil:
			err = refusal(kerr.UnknownTopicID.Code, "Felix topics have no ids; name the topic")
		default:
			err = c.deleteTopic(c.ctx, *name)
		}
		if err != nil {
			rt.ErrorCode, rt.ErrorMessage = err.code, &err.msg
			worst = cmp0(worst, err.code)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	c.count(h.key, worst)
	return answered(h.correlation, resp)
}

// deleteTopic deletes a topic's durable stream. Its group commits stay
// in the commit log (a topic made again under the name resumes from
// them), as OffsetDelete can remove them.
func (c *conn) deleteTopic(ctx context.Context, name string) *adminError {
	delete(c.topics, name)
	scope, ok := c.l.names().scope(c.tenant, name)
	if !ok {
		return refusal(kerr.InvalidTopicException.Code, "%v: %q", errInvalidTopic, name)
	}
	info, err := c.sess.Stream(ctx, scope)
	if err == nil {
		err = notTopic(info)
	}
	if err == nil {
		err = c.sess.DeleteStream(ctx, scope)
	}
	return adminRefusal(err)
}

// handleCreatePartitions refuses every growth (see the package's topic
// administration note) after the checks Kafka makes first: the topic
// exists, the caller may manage it, and the count is more than it has.
func (c *conn) handleCreatePartitions(h header, r *kmsg.CreatePartitionsRequest) *pending {
	resp := r.ResponseKind().(*kmsg.CreatePartitionsResponse)
	worst := int16(0)
	for i, t := range r.Topics {
		rt := kmsg.NewCreatePartitionsResponseTopic()
		rt.Topic = t.Topic
		err := tooMany(i)
		if err == nil {
			err = c.growTopic(c.ctx, t)
		}
		rt.ErrorCode, rt.ErrorMessage = err.code, &err.msg
		worst = cmp0(worst, err.code)
		resp.Topics = append(resp.Topics, rt)
	}
	c.count(h.key, worst)
	return answered(h.correlation, resp)
}

func (c *conn) growTopic(ctx context.Context, t kmsg.CreatePartitionsRequestTopic) *adminError {
	scope, ok := c.l.names().scope(c.tenant, t.Topic)
	if !ok {
		return refusal(kerr.InvalidTopicException.Code, "%v: %q", errInvalidTopic, t.Topic)
	}
	info, err := c.sess.Stream(ctx, scope)
	if err == nil {
		err = notTopic(info)
	}
	if err == nil {
		// The right to manage the stream, checked without changing it.
		err = c.sess.CheckCreateStream(ctx, &info.StreamSpec)
	}
	if err != nil {
		return adminRefusal(err)
	}
	have := int32(info.Shards)
	switch {
	case t.Count == have:
		return refusal(kerr.InvalidPartitions.Code, "Topic already has %d partitions.", have)
	case t.Count < have:
		return refusal(kerr.InvalidPartitions.Code, "Topic currently has %d partitions, which is higher than the requested %d.", have, t.Count)
	}
	return refusal(kerr.InvalidPartitions.Code,
		"Felix cannot add partitions to topic %s (%d shards): keys are routed over the shard count, so more shards would move keys between partitions; create a new topic with %d partitions instead", t.Topic, have, t.Count)
}
