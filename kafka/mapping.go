package kafka

import (
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/wire"
)

// The Kafka-to-Felix mapping. A durable stream is a topic of the
// session's tenant; partition N is shard N; offsets are Felix offsets.
// A topic with a '.' is `<namespace>.<stream>`, split at its FIRST '.'
// (Felix names may themselves contain '.'): the namespace is what comes
// before it, the stream everything after. A topic without a '.' (what
// nearly every Kafka application names its topics) is a stream of the
// default namespace (Config.DefaultNamespace), and such a stream is
// listed back under its bare name, so that an application sees the name
// it created. Both directions go through topicMapping alone: a second
// split elsewhere would let two names of one stream drift apart (in
// commits, say).
//
// A stream whose namespace contains a '.' has no topic name (its topic
// would name another stream), and is not listed. Namespaces starting "__"
// are reserved (offsets.go keeps group commits in one) and are not topics
// either. A dotless topic starting "__" is one of Kafka's internal topics
// (__consumer_offsets: metadata.go), never a stream's: a stream of the
// default namespace named so is listed as default.__<name>.

// topicMapping turns topic names into stream scopes and back.
type topicMapping struct {
	defaultNamespace string
}

// scope is the stream topic names for tenant, or false when the topic is
// not a valid Felix name pair.
func (m topicMapping) scope(tenant, topic string) (wire.Scope, bool) {
	ns, stream, ok := strings.Cut(topic, ".")
	if !ok {
		if strings.HasPrefix(topic, "__") {
			return wire.Scope{}, false
		}
		ns, stream = m.defaultNamespace, topic
	}
	if strings.HasPrefix(ns, "__") {
		return wire.Scope{}, false
	}
	s := wire.Scope{Tenant: tenant, Namespace: ns, Stream: stream}
	return s, s.Validate() == nil
}

// topic is s's topic name, or false when s has none. A stream of the
// default namespace has its bare name unless the stream itself has a
// '.', which would split it elsewhere.
func (m topicMapping) topic(s wire.Scope) (string, bool) {
	if strings.Contains(s.Namespace, ".") || strings.HasPrefix(s.Namespace, "__") {
		return "", false
	}
	if s.Namespace == m.defaultNamespace && !strings.Contains(s.Stream, ".") && !strings.HasPrefix(s.Stream, "__") {
		return s.Stream, true
	}
	return s.Namespace + "." + s.Stream, true
}

// commitKey is the name commits of topic are kept under: its stream's
// `<namespace>.<stream>`, which the default namespace does not change.
func (m topicMapping) commitKey(tenant, topic string) (string, bool) {
	s, ok := m.scope(tenant, topic)
	if !ok {
		return "", false
	}
	return s.Namespace + "." + s.Stream, true
}

// DefaultNamespace is the default Config.DefaultNamespace.
const DefaultNamespace = "default"

// ValidateDefaultNamespace checks a Config.DefaultNamespace: a valid Felix
// name with no '.' (a dotless topic would otherwise name a stream that
// its dotted form maps elsewhere) outside the reserved "__" namespaces.
//
// NOTE: config.Validate applies the same rule to kafka_default_namespace;
// change both together.
func ValidateDefaultNamespace(ns string) error {
	if err := wire.ValidateName("namespace", ns); err != nil {
		return fmt.Errorf("kafka: default namespace: %w", err)
	}
	if strings.Contains(ns, ".") || strings.HasPrefix(ns, "__") {
		return fmt.Errorf("kafka: default namespace %q: must have no '.' and not start with \"__\"", ns)
	}
	return nil
}

// errorCode is the Kafka error code for an error of the service.
func errorCode(err error) int16 {
	var refused *wire.RefusedError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &refused):
		return kerr.OutOfOrderSequenceNumber.Code
	case errors.Is(err, ErrCorruptBatch):
		return kerr.CorruptMessage.Code
	case errors.Is(err, ErrBatchTooLarge):
		return kerr.MessageTooLarge.Code
	case errors.Is(err, ErrUnsupportedBatch):
		return kerr.UnsupportedForMessageFormat.Code
	case errors.Is(err, errInMemory), errors.Is(err, errCache):
		return kerr.InvalidTopicException.Code
	case errors.Is(err, wire.ErrNotFound):
		return kerr.UnknownTopicOrPartition.Code
	case errors.Is(err, wire.ErrForbidden), errors.Is(err, wire.ErrUnauthenticated):
		return kerr.TopicAuthorizationFailed.Code
	case errors.Is(err, wire.ErrOverloaded), errors.Is(err, wire.ErrLimitExceeded):
		// Retriable: the client backs off and sends again.
		return kerr.RequestTimedOut.Code
	case errors.Is(err, wire.ErrNotLeader), errors.Is(err, wire.ErrUnavailable), errors.Is(err, wire.ErrDraining):
		return kerr.NotLeaderForPartition.Code
	case errors.Is(err, wire.ErrStorage):
		return kerr.KafkaStorageError.Code
	case errors.Is(err, wire.ErrInvalidRequest):
		return kerr.InvalidRequest.Code
	}
	return kerr.UnknownServerError.Code
}

// errInMemory refuses a Kafka request on an in-memory stream: only durable
// streams have offsets, so only they are topics.
var errInMemory = errors.New("kafka: the stream is in memory; only durable streams are Kafka topics")

// errCache refuses a Kafka request on a cache: its records are key writes
// in the cache's own encoding, not events a consumer could read.
var errCache = errors.New("kafka: the stream is a cache; only durable event streams are Kafka topics")

// notTopic is why a stream is no Kafka topic, nil when it is one.
func notTopic(info *service.StreamInfo) error {
	switch {
	case info.Cache:
		return errCache
	case !info.Durable:
		return errInMemory
	}
	return nil
}
