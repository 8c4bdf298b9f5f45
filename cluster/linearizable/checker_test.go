package linearizable_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/getfelix/felix-go/client"
)

// The checks against hand-made histories: each passes a correct one and
// flags the same one deliberately corrupted. Pure and fast: no processes.

const checkTimeout = 10 * time.Second

// html is where a check of history name writes its visualization.
func html(t *testing.T, name string) string { return filepath.Join(t.TempDir(), name+".html") }

// ms is a history time, in milliseconds.
func ms(n int64) int64 { return n * int64(time.Millisecond) }

// casOp and readOp build operations of a compare-and-set history.
func casOp(client int, expected uint64, value string, out logOutput, call, ret int64) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Input: logInput{kind: opCAS, expected: expected, value: value, via: "cluster"},
		Output: out, Call: call, Return: ret}
}

func readOp(lt *logTable, client int, values []string, call, ret int64) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Input: logInput{kind: opRead, via: "cluster"},
		Output: logOutput{records: lt.log(values), length: uint64(len(values))}, Call: call, Return: ret}
}

func writtenAt(o uint64) logOutput { return logOutput{outcome: written, offset: o} }
func refusedAt(t uint64) logOutput { return logOutput{outcome: refused, tail: t} }

// goodCAS is a linearizable history: two writers race for offset 0, the
// loser is told the tail is 1; a write of unknown outcome (it did land)
// and reads that see each step.
func goodCAS(lt *logTable) []porcupine.Operation {
	return closePending([]porcupine.Operation{
		casOp(0, 0, "a", writtenAt(0), ms(0), ms(10)),
		casOp(1, 0, "b", refusedAt(1), ms(2), ms(12)),
		readOp(lt, 2, []string{"a"}, ms(13), ms(14)),
		casOp(1, 1, "c", logOutput{outcome: unknown}, ms(15), pendingReturn),
		casOp(0, 1, "d", refusedAt(2), ms(16), ms(20)),
		readOp(lt, 2, []string{"a", "c"}, ms(21), ms(22)),
	})
}

func TestCheckerAcceptsLinearizableHistory(t *testing.T) {
	lt := newLogTable()
	ops := goodCAS(lt)
	if res, err := linearizable(lt, ops, checkTimeout, html(t, "good")); res != porcupine.Ok {
		t.Fatalf("a linearizable history: %s (%v), want Ok", res, err)
	}
	if found := staleReads(casShowsAndReads(ops)); len(found) != 0 {
		t.Errorf("a linearizable history has stale reads: %v", found)
	}
}

// TestCheckerFlagsWrongRefusalTail: the smallest history, a
// refusal naming a tail (10) that a read begun after it does not reach
// (9 records): the written record behind the refusal was not committed.
func TestCheckerFlagsWrongRefusalTail(t *testing.T) {
	lt := newLogTable()
	var values []string
	var ops []porcupine.Operation
	for i := range 9 {
		v := fmt.Sprint("v", i)
		values = append(values, v)
		ops = append(ops, casOp(0, uint64(i), v, writtenAt(uint64(i)), ms(int64(10*i)), ms(int64(10*i+5))))
	}
	ops = append(ops,
		casOp(0, 9, "x", writtenAt(9), ms(1627), ms(1647)),
		casOp(1, 9, "y", refusedAt(10), ms(1631), ms(1632)),
		readOp(lt, 2, values, ms(1639), ms(1640)), // 9 records, after the refusal
	)
	path := html(t, "wrong-refusal-tail")
	res, err := linearizable(lt, ops, checkTimeout, path)
	if res != porcupine.Illegal {
		t.Fatalf("a refusal with a tail no later read reaches: %s, want Illegal", res)
	}
	if _, serr := os.Stat(path); serr != nil {
		t.Errorf("no visualization of the illegal history (%v): %v", err, serr)
	}
	found := staleReads(casShowsAndReads(ops))
	if len(found) != 1 || !strings.Contains(found[0], "refused, tail 10") {
		t.Errorf("stale reads = %q, want the read after the refusal, naming it", found)
	}

	// The same refusal with the tail the log had (9) and the read after
	// the write returned (10 records): linearizable.
	ops[len(ops)-2] = casOp(1, 8, "y", refusedAt(9), ms(1631), ms(1632))
	ops[len(ops)-1] = readOp(lt, 2, append(values, "x"), ms(1648), ms(1649))
	if res, err := linearizable(lt, ops, checkTimeout, html(t, "right-refusal-tail")); res != porcupine.Ok {
		t.Errorf("the corrected history: %s (%v), want Ok", res, err)
	}
}

// TestCheckerFlagsStaleRead: a read that begins after a write was
// acknowledged and does not see it.
func TestCheckerFlagsStaleRead(t *testing.T) {
	lt := newLogTable()
	ops := closePending([]porcupine.Operation{
		casOp(0, 0, "a", writtenAt(0), ms(0), ms(10)),
		casOp(0, 1, "b", writtenAt(1), ms(11), ms(20)),
		readOp(lt, 1, []string{"a"}, ms(21), ms(22)), // b was acknowledged at 20
	})
	if res, _ := linearizable(lt, ops, checkTimeout, html(t, "stale-read")); res != porcupine.Illegal {
		t.Errorf("a read missing a write acknowledged before it began: %s, want Illegal", res)
	}
	if found := staleReads(casShowsAndReads(ops)); len(found) != 1 {
		t.Errorf("stale reads = %q, want the one read", found)
	}

	// The stale-read workload's form: acknowledged offsets and reads'
	// committed ends. A read concurrent with the ack (begun at its
	// return, the intervals are closed) may miss it.
	acks := []shown{{ret: ms(10), floor: 1, what: "w0-0"}, {ret: ms(20), floor: 2, what: "w0-1"}}
	reads := []seen{{call: ms(20), length: 1, what: "read via node-1"}, {call: ms(21), length: 2, what: "read via cluster"}}
	if found := staleReads(acks, reads); len(found) != 0 {
		t.Errorf("reads that saw every ack done before them: %q", found)
	}
	reads = append(reads, seen{call: ms(25), length: 1, what: "read via node-2"})
	found := staleReads(acks, reads)
	if len(found) != 1 || !strings.Contains(found[0], "node-2") || !strings.Contains(found[0], "1 missing") {
		t.Errorf("stale reads = %q, want node-2's read, 1 record missing", found)
	}
	if n, worst := staleCount(acks, reads); n != 1 || worst != 1 {
		t.Errorf("staleCount = %d, %d missing at most; want 1, 1", n, worst)
	}
}

// TestCheckerFlagsDroppedAcknowledgedRecord: an acknowledged record
// missing from the final log, and a history whose read lost a write.
func TestCheckerFlagsDroppedAcknowledgedRecord(t *testing.T) {
	log := records("a", "b", "c")
	acked := map[string]uint64{"a": 0, "b": 1, "c": 2}
	if found := lostAcks(log, acked); len(found) != 0 {
		t.Fatalf("nothing lost, but lostAcks = %q", found)
	}
	dropped := renumber(append(records("a"), log[2:]...)) // b dropped, c moved up
	if found := lostAcks(dropped, acked); len(found) != 2 {
		t.Errorf("b dropped (and c moved to 1): lostAcks = %q, want both", found)
	}
	if found := lostAcks(log[:2], acked); len(found) != 1 || !strings.Contains(found[0], `"c" acknowledged at 2`) {
		t.Errorf("c cut off the end: lostAcks = %q", found)
	}

	lt := newLogTable()
	ops := closePending([]porcupine.Operation{
		casOp(0, 0, "a", writtenAt(0), ms(0), ms(10)),
		casOp(0, 1, "b", writtenAt(1), ms(11), ms(20)),
		casOp(1, 2, "c", writtenAt(2), ms(21), ms(30)),
		readOp(lt, 2, []string{"a", "c"}, ms(31), ms(32)),
	})
	if res, _ := linearizable(lt, ops, checkTimeout, html(t, "dropped-ack")); res != porcupine.Illegal {
		t.Errorf("a read without the acknowledged b: %s, want Illegal", res)
	}
}

// TestCheckerFlagsDuplicatesGapsAndDivergence: the final logs' checks.
func TestCheckerFlagsDuplicatesGapsAndDivergence(t *testing.T) {
	log := records("i-0", "p-0", "p-0", "i-1")
	copies := map[string]int{"i-0": 1, "i-1": 1, "p-0": 2} // p-0: one unknown attempt, then acked
	if found := duplicates(log, copies); len(found) != 0 {
		t.Errorf("allowed copies flagged: %q", found)
	}
	copies["p-0"] = 1 // acked on its first attempt: one copy only
	if found := duplicates(log, copies); len(found) != 1 || !strings.Contains(found[0], `"p-0" is in the log 2 times`) {
		t.Errorf("duplicates = %q, want p-0's second copy", found)
	}
	if found := duplicates(records("i-0", "i-0"), copies); len(found) != 1 {
		t.Errorf("an idempotent payload twice: duplicates = %q", found)
	}
	if found := duplicates(records("ghost"), copies); len(found) != 1 || !strings.Contains(found[0], "never sent") {
		t.Errorf("a payload nobody sent: duplicates = %q", found)
	}

	gapped := records("a", "b")
	gapped[1].Offset = 2
	if found := offsetGaps("node-1", gapped); len(found) != 1 {
		t.Errorf("offsets 0, 2: offsetGaps = %q", found)
	}
	same := map[string][]client.Record{"node-1": records("a", "b"), "node-2": records("a", "b")}
	if found := replicaDiffs(same); len(found) != 0 {
		t.Errorf("identical replicas: %q", found)
	}
	same["node-3"] = records("a", "x")
	same["node-2"] = records("a")
	if found := replicaDiffs(same); len(found) != 2 {
		t.Errorf("node-2 short, node-3 different: replicaDiffs = %q, want both", found)
	}
}

// records is a log of payloads at offsets 0, 1, ...
func records(payloads ...string) []client.Record {
	out := make([]client.Record, len(payloads))
	for i, p := range payloads {
		out[i] = client.Record{Offset: uint64(i), Payload: []byte(p)}
	}
	return out
}

func renumber(log []client.Record) []client.Record {
	for i := range log {
		log[i].Offset = uint64(i)
	}
	return log
}

// TestCheckerFlagsRefusedWriteInLog: a value whose write was refused
// turns up in the final log (read after every operation); an unknown
// write's value may, or may not.
func TestCheckerFlagsRefusedWriteInLog(t *testing.T) {
	lt := newLogTable()
	ops := []porcupine.Operation{
		casOp(0, 0, "a", writtenAt(0), ms(0), ms(10)),
		casOp(1, 1, "b", refusedAt(2), ms(11), ms(20)),
		casOp(2, 1, "c", logOutput{outcome: unknown}, ms(12), pendingReturn),
		readOp(lt, 3, []string{"a", "b"}, ms(30), ms(30)),
	}
	if res, _ := linearizable(lt, closePending(ops), checkTimeout, html(t, "refused-in-log")); res != porcupine.Illegal {
		t.Errorf("the refused b in the final log: %s, want Illegal", res)
	}
	// c landed before b was refused, or never did.
	for _, final := range [][]string{{"a", "c"}, {"a"}} {
		n := uint64(len(final))
		ops[1] = casOp(1, n-1, "b", refusedAt(n), ms(11), ms(20))
		ops[3] = readOp(lt, 3, final, ms(30), ms(30))
		if res, err := linearizable(lt, closePending(ops), checkTimeout, html(t, "unknown-in-log")); res != porcupine.Ok {
			t.Errorf("final log %v: %s (%v), want Ok", final, res, err)
		}
	}
}
