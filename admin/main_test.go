package admin_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/getfelix/felix-go/brokertest"
)

// The admin endpoint's tests drive a real broker through its public API
// (brokertest, the client) and the endpoint over HTTP; the pages' tests
// drive them in a browser (ui/browsertest).

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, brokertest.LeakOptions()...)
}
