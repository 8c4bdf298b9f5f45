package streams

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/rs/zerolog"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/wire"
)

// TestReplicatedTrace runs testdata/replicated_*.txt against one
// replicated shard's Receive handlers, called directly, over a raft group
// the script plays (scriptReplica): what a leader answers to conditional
// and idempotent publishes while entries are in flight, and when reads
// are confirmed (ReadIndex, then the apply), refused (a follower), or
// served from a follower's own state. Each command prints the answers
// given since the last one (publishes and reads are numbered apart) and
// the shard's state after. Regenerate with -rewrite; only commit the
// changes if you understand what caused them.
//
// Commands:
//
//	open                                a follower of term 1, no leader known
//	lead term=N                         elected: its empty entry commits and applies
//	publish [expect=N] [id=P seq=N] values=(a,b,...)
//	commit [n=K]                        the next K entries (all) commit and apply
//	depose term=N                       a leader of term N replaced every uncommitted entry
//	entry term=N values=(a,...)         another leader's entry commits and applies
//	read [follower-lag=MS]              a reader asks to read
//	confirm [at=I]                      raft confirms the ReadIndexes asked so far
//	                                    (at their commit index, or at I)
//	contact ago=MS caught-up=B          a follower last heard from its leader MS ago
//	tick [n=K]                          K of the shard's raft ticks
//	stop                                the shard stops
func TestReplicatedTrace(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		if !strings.HasPrefix(pathBase(path), "replicated_") {
			t.Skip("not a replicated trace")
		}
		var tr *replicatedTrace
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd != "open" && tr == nil {
				d.Fatalf(t, "%s before open", d.Cmd)
			}
			switch d.Cmd {
			case "open":
				tr = openReplicatedTrace()
			case "lead":
				var term uint64
				d.ScanArgs(t, "term", &term)
				r := tr.r
				r.leader, r.term = true, term
				r.log = append(r.log, &fakeEntry{term: term})
				r.commit = len(r.log)
				tr.s.processReady()
			case "publish":
				tr.publish(t, d)
			case "commit":
				n := len(tr.r.log) - tr.r.commit
				d.MaybeScanArgs(t, "n", &n)
				tr.r.commit = min(len(tr.r.log), tr.r.commit+n)
				tr.s.processReady()
			case "depose":
				var term uint64
				d.ScanArgs(t, "term", &term)
				tr.r.depose(term)
				tr.s.processReady()
			case "entry":
				var term uint64
				d.ScanArgs(t, "term", &term)
				e := &fakeEntry{term: term}
				if a, ok := d.Arg("values"); ok {
					for _, v := range a.Vals {
						e.records = append(e.records, []byte(v))
					}
				}
				tr.r.log = append(tr.r.log, e)
				tr.r.commit = len(tr.r.log)
				tr.s.processReady()
			case "read":
				tr.read(t, d)
			case "confirm":
				var at uint64
				d.MaybeScanArgs(t, "at", &at)
				for _, rd := range tr.r.asked {
					if at > 0 {
						rd.index = at
					}
					tr.r.confirming = append(tr.r.confirming, rd)
				}
				tr.r.asked = nil
				tr.s.processReady()
			case "contact":
				var ago int
				d.ScanArgs(t, "ago", &ago)
				d.ScanArgs(t, "caught-up", &tr.r.caughtUp)
				tr.r.heard = time.Now().Add(-time.Duration(ago) * time.Millisecond)
			case "tick":
				n := 1
				d.MaybeScanArgs(t, "n", &n)
				for range n {
					tr.s.handleReplicaTick()
				}
			case "stop":
				tr.s.handleStopped()
				tr.stopped = true
			default:
				d.Fatalf(t, "unknown command %q", d.Cmd)
			}
			return tr.flush()
		})
	})
}

func pathBase(path string) string { return path[strings.LastIndexByte(path, '/')+1:] }

// scriptReplica is a raft group the trace plays, synchronously: entries
// get their index at the next Ready, commit when the script says, and
// ReadIndexes are confirmed at the commit index they were asked at.
type scriptReplica struct {
	leader              bool
	term                uint64
	log                 []*fakeEntry
	placed, commit      int
	applied             int
	next                uint64 // the offset the next applied record takes
	asked, confirming   []scriptRead
	heard               time.Time
	caughtUp            bool
	proposals, readIdxs int
}

type scriptRead struct{ id, index uint64 }

func (r *scriptReplica) Propose(records, _ [][]byte, stamp *Stamp) (Ticket, error) {
	if !r.leader {
		return nil, wire.NewError(wire.CodeNotLeader, "follower")
	}
	e := &fakeEntry{term: r.term, records: records, stamp: stamp}
	r.log = append(r.log, e)
	r.proposals++
	return func() (uint64, uint64, bool) {
		if !e.placed {
			return 0, 0, e.lost
		}
		return e.index, e.term, false
	}, nil
}

func (r *scriptReplica) ReadIndex(id uint64) {
	if r.leader {
		r.asked = append(r.asked, scriptRead{id: id, index: uint64(r.commit)})
	}
	r.readIdxs++
}

func (r *scriptReplica) LeaderContact() (time.Time, bool) { return r.heard, r.caughtUp }
func (r *scriptReplica) Tick()                            {}
func (r *scriptReplica) Quiet() bool                      { return false }
func (r *scriptReplica) MemberGone(string)                {}
func (r *scriptReplica) Removed() bool                    { return false }
func (r *scriptReplica) Restart() bool                    { return false }
func (r *scriptReplica) EnforceRetention(time.Time)       {}
func (r *scriptReplica) AppliedEnd() uint64               { return 0 }
func (r *scriptReplica) CompactableEnd() uint64           { return 0 }
func (r *scriptReplica) CopyingSegments() bool            { return false }
func (r *scriptReplica) Step([]byte) error                { return nil }
func (r *scriptReplica) Close()                           {}

func (r *scriptReplica) HasReady() bool {
	return r.placed < len(r.log) || r.applied < r.commit || len(r.confirming) > 0
}

func (r *scriptReplica) Ready(apply func(Applied), read func(id, index uint64)) error {
	for ; r.placed < len(r.log); r.placed++ {
		r.log[r.placed].placed, r.log[r.placed].index = true, uint64(r.placed+1)
	}
	for ; r.applied < r.commit; r.applied++ {
		e := r.log[r.applied]
		apply(Applied{Index: uint64(r.applied + 1), Term: e.term, Base: r.next, Stamp: e.stamp, Records: e.records})
		r.next += uint64(len(e.records))
	}
	for _, rd := range r.confirming {
		read(rd.id, rd.index)
	}
	r.confirming = nil
	return nil
}

func (r *scriptReplica) Role() Role {
	if r.leader {
		return Role{Leader: true, Term: r.term}
	}
	e := wire.NewError(wire.CodeNotLeader, "replicated shard is led by member m2 at 127.0.0.1:2")
	e.Owner = &wire.Owner{NodeID: "m2", Addr: "127.0.0.1:2", Generation: r.term}
	return Role{Term: r.term, NotLeader: e}
}

// depose makes a leader of term the group's: every uncommitted entry is
// replaced (lost, if it never had an index) and this replica follows.
func (r *scriptReplica) depose(term uint64) {
	for _, e := range r.log[r.commit:] {
		if !e.placed {
			e.lost = true
		}
	}
	r.log = r.log[:r.commit:r.commit]
	r.placed = min(r.placed, r.commit)
	r.leader, r.term = false, term
	r.asked = nil // raft drops a ReadIndex it had not confirmed
}

type replicatedTrace struct {
	s       *shard
	r       *scriptReplica
	stopped bool
	pubs    int
	reads   int
	answers []string
}

func openReplicatedTrace() *replicatedTrace {
	r := &scriptReplica{term: 1}
	s := newShard(testScope, 0, ShardConfig{RetentionInterval: time.Hour}, zerolog.Nop(), nil)
	s.log = newFakeLog(0)
	s.ref = &ShardRef{Mailbox: actors.NewMailbox(actors.MailboxConfig{Capacity: 8})}
	s.repl = &replicated{replica: r, inFlight: make(map[uint64]uint64)}
	return &replicatedTrace{s: s, r: r}
}

func (tr *replicatedTrace) publish(t *testing.T, d *datadriven.TestData) {
	tr.pubs++
	n := tr.pubs
	p := &Publish{Done: func(r PublishResult) {
		tr.answers = append(tr.answers, fmt.Sprintf("publish %d: %s", n, resultString(r)))
	}}
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
	tr.s.handlePublish(p)
}

func (tr *replicatedTrace) read(t *testing.T, d *datadriven.TestData) {
	tr.reads++
	n := tr.reads
	msg := &ConfirmRead{}
	var lag int
	d.MaybeScanArgs(t, "follower-lag", &lag)
	msg.FollowerMaxLag = time.Duration(lag) * time.Millisecond
	tr.s.handleConfirmRead(msg, func(res any) {
		switch r := res.(type) {
		case *ReadConfirmed:
			follower := ""
			if r.Follower {
				follower = " (follower)"
			}
			tr.answers = append(tr.answers, fmt.Sprintf("read %d: committed %d%s", n, r.Committed, follower))
		case error:
			tr.answers = append(tr.answers, fmt.Sprintf("read %d: error: %v", n, r))
		}
	})
}

// flush prints the answers since the last command, then the state.
func (tr *replicatedTrace) flush() string {
	var b strings.Builder
	for _, a := range tr.answers {
		b.WriteString(a + "\n")
	}
	tr.answers = nil
	if tr.stopped {
		b.WriteString("stopped\n")
		return b.String()
	}
	s, rd := tr.s, &tr.s.repl.reads
	role := "follower"
	if tr.r.leader {
		role = "leader"
	}
	fmt.Fprintf(&b, "%s term %d: next %d delivered %d applied index %d; proposed %d", role, tr.r.term, s.next, s.delivered, s.repl.appliedIndex, len(s.repl.proposed))
	refusals := 0
	for _, p := range s.repl.proposed {
		refusals += len(p.refusals)
	}
	if refusals > 0 {
		fmt.Fprintf(&b, " refusals waiting %d", refusals)
	}
	fmt.Fprintf(&b, "; ReadIndexes asked %d", tr.r.readIdxs)
	if n := rd.waiting(); n > 0 {
		fmt.Fprintf(&b, "; reads queued %d", len(rd.queued))
		if rd.asked != nil {
			fmt.Fprintf(&b, " asked %d", len(rd.asked.waiters))
		}
		for _, c := range rd.confirmed {
			fmt.Fprintf(&b, " confirmed at %d: %d", c.index, len(c.waiters))
		}
	}
	b.WriteString("\n")
	return b.String()
}
