package main

import (
	"strings"
	"syscall"
	"testing"
)

// TestBrokerList: --broker takes a comma-separated list; a broker in it
// that does not answer is skipped, by pub and sub (through the cluster
// client) and by the other commands (the first that answers).
func TestBrokerList(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	list := freeUDPAddr(t) + ", " + b.addr
	conn := []string{"--broker", list, "--connect-timeout", "1s", "--ca", b.ca, "--token", b.token}
	runFelix(t, opts{}, append([]string{"stream", "create", "--stream", "listed", "--shards", "2"}, conn...)...).wantExit(t, 0)
	sub := start(t, opts{}, append([]string{"sub", "--stream", "listed", "--count", "1"}, conn...)...)
	sub.waitStderrLine(t, "subscribed")
	runFelix(t, opts{}, append([]string{"pub", "--stream", "listed", "hello"}, conn...)...).wantExit(t, 0)
	sub.wantExit(t, 0)
	if got := sub.stdout.String(); got != "hello\n" {
		t.Errorf("sub through a list printed %q, want hello", got)
	}

	r := runFelix(t, opts{}, "pub", "--broker", " , ", "--stream", "listed", "x")
	r.wantExit(t, 2)
	if want := "--broker needs a host:port"; !strings.Contains(r.stderr.String(), want) {
		t.Errorf("pub --broker ' , ': stderr %q, want it to contain %q", r.stderr, want)
	}
}

// TestSubFollowsEndedSubscription: when the broker ends a subscription (its
// feeder stopped, as when a shard moves to another member), felix sub says
// so and subscribes again; on a durable stream it goes on after the last
// record it printed.
func TestSubFollowsEndedSubscription(t *testing.T) {
	t.Parallel()
	b := startAdminBroker(t, true)
	conn := []string{"--broker", b.addr, "--ca", b.ca, "--token", b.token}
	runFelix(t, opts{}, append([]string{"stream", "create", "--stream", "moving", "--durable"}, conn...)...).wantExit(t, 0)
	sub := start(t, opts{}, append([]string{"sub", "--stream", "moving"}, conn...)...)
	sub.waitStderrLine(t, "subscribed")
	runFelix(t, opts{}, append([]string{"pub", "--stream", "moving", "one"}, conn...)...).wantExit(t, 0)
	sub.waitStdout(t, "the first record", func(out string) bool { return out == "one\n" })

	runFelix(t, opts{}, "chaos", "kill", "--admin", b.admin, "--token", b.token, "--kind", "feeder", "--mode", "stop").wantExit(t, 0)
	sub.waitStderr(t, "a line saying it subscribes again", func(line string) bool {
		return strings.Contains(line, "ended (client: the broker ended the subscription; subscribe again); subscribing again")
	})
	runFelix(t, opts{}, append([]string{"pub", "--stream", "moving", "two"}, conn...)...).wantExit(t, 0)
	sub.waitStdout(t, "the record after the end, once", func(out string) bool { return out == "one\ntwo\n" })
	sub.signal(t, syscall.SIGTERM)
	sub.wantExitWithin(t, 0, stopWithin)
}
