package broker_test

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, leakOptions()...)
}

// leakOptions lists goroutines that are not ours and outlive broker.Stop.
func leakOptions() []goleak.Option {
	// protoactor throttles dead-letter logging with a goroutine that sleeps
	// out its interval after a dead letter (a message racing a stop); it ends
	// on its own.
	return []goleak.Option{goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1")}
}
