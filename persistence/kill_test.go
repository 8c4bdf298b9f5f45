package persistence

import (
	"bufio"
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The kill -9 test re-executes the test binary as a child that appends
// under FsyncOnCommit and prints "durable <base> <next>" each time
// WaitDurable reports the batch [base, next) on the device. TestMain sends the child here.
const (
	childEnv    = "FELIX_PERSISTENCE_KILL_CHILD" // the log directory
	childRunEnv = "FELIX_PERSISTENCE_KILL_RUN"   // the round, written into every record
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
		printed := killChildAfterRandomDelay(t, dir, run)
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

// killChildAfterRandomDelay runs one child round and returns the durable
// batches it printed before SIGKILL.
func killChildAfterRandomDelay(t *testing.T, dir string, run int) []durableBatch {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+dir, childRunEnv+"="+strconv.Itoa(run))
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
	var printed []durableBatch
	first := make(chan struct{})
	readDone := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var b durableBatch
			if _, err := fmt.Sscanf(sc.Text(), "durable %d %d", &b.base, &b.next); err != nil {
				readDone <- fmt.Errorf("child printed %q", sc.Text())
				return
			}
			mu.Lock()
			if len(printed) == 0 {
				close(first)
			}
			printed = append(printed, b)
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
