package js_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/getfelix/felix-go/brokertest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, brokertest.LeakOptions()...)
}
