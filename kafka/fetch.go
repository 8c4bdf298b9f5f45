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
// commits (service.CommitWatcher: the broker wakes it when a publish to one
// of them is acknowledged) and reads again; it also reads again on a timer
// that backs off from fetchPollMin to fetchPollMax, which is all it has
// when the session cannot watch (or a shard refuses more watches), and
// what catches records that reach a shard without a publish here (a
// replicated shard's follower).
// They are variables for a test that sets them past its deadline, so
// that only a commit can wake a Fetch.
var (
	fetchPollMin = 5 * time.Millisecond
	fetchPollMax = 250 * time.Millisecond
)

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
	p := newPending()
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
		wait := min(time.Duration(max(r.MaxWaitMillis, 0))*time.Millisecond, c.l.cfg.MaxFetchWait)
		code := c.longPoll(resp, parts, int(r.MinBytes), int(r.MaxBytes), wait)
		c.count(h.key, code)
		p.finish(appendResponse(nil, h.correlation, resp), false)
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
	interval := fetchPollMin
	for {
		total, code := c.fetchOnce(resp, parts, maxBytes)
		if total >= max(minBytes, 1) || code != 0 || !time.Now().Before(deadline) {
			c.l.cfg.Hooks.Bytes("out", total)
			return code
		}
		if timer == nil {
			cancels = c.watchCommits(resp, parts, wake)
			timer = time.NewTimer(interval)
			defer timer.Stop()
		} else {
			interval = min(2*interval, fetchPollMax)
			timer.Reset(interval)
		}
		select {
		case <-wake:
		case <-timer.C:
		case <-c.ctx.Done():
			return 0
		}
	}
}

// watchCommits asks to be woken on wake when a partition of the Fetch gets
// records past what this read saw (its high watermark); a partition that
// cannot be watched is left to the timer.
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
			continue
		}
		budget := min(fp.max, maxBytes-total)
		if total == 0 {
			budget = max(budget, 1)
		}
		batches, committed, err := c.readPartition(c.ctx, fp, budget, out.RecordBatches)
		out.RecordBatches = batches
		if err != nil {
			out.ErrorCode = fetchCode(err)
			code = out.ErrorCode
			continue
		}
		out.ErrorCode = 0
		out.HighWatermark, out.LastStableOffset = int64(committed), int64(committed)
		total += len(batches)
	}
	return total, code
}

// readPartition appends record batches from fp's offset to dst, at least
// one batch when there is one, then up to budget bytes; it returns them
// and the committed end.
func (c *conn) readPartition(ctx context.Context, fp fetchPart, budget int, dst []byte) ([]byte, uint64, error) {
	if fp.offset < 0 {
		return dst, 0, errOutOfRange
	}
	from := uint64(fp.offset)
	for {
		room := max(budget-len(dst), 0)
		if len(dst) > 0 && room == 0 {
			break
		}
		page, err := c.sess.Read(ctx, &service.Read{Scope: fp.t.scope, Shard: fp.shard, From: from, MaxBytes: max(room, 1)})
		if err != nil {
			return dst, 0, err
		}
		if len(page.Records) == 0 || budget <= 0 {
			return dst, page.Committed, nil
		}
		dst = appendRuns(dst, page.Records)
		from = page.Next
		if from >= page.Committed {
			return dst, page.Committed, nil
		}
	}
	// Out of budget: the committed end still has to be reported.
	page, err := c.sess.Read(ctx, &service.Read{Scope: fp.t.scope, Shard: fp.shard, From: from, MaxRecords: 1})
	if err != nil {
		return dst, 0, err
	}
	return dst, page.Committed, nil
}

// appendRuns appends recs as record batches, one per run of contiguous
// offsets (Felix offsets are contiguous within a shard, but a Kafka batch
// must be, so this does not assume it).
func appendRuns(dst []byte, recs []service.Record) []byte {
	start := 0
	for i := 1; i <= len(recs); i++ {
		if i == len(recs) || recs[i].Offset != recs[i-1].Offset+1 {
			dst = appendBatch(dst, recs[start:i])
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
