package broker_test

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, leakOptions()...)
}

// leakOptions lists goroutines that are not ours and may outlive
// broker.Stop. Only one is known:
//
// protoactor's dead-letter logger throttles with actor.NewThrottle, which on
// the first dead letter of a period starts a goroutine that waits out
// DeadLetterThrottleInterval (1 s) on a ticker, with no way to cancel it, so
// it outlives ActorSystem.Shutdown by up to a second. A dead letter happens
// now and then during teardown (an *actor.Stop reaching a feeder or
// connection writer that is already gone). The function is named after the
// closure; the first spelling is what the compiler emits when NewThrottle is
// inlined into NewDeadLetter (the default build), the second when it is not.
func leakOptions() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"),
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewThrottle.func1.1"),
	}
}
