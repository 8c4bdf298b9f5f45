//go:build felixprobe

package latprobe

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/getfelix/felix-go/brokertest"
)

// The broker, its clients and the raw QUIC endpoints must all be gone when
// the tests end.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, brokertest.LeakOptions()...)
}
