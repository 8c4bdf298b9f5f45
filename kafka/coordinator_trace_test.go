package kafka

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestCoordinatorTrace runs testdata/coordinator_*.txt against the group
// coordinator, its handlers called directly, in a synctest bubble whose
// clock moves only by wait (the expiry ticker is not started: wait runs
// its expire). Each command prints the answers that came since the last
// one (a JoinGroup or SyncGroup may wait for other members), then the
// group. Regenerate with -rewrite; only commit the changes if you
// understand what caused them.
//
// Requests are named (as=NAME) so their answers can be told apart;
// member ids are the coordinator's, felix-CONN-N.
//
//	join as=NAME [conn=N] [member=ID] [instance=I] [session=D] [rebalance=D] [type=T] protocols=(P:META,...)
//	sync as=NAME member=ID gen=N [instance=I] [assign=(ID:DATA,...)]
//	heartbeat member=ID gen=N [instance=I]
//	leave members=(ID,...)
//	leave instance=I [member=ID]        a static member's LeaveGroup (v3+)
//	commit [member=ID] gen=N [instance=I]  the coordinator's check of an OffsetCommit
//	wait D                              time passes; expire runs
func TestCoordinatorTrace(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		synctest.Test(t, func(t *testing.T) {
			tr := &coordTrace{co: &coordinator{}, waiting: make(map[string]waitingAnswer)}
			tr.co.mu.groups = make(map[groupKey]*group)
			tr.co.offsets.init()
			datadriven.RunTest(t, path, tr.run)
		})
	})
}

var traceGroup = groupKey{tenant: "t", group: "g"}

type coordTrace struct {
	co      *coordinator
	waiting map[string]waitingAnswer // by request name
}

type waitingAnswer struct {
	p    *pending
	resp kmsg.Response
}

func (tr *coordTrace) run(t *testing.T, d *datadriven.TestData) string {
	var b strings.Builder
	switch d.Cmd {
	case "join":
		r := kmsg.NewPtrJoinGroupRequest()
		r.SetVersion(5)
		r.Group, r.ProtocolType = traceGroup.group, "consumer"
		r.SessionTimeoutMillis, r.RebalanceTimeoutMillis = 10_000, 0
		conn := uint64(1)
		d.MaybeScanArgs(t, "conn", &conn)
		d.MaybeScanArgs(t, "member", &r.MemberID)
		d.MaybeScanArgs(t, "type", &r.ProtocolType)
		r.InstanceID = instanceArg(t, d)
		r.SessionTimeoutMillis = millisArg(t, d, "session", r.SessionTimeoutMillis)
		r.RebalanceTimeoutMillis = millisArg(t, d, "rebalance", r.RebalanceTimeoutMillis)
		if a, ok := d.Arg("protocols"); ok {
			for _, v := range a.Vals {
				name, meta, _ := strings.Cut(v, ":")
				p := kmsg.NewJoinGroupRequestProtocol()
				p.Name, p.Metadata = name, []byte(meta)
				r.Protocols = append(r.Protocols, p)
			}
		}
		tr.expect(t, d, tr.co.join(traceGroup, 0, r, joiner{conn: conn}), r.ResponseKind())
	case "sync":
		r := kmsg.NewPtrSyncGroupRequest()
		r.SetVersion(3)
		r.Group = traceGroup.group
		d.ScanArgs(t, "member", &r.MemberID)
		d.ScanArgs(t, "gen", &r.Generation)
		r.InstanceID = instanceArg(t, d)
		if a, ok := d.Arg("assign"); ok {
			for _, v := range a.Vals {
				id, data, _ := strings.Cut(v, ":")
				ga := kmsg.NewSyncGroupRequestGroupAssignment()
				ga.MemberID, ga.MemberAssignment = id, []byte(data)
				r.GroupAssignment = append(r.GroupAssignment, ga)
			}
		}
		tr.expect(t, d, tr.co.sync(traceGroup, 0, r), r.ResponseKind())
	case "heartbeat":
		r := kmsg.NewPtrHeartbeatRequest()
		d.ScanArgs(t, "member", &r.MemberID)
		d.ScanArgs(t, "gen", &r.Generation)
		r.InstanceID = instanceArg(t, d)
		fmt.Fprintf(&b, "heartbeat: %s\n", codeName(tr.co.heartbeat(traceGroup, r)))
	case "leave":
		if inst := instanceArg(t, d); inst != nil {
			l := leaving{instance: inst}
			d.MaybeScanArgs(t, "member", &l.id)
			fmt.Fprintf(&b, "leave instance %s: %s\n", *inst, codeName(tr.co.leave(traceGroup, []leaving{l})[0]))
			break
		}
		a, _ := d.Arg("members")
		who := make([]leaving, len(a.Vals))
		for i, id := range a.Vals {
			who[i].id = id
		}
		for i, code := range tr.co.leave(traceGroup, who) {
			fmt.Fprintf(&b, "leave %s: %s\n", a.Vals[i], codeName(code))
		}
	case "commit":
		var member string
		var gen int32
		d.MaybeScanArgs(t, "member", &member)
		d.ScanArgs(t, "gen", &gen)
		fmt.Fprintf(&b, "commit: %s\n", codeName(tr.co.commitCode(traceGroup, member, instanceArg(t, d), gen)))
	case "wait":
		dur, err := time.ParseDuration(d.CmdArgs[0].Key)
		if err != nil {
			d.Fatalf(t, "wait: %v", err)
		}
		time.Sleep(dur)
		tr.co.expire(time.Now())
	default:
		d.Fatalf(t, "unknown command %q", d.Cmd)
	}
	b.WriteString(tr.answers(t))
	b.WriteString(tr.state())
	return b.String()
}

// expect keeps a request's answer to print once it comes.
func (tr *coordTrace) expect(t *testing.T, d *datadriven.TestData, p *pending, resp kmsg.Response) {
	var name string
	d.ScanArgs(t, "as", &name)
	if _, dup := tr.waiting[name]; dup {
		d.Fatalf(t, "request %s is still waiting", name)
	}
	tr.waiting[name] = waitingAnswer{p, resp}
}

// answers prints the requests answered since the last command, by name.
func (tr *coordTrace) answers(t *testing.T) string {
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(tr.waiting)) {
		w := tr.waiting[name]
		select {
		case <-w.p.done:
		default:
			continue
		}
		delete(tr.waiting, name)
		body := w.p.frame[8:] // the size and the correlation id
		if w.resp.IsFlexible() {
			body = body[1:] // the header's tags
		}
		if err := w.resp.ReadFrom(body); err != nil {
			t.Fatalf("decode the answer to %s: %v", name, err)
		}
		switch r := w.resp.(type) {
		case *kmsg.JoinGroupResponse:
			if r.ErrorCode != 0 {
				fmt.Fprintf(&b, "%s: join %s\n", name, codeName(r.ErrorCode))
				continue
			}
			fmt.Fprintf(&b, "%s: joined as %s, generation %d, leader %s, protocol %s", name, r.MemberID, r.Generation, r.LeaderID, *r.Protocol)
			if len(r.Members) > 0 {
				var ms []string
				for _, m := range r.Members {
					ms = append(ms, fmt.Sprintf("%s:%s", m.MemberID, m.ProtocolMetadata))
				}
				slices.Sort(ms)
				fmt.Fprintf(&b, ", members %v", ms)
			}
			b.WriteString("\n")
		case *kmsg.SyncGroupResponse:
			if r.ErrorCode != 0 {
				fmt.Fprintf(&b, "%s: sync %s\n", name, codeName(r.ErrorCode))
				continue
			}
			fmt.Fprintf(&b, "%s: synced, assignment %q\n", name, r.MemberAssignment)
		}
	}
	return b.String()
}

// state prints the group and the requests still waiting.
func (tr *coordTrace) state() string {
	g := tr.co.mu.groups[traceGroup]
	if g == nil {
		return "no group\n"
	}
	var b strings.Builder
	states := map[groupState]string{groupEmpty: "empty", groupPreparing: "preparing", groupCompleting: "completing", groupStable: "stable"}
	fmt.Fprintf(&b, "%s generation %d", states[g.state], g.generation)
	if g.leader != "" {
		fmt.Fprintf(&b, " leader %s protocol %s", g.leader, g.protocol)
	}
	b.WriteString("\n")
	for _, id := range slices.Sorted(maps.Keys(g.members)) {
		m := g.members[id]
		fmt.Fprintf(&b, "  %s", id)
		if m.instance != nil {
			fmt.Fprintf(&b, " instance %s", *m.instance)
		}
		if m.join != nil {
			b.WriteString(" waiting in join")
		}
		if m.sync != nil {
			b.WriteString(" waiting in sync")
		}
		b.WriteString("\n")
	}
	if n := len(tr.waiting); n > 0 {
		fmt.Fprintf(&b, "unanswered: %v\n", slices.Sorted(maps.Keys(tr.waiting)))
	}
	return b.String()
}

func codeName(code int16) string {
	if code == 0 {
		return "ok"
	}
	if err := kerr.ErrorForCode(code); err != nil {
		return err.(*kerr.Error).Message
	}
	return fmt.Sprint(code)
}

// instanceArg is the command's instance=I, or nil.
func instanceArg(t *testing.T, d *datadriven.TestData) *string {
	var inst string
	if !d.MaybeScanArgs(t, "instance", &inst) {
		return nil
	}
	return &inst
}

func millisArg(t *testing.T, d *datadriven.TestData, key string, def int32) int32 {
	var s string
	if !d.MaybeScanArgs(t, key, &s) {
		return def
	}
	dur, err := time.ParseDuration(s)
	if err != nil {
		d.Fatalf(t, "%s=%s: %v", key, s, err)
	}
	return int32(dur.Milliseconds())
}
