package groups

import (
	"container/heap"
	"maps"
	"slices"
	"time"

	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/streams"
	"github.com/getfelix/felix-go/wire"
)

// core is one group's state on one shard and every rule about it, with no
// actor and no clock of its own (the actor passes now), so it is tested
// directly. Only the group actor touches it.
//
// Offsets in [cursor, next) are either pending (an entry: in flight or owed
// again) or settled (acked, or dead letters). cursor only moves over a
// contiguous settled run; next is where the log is read for new records.
// Redriven dead letters are pending too and may sit below the cursor.
type core struct {
	name string
	lim  Limits

	exists  bool
	created time.Time
	cursor  uint64
	next    uint64
	// saved is the cursor last written; the actor writes a checkpoint when
	// the cursor has moved far enough from it, or after a while.
	saved   uint64
	pending map[uint64]*entry
	// dead is the dead-letter set; true marks one redriven (pending).
	dead map[uint64]bool
	// timers holds visibility deadlines and nack delays; ready the owed
	// entries due now, in the order they became due.
	timers    timerHeap
	ready     []timerItem
	consumers map[string]time.Time
	// ahead are records read from the log at next and not handed out yet:
	// a poll takes from it, so a log batch larger than a poll is read once,
	// not once per poll (at most readAhead records, readAheadBytes).
	ahead []streams.Record

	// gens numbers every change of every entry, so a timer item of an
	// entry that was settled and made again (a redriven dead letter)
	// never matches the new one.
	gens uint64

	// Counters since the actor started, for describe and metrics.
	redeliveries, deadLettered uint64

	// out are the state records to write, in order; the actor drains it.
	out []Record
}

// Limits are a group's knobs (config's group_*).
type Limits struct {
	Visibility    time.Duration
	MaxVisibility time.Duration
	MaxAttempts   int
	MaxInFlight   int
	// MaxDeadLetters bounds the dead-letter set; past it a record that
	// should die is handed out again instead.
	MaxDeadLetters int
	// IdleAfter stops an idle group actor (see idleAfter, the default
	// when zero).
	IdleAfter time.Duration
}

type entryState uint8

const (
	inFlight entryState = iota + 1
	owed
)

type entry struct {
	attempts uint32
	state    entryState
	at       time.Time // in flight: visibility deadline; owed: when due
	gen      uint64    // changed on every change (core.gens); timer items carry it
	redriven bool
}

// Log is what a group reads: the data shard's committed records.
type Log interface {
	Read(from uint64, maxRecords, maxBytes int) (streams.ReadPage, error)
	StartOffset() uint64
	Committed() uint64
}

// Read-ahead bounds: what one log read fetches for later polls.
const (
	readAhead      = 1000
	readAheadBytes = 1 << 20
)

// maxConsumersSeen bounds the names describe reports.
const maxConsumersSeen = 64

// consumerActiveFor is how long after its last poll describe still lists a
// consumer. A group has no membership, so a consumer that exited is known
// only by its silence; a consumer's long poll lasts at most a few seconds,
// so half a minute of silence means it stopped (Kafka's session timeout is
// of the same order: 45 s).
const consumerActiveFor = 30 * time.Second

func newCore(name string, lim Limits) *core {
	c := &core{name: name, lim: lim}
	c.reset()
	return c
}

// reset forgets everything: the group does not exist.
func (c *core) reset() {
	c.exists, c.created = false, time.Time{}
	c.cursor, c.next, c.saved = 0, 0, 0
	c.pending = make(map[uint64]*entry)
	c.dead = make(map[uint64]bool)
	c.timers, c.ready = nil, nil
	c.consumers = make(map[string]time.Time)
	c.ahead = nil
}

// apply replays one state record of this group.
func (c *core) apply(r Record) {
	switch r.Kind {
	case KindCreate:
		c.reset()
		c.exists, c.created = true, time.Unix(0, r.Time).UTC()
		c.cursor = r.Cursor
	case KindCursor:
		c.cursor = max(c.cursor, r.Cursor)
	case KindSeek:
		c.cursor = r.Cursor
		for o := range c.dead {
			c.dead[o] = false
		}
	case KindDead:
		for _, o := range r.Offsets {
			c.dead[o] = false
		}
	case KindRedrive:
		for _, o := range r.Offsets {
			if _, ok := c.dead[o]; ok {
				c.dead[o] = true
			}
		}
	case KindRemove:
		for _, o := range r.Offsets {
			delete(c.dead, o)
		}
	case KindDelete:
		c.reset()
	}
}

// replayed finishes a replay: reading resumes at the cursor, and redriven
// dead letters are owed again.
func (c *core) replayed(now time.Time) {
	c.next, c.saved = c.cursor, c.cursor
	for _, o := range slices.Sorted(maps.Keys(c.dead)) {
		if c.dead[o] {
			e := &entry{state: owed, at: now, redriven: true, gen: c.nextGen()}
			c.pending[o] = e
			c.ready = append(c.ready, timerItem{off: o, gen: e.gen})
		}
	}
}

// create makes the group at start (a no-op when it exists).
func (c *core) create(start uint64, now time.Time) bool {
	if c.exists {
		return false
	}
	c.reset()
	c.exists, c.created = true, now.UTC()
	c.cursor, c.next, c.saved = start, start, start
	c.out = append(c.out, Record{Kind: KindCreate, Group: c.name, Cursor: start, Time: now.UnixNano()})
	return true
}

// seek moves the cursor to off: claims in flight and owed records are
// dropped (their settlements become stale), dead letters kept, redriven
// ones dead again.
func (c *core) seek(off uint64) {
	c.cursor, c.next, c.saved = off, off, off
	c.pending = make(map[uint64]*entry)
	c.timers, c.ready, c.ahead = nil, nil, nil
	for o := range c.dead {
		c.dead[o] = false
	}
	c.out = append(c.out, Record{Kind: KindSeek, Group: c.name, Cursor: off})
}

// remove deletes the group.
func (c *core) remove() {
	c.reset()
	c.out = append(c.out, Record{Kind: KindDelete, Group: c.name})
}

// poll hands out up to limit records and about maxBytes: owed records
// first, then new ones while the group holds fewer than MaxInFlight
// unsettled. Each is claimed for vis from now.
func (c *core) poll(log Log, now time.Time, limit, maxBytes int, vis time.Duration, consumer string) ([]service.GroupRecord, error) {
	if consumer != "" {
		c.seen(consumer, now)
	}
	var out []service.GroupRecord
	bytes := 0
	full := func() bool { return len(out) >= limit || (len(out) > 0 && bytes >= maxBytes) }
	for len(c.ready) > 0 && !full() {
		it := c.ready[0]
		c.ready = c.ready[1:]
		e := c.pending[it.off]
		if e == nil || e.gen != it.gen || e.state != owed {
			continue
		}
		rec, ok, err := readOne(log, it.off, maxBytes-bytes)
		if err != nil {
			c.ready = append([]timerItem{it}, c.ready...)
			return out, err
		}
		if !ok {
			c.gone(it.off, e) // retention deleted it
			continue
		}
		c.redeliveries++
		out = append(out, c.handOut(it.off, e, rec, now, vis))
		bytes += len(rec.Value)
	}
	if start := log.StartOffset(); c.next < start {
		// Retention deleted what was never handed out: nothing below the
		// oldest kept record can be settled any more, so the cursor jumps
		// rather than walks there.
		c.next, c.ahead = start, nil
		c.cursor = max(c.cursor, start)
		c.advance()
	}
	for !full() && len(c.pending) < c.lim.MaxInFlight {
		if len(c.ahead) == 0 {
			if err := c.readAhead(log); err != nil {
				return out, err
			}
			if len(c.ahead) == 0 {
				break
			}
		}
		r := c.ahead[0]
		c.ahead[0] = streams.Record{}
		c.ahead = c.ahead[1:]
		c.next = r.Offset + 1
		if _, isDead := c.dead[r.Offset]; isDead {
			continue
		}
		e := &entry{}
		c.pending[r.Offset] = e
		out = append(out, c.handOut(r.Offset, e, r, now, vis))
		bytes += len(r.Value)
	}
	c.advance()
	return out, nil
}

// readAhead reads the next committed records into ahead (a log's Read
// may return written records past the committed end: they are not asked
// for).
func (c *core) readAhead(log Log) error {
	committed := log.Committed()
	if c.next >= committed {
		return nil
	}
	page, err := log.Read(c.next, int(min(readAhead, committed-c.next)), readAheadBytes)
	if err != nil {
		return err
	}
	c.ahead = page.Records
	return nil
}

// readOne reads the record at off; ok is false when retention deleted it.
func readOne(log Log, off uint64, maxBytes int) (streams.Record, bool, error) {
	if off < log.StartOffset() {
		return streams.Record{}, false, nil
	}
	page, err := log.Read(off, 1, max(1, maxBytes))
	if err != nil {
		return streams.Record{}, false, err
	}
	if len(page.Records) == 0 || page.Records[0].Offset != off {
		return streams.Record{}, false, nil
	}
	return page.Records[0], true, nil
}

// handOut claims e (at off) for vis from now.
func (c *core) handOut(off uint64, e *entry, r streams.Record, now time.Time, vis time.Duration) service.GroupRecord {
	e.attempts++
	e.state, e.at = inFlight, now.Add(vis)
	e.gen = c.nextGen()
	c.pushTimer(off, e)
	return service.GroupRecord{Offset: off, Time: r.Time, Attempts: e.attempts, Value: r.Value}
}

// gone settles a pending record retention deleted.
func (c *core) gone(off uint64, e *entry) {
	delete(c.pending, off)
	if e.redriven {
		delete(c.dead, off)
		c.out = append(c.out, Record{Kind: KindRemove, Group: c.name, Offsets: []uint64{off}})
	}
	c.advance()
}

// advance moves the cursor over the settled run after it.
func (c *core) advance() {
	for c.cursor < c.next {
		if _, ok := c.pending[c.cursor]; ok {
			return
		}
		c.cursor++
	}
}

// seen records a consumer's poll, forgetting the longest silent one past
// maxConsumersSeen.
func (c *core) seen(consumer string, now time.Time) {
	if _, ok := c.consumers[consumer]; !ok && len(c.consumers) >= maxConsumersSeen {
		oldest, at := "", now
		for n, t := range c.consumers {
			if t.Before(at) || oldest == "" {
				oldest, at = n, t
			}
		}
		delete(c.consumers, oldest)
	}
	c.consumers[consumer] = now
}

// settle applies op to each claim; the claims it refused are returned.
func (c *core) settle(op service.SettleOp, claims []service.Claim, now time.Time, delay, vis time.Duration) []service.ClaimFailure {
	var failed []service.ClaimFailure
	for _, cl := range claims {
		e, err := c.claimed(cl)
		if err != nil {
			failed = append(failed, service.ClaimFailure{Offset: cl.Offset, Err: err})
			continue
		}
		switch op {
		case service.SettleAck:
			c.ack(cl.Offset, e)
		case service.SettleNack:
			c.owe(cl.Offset, e, now, now.Add(delay))
		case service.SettleExtend:
			e.at = now.Add(vis)
			e.gen = c.nextGen()
			c.pushTimer(cl.Offset, e)
		case service.SettleDeadLetter:
			if !c.die(cl.Offset, e) {
				failed = append(failed, service.ClaimFailure{Offset: cl.Offset, Err: wire.NewError(wire.CodeLimitExceeded,
					"the group has %d dead letters on this shard, its bound; redrive or discard some", len(c.dead))})
			}
		}
	}
	c.advance()
	return failed
}

// claimed finds the entry a claim names, or says why it names none.
func (c *core) claimed(cl service.Claim) (*entry, *wire.Error) {
	e := c.pending[cl.Offset]
	switch {
	case e == nil && cl.Offset >= c.next:
		return nil, wire.NewError(wire.CodeInvalidRequest, "not_claimed: offset %d was never handed out by group %s", cl.Offset, c.name)
	case e == nil:
		return nil, wire.NewError(wire.CodeStaleClaim, "settled: offset %d of group %s is already settled (acked, dead-lettered, or its claim was dropped by a seek)", cl.Offset, c.name)
	case e.state != inFlight:
		return nil, wire.NewError(wire.CodeStaleClaim, "expired: the claim on offset %d of group %s expired or was nacked; it will be handed out again", cl.Offset, c.name)
	case e.attempts != cl.Attempt:
		return nil, wire.NewError(wire.CodeStaleClaim, "expired: offset %d of group %s was handed out again (attempt %d, not %d)", cl.Offset, c.name, e.attempts, cl.Attempt)
	}
	return e, nil
}

// ack settles a claim; a redriven dead letter leaves the set.
func (c *core) ack(off uint64, e *entry) {
	delete(c.pending, off)
	if e.redriven {
		delete(c.dead, off)
		c.out = append(c.out, Record{Kind: KindRemove, Group: c.name, Offsets: []uint64{off}})
	}
}

// owe makes e owed again from at, or a dead letter past MaxAttempts.
func (c *core) owe(off uint64, e *entry, now, at time.Time) {
	if int(e.attempts) >= c.lim.MaxAttempts && c.die(off, e) {
		return
	}
	if !at.After(now) {
		c.makeReady(off, e, now)
		return
	}
	e.state, e.at = owed, at
	e.gen = c.nextGen()
	c.pushTimer(off, e)
}

// makeReady makes e owed now, queued for the next poll.
func (c *core) makeReady(off uint64, e *entry, now time.Time) {
	e.state, e.at = owed, now
	e.gen = c.nextGen()
	c.ready = append(c.ready, timerItem{off: off, gen: e.gen})
}

// pushTimer arms e's deadline. Superseded items stay in the heap until
// their time (an ack does not search the heap), so it is rebuilt from the
// live entries when stale ones outnumber them: acked claims would
// otherwise hold a visibility timeout's worth of items.
func (c *core) pushTimer(off uint64, e *entry) {
	if len(c.timers) > 2*len(c.pending)+1024 {
		live := c.timers[:0]
		for _, it := range c.timers {
			if p := c.pending[it.off]; p != nil && p.gen == it.gen {
				live = append(live, it)
			}
		}
		c.timers = live
		heap.Init(&c.timers)
	}
	heap.Push(&c.timers, timerItem{at: e.at, off: off, gen: e.gen})
}

// die makes a pending record a dead letter, unless the set is full.
func (c *core) die(off uint64, e *entry) bool {
	if !e.redriven && len(c.dead) >= c.lim.MaxDeadLetters {
		return false
	}
	delete(c.pending, off)
	c.dead[off] = false
	c.deadLettered++
	c.out = append(c.out, Record{Kind: KindDead, Group: c.name, Offsets: []uint64{off}})
	return true
}

// expire applies every deadline up to now: expired claims become owed (or
// dead letters), delayed nacks become due. It reports whether anything
// became available.
func (c *core) expire(now time.Time) bool {
	avail := false
	for len(c.timers) > 0 && !c.timers[0].at.After(now) {
		it := heap.Pop(&c.timers).(timerItem)
		e := c.pending[it.off]
		if e == nil || e.gen != it.gen {
			continue
		}
		if e.state == inFlight && int(e.attempts) >= c.lim.MaxAttempts && c.die(it.off, e) {
			continue
		}
		c.makeReady(it.off, e, now)
		avail = true
	}
	c.advance()
	return avail
}

// nextDeadline is the earliest timer, if any.
func (c *core) nextDeadline() (time.Time, bool) {
	if len(c.timers) == 0 {
		return time.Time{}, false
	}
	return c.timers[0].at, true
}

// nextGen is a generation no entry had.
func (c *core) nextGen() uint64 {
	c.gens++
	return c.gens
}

// hasReady reports whether a poll would get an owed record now.
func (c *core) hasReady() bool { return len(c.ready) > 0 }

// checkpoint queues a cursor record if the cursor moved since the last.
func (c *core) checkpoint() {
	if c.exists && c.cursor != c.saved {
		c.out = append(c.out, Record{Kind: KindCursor, Group: c.name, Cursor: c.cursor})
		c.saved = c.cursor
	}
}

// deadLetters lists up to n dead letters from offset from.
func (c *core) deadLetters(from uint64, n int) service.DeadLetters {
	all := slices.Sorted(maps.Keys(c.dead))
	i, _ := slices.BinarySearch(all, from)
	all = all[i:]
	if len(all) > n {
		return service.DeadLetters{Offsets: all[:n], More: true}
	}
	return service.DeadLetters{Offsets: all}
}

// redrive hands dead letters out again; it returns how many.
func (c *core) redrive(offsets []uint64, all bool, now time.Time) int {
	var changed []uint64
	for _, o := range c.pick(offsets, all) {
		if redriven, ok := c.dead[o]; !ok || redriven {
			continue
		}
		c.dead[o] = true
		e := &entry{state: owed, at: now, redriven: true, gen: c.nextGen()}
		c.pending[o] = e
		c.ready = append(c.ready, timerItem{off: o, gen: e.gen})
		changed = append(changed, o)
	}
	c.writeOffsets(KindRedrive, changed)
	return len(changed)
}

// discard forgets dead letters (a redriven one in flight too); it returns
// how many.
func (c *core) discard(offsets []uint64, all bool) int {
	var changed []uint64
	for _, o := range c.pick(offsets, all) {
		if _, ok := c.dead[o]; !ok {
			continue
		}
		delete(c.dead, o)
		delete(c.pending, o)
		changed = append(changed, o)
	}
	c.writeOffsets(KindRemove, changed)
	c.advance()
	return len(changed)
}

// pick is the sorted, distinct offsets an operation applies to.
func (c *core) pick(offsets []uint64, all bool) []uint64 {
	if all {
		return slices.Sorted(maps.Keys(c.dead))
	}
	return slices.Compact(slices.Sorted(slices.Values(offsets)))
}

// writeOffsets queues records of kind for offsets, split to the record bound.
func (c *core) writeOffsets(kind Kind, offsets []uint64) {
	for chunk := range slices.Chunk(offsets, maxRecordOffsets) {
		c.out = append(c.out, Record{Kind: kind, Group: c.name, Offsets: chunk})
	}
}

// info describes the group on this shard at now: its consumers are the
// ones that polled within consumerActiveFor.
func (c *core) info(shard uint32, committed uint64, now time.Time) service.GroupShardInfo {
	in := service.GroupShardInfo{
		Shard: shard, Cursor: c.cursor, Next: c.next, Committed: committed,
		DeadLetters: uint64(len(c.dead)), Redeliveries: c.redeliveries, CreatedAt: c.created,
	}
	if committed > c.cursor {
		in.Lag = committed - c.cursor
	}
	for _, e := range c.pending {
		if e.state == inFlight {
			in.InFlight++
		} else {
			in.Owed++
		}
	}
	for name, at := range c.consumers {
		if now.Sub(at) <= consumerActiveFor {
			in.Consumers = append(in.Consumers, name)
		}
	}
	slices.Sort(in.Consumers)
	return in
}

// timerItem is a deadline of the entry at off, valid while its gen is.
type timerItem struct {
	at  time.Time
	off uint64
	gen uint64
}

type timerHeap []timerItem

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	// Equal deadlines (a poll's records) expire in offset order.
	return h[i].at.Before(h[j].at) || h[i].at.Equal(h[j].at) && h[i].off < h[j].off
}
func (h timerHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)   { *h = append(*h, x.(timerItem)) }
func (h *timerHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}
