package kafka

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/wire"
)

// A long-polling Fetch with nothing to send waits for its partitions'
// commits and reads again: the session's shards wake it (service.
// CommitWatcher) whenever their committed end moves, a replicated shard's
// follower applying its leader's entries included. Nothing else wakes it
// but its max wait, which is Kafka's: without a watch (a session that
// cannot watch, a shard with too many watches) it waits that out.

// fetchPart is one partition of a Fetch, resolved on the read loop.
type fetchPart struct {
	topic, part int // indexes into the response
	t           topicInfo
	shard       uint32
	offset      int64
	max         int
	err         error
}

// handleFetch resolves the topics on the read loop (the topic cache is
// its own), then long-polls in a goroutine of its own, so a waiting Fetch
// holds up no Produce; its answer still leaves in request order.
func (c *conn) handleFetch(h header, r *kmsg.FetchRequest) *pending {
	resp := r.ResponseKind().(*kmsg.FetchResponse)
	resp.SessionID = 0 // fetch sessions are declined: clients send full fetches
	var parts []fetchPart
	for ti, rt := range r.Topics {
		t := kmsg.NewFetchResponseTopic()
		t.Topic = rt.Topic
		info, err := c.topic(c.ctx, rt.Topic, false)
		for pi, rp := range rt.Partitions {
			p := kmsg.NewFetchResponseTopicPartition()
			p.Partition = rp.Partition
			p.RecordBatches = []byte{} // never null: librdkafka reads null as a parse failure
			t.Partitions = append(t.Partitions, p)
			perr := partitionError(info, err, rp.Partition)
			parts = append(parts, fetchPart{topic: ti, part: pi, t: info, shard: uint32(rp.Partition), offset: rp.FetchOffset, max: int(rp.PartitionMaxBytes), err: perr})
		}
		resp.Topics = append(resp.Topics, t)
	}
	// The broker's cap and the connection's budget are Kafka's own
	// fetch.max.bytes rules: the request's max_bytes is honoured up to
	// the broker maximum, and the answer's bytes are reserved, in request
	// order, before anything is read for it.
	maxBytes := max(int(r.MaxBytes), 0)
	if maxBytes > c.l.cfg.FetchMaxBytes {
		maxBytes = c.l.cfg.FetchMaxBytes
		c.l.cfg.Hooks.Limit("kafka_fetch_max_bytes")
	}
	held := c.fetchBytes.reserve(maxBytes)
	p := newPending()
	p.held = held
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer func() {
			if rec := recover(); rec != nil {
				c.l.cfg.Log.Error().Interface("panic", rec).Uint64("conn", c.id).Msg("kafka: fetch panicked; connection closed")
				c.l.cfg.Hooks.Request("panic", "closed")
				p.finish(nil, true)
			}
		}()
		if c.fetchBytes.wait(c.ctx, held) != nil {
			p.finish(nil, false)
			return
		}
		wait := min(time.Duration(max(r.MaxWaitMillis, 0))*time.Millisecond, c.l.cfg.MaxFetchWait)
		code := c.longPoll(resp, parts, int(r.MinBytes), maxBytes, wait)
		c.count(h.key, code)
		frame := appendResponse(nil, h.correlation, resp)
		// What the answer really holds: less gives bytes back to the
		// Fetches waiting; more (a first batch past the cap, KIP-74, and
		// the partitions' headers) is charged until it is written.
		c.fetchBytes.adjust(held, len(frame))
		p.finish(frame, false)
	}()
	return p
}

// longPoll fills resp until it holds minBytes, or wait passes, or a
// partition has an error; it returns one error code seen, for metrics.
func (c *conn) longPoll(resp *kmsg.FetchResponse, parts []fetchPart, minBytes, maxBytes int, wait time.Duration) int16 {
	deadline := time.Now().Add(wait)
	var timer *time.Timer
	wake := make(chan struct{}, 1)
	var cancels []func()
	defer func() {
		for _, cancel := range cancels {
			cancel()
		}
	}()
	for {
		total, code := c.fetchOnce(resp, parts, maxBytes)
		if total >= max(minBytes, 1) || code != 0 || !time.Now().Before(deadline) {
			c.l.cfg.Hooks.Bytes("out", total)
			return code
		}
		if timer == nil {
			// Watched after the first read, from what it saw: a commit
			// in between wakes the watch at once.
			cancels = c.watchCommits(resp, parts, wake)
			timer = time.NewTimer(time.Until(deadline))
			defer timer.Stop()
		}
		select {
		case <-wake:
		case <-timer.C: // the max wait: one last read, then the answer
		case <-c.ctx.Done():
			return 0
		}
	}
}

// watchCommits asks to be woken on wake when a partition of the Fetch gets
// records past what this read saw (its high watermark); a partition that
// cannot be watched is left to the max wait.
func (c *conn) watchCommits(resp *kmsg.FetchResponse, parts []fetchPart, wake chan<- struct{}) []func() {
	w, ok := c.sess.(service.CommitWatcher)
	if !ok {
		return nil
	}
	var cancels []func()
	for _, fp := range parts {
		out := &resp.Topics[fp.topic].Partitions[fp.part]
		if fp.err != nil || out.ErrorCode != 0 {
			continue
		}
		cancel, err := w.WatchCommitted(c.ctx, fp.t.scope, fp.shard, uint64(out.HighWatermark), wake)
		if err == nil {
			cancels = append(cancels, cancel)
		}
	}
	return cancels
}

// fetchOnce reads every partition once into resp, within maxBytes in all
// (but at least one batch, KIP-74), and returns the bytes it holds.
func (c *conn) fetchOnce(resp *kmsg.FetchResponse, parts []fetchPart, maxBytes int) (int, int16) {
	total := 0
	var code int16
	for _, fp := range parts {
		out := &resp.Topics[fp.topic].Partitions[fp.part]
		out.RecordBatches = out.RecordBatches[:0]
		if fp.err != nil {
			out.ErrorCode = topicCode(fp.err)
			code = out.ErrorCode
			unknownEnds(out)
			continue
		}
		budget := min(fp.max, maxBytes-total)
		if total == 0 {
			budget = max(budget, 1)
		}
		batches, ends, err := c.readPartition(c.ctx, fp, budget, out.RecordBatches)
		out.RecordBatches = batches
		if err != nil {
			out.ErrorCode = fetchCode(err)
			code = out.ErrorCode
			unknownEnds(out)
			continue
		}
		out.ErrorCode = 0
		out.HighWatermark, out.LastStableOffset = int64(ends.Committed), int64(ends.Committed)
		out.LogStartOffset = int64(ends.Start)
		total += len(batches)
	}
	return total, code
}

// fetchFollowerLag makes a Fetch a follower read: Kafka consumers may
// fetch from any replica (KIP-392) and read what it has, so a replica of
// a replicated shard serves a Fetch while it heard from its leader within
// this long: Kafka's replica.lag.time.max.ms default, after which Kafka
// drops a follower from the in-sync set.
const fetchFollowerLag = 30 * time.Second

// unknownEnds is a partition answered with an error: as Kafka answers
// one, its high watermark, last stable offset and log start are -1, so a
// client never reads 0 as the end (kcat -e exited early at 0).
func unknownEnds(out *kmsg.FetchResponseTopicPartition) {
	out.HighWatermark, out.LastStableOffset, out.LogStartOffset = -1, -1, -1
}

// partEnds is what a read learned of a partition's ends.
type partEnds struct{ Committed, Start uint64 }

// readPartition appends record batches from fp's offset to dst, at least
// one batch when there is one, then up to budget bytes; it returns them
// and the partition's committed end and log start.
func (c *conn) readPartition(ctx context.Context, fp fetchPart, budget int, dst []byte) ([]byte, partEnds, error) {
	if fp.offset < 0 {
		return dst, partEnds{}, errOutOfRange
	}
	from := uint64(fp.offset)
	for {
		room := max(budget-len(dst), 0)
		if len(dst) > 0 && room == 0 {
			break
		}
		page, err := c.sess.Read(ctx, &service.Read{Scope: fp.t.scope, Shard: fp.shard, From: from, MaxBytes: max(room, 1), FollowerMaxLag: fetchFollowerLag})
		if err != nil {
			return dst, partEnds{}, err
		}
		if len(page.Records) == 0 || budget <= 0 {
			return dst, partEnds{page.Committed, page.Start}, nil
		}
		if fp.t.codec == codecProducer {
			if page, err = c.wholeBatches(ctx, fp, page); err != nil {
				return dst, partEnds{}, err
			}
		}
		dst = appendRuns(dst, page.Records, fp.t.logAppendTime, fp.t.codec)
		from = page.Next
		if from >= page.Committed {
			return dst, partEnds{page.Committed, page.Start}, nil
		}
	}
	// Out of budget: the committed end still has to be reported.
	page, err := c.sess.Read(ctx, &service.Read{Scope: fp.t.scope, Shard: fp.shard, From: from, MaxRecords: 1, FollowerMaxLag: fetchFollowerLag})
	if err != nil {
		return dst, partEnds{}, err
	}
	return dst, partEnds{page.Committed, page.Start}, nil
}

// wholeBatches extends page to the end of the produced batch its last
// record is in, so a batch fetched in its producer's codec comes back
// whole, as Kafka stores and serves it (a consumer's decompression limit
// is about whole batches). A produced batch is within MaxBatchBytes
// decompressed, and so is what this adds, whatever a batch length read
// back says.
func (c *conn) wholeBatches(ctx context.Context, fp fetchPart, page *service.Records) (*service.Records, error) {
	added := 0
	for {
		rest := batchRest(page.Records)
		if rest == 0 || page.Next >= page.Committed || added >= c.l.cfg.MaxBatchBytes {
			return page, nil
		}
		more, err := c.sess.Read(ctx, &service.Read{Scope: fp.t.scope, Shard: fp.shard, From: page.Next, MaxRecords: rest, MaxBytes: c.l.cfg.MaxBatchBytes - added, FollowerMaxLag: fetchFollowerLag})
		if err != nil {
			return nil, err
		}
		if len(more.Records) == 0 {
			return page, nil
		}
		for _, r := range more.Records {
			added += len(r.Value)
		}
		more.Records = append(page.Records[:len(page.Records):len(page.Records)], more.Records...)
		page = more
	}
}

// batchRest is how many records of the produced batch recs end in are
// not in recs (0 when recs end a batch, or its start is not in recs).
func batchRest(recs []service.Record) int {
	rest := 0
	for _, r := range recs {
		switch {
		case r.Batch > 0:
			rest = r.Batch - 1
		case rest > 0:
			rest--
		}
	}
	return rest
}

// appendRuns appends recs as record batches, one per run of contiguous
// offsets (Felix offsets are contiguous within a shard, but a Kafka batch
// must be, so this does not assume it). A LogAppendTime batch gives all
// its records one time, its max timestamp, so under logAppendTime a run
// also ends where the append time changes. A batch is compressed with the
// stream's codec, or under codecProducer with the codec its records were
// produced in, so a run also ends where that changes and where a produced
// batch starts.
func appendRuns(dst []byte, recs []service.Record, logAppendTime bool, codec int) []byte {
	start := 0
	for i := 1; i <= len(recs); i++ {
		if i == len(recs) || recs[i].Offset != recs[i-1].Offset+1 ||
			logAppendTime && !recs[i].Time.Equal(recs[i-1].Time) ||
			codec == codecProducer && (recs[i].Codec != recs[i-1].Codec || recs[i].Batch > 0) {
			runCodec := codec
			if runCodec == codecProducer {
				runCodec = codecs[recs[start].Codec]
			}
			dst = appendBatch(dst, recs[start:i], logAppendTime, runCodec)
			start = i
		}
	}
	return dst
}

// errOutOfRange is a fetch or list offset outside what the shard holds.
var errOutOfRange = errors.New("kafka: offset out of range")

// fetchCode maps a range read's refusal: an offset past the committed end
// (in_future) or below what retention kept (too_old) is
// OFFSET_OUT_OF_RANGE, so the client applies its reset policy.
func fetchCode(err error) int16 {
	var we *wire.Error
	if errors.Is(err, errOutOfRange) || errors.As(err, &we) &&
		(strings.HasPrefix(we.Message, "in_future") || strings.HasPrefix(we.Message, "too_old")) {
		return kerr.OffsetOutOfRange.Code
	}
	return errorCode(err)
}
