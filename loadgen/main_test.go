package loadgen

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that a run leaves no goroutine behind. The one exception
// is not ours: protoactor's dead-letter logger starts a goroutine that
// sleeps out its 1 s throttle interval after a dead letter (one can happen
// while the embedded broker stops), with no way to cancel it. Both
// spellings of its name are listed: inlined (the default build) or not.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"),
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewThrottle.func1.1"),
	)
}
