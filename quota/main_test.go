package quota

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if a test leaves a goroutine behind: the package
// starts none, so any left is a test's.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
