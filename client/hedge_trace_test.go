package client

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestHedgeTrace runs testdata/hedge_*.txt against the hedge's rule
// (silence): a watch of an owner's connection, started hedgeAfter into a
// call, asks the owner and the other members who owns the shard on every
// tick. Each command prints who was asked, and whether the connection is
// abandoned now; an abandoned connection fails its calls with a
// *ConnectionLostError, and the trace shows what a call does with it:
// judge's verdict for a call safe to make again and for a plain publish
// (whose outcome is unknown), and whether an idempotent producer sends
// its batch again (outcomeUnknown). The rule itself does not look at the
// call: every routed call waiting on the connection fails alike. Regenerate with -rewrite; only commit the
// changes if you understand what caused them.
//
// Commands:
//
//	watch owner=A members=(B,C,...)   a watch of A, the other members known
//	tick                              hedgeEvery passes; the due questions go
//	answer from=X [names=Y] [err]     X answers; a member names owner Y
//	                                  (none, or an error: it names nobody)
func TestHedgeTrace(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		var (
			s       *silence
			members []string
			ended   bool // abandoned: the watch's run returned
		)
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if ended && d.Cmd != "watch" {
				d.Fatalf(t, "%s after the watch abandoned the connection", d.Cmd)
			}
			ended = false
			var b strings.Builder
			switch d.Cmd {
			case "watch":
				var owner string
				d.ScanArgs(t, "owner", &owner)
				members = nil
				if a, ok := d.Arg("members"); ok {
					members = a.Vals
				}
				s = newSilence(owner)
				b.WriteString(asked(s.toAsk(append([]string{owner}, members...))))
			case "tick":
				s.tick()
				b.WriteString(asked(s.toAsk(append([]string{s.owner}, members...))))
			case "answer":
				var from, names string
				d.ScanArgs(t, "from", &from)
				d.MaybeScanArgs(t, "names", &names)
				if d.HasArg("err") || names == s.owner {
					names = "" // as otherOwner: an error or the same owner names nobody else
				}
				s.answered(from, from == s.owner, names)
			default:
				d.Fatalf(t, "unknown command %q", d.Cmd)
			}
			fmt.Fprintf(&b, "t=%s unanswered %v", hedgeAfter+time.Duration(s.ticks)*hedgeEvery, unanswered(s))
			if len(s.moved) > 0 {
				fmt.Fprintf(&b, " moved %v", s.moved)
			}
			b.WriteString("\n")
			if from, to, ok := s.abandon(); ok {
				ended = true
				err := &ConnectionLostError{Cause: errors.New("abandoned")}
				var cc ClusterClient
				fmt.Fprintf(&b, "abandon: %s names %s\n", from, to)
				fmt.Fprintf(&b, "  a safe call (subscribe, group, lookup) %s\n", verdictString(cc.judge(err, true)))
				fmt.Fprintf(&b, "  a plain publish %s\n", verdictString(cc.judge(err, false)))
				if outcomeUnknown(err) {
					b.WriteString("  an idempotent producer sends the batch again with its sequence\n")
				}
			}
			return b.String()
		})
	})
}

func asked(owner bool, others []string) string {
	var who []string
	if owner {
		who = append(who, "owner")
	}
	who = append(who, others...)
	if len(who) == 0 {
		return "ask nobody\n"
	}
	return "ask " + strings.Join(who, " ") + "\n"
}

func unanswered(s *silence) []string {
	var others []string
	for addr := range s.pending {
		if addr != s.owner {
			others = append(others, addr)
		}
	}
	slices.Sort(others)
	if s.pending[s.owner] {
		return append([]string{fmt.Sprintf("owner(asked at tick %d)", s.ownerTick)}, others...)
	}
	return others
}

func verdictString(v verdict) string {
	switch v {
	case verdictDone:
		return "returns the error"
	case verdictFollow:
		return "follows the redirect"
	case verdictRetry:
		return "retries"
	case verdictReroute:
		return "returns the error and asks again who owns the shard next time"
	}
	return fmt.Sprintf("verdict(%d)", uint8(v))
}
