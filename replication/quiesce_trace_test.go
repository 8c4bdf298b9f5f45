package replication

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// TestQuiesceDecisions runs testdata/quiesce.txt: when a leader may take
// its group quiet (quiesceDecision), and when a follower that stepped the
// quiesce heartbeat agrees to (followerAgrees). Regenerate with -rewrite;
// only commit the changes if you understand what caused them.
//
// Commands:
//
//	decide [follower] last=N commit=N applied=N [awaiting=N] [reads=N] [transferring] [ready]
//	<id> match=N [probe] [inactive] [gone]   one line per other replica
//	agree state=follower|candidate|leader lead=N term=N commit=N last=N from=N m-term=N m-commit=N
func TestQuiesceDecisions(t *testing.T) {
	datadriven.RunTest(t, "testdata/quiesce.txt", func(t *testing.T, d *datadriven.TestData) string {
		switch d.Cmd {
		case "decide":
			v := groupView{leader: !d.HasArg("follower"), transferring: d.HasArg("transferring"), hasReady: d.HasArg("ready")}
			d.ScanArgs(t, "last", &v.lastIndex)
			d.ScanArgs(t, "commit", &v.commit)
			d.ScanArgs(t, "applied", &v.applied)
			d.MaybeScanArgs(t, "awaiting", &v.awaiting)
			d.MaybeScanArgs(t, "reads", &v.reads)
			for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
				if line != "" {
					v.peers = append(v.peers, parsePeerView(t, line))
				}
			}
			if ok, why := quiesceDecision(v); !ok {
				return "awake: " + why + "\n"
			}
			return "quiesce\n"
		case "agree":
			var st raft.BasicStatus
			var state string
			var last uint64
			var m raftpb.Message
			d.ScanArgs(t, "state", &state)
			d.ScanArgs(t, "lead", &st.Lead)
			d.ScanArgs(t, "term", &st.Term)
			d.ScanArgs(t, "commit", &st.Commit)
			d.ScanArgs(t, "last", &last)
			d.ScanArgs(t, "from", &m.From)
			d.ScanArgs(t, "m-term", &m.Term)
			d.ScanArgs(t, "m-commit", &m.Commit)
			st.RaftState = map[string]raft.StateType{"follower": raft.StateFollower, "candidate": raft.StateCandidate, "leader": raft.StateLeader}[state]
			if followerAgrees(st, last, m) {
				return "quiet\n"
			}
			return "awake\n"
		}
		d.Fatalf(t, "unknown command %q", d.Cmd)
		return ""
	})
}

func parsePeerView(t *testing.T, line string) peerView {
	t.Helper()
	fields := strings.Fields(line)
	id, err := strconv.ParseUint(fields[0], 10, 64)
	if err != nil {
		t.Fatalf("peer line %q: %v", line, err)
	}
	p := peerView{id: id, replicating: true, recentActive: true}
	for _, f := range fields[1:] {
		switch {
		case strings.HasPrefix(f, "match="):
			if _, err := fmt.Sscanf(f, "match=%d", &p.match); err != nil {
				t.Fatalf("peer line %q: %v", line, err)
			}
		case f == "probe":
			p.replicating = false
		case f == "inactive":
			p.recentActive = false
		case f == "gone":
			p.gone = true
		default:
			t.Fatalf("peer line %q: unknown field %q", line, f)
		}
	}
	return p
}
