package kafka

import (
	"cmp"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/getfelix/felix-go/service"
)

// Configs: DescribeConfigs, AlterConfigs and IncrementalAlterConfigs.
//
// A topic has the configs its stream has: cleanup.policy (always delete:
// streams are never compacted), retention.ms and retention.bytes (the
// stream's own retention, or the broker's durable_retention_* when it has
// none; -1 is no bound), compression.type (the stream's Fetch codec:
// producer, none, gzip, snappy, lz4 or zstd), message.timestamp.type
// (CreateTime, or LogAppendTime for a stream that keeps append times only)
// and max.message.bytes (the broker's kafka_max_batch_bytes, the same for
// every topic: read-only). Other
// names are not described, as Kafka leaves out names it does not know.
// The broker resource describes the listener's bounds, all read-only.
//
// A stream's settings are fixed when it is created, so an alter that
// would change one is refused INVALID_CONFIG, saying so; one that sets
// what the topic already has succeeds and changes nothing (tools that
// apply a whole desired state, such as Terraform's, do that on every run).
// An unknown name is INVALID_CONFIG, as Kafka answers; the broker's
// configs are INVALID_REQUEST, as Kafka answers a static broker config.

// The topic configs a stream has.
const (
	configCleanupPolicy   = "cleanup.policy"
	configRetentionMs     = "retention.ms"
	configRetentionBytes  = "retention.bytes"
	configMaxMessageBytes = "max.message.bytes"
	configCompressionType = "compression.type"
	configTimestampType   = "message.timestamp.type"
)

// The values of compression.type and message.timestamp.type that are not
// a codec's name.
const (
	compressionProducer = "producer"
	timestampCreateTime = "CreateTime"
	timestampAppendTime = "LogAppendTime"
)

// configEntry is one described config.
type configEntry struct {
	name, value string
	readOnly    bool
	isDefault   bool
	source      kmsg.ConfigSource
	typ         kmsg.ConfigType
}

// topicConfigs describes a topic's stream.
func (c *conn) topicConfigs(info *service.StreamInfo) []configEntry {
	own := info.RetentionBytes > 0 || info.RetentionAge > 0
	retention := func(name string, ownValue, brokerValue int64) configEntry {
		e := configEntry{name: name, typ: kmsg.ConfigTypeLong, value: unbounded(ownValue), source: kmsg.ConfigSourceDynamicTopicConfig}
		if !own {
			e.value, e.isDefault, e.source = unbounded(brokerValue), true, kmsg.ConfigSourceDefaultConfig
			if brokerValue > 0 {
				e.source = kmsg.ConfigSourceStaticBrokerConfig
			}
		}
		return e
	}
	return []configEntry{
		{name: configCleanupPolicy, value: "delete", isDefault: true, source: kmsg.ConfigSourceDefaultConfig, typ: kmsg.ConfigTypeList},
		retention(configRetentionMs, info.RetentionAge.Milliseconds(), c.l.cfg.DefaultRetentionAge.Milliseconds()),
		retention(configRetentionBytes, info.RetentionBytes, c.l.cfg.DefaultRetentionBytes),
		{name: configMaxMessageBytes, value: strconv.Itoa(c.l.cfg.MaxBatchBytes), readOnly: true, isDefault: true,
			source: kmsg.ConfigSourceStaticBrokerConfig, typ: kmsg.ConfigTypeInt},
		ownOrDefault(configCompressionType, cmp.Or(info.Compression, compressionProducer), info.Compression == ""),
		ownOrDefault(configTimestampType, timestampType(info.LogAppendTime), !info.LogAppendTime),
	}
}

// ownOrDefault is a string config the topic has from its creation, or
// at its default.
func ownOrDefault(name, value string, isDefault bool) configEntry {
	e := configEntry{name: name, value: value, source: kmsg.ConfigSourceDynamicTopicConfig, typ: kmsg.ConfigTypeString}
	if isDefault {
		e.isDefault, e.source = true, kmsg.ConfigSourceDefaultConfig
	}
	return e
}

func timestampType(logAppendTime bool) string {
	if logAppendTime {
		return timestampAppendTime
	}
	return timestampCreateTime
}

// unbounded is a retention for Kafka: 0, no bound, is -1.
func unbounded(n int64) string {
	if n <= 0 {
		return "-1"
	}
	return strconv.FormatInt(n, 10)
}

// brokerConfigs describes the listener's bounds (read-only).
func (c *conn) brokerConfigs() []configEntry {
	cfg := c.l.cfg
	static := func(name, value string, typ kmsg.ConfigType) configEntry {
		return configEntry{name: name, value: value, readOnly: true, source: kmsg.ConfigSourceStaticBrokerConfig, typ: typ}
	}
	return []configEntry{
		static("message.max.bytes", strconv.Itoa(cfg.MaxBatchBytes), kmsg.ConfigTypeInt),
		static("socket.request.max.bytes", strconv.Itoa(cfg.MaxRequestBytes), kmsg.ConfigTypeInt),
		static("fetch.max.bytes", strconv.Itoa(cfg.FetchMaxBytes), kmsg.ConfigTypeInt),
		static("connections.max.idle.ms", strconv.FormatInt(cfg.IdleTimeout.Milliseconds(), 10), kmsg.ConfigTypeLong),
		static("auto.create.topics.enable", strconv.FormatBool(cfg.AutoCreate), kmsg.ConfigTypeBoolean),
		static("num.partitions", strconv.Itoa(int(cfg.AutoCreateShards)), kmsg.ConfigTypeInt),
		static("log.retention.ms", unbounded(cfg.DefaultRetentionAge.Milliseconds()), kmsg.ConfigTypeLong),
		static("log.retention.bytes", unbounded(cfg.DefaultRetentionBytes), kmsg.ConfigTypeLong),
		static("log.cleanup.policy", "delete", kmsg.ConfigTypeList),
	}
}

// configResource is a DescribeConfigs or alter resource's configs, or why
// it has none: the topic's stream, or this broker.
func (c *conn) configResource(typ kmsg.ConfigResourceType, name string) (*service.StreamInfo, []configEntry, *adminError) {
	switch typ {
	case kmsg.ConfigResourceTypeTopic:
		scope, ok := c.l.names().scope(c.tenant, name)
		if !ok {
			return nil, nil, refusal(kerr.InvalidTopicException.Code, "%v: %q", errInvalidTopic, name)
		}
		info, err := c.sess.Stream(c.ctx, scope)
		if err == nil {
			err = notTopic(info)
		}
		if err != nil {
			return nil, nil, adminRefusal(err)
		}
		return info, c.topicConfigs(info), nil
	case kmsg.ConfigResourceTypeBroker:
		self := strconv.Itoa(int(c.l.view().self))
		if name != "" && name != self {
			return nil, nil, refusal(kerr.InvalidRequest.Code, "broker %s: this is broker %s; ask it for its own configs", name, self)
		}
		return nil, c.brokerConfigs(), nil
	}
	return nil, nil, refusal(kerr.InvalidRequest.Code, "config resource type %d is not supported: topics (2) and brokers (4) have configs", typ)
}

// handleDescribeConfigs describes each resource's configs, those named or
// all of them.
func (c *conn) handleDescribeConfigs(h header, r *kmsg.DescribeConfigsRequest) *pending {
	resp := r.ResponseKind().(*kmsg.DescribeConfigsResponse)
	worst := int16(0)
	for i, res := range r.Resources {
		rr := kmsg.NewDescribeConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = res.ResourceType, res.ResourceName
		var entries []configEntry
		err := tooMany(i)
		if err == nil {
			_, entries, err = c.configResource(res.ResourceType, res.ResourceName)
		}
		if err != nil {
			rr.ErrorCode, rr.ErrorMessage = err.code, &err.msg
			worst = cmp0(worst, err.code)
		}
		for _, e := range entries {
			if res.ConfigNames != nil && !contains(res.ConfigNames, e.name) {
				continue
			}
			rc := kmsg.NewDescribeConfigsResponseResourceConfig()
			rc.Name, rc.Value, rc.ReadOnly, rc.IsDefault = e.name, kmsg.StringPtr(e.value), e.readOnly, e.isDefault
			rc.Source, rc.ConfigType = e.source, e.typ
			rr.Configs = append(rr.Configs, rc)
		}
		resp.Resources = append(resp.Resources, rr)
	}
	c.count(h.key, worst)
	return answered(h.correlation, resp)
}

func contains(names []string, name string) bool {
	for _, n := range names {
		if n == name {
			return true
		}
	}
	return false
}

// configChange is one config an alter names: set to value, or (nil
// value) back to its default.
type configChange struct {
	name  string
	value *string
}

// alterConfigs answers an alter of one resource: every change must leave
// it as it is (see above). full (AlterConfigs) also resets every config
// it does not name, so those must be at their defaults.
func (c *conn) alterConfigs(typ kmsg.ConfigResourceType, name string, changes []configChange, full bool) *adminError {
	info, entries, err := c.configResource(typ, name)
	if err != nil {
		return err
	}
	if typ == kmsg.ConfigResourceTypeBroker {
		if len(changes) == 0 {
			return nil
		}
		return refusal(kerr.InvalidRequest.Code, "Cannot update these configs dynamically: %s (the broker's configs are its knobs, set at start)", changes[0].name)
	}
	if serr := c.sess.CheckCreateStream(c.ctx, &info.StreamSpec); serr != nil {
		return adminRefusal(serr) // the right to manage the stream
	}
	named := make(map[string]bool, len(changes))
	for _, ch := range changes {
		named[ch.name] = true
		e, ok := findConfig(entries, ch.name)
		if !ok {
			return refusal(kerr.InvalidConfig.Code, "Unknown topic config name: %s", ch.name)
		}
		if !sameConfig(e, ch.value) {
			return refusal(kerr.InvalidConfig.Code, "%s of topic %s cannot change (it is %s): a Felix stream's settings are fixed when it is created; create a new topic with the value", ch.name, name, e.value)
		}
	}
	if full {
		for _, e := range entries {
			if !named[e.name] && !e.isDefault {
				return refusal(kerr.InvalidConfig.Code, "%s of topic %s cannot go back to its default (it is %s): a Felix stream's settings are fixed when it is created", e.name, name, e.value)
			}
		}
	}
	return nil
}

func findConfig(entries []configEntry, name string) (configEntry, bool) {
	for _, e := range entries {
		if e.name == name {
			return e, true
		}
	}
	return configEntry{}, false
}

// sameConfig reports whether setting value (nil: the default) leaves e
// as it is.
func sameConfig(e configEntry, value *string) bool {
	if value == nil {
		return e.isDefault
	}
	v := strings.TrimSpace(*value)
	if e.name == configCompressionType && v == "uncompressed" {
		v = service.CompressionNone // Kafka's other name for it
	}
	if e.typ == kmsg.ConfigTypeLong || e.typ == kmsg.ConfigTypeInt {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return false
		}
		if n <= 0 && e.name != configMaxMessageBytes {
			n = -1
		}
		v = strconv.FormatInt(n, 10)
	}
	return v == e.value
}

// handleIncrementalAlterConfigs answers each resource (see alterConfigs);
// APPEND and SUBTRACT apply to list configs, of which cleanup.policy is
// the only one and has one value.
func (c *conn) handleIncrementalAlterConfigs(h header, r *kmsg.IncrementalAlterConfigsRequest) *pending {
	resp := r.ResponseKind().(*kmsg.IncrementalAlterConfigsResponse)
	worst := int16(0)
	for i, res := range r.Resources {
		rr := kmsg.NewIncrementalAlterConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = res.ResourceType, res.ResourceName
		var changes []configChange
		err := tooMany(i)
		for _, cfg := range res.Configs {
			switch cfg.Op {
			case kmsg.IncrementalAlterConfigOpSet:
				changes = append(changes, configChange{cfg.Name, cfg.Value})
			case kmsg.IncrementalAlterConfigOpDelete:
				changes = append(changes, configChange{name: cfg.Name})
			case kmsg.IncrementalAlterConfigOpAppend, kmsg.IncrementalAlterConfigOpSubtract:
				if cfg.Name == configCleanupPolicy && cfg.Value != nil && strings.TrimSpace(*cfg.Value) == "delete" && cfg.Op == kmsg.IncrementalAlterConfigOpAppend {
					continue // appending what the list holds changes nothing
				}
				value := "null"
				if cfg.Value != nil {
					value = *cfg.Value
				}
				err = cmpErr(err, refusal(kerr.InvalidConfig.Code, "%s: %s of %q would change it; a Felix stream's settings are fixed when it is created", cfg.Name, cfg.Op, value))
			default:
				err = cmpErr(err, refusal(kerr.InvalidRequest.Code, "unknown config operation %d", cfg.Op))
			}
		}
		if err == nil {
			err = c.alterConfigs(res.ResourceType, res.ResourceName, changes, false)
		}
		if err != nil {
			rr.ErrorCode, rr.ErrorMessage = err.code, &err.msg
			worst = cmp0(worst, err.code)
		}
		resp.Resources = append(resp.Resources, rr)
	}
	c.count(h.key, worst)
	return answered(h.correlation, resp)
}

// cmpErr keeps the first refusal.
func cmpErr(have, err *adminError) *adminError {
	if have != nil {
		return have
	}
	return err
}

// handleAlterConfigs answers each resource as a whole new config set
// (see alterConfigs).
func (c *conn) handleAlterConfigs(h header, r *kmsg.AlterConfigsRequest) *pending {
	resp := r.ResponseKind().(*kmsg.AlterConfigsResponse)
	worst := int16(0)
	for i, res := range r.Resources {
		rr := kmsg.NewAlterConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = res.ResourceType, res.ResourceName
		changes := make([]configChange, 0, len(res.Configs))
		for _, cfg := range res.Configs {
			changes = append(changes, configChange{cfg.Name, cfg.Value})
		}
		err := tooMany(i)
		if err == nil {
			err = c.alterConfigs(res.ResourceType, res.ResourceName, changes, true)
		}
		if err != nil {
			rr.ErrorCode, rr.ErrorMessage = err.code, &err.msg
			worst = cmp0(worst, err.code)
		}
		resp.Resources = append(resp.Resources, rr)
	}
	c.count(h.key, worst)
	return answered(h.correlation, resp)
}
