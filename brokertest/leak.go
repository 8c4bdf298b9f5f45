package brokertest

import "go.uber.org/goleak"

// LeakOptions are the goleak options for a test package that starts a
// broker: protoactor's dead-letter throttle outlives the broker's actor
// system by up to a second (one dead letter can happen while it stops), with
// no way to cancel it. Both spellings of its name are listed: inlined (the
// default build) or not.
func LeakOptions() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"),
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewThrottle.func1.1"),
	}
}
