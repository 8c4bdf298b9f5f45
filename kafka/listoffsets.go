package kafka

import (
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/getfelix/felix-go/service"
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
// by time (the first record whose stored time is at or after it) through
// the service's OffsetForTime. As Kafka answers: earliest and latest
// carry timestamp -1; a time lookup carries the record's timestamp, and
// offset -1 and timestamp -1 when every record is older.
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
				p.Offset, p.Timestamp, perr = c.listOffset(info, uint32(rp.Partition), rp.Timestamp)
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

// listOffset is one partition's answer: the offset and the timestamp.
func (c *conn) listOffset(t topicInfo, shard uint32, ts int64) (int64, int64, error) {
	off, err := c.sess.OffsetForTime(c.ctx, t.scope, shard, listTime(ts))
	if err != nil || ts == timestampEarliest || ts < timestampEarliest || ts == timestampLatest {
		return int64(off), -1, err
	}
	page, err := c.sess.Read(c.ctx, &service.Read{Scope: t.scope, Shard: shard, From: off, MaxRecords: 1})
	if err != nil {
		return -1, -1, err
	}
	if len(page.Records) == 0 { // every record is older
		return -1, -1, nil
	}
	return int64(off), page.Records[0].Time.UnixMilli(), nil
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
