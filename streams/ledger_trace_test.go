package streams

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/rs/zerolog"
)

// TestLedgerTrace runs testdata/ledger_*.txt against one durable shard's
// publish path, its Receive handlers called directly, with no actor: the
// checks where offsets are assigned (idempotent sequences, publish_if's
// expected offset, the ownership fence), the producer table, and the
// ledger's accounting of publishes in hand and waiting for their fsync.
// The fsyncs are the script's: under on_commit each waits until a sync
// command completes it, as the waiter would, in append order. Each
// command prints the answers given (publishes are numbered in order) and
// the shard's state after. Regenerate with -rewrite; only commit the
// changes if you understand what caused them.
//
// Commands:
//
//	open [on-commit] [max-producers=N]  a shard over a new log
//	reopen [on-commit]                  a new shard over the same log
//	publish [id=P seq=N] [expect=N] [crash=append|deliver] values=(a,b,...)
//	burst id=P from=N to=M              unnumbered batches, unanswered in the trace
//	sync [err]                          the oldest waiting fsync completes
//	fence lost|held                     the shard's ownership
//	fail-appends [off]                  the log refuses writes
//	stop                                the shard stops
func TestLedgerTrace(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		if !strings.HasPrefix(pathBase(path), "ledger_") {
			t.Skip("not a ledger trace")
		}
		var tr *ledgerTrace
		t.Cleanup(func() {
			if tr != nil {
				tr.stop()
			}
		})
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd != "open" && tr == nil {
				d.Fatalf(t, "%s before open", d.Cmd)
			}
			switch d.Cmd {
			case "open", "reopen":
				log := newFakeLog(0)
				var max int
				d.MaybeScanArgs(t, "max-producers", &max)
				numbers := make(map[*Publish]int)
				if tr != nil {
					log, max, numbers = tr.log, tr.maxProducers, tr.numbers
					tr.stop()
				}
				tr = openLedgerTrace(t, log, d.HasArg("on-commit"), max)
				tr.numbers = numbers
			case "publish":
				tr.publish(t, d)
			case "burst":
				// Batches of one record from producer id, sequences
				// from..to: a window's worth without a line each.
				var id, from, to uint64
				d.ScanArgs(t, "id", &id)
				d.ScanArgs(t, "from", &from)
				d.ScanArgs(t, "to", &to)
				for seq := from; seq <= to; seq++ {
					tr.s.handlePublish(&Publish{Producer: &ProducerSeq{ID: id, Seq: seq}, Payloads: [][]byte{[]byte(fmt.Sprint(seq))}})
				}
			case "sync":
				select {
				case w := <-tr.s.waiter.waits:
					var err error
					if d.HasArg("err") {
						err = errors.New("fsync failed")
					}
					tr.s.handleDurable(&durableDone{durableWait: w, err: err})
				default:
					d.Fatalf(t, "no fsync is waiting")
				}
			case "fence":
				tr.fence.err = nil
				if d.CmdArgs[0].Key == "lost" {
					tr.fence.err = errors.New("lease lost")
				}
			case "fail-appends":
				tr.log.mu.Lock()
				tr.log.fail = errors.New("disk full")
				if d.HasArg("off") {
					tr.log.fail = nil
				}
				tr.log.mu.Unlock()
			case "stop":
				tr.stop()
			default:
				d.Fatalf(t, "unknown command %q", d.Cmd)
			}
			return tr.flush()
		})
	})
}

type ledgerTrace struct {
	s            *shard
	log          *fakeLog
	fence        *testFence
	maxProducers int
	stopped      bool
	numbers      map[*Publish]int // publish -> its number in the trace
	answers      []string         // given since the last command
}

type testFence struct{ err error }

func (f *testFence) Check() error { return f.err }

func openLedgerTrace(t *testing.T, log *fakeLog, onCommit bool, maxProducers int) *ledgerTrace {
	tr := &ledgerTrace{log: log, fence: &testFence{}, maxProducers: maxProducers}
	s := newShard(testScope, 0, ShardConfig{maxProducers: maxProducers, RetentionInterval: time.Hour}, zerolog.Nop(), nil)
	s.open = func() (Log, bool, error) { return log, false, nil }
	if err := s.openLog(nil); err != nil {
		t.Fatal(err)
	}
	s.fence = tr.fence
	if onCommit {
		// The waiter without its goroutine: the script completes the
		// fsyncs (sync), in the order the shard handed them over.
		done := make(chan struct{})
		close(done)
		s.waiter = &syncWaiter{worker: worker{quit: make(chan struct{}), done: done}, waits: make(chan durableWait, 64)}
	}
	tr.s = s
	return tr
}

func (tr *ledgerTrace) publish(t *testing.T, d *datadriven.TestData) {
	p := &Publish{}
	n := len(tr.numbers) + 1
	tr.numbers[p] = n
	p.Done = func(r PublishResult) {
		tr.answers = append(tr.answers, fmt.Sprintf("publish %d: %s", n, resultString(r)))
	}
	if a, ok := d.Arg("values"); ok {
		for _, v := range a.Vals {
			p.Payloads = append(p.Payloads, []byte(v))
		}
	}
	if d.HasArg("id") {
		var ps ProducerSeq
		d.ScanArgs(t, "id", &ps.ID)
		d.ScanArgs(t, "seq", &ps.Seq)
		p.Producer = &ps
	}
	if d.HasArg("expect") {
		var off uint64
		d.ScanArgs(t, "expect", &off)
		p.ExpectedOffset = &off
	}
	var crash string
	d.MaybeScanArgs(t, "crash", &crash)
	at := map[string]step{"append": stepAppend, "deliver": stepDeliver}
	if crash != "" {
		tr.s.cfg.beforeStep = func(st step) {
			if st == at[crash] {
				panic("crash at " + crash)
			}
		}
	}
	func() {
		defer func() {
			if r := recover(); r != nil {
				// What the actor's supervisor does with a panic in
				// Receive: the same instance is restarted.
				tr.answers = append(tr.answers, fmt.Sprintf("publish %d: panicked: %v; restart", n, r))
				tr.s.handleRestarting()
			}
		}()
		tr.s.handlePublish(p)
	}()
	tr.s.cfg.beforeStep = nil
}

func (tr *ledgerTrace) stop() {
	if !tr.stopped {
		tr.stopped = true
		tr.s.handleStopped()
	}
}

// flush prints the answers since the last command, then the state.
func (tr *ledgerTrace) flush() string {
	var b strings.Builder
	for _, a := range tr.answers {
		b.WriteString(a + "\n")
	}
	tr.answers = nil
	s := tr.s
	if tr.stopped {
		fmt.Fprintf(&b, "stopped; log closed %t\n", tr.log.isClosed())
		return b.String()
	}
	fmt.Fprintf(&b, "next %d delivered %d log %d", s.next, s.delivered, tr.log.appended())
	if s.ledger.inHand != nil {
		fmt.Fprintf(&b, " in hand %d", tr.numbers[s.ledger.inHand.p])
	}
	if len(s.ledger.syncing) > 0 {
		b.WriteString(" syncing")
		for _, pe := range s.ledger.syncing {
			fmt.Fprintf(&b, " %d", tr.numbers[pe.p])
		}
	}
	b.WriteString("\n")
	var ids []uint64
	for id := range s.producers.byID {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		ps := s.producers.byID[id].Value.(*producerState)
		fmt.Fprintf(&b, "  producer %d: last %d remembered %d\n", id, ps.last, ps.remembered)
	}
	return b.String()
}

func resultString(r PublishResult) string {
	if r.Err != nil {
		return "error: " + r.Err.Error()
	}
	s := fmt.Sprintf("ok base %d", r.Base)
	if r.Durable {
		s += " durable"
	}
	if r.Duplicate {
		s += " duplicate"
	}
	return s
}
