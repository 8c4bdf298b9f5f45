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
	return nil
}
