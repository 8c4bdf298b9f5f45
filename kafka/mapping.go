package kafka

import (
	"errors"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/getfelix/felix-go/wire"
)

// The Kafka-to-Felix mapping. A durable stream is topic
// `<namespace>.<stream>` of the session's tenant; partition N is shard N;
// offsets are Felix offsets. Felix names may themselves contain '.', so a
// topic splits at its FIRST '.': the namespace is what comes before it,
// the stream everything after. A stream whose namespace contains a '.' has
// no topic name (topicName reports it), and is not listed. Namespaces
// starting "__" are reserved (offsets.go keeps group commits in one) and
// are not topics either.

// topicScope is the stream topic names for tenant, or false when the topic
// is not a valid Felix name pair.
func topicScope(tenant, topic string) (wire.Scope, bool) {
	ns, stream, ok := strings.Cut(topic, ".")
	if !ok || strings.HasPrefix(ns, "__") {
		return wire.Scope{}, false
	}
	s := wire.Scope{Tenant: tenant, Namespace: ns, Stream: stream}
	return s, s.Validate() == nil
}

// topicName is scope's topic, or false when its namespace has a '.', so
// that the topic would name another stream.
func topicName(s wire.Scope) (string, bool) {
	if strings.Contains(s.Namespace, ".") || strings.HasPrefix(s.Namespace, "__") {
		return "", false
	}
	return s.Namespace + "." + s.Stream, true
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
	case errors.Is(err, errInMemory):
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
