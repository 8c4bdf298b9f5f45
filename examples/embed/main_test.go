package main

import (
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
	if err := run(); err != nil {
		t.Fatalf("run: %v", err)
	}
}
