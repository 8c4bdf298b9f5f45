package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestGroupCLI is the README's work queue: records consumed and acked by
// felix consume; a failing --exec handler makes a record a dead letter
// after group_max_attempts (5); felix group lists it, redrives it, and
// it is consumed again.
func TestGroupCLI(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	conn := []string{"--broker", b.addr, "--ca", b.ca, "--token", b.token, "--stream", "jobs"}
	felix := felixOK(t, conn)
	felix("stream", "create", "--durable")
	felix("pub", "a", "b", "c")
	felix("group", "create", "--group", "workers", "--start", "earliest")

	out := felix("consume", "--group", "workers", "--count", "3", "--json").stdout.String()
	var got []string
	for _, line := range lines(out) {
		var r struct {
			Offset   uint64
			Attempts uint32
			Payload  string
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil || r.Attempts != 1 {
			t.Fatalf("consume --json printed %q (%v)", line, err)
		}
		got = append(got, r.Payload)
	}
	if strings.Join(got, ",") != "a,b,c" {
		t.Fatalf("consumed %q", got)
	}
	var info struct {
		Shards []struct{ Cursor, Lag, DeadLetters uint64 }
	}
	if err := json.Unmarshal([]byte(felix("group", "describe", "--group", "workers", "--json").stdout.String()), &info); err != nil ||
		info.Shards[0].Cursor != 3 || info.Shards[0].Lag != 0 {
		t.Fatalf("describe: %+v, %v", info, err)
	}

	// A handler that always fails: five attempts, then a dead letter.
	felix("pub", "poison")
	failing := felix("consume", "--group", "workers", "--count", "5", "--exec", `test "$FELIX_ATTEMPTS" = 9`)
	if want := "offset 3 is a dead letter after 5 attempts"; !strings.Contains(failing.stderr.String(), want) {
		t.Errorf("consume --exec whose record became a dead letter: stderr\n%s\nwant %q", failing.stderr, want)
	}
	if dl := strings.TrimSpace(felix("group", "dead-letters", "--group", "workers").stdout.String()); dl != "3" {
		t.Fatalf("dead letters: %q", dl)
	}
	felix("group", "redrive", "--group", "workers", "--all")
	out = felix("consume", "--group", "workers", "--count", "1", "--exec", `cat; echo " attempt $FELIX_ATTEMPTS at $FELIX_OFFSET"`).stdout.String()
	if strings.TrimSpace(out) != "poison attempt 1 at 3" {
		t.Fatalf("redriven: %q", out)
	}
	if dl := strings.TrimSpace(felix("group", "dead-letters", "--group", "workers").stdout.String()); dl != "" {
		t.Fatalf("dead letters after the redriven one was acked: %q", dl)
	}
	if ls := strings.TrimSpace(felix("group", "ls").stdout.String()); ls != "workers" {
		t.Fatalf("group ls: %q", ls)
	}
	felix("group", "rm", "--group", "workers")
	if p := runFelix(t, opts{}, append([]string{"group", "describe", "--group", "workers"}, conn...)...); p.exitCode() == 0 || !strings.Contains(p.stderr.String(), "not_found") {
		t.Fatalf("describe a deleted group: exit %d, %s", p.exitCode(), p.stderr)
	}
}

// TestGroupCLIBrokerList: with several --broker addresses, group and
// consume go through the cluster client (a dead address in the list is
// skipped), and consume still settles what it prints.
func TestGroupCLIBrokerList(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	conn := []string{"--broker", freeUDPAddr(t) + "," + b.addr, "--connect-timeout", "1s", "--ca", b.ca, "--token", b.token, "--stream", "listjobs"}
	felix := felixOK(t, conn)
	felix("stream", "create", "--durable")
	felix("pub", "a", "b")
	felix("group", "create", "--group", "workers", "--start", "earliest")
	if out := felix("consume", "--group", "workers", "--count", "2").stdout.String(); out != "a\nb\n" {
		t.Fatalf("consume printed %q", out)
	}
	var info struct {
		Shards []struct{ Cursor uint64 }
	}
	if err := json.Unmarshal([]byte(felix("group", "describe", "--group", "workers", "--json").stdout.String()), &info); err != nil || info.Shards[0].Cursor != 2 {
		t.Fatalf("describe: %+v, %v", info, err)
	}
	if got := strings.TrimSpace(felix("group", "ls").stdout.String()); got != "workers" {
		t.Fatalf("ls: %q", got)
	}
}

// felixOK runs felix with args and conn, and fails the test unless it
// exits 0.
func felixOK(t *testing.T, conn []string) func(args ...string) *proc {
	return func(args ...string) *proc {
		t.Helper()
		p := runFelix(t, opts{}, append(args, conn...)...)
		if p.exitCode() != 0 {
			t.Fatalf("felix %q: exit %d\nstdout: %s\nstderr: %s", args, p.exitCode(), p.stdout, p.stderr)
		}
		return p
	}
}
