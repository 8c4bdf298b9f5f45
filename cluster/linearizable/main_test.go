package linearizable_test

import (
	"testing"

	"github.com/getfelix/felix-go/clustertest"
)

func TestMain(m *testing.M) { clustertest.Main(m) }
