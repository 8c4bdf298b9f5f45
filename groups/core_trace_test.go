package groups

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/getfelix/felix-go/service"
)

// TestCoreTrace runs the scripts in testdata/*.txt against one
// group's core. Each command changes the core and prints what it answered,
// the state records it queued for writing, and the state after. The clock
// is logical: it starts at zero and moves only by tick, so every deadline
// in a trace is exact. Regenerate with -rewrite; only commit the changes
// if you understand what caused them.
//
// Commands:
//
//	new [attempts=N] [inflight=N] [dead=N] [vis=D]  a core and an empty log
//	append n=N                                      N records on the log
//	retain start=N                                  retention keeps N..
//	create [start=N]                                make the group
//	poll [max=N] [bytes=N] [vis=D] [consumer=S]     hand records out
//	ack|nack|extend|deadletter OFF/ATTEMPT...       settle claims
//	  (nack [delay=D], extend [vis=D])
//	tick D                                          move the clock, expire
//	seek N                                          move the cursor
//	redrive|discard all|OFF...                      act on dead letters
//	dead-letters [from=N] [max=N]                   list them
//	seen n=N [prefix=S]                             empty polls from consumers S1..SN
//	checkpoint                                      queue a cursor record
//	remove                                          delete the group
//	replay                                          a new core from the records written
//	describe                                        what describe reports
func TestCoreTrace(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		var tr *coreTrace
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd == "new" {
				tr = newCoreTrace(t, d)
				return tr.state()
			}
			if tr == nil {
				d.Fatalf(t, "%s before new", d.Cmd)
			}
			return tr.run(t, d)
		})
	})
}

// epoch is the logical clock's zero; times in a trace are offsets from it.
var epoch = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)

type coreTrace struct {
	c   *core
	log *memLog
	now time.Time
	// written is every state record the core queued, in order: what a
	// replay reads back.
	written []Record
}

func newCoreTrace(t *testing.T, d *datadriven.TestData) *coreTrace {
	lim := Limits{Visibility: time.Second, MaxVisibility: time.Hour, MaxAttempts: 3, MaxInFlight: 100, MaxDeadLetters: 10}
	d.MaybeScanArgs(t, "attempts", &lim.MaxAttempts)
	d.MaybeScanArgs(t, "inflight", &lim.MaxInFlight)
	d.MaybeScanArgs(t, "dead", &lim.MaxDeadLetters)
	lim.Visibility = durArg(t, d, "vis", lim.Visibility)
	return &coreTrace{c: newCore("g", lim), log: &memLog{}, now: epoch}
}

func (tr *coreTrace) run(t *testing.T, d *datadriven.TestData) string {
	c := tr.c
	var b strings.Builder
	switch d.Cmd {
	case "append":
		var n int
		d.ScanArgs(t, "n", &n)
		tr.log.append(n)
		fmt.Fprintf(&b, "log %d..%d\n", tr.log.start, tr.log.Committed())
	case "retain":
		var start uint64
		d.ScanArgs(t, "start", &start)
		drop := min(int(start-tr.log.start), len(tr.log.records))
		tr.log.records = tr.log.records[drop:]
		tr.log.start = start
		fmt.Fprintf(&b, "log %d..%d\n", tr.log.start, tr.log.Committed())
	case "create":
		var start uint64
		d.MaybeScanArgs(t, "start", &start)
		fmt.Fprintf(&b, "created %t\n", c.create(start, tr.now))
	case "poll":
		limit, maxBytes, consumer := 10, 1<<20, ""
		d.MaybeScanArgs(t, "max", &limit)
		d.MaybeScanArgs(t, "bytes", &maxBytes)
		d.MaybeScanArgs(t, "consumer", &consumer)
		vis := durArg(t, d, "vis", c.lim.Visibility)
		recs, err := c.poll(tr.log, tr.now, limit, maxBytes, vis, consumer)
		if err != nil {
			d.Fatalf(t, "poll: %v", err)
		}
		if len(recs) == 0 {
			b.WriteString("handed out nothing\n")
		}
		for _, r := range recs {
			fmt.Fprintf(&b, "handed out %d attempt %d %q\n", r.Offset, r.Attempts, r.Value)
		}
	case "ack", "nack", "extend", "deadletter":
		op := map[string]service.SettleOp{"ack": service.SettleAck, "nack": service.SettleNack,
			"extend": service.SettleExtend, "deadletter": service.SettleDeadLetter}[d.Cmd]
		delay := durArg(t, d, "delay", 0)
		vis := durArg(t, d, "vis", c.lim.Visibility)
		failed := c.settle(op, claimArgs(t, d), tr.now, delay, vis)
		if len(failed) == 0 {
			b.WriteString("settled\n")
		}
		for _, f := range failed {
			fmt.Fprintf(&b, "refused %d: %v\n", f.Offset, f.Err)
		}
	case "tick":
		if len(d.CmdArgs) != 1 {
			d.Fatalf(t, "tick takes one duration")
		}
		dur, err := time.ParseDuration(d.CmdArgs[0].Key)
		if err != nil {
			d.Fatalf(t, "tick: %v", err)
		}
		tr.now = tr.now.Add(dur)
		fmt.Fprintf(&b, "now %s; available %t\n", since(tr.now), c.expire(tr.now))
	case "seek":
		off, err := strconv.ParseUint(d.CmdArgs[0].Key, 10, 64)
		if err != nil {
			d.Fatalf(t, "seek: %v", err)
		}
		c.seek(off)
	case "redrive":
		all, offsets := offsetArgs(t, d)
		fmt.Fprintf(&b, "redriven %d\n", c.redrive(offsets, all, tr.now))
	case "discard":
		all, offsets := offsetArgs(t, d)
		fmt.Fprintf(&b, "discarded %d\n", c.discard(offsets, all))
	case "dead-letters":
		from, n := uint64(0), 100
		d.MaybeScanArgs(t, "from", &from)
		d.MaybeScanArgs(t, "max", &n)
		dl := c.deadLetters(from, n)
		fmt.Fprintf(&b, "dead letters %v more %t\n", dl.Offsets, dl.More)
	case "seen":
		// Polls that take nothing, from consumers PREFIX1..PREFIXn.
		var n int
		prefix := "c"
		d.ScanArgs(t, "n", &n)
		d.MaybeScanArgs(t, "prefix", &prefix)
		for i := 1; i <= n; i++ {
			if _, err := c.poll(tr.log, tr.now, 0, 0, c.lim.Visibility, fmt.Sprint(prefix, i)); err != nil {
				d.Fatalf(t, "poll: %v", err)
			}
		}
	case "checkpoint":
		c.checkpoint()
	case "remove":
		c.remove()
	case "replay":
		// What a restarted actor does: a new core applies every record
		// written, through their encoding, then finishes the replay.
		r := newCore(c.name, c.lim)
		for _, rec := range tr.written {
			enc, err := AppendRecord(nil, &rec)
			if err != nil {
				d.Fatalf(t, "encode %+v: %v", rec, err)
			}
			dec, err := DecodeRecord(enc)
			if err != nil {
				d.Fatalf(t, "decode %+v: %v", rec, err)
			}
			r.apply(dec)
		}
		r.replayed(tr.now)
		tr.c = r
		fmt.Fprintf(&b, "replayed %d records\n", len(tr.written))
	case "describe":
		in := c.info(0, tr.log.Committed(), tr.now)
		fmt.Fprintf(&b, "lag %d in-flight %d owed %d dead %d redeliveries %d dead-lettered %d\n",
			in.Lag, in.InFlight, in.Owed, in.DeadLetters, in.Redeliveries, c.deadLettered)
		fmt.Fprintf(&b, "consumers (%d) %v\n", len(in.Consumers), in.Consumers)
	default:
		d.Fatalf(t, "unknown command %q", d.Cmd)
	}
	for _, r := range tr.c.out {
		fmt.Fprintf(&b, "write %s\n", recordString(r))
	}
	tr.written = append(tr.written, tr.c.out...)
	tr.c.out = nil
	b.WriteString(tr.state())
	return b.String()
}

// state is the core's state: cursor and read position, each pending
// entry, the dead letters, and the next deadline.
func (tr *coreTrace) state() string {
	c := tr.c
	if !c.exists {
		return "no group\n"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "cursor %d next %d saved %d", c.cursor, c.next, c.saved)
	if at, ok := c.nextDeadline(); ok {
		fmt.Fprintf(&b, " deadline %s", since(at))
	}
	b.WriteString("\n")
	for _, off := range slices.Sorted(maps.Keys(c.pending)) {
		e := c.pending[off]
		state := "in-flight until"
		if e.state == owed {
			state = "owed from"
		}
		fmt.Fprintf(&b, "  %d: %s %s, attempts %d", off, state, since(e.at), e.attempts)
		if e.redriven {
			b.WriteString(", redriven")
		}
		b.WriteString("\n")
	}
	if len(c.dead) > 0 {
		b.WriteString("  dead:")
		for _, off := range slices.Sorted(maps.Keys(c.dead)) {
			fmt.Fprintf(&b, " %d", off)
			if c.dead[off] {
				b.WriteString("(redriven)")
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

func since(at time.Time) string { return at.Sub(epoch).String() }

func recordString(r Record) string {
	names := map[Kind]string{KindCreate: "create", KindCursor: "cursor", KindSeek: "seek", KindDead: "dead",
		KindRedrive: "redrive", KindRemove: "remove", KindDelete: "delete"}
	s := names[r.Kind]
	switch r.Kind {
	case KindCreate, KindCursor, KindSeek:
		s += fmt.Sprintf(" cursor %d", r.Cursor)
	case KindDead, KindRedrive, KindRemove:
		s += fmt.Sprintf(" %v", r.Offsets)
	}
	return s
}

// claimArgs reads OFF/ATTEMPT arguments.
func claimArgs(t *testing.T, d *datadriven.TestData) []service.Claim {
	var out []service.Claim
	for _, a := range d.CmdArgs {
		if len(a.Vals) > 0 {
			continue
		}
		off, att, ok := strings.Cut(a.Key, "/")
		o, err1 := strconv.ParseUint(off, 10, 64)
		n, err2 := strconv.ParseUint(att, 10, 32)
		if !ok || err1 != nil || err2 != nil {
			d.Fatalf(t, "claim %q: want OFFSET/ATTEMPT", a.Key)
		}
		out = append(out, service.Claim{Offset: o, Attempt: uint32(n)})
	}
	return out
}

// offsetArgs reads "all" or offsets.
func offsetArgs(t *testing.T, d *datadriven.TestData) (all bool, offsets []uint64) {
	for _, a := range d.CmdArgs {
		if a.Key == "all" {
			all = true
			continue
		}
		o, err := strconv.ParseUint(a.Key, 10, 64)
		if err != nil {
			d.Fatalf(t, "offset %q: %v", a.Key, err)
		}
		offsets = append(offsets, o)
	}
	return all, offsets
}

func durArg(t *testing.T, d *datadriven.TestData, key string, def time.Duration) time.Duration {
	var s string
	if !d.MaybeScanArgs(t, key, &s) {
		return def
	}
	dur, err := time.ParseDuration(s)
	if err != nil {
		d.Fatalf(t, "%s=%s: %v", key, s, err)
	}
	return dur
}
