package kafka

import (
	"errors"
	"fmt"
	"math"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/wire"
)

// produceCall is one Produce in flight: its response, filled in place by
// each partition's publish callback, and the partitions still outstanding.
type produceCall struct {
	c       *conn
	h       header
	resp    *kmsg.ProduceResponse
	p       *pending
	waiting atomic.Int32
	acks    int16
}

// handleProduce admits each partition's batch to its shard, in request
// order, from the read loop, so an idempotent producer's pipelined batches
// reach the shard in wire order. Every batch is checked and decompressed
// first, so a request whose batches together pass
// MaxRequestDecompressedBytes is refused whole, RECORD_LIST_TOO_LARGE,
// with nothing written. The answer is written when every partition has
// been answered; with acks=0 nothing is written.
func (c *conn) handleProduce(h header, r *kmsg.ProduceRequest) *pending {
	pc := &produceCall{c: c, h: h, resp: r.ResponseKind().(*kmsg.ProduceResponse), p: newPending(), acks: r.Acks}
	var refuse error
	switch {
	case r.TransactionID != nil:
		refuse = errTransactional
	case r.Acks != 0 && r.Acks != 1 && r.Acks != -1:
		refuse = errAcks
	}
	var batches []producePart
	left := c.l.cfg.MaxRequestDecompressedBytes
	for _, rt := range r.Topics {
		t := kmsg.NewProduceResponseTopic()
		t.Topic = rt.Topic
		t.Partitions = make([]kmsg.ProduceResponseTopicPartition, len(rt.Partitions))
		pc.resp.Topics = append(pc.resp.Topics, t)
		parts := pc.resp.Topics[len(pc.resp.Topics)-1].Partitions
		for i, rp := range rt.Partitions {
			parts[i] = kmsg.NewProduceResponseTopicPartition()
			parts[i].Partition = rp.Partition
			parts[i].BaseOffset = -1
			if refuse != nil {
				parts[i].ErrorCode = produceCode(refuse)
				continue
			}
			pp, err := c.preparePartition(rt.Topic, rp, left, r.Version < 3)
			if err != nil {
				if errors.Is(err, errRequestTooLarge) {
					refuse = err
					c.l.cfg.Hooks.Limit("kafka_max_request_decompressed_bytes")
				} else if errors.Is(err, ErrBatchTooLarge) {
					c.l.cfg.Hooks.Limit("kafka_max_batch_bytes")
				}
				parts[i].ErrorCode = produceCode(err)
				continue
			}
			left -= pp.batch.size
			pp.out = &parts[i]
			batches = append(batches, pp)
		}
	}
	if errors.Is(refuse, errRequestTooLarge) {
		// Every partition, those checked before the bound was passed
		// too: Kafka's clients treat the code as the request's.
		for ti := range pc.resp.Topics {
			for pi := range pc.resp.Topics[ti].Partitions {
				pc.resp.Topics[ti].Partitions[pi].ErrorCode = produceCode(refuse)
			}
		}
		batches = nil
	}
	pc.waiting.Store(int32(len(batches)) + 1) // the 1 released after the loop, so no callback finishes early
	for _, pp := range batches {
		c.producePartition(pc, pp)
	}
	pc.partitionDone()
	return pc.p
}

// producePart is one partition's batch of a Produce, checked and
// decompressed, waiting to be published.
type producePart struct {
	t         topicInfo
	partition int32
	batch     producedBatch
	out       *kmsg.ProduceResponseTopicPartition
}

// preparePartition resolves a partition's topic and parses its batch (a
// message set of the old formats for a Produce below v3: legacy), which
// may decompress to at most left bytes, the request's bound less what its
// earlier batches took (errRequestTooLarge past it), and at most
// MaxBatchBytes itself (ErrBatchTooLarge).
func (c *conn) preparePartition(topic string, rp kmsg.ProduceRequestTopicPartition, left int, legacy bool) (producePart, error) {
	t, err := c.topic(c.ctx, topic, true)
	if err = partitionError(t, err, rp.Partition); err != nil {
		return producePart{}, err
	}
	limit := min(c.l.cfg.MaxBatchBytes, left)
	parse := parseBatch
	if legacy {
		parse = parseMessageSet
	}
	b, err := parse(rp.Records, limit)
	if errors.Is(err, ErrBatchTooLarge) && limit < c.l.cfg.MaxBatchBytes {
		return producePart{}, fmt.Errorf("%w: %v", errRequestTooLarge, err)
	}
	if err != nil {
		return producePart{}, err
	}
	return producePart{t: t, partition: rp.Partition, batch: b}, nil
}

var (
	errTransactional = errors.New("kafka: transactions are not supported")
	errAcks          = errors.New("kafka: acks must be 0, 1 or -1")
	// errRequestTooLarge is a Produce whose batches together decompress
	// past the listener's MaxRequestDecompressedBytes.
	errRequestTooLarge = errors.New("kafka: produce request decompresses past kafka_max_request_decompressed_bytes")
)

func produceCode(err error) int16 {
	switch {
	case errors.Is(err, errTransactional):
		return kerr.TransactionalIDAuthorizationFailed.Code
	case errors.Is(err, errAcks):
		return kerr.InvalidRequiredAcks.Code
	case errors.Is(err, errSequence):
		return kerr.OutOfOrderSequenceNumber.Code
	case errors.Is(err, errRequestTooLarge):
		return kerr.RecordListTooLarge.Code
	}
	return topicCode(err)
}

// partitionDone counts one partition (or the request itself) answered and
// finishes the response after the last.
func (pc *produceCall) partitionDone() {
	if pc.waiting.Add(-1) != 0 {
		return
	}
	code := int16(0)
	for _, t := range pc.resp.Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode != 0 {
				code = p.ErrorCode
			}
		}
	}
	pc.c.count(pc.h.key, code)
	if pc.acks == 0 {
		pc.p.finish(nil, false)
		return
	}
	pc.p.finish(appendResponse(nil, pc.h.correlation, pc.resp), false)
}

// producePartition publishes one partition's checked batch; its answer
// is set (and partitionDone called) exactly once.
func (c *conn) producePartition(pc *produceCall, pp producePart) {
	out := pp.out
	fail := func(err error) {
		out.ErrorCode = produceCode(err)
		pc.partitionDone()
	}
	t, b := pp.t, pp.batch
	shard := uint32(pp.partition)
	pub := &service.Publish{Scope: t.scope, Shard: &shard, Payloads: b.values, Attrs: b.attrs}
	var key producerKey
	if b.producerID >= 0 {
		key = producerKey{id: uint64(b.producerID), scope: t.scope, shard: shard}
		seq, dup, err := c.sequence(key, pub, b)
		if err != nil || dup != nil {
			if dup != nil {
				out.BaseOffset = int64(dup.Offset)
				pc.partitionDone()
				return
			}
			fail(err)
			return
		}
		pub.Producer = &service.ProducerSeq{ID: key.id, Seq: seq}
	}
	bytes := int(pub.Bytes())
	err := c.sess.Publish(c.ctx, pub, func(res service.PublishResult) {
		if res.Err != nil {
			c.publishFailed(pub, key)
			out.ErrorCode = produceCode(res.Err)
		} else {
			out.BaseOffset = int64(res.Offset)
			if t.logAppendTime && !res.AppendTime.IsZero() {
				out.LogAppendTime = res.AppendTime.UnixMilli() // the time its records now carry
			}
			c.l.cfg.Hooks.Bytes("in", bytes)
		}
		pc.partitionDone()
	})
	if err != nil {
		c.publishFailed(pub, key)
		fail(err)
	}
}

// publishFailed forgets the producer pair of a failed idempotent publish,
// so its next batch probes the shard. It runs on the read loop or a
// shard's callback, so it touches only the shared producer map.
func (c *conn) publishFailed(pub *service.Publish, key producerKey) {
	if pub.Producer != nil {
		c.l.producers.forget(key)
	}
}

// sequence maps a Kafka batch's producer sequence onto the shard's (see
// producers.go), probing the shard when the pair is unknown. dup is set
// when the batch turned out to be a retry of one already written: the
// shard's answer, with its original offset.
func (c *conn) sequence(key producerKey, pub *service.Publish, b producedBatch) (uint64, *service.PublishResult, error) {
	n := int32(len(b.values))
	seq, known, err := c.l.producers.assign(key, b.baseSequence, n)
	if known || err != nil {
		return seq, nil, err
	}
	var next uint64
	_, err = c.probeResult(pub, key.id, math.MaxUint64)
	var refused *wire.RefusedError
	switch {
	case errors.As(err, &refused) && refused.Reason == "unknown_producer":
		next = 0
	case errors.As(err, &refused) && refused.Reason == "sequence_gap":
		next = refused.Expected
	case err != nil:
		return 0, nil, err
	default:
		return 0, nil, errors.New("kafka: probe publish was accepted") // cannot happen: MaxUint64 is never next
	}
	// Is this batch one of the last few the shard wrote, sent again (up
	// to 5 were in flight when the answers were lost)? Each is asked with
	// its sequence: the same content is answered as the duplicate it is;
	// other content (sequence_reused) means look one further back.
	for back := uint64(1); back <= producerWindow && back <= next; back++ {
		felix := next - back
		res, err := c.probeResult(pub, key.id, felix)
		if err == nil {
			c.l.producers.learn(key, addSeq(b.baseSequence, n), felix+1, &sentBatch{kafka: b.baseSequence, felix: felix, set: true})
			return 0, &res, nil
		}
		if !errors.As(err, &refused) {
			return 0, nil, err
		}
		if refused.Reason != "sequence_reused" {
			break // expired: older than the batches the shard remembers
		}
	}
	c.l.producers.learn(key, b.baseSequence, next, nil)
	seq, _, err = c.l.producers.assign(key, b.baseSequence, n)
	return seq, nil, err
}

// probeResult publishes pub as producer id's batch seq and waits for the
// shard's answer (a refusal writes nothing).
func (c *conn) probeResult(pub *service.Publish, id, seq uint64) (service.PublishResult, error) {
	probe := *pub
	probe.Producer = &service.ProducerSeq{ID: id, Seq: seq}
	done := make(chan service.PublishResult, 1)
	if err := c.sess.Publish(c.ctx, &probe, func(r service.PublishResult) { done <- r }); err != nil {
		return service.PublishResult{}, err
	}
	select {
	case r := <-done:
		return r, r.Err
	case <-c.ctx.Done():
		return service.PublishResult{}, c.ctx.Err()
	}
}
