package main

import (
	"bytes"
	"net"
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// TestEmbedRunsAndStopsClean runs the example end to end: a broker inside a
// host actor system serves a publish and a subscription, and stopping it
// leaves no goroutine behind.
func TestEmbedRunsAndStopsClean(t *testing.T) {
	// protoactor throttles dead-letter logging with a goroutine that sleeps
	// out its interval (1 s) after a dead letter, such as a message racing
	// the stop of a connection writer; it ends on its own and is not ours.
	defer goleak.VerifyNone(t, goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
	if err := run(nil, os.Stderr); err != nil {
		t.Fatalf("run: %v", err)
	}
}

// TestEmbedBesideABroker: with the admin port of a broker's defaults
// (5080) taken, by this test or by a broker already there, the example
// runs on its free ports; an explicit taken -admin fails naming it; and a
// log that is not a terminal has no colour codes.
func TestEmbedBesideABroker(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
	if l, err := net.Listen("tcp", "127.0.0.1:5080"); err == nil {
		defer l.Close()
	}
	logFile, err := os.CreateTemp(t.TempDir(), "log")
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	if err := run(nil, logFile); err != nil {
		t.Fatalf("run with 127.0.0.1:5080 taken: %v", err)
	}
	log, err := os.ReadFile(logFile.Name())
	if err != nil || len(log) == 0 || bytes.Contains(log, []byte("\x1b[")) {
		t.Errorf("the log written to a file (%v) has colour codes or is empty:\n%q", err, log)
	}
	err = run([]string{"-admin", "127.0.0.1:5080"}, logFile)
	if err == nil || !strings.Contains(err.Error(), "5080") {
		t.Errorf("run -admin 127.0.0.1:5080 with the port taken: %v, want an error naming it", err)
	}
}
