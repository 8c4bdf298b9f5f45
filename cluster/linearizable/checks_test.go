package linearizable_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/getfelix/felix-go/client"
)

// The checks. Each finder is pure and returns what it found wrong, one
// line each, so the corrupted-history tests can show it finds it.

// shownFindings is how many of a check's findings a failure prints; the
// count is always given.
const shownFindings = 10

// report fails t with a check's findings, when there are any.
func report(t *testing.T, check string, found []string) {
	t.Helper()
	if len(found) == 0 {
		return
	}
	t.Errorf("%s: %d found; the first:\n  %s", check, len(found), strings.Join(found[:min(len(found), shownFindings)], "\n  "))
}

// linearizable checks ops against the log model, giving porcupine at most
// timeout. Anything but Ok (Illegal, or Unknown when the time ran out)
// writes porcupine's visualization to html, notes (the faults) shown in
// it; the error names it.
func linearizable(lt *logTable, ops []porcupine.Operation, timeout time.Duration, html string, notes ...porcupine.Annotation) (porcupine.CheckResult, error) {
	return checkModel(logModel(lt), ops, timeout, html, notes...)
}

// checkModel is linearizable for any model.
func checkModel(model porcupine.Model, ops []porcupine.Operation, timeout time.Duration, html string, notes ...porcupine.Annotation) (porcupine.CheckResult, error) {
	res, info := porcupine.CheckOperationsVerbose(model, ops, timeout)
	if res == porcupine.Ok {
		return res, nil
	}
	info.AddAnnotations(notes)
	if err := porcupine.VisualizePath(model, info, html); err != nil {
		return res, fmt.Errorf("%d operations: %s; the visualization: %w", len(ops), res, err)
	}
	return res, fmt.Errorf("%d operations: %s (porcupine, within %s); the visualization: %s", len(ops), res, timeout, html)
}

// keptFile is a path for name in a folder kept after the test (not
// t.TempDir, which is removed when the test ends, pass or fail).
func keptFile(t *testing.T, name string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "felix-linearizable-")
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, name)
}

// shown is what an operation that completed at ret showed of the log:
// that it had at least floor records.
type shown struct {
	ret   int64
	floor uint64
	what  string
}

// seen is a read that began at call and saw length records.
type seen struct {
	call   int64
	length uint64
	via    string // where it went, when the check groups by it
	what   string
}

// staleReads finds each read that saw fewer records than an operation
// that had completed before the read began had shown. A log only grows,
// so in any linearization that read comes after the operation and sees at
// least as much. Operations overlapping the read (ret == call included:
// the intervals are closed) are not compared.
func staleReads(shows []shown, reads []seen) []string {
	var found []string
	eachStale(shows, reads, func(r seen, best shown) {
		found = append(found, fmt.Sprintf("%s at %s saw %d records; %s, done at %s, showed %d (%d missing)",
			r.what, at(r.call), r.length, best.what, at(best.ret), best.floor, best.floor-r.length))
	})
	return found
}

// staleCount is how many of reads are stale, and the most records one
// missed.
func staleCount(shows []shown, reads []seen) (n int, worst uint64) {
	eachStale(shows, reads, func(r seen, best shown) {
		n++
		worst = max(worst, best.floor-r.length)
	})
	return n, worst
}

// eachStale calls found with each stale read and the operation it missed
// most of.
func eachStale(shows []shown, reads []seen, found func(seen, shown)) {
	shows = slices.Clone(shows)
	reads = slices.Clone(reads)
	sort.Slice(shows, func(i, j int) bool { return shows[i].ret < shows[j].ret })
	sort.Slice(reads, func(i, j int) bool { return reads[i].call < reads[j].call })
	var best shown
	next := 0
	for _, r := range reads {
		for next < len(shows) && shows[next].ret < r.call {
			if shows[next].floor > best.floor {
				best = shows[next]
			}
			next++
		}
		if r.length < best.floor {
			found(r, best)
		}
	}
}

// at formats a history time.
func at(ns int64) string { return time.Duration(ns).Round(time.Microsecond).String() }

// casShowsAndReads is what a compare-and-set history's answered
// operations showed of the log: a write at o that the log had o+1
// records, a refusal with tail t that it had t, a read what it returned.
func casShowsAndReads(ops []porcupine.Operation) ([]shown, []seen) {
	var shows []shown
	var reads []seen
	for _, op := range ops {
		in, out := op.Input.(logInput), op.Output.(logOutput)
		what := describeOperation(in, out)
		switch {
		case in.kind == opRead:
			shows = append(shows, shown{op.Return, out.length, what})
			reads = append(reads, seen{call: op.Call, length: out.length, via: in.via, what: what})
		case out.outcome == written:
			shows = append(shows, shown{op.Return, out.offset + 1, what})
		case out.outcome == refused:
			shows = append(shows, shown{op.Return, out.tail, what})
		}
	}
	return shows, reads
}

// offsetGaps finds records not at their place: record i has offset i.
func offsetGaps(node string, log []client.Record) []string {
	var found []string
	for i, r := range log {
		if r.Offset != uint64(i) {
			found = append(found, fmt.Sprintf("%s: record %d has offset %d", node, i, r.Offset))
		}
	}
	return found
}

// replicaDiffs finds where each replica's log differs from the first
// node's (in name order).
func replicaDiffs(logs map[string][]client.Record) []string {
	nodes := make([]string, 0, len(logs))
	for n := range logs {
		nodes = append(nodes, n)
	}
	slices.Sort(nodes)
	var found []string
	first := logs[nodes[0]]
	for _, n := range nodes[1:] {
		l := logs[n]
		if len(l) != len(first) {
			found = append(found, fmt.Sprintf("%s holds %d records, %s %d", n, len(l), nodes[0], len(first)))
		}
		for i := range min(len(l), len(first)) {
			if l[i].Offset != first[i].Offset || string(l[i].Payload) != string(first[i].Payload) {
				found = append(found, fmt.Sprintf("%s and %s differ at record %d: %d %q, %d %q",
					nodes[0], n, i, first[i].Offset, first[i].Payload, l[i].Offset, l[i].Payload))
				break
			}
		}
	}
	return found
}

// lostAcks finds each acknowledged payload that is not in the log at its
// acknowledged offset.
func lostAcks(log []client.Record, acked map[string]uint64) []string {
	var found []string
	for p, off := range acked {
		switch {
		case off >= uint64(len(log)):
			found = append(found, fmt.Sprintf("%q acknowledged at %d; the log has %d records", p, off, len(log)))
		case string(log[off].Payload) != p:
			found = append(found, fmt.Sprintf("%q acknowledged at %d; %q is there", p, off, log[off].Payload))
		}
	}
	slices.Sort(found)
	return found
}

// duplicates finds payloads in the log more often than copies allows, and
// payloads nobody sent (copies has no entry). copies is, per payload,
// how many times it may be in the log: 1 for an idempotent producer's
// and a compare-and-set's; for a plain producer's, its attempts that
// were acknowledged or whose outcome is unknown (a plain producer resends
// only after an unknown outcome, and each such attempt may have written
// it).
func duplicates(log []client.Record, copies map[string]int) []string {
	at := map[string][]uint64{}
	for _, r := range log {
		at[string(r.Payload)] = append(at[string(r.Payload)], r.Offset)
	}
	var found []string
	for p, offs := range at {
		allowed, sent := copies[p]
		switch {
		case !sent:
			found = append(found, fmt.Sprintf("%q at %v was never sent", p, offs))
		case len(offs) > allowed:
			found = append(found, fmt.Sprintf("%q is in the log %d times (at %v), at most %d allowed", p, len(offs), offs, allowed))
		}
	}
	slices.Sort(found)
	return found
}
