package member

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestLivenessTrace drives the beat loop's liveness state machine
// (livenessState) through testdata/liveness.txt:
//
//	hear <node>... at=<duration>   something arrived from each node then
//	check at=<duration> [members=<a,b>]
//	                               the beat loop's check; it prints the
//	                               members told gone, and each one's state
//
// Times are durations since the trace's start.
func TestLivenessTrace(t *testing.T) {
	tr := &livenessTrace{heard: map[string]time.Time{}}
	datadriven.RunTest(t, "testdata/liveness.txt", tr.run)
}

type livenessTrace struct {
	base  time.Time
	heard map[string]time.Time
	state livenessState
}

func (tr *livenessTrace) at(t *testing.T, d *datadriven.TestData) time.Time {
	var s string
	d.ScanArgs(t, "at", &s)
	dur, err := time.ParseDuration(s)
	if err != nil {
		t.Fatal(err)
	}
	return tr.base.Add(dur)
}

func (tr *livenessTrace) run(t *testing.T, d *datadriven.TestData) string {
	switch d.Cmd {
	case "hear":
		now := tr.at(t, d)
		for _, a := range d.CmdArgs {
			if a.Key != "at" {
				tr.heard[a.Key] = now
			}
		}
		return ""
	case "check":
		now := tr.at(t, d)
		var members []string
		if d.HasArg("members") {
			var list string
			d.ScanArgs(t, "members", &list)
			members = strings.Split(list, ",")
		}
		gone := tr.state.check(now, members, func(node string) time.Time { return tr.heard[node] })
		var b strings.Builder
		fmt.Fprintf(&b, "gone: %s\n", orNone(gone))
		nodes := make([]string, 0, len(tr.state.peers))
		for n := range tr.state.peers {
			nodes = append(nodes, n)
		}
		slices.Sort(nodes)
		for _, n := range nodes {
			state := "live"
			if tr.state.peers[n].gone {
				state = "gone"
			}
			fmt.Fprintf(&b, "%s: %s\n", n, state)
		}
		return b.String()
	}
	t.Fatalf("unknown command %q", d.Cmd)
	return ""
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, " ")
}

// TestMemberGoneReachesTheGroupsThatNameIt: the member's loss is pushed
// to exactly the open replicas whose group names it, once each, and to
// none that closed or never named it.
func TestMemberGoneReachesTheGroupsThatNameIt(t *testing.T) {
	var w replicaWatches
	told := map[string][]string{}
	watch := func(name string, nodes ...string) *replicaWatch {
		rw := &replicaWatch{gone: func(node string) { told[name] = append(told[name], node) }}
		rw.nodes.Store(&nodes)
		w.add(rw)
		return rw
	}
	watch("s0", "a", "b", "c")
	watch("s1", "a", "c", "d")
	closed := watch("s2", "b", "c", "d")
	moved := watch("s3", "a", "b", "d")
	watch("s4", "a", "b", "c")
	w.remove(closed)
	// s3's set changed: a move took its replica off b.
	nodes := []string{"a", "d", "e"}
	moved.nodes.Store(&nodes)
	if n := w.memberGone("b"); n != 2 {
		t.Errorf("memberGone(b) told %d replicas, want 2", n)
	}
	want := map[string][]string{"s0": {"b"}, "s4": {"b"}}
	if fmt.Sprint(told) != fmt.Sprint(want) {
		t.Errorf("told %v, want %v", told, want)
	}
}
