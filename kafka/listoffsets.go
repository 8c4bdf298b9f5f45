package kafka

import (
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Kafka's special ListOffsets timestamps.
const (
	timestampLatest   = -1
	timestampEarliest = -2
)

// Times the service's OffsetForTime turns into the ends of a shard: before
// every record is the oldest offset kept, after every record the committed
// end.
var (
	beforeAll = time.Unix(0, 0)
	afterAll  = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
)

// handleListOffsets answers earliest (-2), latest (-1, the committed end,
// which is also the last stable offset: Felix has no transactions) and
// by time (the first record stored at or after it, or the committed end
// when every record is older) through the service's OffsetForTime.
func (c *conn) handleListOffsets(h header, r *kmsg.ListOffsetsRequest) *pending {
	resp := r.ResponseKind().(*kmsg.ListOffsetsResponse)
	var code int16
	for _, rt := range r.Topics {
		t := kmsg.NewListOffsetsResponseTopic()
		t.Topic = rt.Topic
		info, err := c.topic(c.ctx, rt.Topic, false)
		for _, rp := range rt.Partitions {
			p := kmsg.NewListOffsetsResponseTopicPartition()
			p.Partition = rp.Partition
			p.Timestamp, p.Offset = -1, -1
			perr := partitionError(info, err, rp.Partition)
			if perr == nil {
				var off uint64
				off, perr = c.sess.OffsetForTime(c.ctx, info.scope, uint32(rp.Partition), listTime(rp.Timestamp))
				p.Offset = int64(off)
			}
			if perr != nil {
				p.ErrorCode = topicCode(perr)
				code = p.ErrorCode
			}
			t.Partitions = append(t.Partitions, p)
		}
		resp.Topics = append(resp.Topics, t)
	}
	c.count(h.key, code)
	return answered(h.correlation, resp)
}

// listTime is the time a ListOffsets timestamp asks for.
func listTime(ts int64) time.Time {
	switch {
	case ts == timestampEarliest || ts < timestampEarliest:
		return beforeAll
	case ts == timestampLatest:
		return afterAll
	}
	return time.UnixMilli(ts)
}
