//go:build felixprobe

package latprobe

import (
	"testing"

	"go.uber.org/goleak"
)

// The broker, its clients and the raw QUIC endpoints must all be gone
// when the tests end; protoactor's dead-letter throttle is the broker
// tests' one known straggler.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"),
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewThrottle.func1.1"),
	)
}
