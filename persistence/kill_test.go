package persistence

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The kill -9 tests re-execute the test binary as a child that appends
// under FsyncOnCommit and prints a line each time a wait reports something
// on the device: "durable <base> <next>" for the batch [base, next), or, in
// a log of raft entries, "durable <index> <term>" for an entry, and
// "truncate <index> <term>" before it cuts the log at index and goes on in
// term. TestMain sends the child here.
const (
	childEnv     = "FELIX_PERSISTENCE_KILL_CHILD" // the log directory
	childRunEnv  = "FELIX_PERSISTENCE_KILL_RUN"   // the round, written into every record
	childModeEnv = "FELIX_PERSISTENCE_KILL_MODE"  // "entries" for a log of raft entries
)

func killConfig() Config {
	return Config{SegmentBytes: 16 << 10, IndexIntervalBytes: 512, Fsync: FsyncOnCommit}
}

// killPayload names the round that wrote a record, so a reused offset shows.
func killPayload(run int, off uint64) []byte {
	return fmt.Appendf(nil, "run%d/off%d/%s", run, off, strings.Repeat("p", int(off%40)))
}

func runKillChild(dir string) {
	run, _ := strconv.Atoi(os.Getenv(childRunEnv))
	if os.Getenv(childModeEnv) == "entries" {
		runKillEntriesChild(dir, run)
	}
	l, err := Open(dir, killConfig())
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open:", err)
		os.Exit(2)
	}
	type pending struct {
		base, next uint64
		done       <-chan error
	}
	// The appender runs ahead of the printer, so appends arrive while an
	// fsync runs and group commit has something to group.
	queue := make(chan pending, 256)
	go func() {
		for p := range queue {
			if err := <-p.done; err != nil {
				fmt.Fprintln(os.Stderr, "child durable:", err)
				os.Exit(3)
			}
			fmt.Printf("durable %d %d\n", p.base, p.next) // one write per line: a pipe write this small is atomic
		}
	}()
	for {
		base := l.NextOffset()
		recs := make([][]byte, 1+base%4)
		for i := range recs {
			recs[i] = killPayload(run, base+uint64(i))
		}
		a, err := l.Append(base, recs, time.Now())
		if err != nil {
			fmt.Fprintln(os.Stderr, "child append:", err)
			os.Exit(4)
		}
		queue <- pending{base: a.Base, next: a.Next, done: l.WaitDurable(a.Next)}
	}
}

// TestKill9KeepsEveryDurableRecord kills a child appender with SIGKILL at
// random moments and checks, after each kill, that every offset the child
// reported durable is present once, in order, with the content that round
// wrote, and that no later round reused it.
func TestKill9KeepsEveryDurableRecord(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	dir := t.TempDir()
	durableRun := map[uint64]int{} // offset → round that reported it durable
	var durableEnd uint64
	start := time.Now()
	for run := 1; run <= 10; run++ {
		if time.Since(start) > 40*time.Second {
			t.Logf("stopping after %d rounds: time budget spent", run-1)
			break
		}
		var printed []durableBatch
		for _, line := range killChildAfterRandomDelay(t, dir, run, "") {
			var b durableBatch
			if _, err := fmt.Sscanf(line, "durable %d %d", &b.base, &b.next); err != nil {
				t.Fatalf("round %d: child printed %q", run, line)
			}
			printed = append(printed, b)
		}
		for _, b := range printed {
			if b.base < durableEnd || b.next <= b.base {
				t.Fatalf("round %d printed durable [%d, %d) after [.., %d): out of order or reused", run, b.base, b.next, durableEnd)
			}
			for off := b.base; off < b.next; off++ {
				durableRun[off] = run
			}
			durableEnd = b.next
		}

		l := mustOpen(t, dir, Config{SegmentBytes: killConfig().SegmentBytes, VerifyOnOpen: true, Fsync: FsyncNone})
		if l.NextOffset() < durableEnd {
			t.Fatalf("round %d: reopened at next offset %d, but offsets below %d were reported durable", run, l.NextOffset(), durableEnd)
		}
		lastRun := 0
		for off := uint64(0); off < l.NextOffset(); {
			page, err := l.Read(off, 0, 0)
			if err != nil {
				t.Fatalf("round %d: Read(%d): %v", run, off, err)
			}
			for _, r := range page.Records {
				if r.Offset != off {
					t.Fatalf("round %d: offset %d where %d was expected", run, r.Offset, off)
				}
				var wrote int
				if _, err := fmt.Sscanf(string(r.Value), "run%d/", &wrote); err != nil {
					t.Fatalf("round %d: offset %d holds %q", run, off, r.Value)
				}
				if want, ok := durableRun[off]; ok && wrote != want {
					t.Fatalf("round %d: offset %d was durable in round %d but holds round %d's record: reused", run, off, want, wrote)
				}
				if wrote < lastRun || !bytes.Equal(r.Value, killPayload(wrote, off)) {
					t.Fatalf("round %d: offset %d holds %q after a record of round %d", run, off, r.Value, lastRun)
				}
				lastRun = wrote
				off++
			}
		}
		mustClose(t, l)
		t.Logf("round %d: %d durable lines, log ends at %d", run, len(printed), durableEnd)
	}
	if durableEnd == 0 {
		t.Fatal("no child ever reported a durable record")
	}
}

// durableBatch is one line a child printed.
type durableBatch struct{ base, next uint64 }

// killChildAfterRandomDelay runs one child round in mode and returns the
// lines it printed before SIGKILL.
func killChildAfterRandomDelay(t *testing.T, dir string, run int, mode string) []string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+dir, childRunEnv+"="+strconv.Itoa(run), childModeEnv+"="+mode)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var printed []string
	first := make(chan struct{})
	readDone := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			mu.Lock()
			if len(printed) == 0 {
				close(first)
			}
			printed = append(printed, sc.Text())
			mu.Unlock()
		}
		readDone <- sc.Err()
	}()
	select {
	case <-first:
		time.Sleep(time.Duration(10+rand.IntN(150)) * time.Millisecond)
	case <-time.After(eventTimeout):
		t.Errorf("round %d: child printed nothing in %v", run, eventTimeout)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := <-readDone; err != nil {
		t.Fatalf("round %d: %v (stderr: %s)", run, err, stderr.String())
	}
	err = cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
		t.Fatalf("round %d: child ended on its own: %v, stderr: %s", run, err, stderr.String())
	}
	mu.Lock()
	defer mu.Unlock()
	return printed
}

// killEntryTerm is the term a child writes in: rounds and, within one, the
// truncations it made order it, so terms never go back.
func killEntryTerm(run, truncations int) uint64 { return uint64(run)*1000 + uint64(truncations) }

// killEntry is what the entry child appends at index in term: records
// naming both, a conf change, or an empty entry.
func killEntry(index, term uint64) (EntryMeta, [][]byte) {
	meta := EntryMeta{Index: index, Term: term}
	switch index % 5 {
	case 3:
		meta.Kind = EntryEmpty
		return meta, nil
	case 4:
		meta.Kind, meta.Control = EntryConfChange, fmt.Appendf(nil, "cc/t%d/i%d", term, index)
		return meta, nil
	}
	records := make([][]byte, 1+index%3)
	for i := range records {
		records[i] = fmt.Appendf(nil, "t%d/i%d/r%d/%s", term, index, i, strings.Repeat("p", int(index%40)))
	}
	return meta, records
}

// runKillEntriesChild appends raft entries as a follower would: after every
// 40 it commits all but the last few (SetEntryFloor) and cuts up to 6 of
// those, durable or not, then goes on in a new term.
func runKillEntriesChild(dir string, run int) {
	l, err := Open(dir, killConfig())
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open:", err)
		os.Exit(2)
	}
	type pending struct {
		index, term uint64
		done        <-chan error
	}
	queue := make(chan pending, 256)
	go func() {
		for p := range queue {
			err := <-p.done
			if errors.Is(err, ErrTruncated) {
				continue // cut before it reached the device
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, "child durable:", err)
				os.Exit(3)
			}
			fmt.Printf("durable %d %d\n", p.index, p.term)
		}
	}()
	index := uint64(1)
	if last, ok := l.LastEntry(); ok {
		index = last.Index + 1
	}
	truncations := 0
	for n := 1; ; n++ {
		term := killEntryTerm(run, truncations)
		meta, records := killEntry(index, term)
		if _, err := l.AppendEntry(meta, records, time.Now(), nil); err != nil {
			fmt.Fprintln(os.Stderr, "child append:", err)
			os.Exit(4)
		}
		queue <- pending{index: index, term: term, done: l.WaitEntryDurable(index)}
		index++
		if n%40 == 0 {
			cut := index - 1 - uint64(rand.IntN(6))
			l.SetEntryFloor(cut - 1)
			truncations++
			fmt.Printf("truncate %d %d\n", cut, killEntryTerm(run, truncations))
			if err := l.TruncateEntries(cut); err != nil {
				fmt.Fprintln(os.Stderr, "child truncate:", err)
				os.Exit(5)
			}
			index = cut
		}
	}
}

// TestKill9KeepsEveryDurableEntry kills a child that appends raft entries
// and cuts their tails with SIGKILL at random moments, and checks after each
// kill that the log holds consecutive entries with their content intact,
// terms never going back, offsets contiguous, and every entry the child
// reported durable unless a later cut removed it.
func TestKill9KeepsEveryDurableEntry(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	dir := t.TempDir()
	durableTerm := map[uint64]uint64{} // index → the newest term reported durable there
	type truncation struct{ index, term uint64 }
	var cuts []truncation
	removed := func(index, term uint64) bool {
		return slices.ContainsFunc(cuts, func(c truncation) bool { return c.index <= index && c.term > term })
	}
	start := time.Now()
	for run := 1; run <= 10; run++ {
		if time.Since(start) > 40*time.Second {
			t.Logf("stopping after %d rounds: time budget spent", run-1)
			break
		}
		lines := killChildAfterRandomDelay(t, dir, run, "entries")
		for _, line := range lines {
			var index, term uint64
			switch {
			case strings.HasPrefix(line, "durable "):
				fmt.Sscanf(line, "durable %d %d", &index, &term)
				durableTerm[index] = max(durableTerm[index], term)
			case strings.HasPrefix(line, "truncate "):
				fmt.Sscanf(line, "truncate %d %d", &index, &term)
				cuts = append(cuts, truncation{index, term})
			default:
				t.Fatalf("round %d: child printed %q", run, line)
			}
		}

		l := mustOpen(t, dir, Config{SegmentBytes: killConfig().SegmentBytes, VerifyOnOpen: true, Fsync: FsyncNone})
		held := map[uint64]uint64{} // index → term
		var prev Entry
		err := l.EntryHeaders(0, func(e Entry) bool {
			if prev.Index != 0 && (e.Index != prev.Index+1 || e.Term < prev.Term || e.Base != prev.Base+uint64(len(prev.Records))) {
				t.Errorf("round %d: entry %d term %d base %d after %d term %d base %d", run, e.Index, e.Term, e.Base, prev.Index, prev.Term, prev.Base)
			}
			got, err := l.ReadEntries(e.Base, e.Index, 0)
			if err != nil || len(got) != 1 {
				t.Errorf("round %d: ReadEntries(%d, %d): %v", run, e.Base, e.Index, err)
				return false
			}
			meta, records := killEntry(e.Index, e.Term)
			if got[0].Kind != meta.Kind || !bytes.Equal(got[0].Control, meta.Control) || !slices.EqualFunc(got[0].Records, records, bytes.Equal) {
				t.Errorf("round %d: entry %d in term %d holds %v %q %q", run, e.Index, e.Term, got[0].Kind, got[0].Control, got[0].Records)
			}
			prev = got[0]
			held[e.Index] = e.Term
			return !t.Failed()
		})
		if err != nil {
			t.Fatalf("round %d: EntryHeaders: %v", run, err)
		}
		for index, term := range durableTerm {
			if removed(index, term) {
				continue
			}
			if got, ok := held[index]; !ok || got != term {
				t.Fatalf("round %d: entry %d was durable in term %d and never cut, but the log holds term %d (present %v)", run, index, term, got, ok)
			}
		}
		for off := uint64(0); off < l.NextOffset(); {
			page, err := l.Read(off, 0, 0)
			if err != nil || len(page.Records) == 0 || page.Records[0].Offset != off {
				t.Fatalf("round %d: Read(%d): %d records, %v", run, off, len(page.Records), err)
			}
			off = page.Next
		}
		mustClose(t, l)
		t.Logf("round %d: %d lines, log ends at entry %d", run, len(lines), prev.Index)
	}
	if len(durableTerm) == 0 || len(cuts) == 0 {
		t.Fatalf("the children reported %d durable entries and %d cuts, want both", len(durableTerm), len(cuts))
	}
}
