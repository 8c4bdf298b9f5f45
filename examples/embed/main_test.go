package main

import (
	"testing"

	"go.uber.org/goleak"
)

// TestEmbedRunsAndStopsClean runs the example end to end: a broker inside a
// host actor system serves a publish and a subscription, and stopping it
// leaves no goroutine behind.
func TestEmbedRunsAndStopsClean(t *testing.T) {
	defer goleak.VerifyNone(t)
	if err := run(); err != nil {
		t.Fatalf("run: %v", err)
	}
}
