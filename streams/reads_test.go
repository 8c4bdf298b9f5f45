package streams

import (
	"errors"
	"testing"

	"github.com/getfelix/felix-go/wire"
)

// TestReadsWaitingAreBounded: a leader holds at most maxWaitingReads reads
// for their confirmation; the next is refused overloaded at once, and a
// stop answers every one held.
func TestReadsWaitingAreBounded(t *testing.T) {
	tr := openReplicatedTrace()
	tr.r.leader, tr.r.term = true, 1
	tr.r.log = append(tr.r.log, &fakeEntry{term: 1})
	tr.r.commit = 1
	tr.s.processReady()
	answers := make(map[string]int)
	answer := func(res any) {
		switch r := res.(type) {
		case error:
			var we *wire.Error
			if errors.As(r, &we) {
				answers[we.Code.String()]++
			}
		default:
			answers["confirmed"]++
		}
	}
	for range maxWaitingReads {
		tr.s.handleConfirmRead(&ConfirmRead{}, answer)
	}
	if len(answers) != 0 || tr.r.readIdxs != 1 {
		t.Fatalf("%d reads waiting: answered %v, %d ReadIndexes asked; want none answered, one asked", maxWaitingReads, answers, tr.r.readIdxs)
	}
	tr.s.handleConfirmRead(&ConfirmRead{}, answer)
	if answers[wire.CodeOverloaded.String()] != 1 {
		t.Fatalf("one read past the bound: answered %v; want it refused overloaded", answers)
	}
	tr.s.handleStopped()
	if got := answers[wire.CodeShardUnavailable.String()]; got != maxWaitingReads {
		t.Fatalf("the stop answered %d reads shard_unavailable, want all %d held", got, maxWaitingReads)
	}
}
