package groups

import (
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/streams"
)

// memLog is a data shard's log in memory.
type memLog struct {
	start   uint64
	records []streams.Record // records[i] has offset start+i
}

func newMemLog(n int) *memLog {
	l := &memLog{}
	l.append(n)
	return l
}

func (l *memLog) append(n int) {
	for range n {
		off := l.start + uint64(len(l.records))
		l.records = append(l.records, streams.Record{Offset: off, Value: []byte(fmt.Sprint("r", off))})
	}
}

func (l *memLog) Read(from uint64, maxRecords, maxBytes int) (streams.ReadPage, error) {
	page := streams.ReadPage{Next: from}
	for i := int(from - l.start); i >= 0 && i < len(l.records) && len(page.Records) < maxRecords; i++ {
		page.Records = append(page.Records, l.records[i])
		page.Next++
	}
	return page, nil
}
func (l *memLog) StartOffset() uint64 { return l.start }
func (l *memLog) Committed() uint64   { return l.start + uint64(len(l.records)) }

var testLimits = Limits{Visibility: time.Second, MaxVisibility: time.Hour, MaxAttempts: 3, MaxInFlight: 100, MaxDeadLetters: 10}

func poll(t *testing.T, c *core, log Log, n int) []service.GroupRecord {
	t.Helper()
	recs, err := c.poll(log, time.Now(), n, 1<<20, c.lim.Visibility, "t")
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

func offs(recs []service.GroupRecord) []uint64 {
	out := make([]uint64, len(recs))
	for i, r := range recs {
		out[i] = r.Offset
	}
	return out
}

func claims(recs ...service.GroupRecord) []service.Claim {
	out := make([]service.Claim, len(recs))
	for i, r := range recs {
		out[i] = service.Claim{Offset: r.Offset, Attempt: r.Attempts}
	}
	return out
}

// TestCoreVisibility: an unsettled claim comes back after the visibility
// timeout, before new records, with attempts one higher; after
// MaxAttempts it is a dead letter, written at once.
func TestCoreVisibility(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := newMemLog(4)
		c := newCore("g", testLimits)
		c.create(0, time.Now())
		if got := offs(poll(t, c, log, 2)); !slices.Equal(got, []uint64{0, 1}) {
			t.Fatalf("first poll %v", got)
		}
		time.Sleep(999 * time.Millisecond)
		if c.expire(time.Now()) {
			t.Fatal("expired before the visibility timeout")
		}
		time.Sleep(time.Millisecond)
		if !c.expire(time.Now()) {
			t.Fatal("not expired at the visibility timeout")
		}
		recs := poll(t, c, log, 3)
		if !slices.Equal(offs(recs), []uint64{0, 1, 2}) || recs[0].Attempts != 2 || recs[2].Attempts != 1 {
			t.Fatalf("owed first: %+v", recs)
		}
		time.Sleep(time.Second)
		c.expire(time.Now())
		recs = poll(t, c, log, 2) // 0 and 1, third attempt
		if recs[0].Attempts != 3 {
			t.Fatalf("third attempt: %+v", recs)
		}
		c.out = nil
		time.Sleep(time.Second)
		c.expire(time.Now())
		if _, dead := c.dead[0]; !dead || len(c.out) == 0 || c.out[0].Kind != KindDead {
			t.Fatalf("after max attempts: dead %v, out %+v", c.dead, c.out)
		}
		// 2 had 2 attempts: it comes back; 0 and 1 do not.
		if got := offs(poll(t, c, log, 10)); !slices.Equal(got, []uint64{2, 3}) {
			t.Fatalf("after dead letters: %v", got)
		}
	})
}

// TestCoreCursor: the cursor moves only over a contiguous settled run,
// and a replay of what was written rebuilds cursor and dead letters and
// hands out everything past the cursor again.
func TestCoreCursor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := newMemLog(6)
		c := newCore("g", testLimits)
		c.create(0, time.Now())
		recs := poll(t, c, log, 6)
		if f := c.settle(service.SettleAck, claims(recs[1], recs[2], recs[4]), time.Now(), 0, 0); f != nil {
			t.Fatal(f)
		}
		if c.cursor != 0 {
			t.Fatalf("cursor %d with 0 unsettled", c.cursor)
		}
		c.settle(service.SettleDeadLetter, claims(recs[0]), time.Now(), 0, 0)
		c.settle(service.SettleAck, claims(recs[3]), time.Now(), 0, 0)
		if c.cursor != 5 {
			t.Fatalf("cursor %d, want 5", c.cursor)
		}
		c.checkpoint()
		written := c.out
		// Replaying what was written: cursor 5, dead letter 0; 5 again.
		r := newCore("g", testLimits)
		for _, rec := range written {
			b, err := AppendRecord(nil, &rec)
			if err != nil {
				t.Fatal(err)
			}
			dec, err := DecodeRecord(b)
			if err != nil {
				t.Fatal(err)
			}
			r.apply(dec)
		}
		r.replayed(time.Now())
		if r.cursor != 5 || len(r.dead) != 1 || !r.exists {
			t.Fatalf("replayed: cursor %d dead %v", r.cursor, r.dead)
		}
		if got := offs(poll(t, r, log, 10)); !slices.Equal(got, []uint64{5}) {
			t.Fatalf("after replay: %v", got)
		}
		// Redrive survives a replay too, until acked.
		r.out = nil
		if n := r.redrive(nil, true, time.Now()); n != 1 {
			t.Fatalf("redrive %d", n)
		}
		r2 := newCore("g", testLimits)
		for _, rec := range append(written, r.out...) {
			r2.apply(rec)
		}
		r2.replayed(time.Now())
		if got := offs(poll(t, r2, log, 10)); !slices.Equal(got, []uint64{0, 5}) {
			t.Fatalf("redriven after replay: %v", got)
		}
	})
}

// TestCoreInFlightCapAndNack: past MaxInFlight unsettled nothing new is
// handed out; a nack's delay holds the record back; settlements of
// claims that are not held fail one by one.
func TestCoreInFlightCapAndNack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim := testLimits
		lim.MaxInFlight = 3
		log := newMemLog(10)
		c := newCore("g", lim)
		c.create(0, time.Now())
		recs := poll(t, c, log, 10)
		if len(recs) != 3 || len(poll(t, c, log, 10)) != 0 {
			t.Fatalf("in-flight cap: %v", offs(recs))
		}
		c.settle(service.SettleNack, claims(recs[0]), time.Now(), 500*time.Millisecond, 0)
		c.settle(service.SettleAck, claims(recs[1]), time.Now(), 0, 0)
		// One unsettled place freed by the ack: offset 3. 0 is delayed.
		if got := offs(poll(t, c, log, 10)); !slices.Equal(got, []uint64{3}) {
			t.Fatalf("after a nack with delay: %v", got)
		}
		time.Sleep(500 * time.Millisecond)
		c.expire(time.Now())
		if got := poll(t, c, log, 10); !slices.Equal(offs(got), []uint64{0}) || got[0].Attempts != 2 {
			t.Fatalf("after the delay: %+v", got)
		}
		f := c.settle(service.SettleAck, []service.Claim{{Offset: 1, Attempt: 1}, {Offset: 2, Attempt: 1}, {Offset: 9, Attempt: 1}, {Offset: 0, Attempt: 1}}, time.Now(), 0, 0)
		if len(f) != 3 || f[0].Offset != 1 || f[1].Offset != 9 || f[2].Offset != 0 {
			t.Fatalf("failures: %+v", f)
		}
	})
}
