package kafka

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/wire"
)

// topicInfo is what a connection knows of a topic's stream.
type topicInfo struct {
	scope  wire.Scope
	shards uint32
	// logAppendTime: the stream keeps append times only, and Fetch marks
	// its batches so (message.timestamp.type=LogAppendTime).
	logAppendTime bool
	// codec compresses Fetch's batches where that saves bytes: the
	// stream's compression (compression.type); codecProducer for each
	// record's own.
	codec int
}

// topicCache remembers the topics a connection resolved, so a Produce or
// Fetch does not ask the registry each time. An error on a topic's
// partition forgets it; maxCachedTopics bounds it.
type topicCache map[string]topicInfo

const maxCachedTopics = 1024

// errInvalidTopic is a topic name that maps to no stream (mapping.go).
var errInvalidTopic = errors.New("kafka: topic is not <stream> or <namespace>.<stream> of valid Felix names")

// nodeID is this broker's Kafka node id. A single broker is node 0.
const nodeID = 0

// topic resolves name to its durable stream. create makes an unknown one
// when the listener auto-creates topics.
func (c *conn) topic(ctx context.Context, name string, create bool) (topicInfo, error) {
	if t, ok := c.topics[name]; ok {
		return t, nil
	}
	scope, ok := c.l.names().scope(c.tenant, name)
	if !ok {
		return topicInfo{}, errInvalidTopic
	}
	info, err := c.sess.Stream(ctx, scope)
	if errors.Is(err, wire.ErrNotFound) && create && c.l.cfg.AutoCreate {
		info, err = c.sess.CreateStream(ctx, &service.StreamSpec{Scope: scope, Shards: c.l.cfg.AutoCreateShards, Durable: true})
	}
	if err != nil {
		return topicInfo{}, err
	}
	if err := notTopic(info); err != nil {
		return topicInfo{}, err
	}
	if c.topics == nil || len(c.topics) >= maxCachedTopics {
		c.topics = make(topicCache)
	}
	t := topicInfo{scope: scope, shards: info.Shards, logAppendTime: info.LogAppendTime, codec: fetchCodec(info.Compression)}
	c.topics[name] = t
	return t, nil
}

// partitionError is err, or not_found for a partition past t's shards.
func partitionError(t topicInfo, err error, partition int32) error {
	if err == nil && (partition < 0 || uint32(partition) >= t.shards) {
		return wire.ErrNotFound
	}
	return err
}

// topicCode is errorCode for topic lookups, where an invalid name has its
// own code.
func topicCode(err error) int16 {
	if errors.Is(err, errInvalidTopic) {
		return kerr.InvalidTopicException.Code
	}
	return errorCode(err)
}

// handleMetadata lists the brokers (this one, or every member of its
// cluster: cluster.go) and the requested topics (all the
// tenant's durable streams when the request names none).
func (c *conn) handleMetadata(h header, r *kmsg.MetadataRequest) *pending {
	resp := r.ResponseKind().(*kmsg.MetadataResponse)
	v := c.l.view()
	resp.Brokers = v.brokers
	cluster := "felix"
	resp.ClusterID = &cluster
	resp.ControllerID = v.self
	ctx := c.ctx
	names, err := c.requestedTopics(ctx, r, v.ids == nil)
	if err != nil {
		// Listing failed (a permission): answer no topics rather than
		// fail the connection.
		c.count(h.key, errorCode(err))
		return answered(h.correlation, resp)
	}
	for _, name := range names {
		if name == consumerOffsetsTopic {
			resp.Topics = append(resp.Topics, c.consumerOffsetsMetadata(ctx, v))
			continue
		}
		t, err := c.topic(ctx, name, r.AllowAutoTopicCreation)
		mt := metadataTopic(name, t, topicCode(err), v.ids == nil)
		if err == nil && v.ids != nil {
			c.clusterPartitions(ctx, &mt, t, v)
		}
		resp.Topics = append(resp.Topics, mt)
	}
	c.count(h.key, 0)
	return answered(h.correlation, resp)
}

// requestedTopics is the request's topic names, or every durable stream of
// the tenant that has a topic name when it names none (a nil list), and
// __consumer_offsets: always on a single broker, whose coordinator is
// itself; in a cluster once the tenant's offsets stream exists, since
// finding its coordinator would create it.
func (c *conn) requestedTopics(ctx context.Context, r *kmsg.MetadataRequest, single bool) ([]string, error) {
	if r.Topics != nil {
		names := make([]string, 0, len(r.Topics))
		for _, t := range r.Topics {
			if t.Topic != nil {
				names = append(names, *t.Topic)
			}
		}
		return names, nil
	}
	infos, err := c.sess.Streams(ctx, c.tenant, "")
	if err != nil {
		return nil, err
	}
	var names []string
	for _, info := range infos {
		if name, ok := c.l.names().topic(info.Scope); ok && notTopic(&info) == nil {
			names = append(names, name)
		}
	}
	if single {
		names = append(names, consumerOffsetsTopic)
	} else if _, err := c.sess.Stream(ctx, offsetsScope(c.tenant)); err == nil {
		names = append(names, consumerOffsetsTopic)
	}
	return names, nil
}

// consumerOffsetsTopic is Kafka's internal topic of group commits. Felix
// keeps them in the tenant's __kafka/offsets stream, in a format of its
// own (offsets.go), so it is no topic to read or write: its name maps to
// no stream (INVALID_TOPIC_EXCEPTION). Metadata still lists it, marked
// internal, with one partition led by the group coordinator, since
// clients and tools expect it there (a regex consumer skips internal
// topics, and finds them so).
const consumerOffsetsTopic = "__consumer_offsets"

// consumerOffsetsMetadata is __consumer_offsets's Metadata entry.
func (c *conn) consumerOffsetsMetadata(ctx context.Context, v brokerView) kmsg.MetadataResponseTopic {
	name := consumerOffsetsTopic
	mt := kmsg.NewMetadataResponseTopic()
	mt.Topic, mt.IsInternal = &name, true
	id, _, code := c.coordinatorOf(ctx, v)
	p := kmsg.NewMetadataResponseTopicPartition()
	p.Leader, p.Replicas, p.ISR = id, []int32{id}, []int32{id}
	if code != 0 {
		p.Leader, p.ErrorCode, p.Replicas, p.ISR = -1, kerr.LeaderNotAvailable.Code, []int32{}, []int32{}
	}
	mt.Partitions = append(mt.Partitions, p)
	return mt
}

// metadataTopic is a topic's entry; single lists its partitions, all led
// by this broker (a cluster member fills them from the owners).
func metadataTopic(name string, t topicInfo, code int16, single bool) kmsg.MetadataResponseTopic {
	mt := kmsg.NewMetadataResponseTopic()
	mt.Topic = &name
	mt.ErrorCode = code
	if code != 0 || !single {
		return mt
	}
	for n := range t.shards {
		p := kmsg.NewMetadataResponseTopicPartition()
		p.Partition = int32(n)
		p.Leader = nodeID
		p.Replicas = []int32{nodeID}
		p.ISR = []int32{nodeID}
		mt.Partitions = append(mt.Partitions, p)
	}
	return mt
}
