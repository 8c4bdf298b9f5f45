package client

import (
	"testing"

	"github.com/getfelix/felix-go/wire"
)

// TestAckWindow: a stream pipelines acked publishes only when the broker
// granted FeaturePublishPipeline and a window; otherwise one at a time.
func TestAckWindow(t *testing.T) {
	tests := []struct {
		name     string
		features uint32
		window   int
		want     int
	}{
		{"granted", wire.FeaturePublishPipeline, 256, 256},
		{"granted with other features", wire.SupportedFeatures, 8, 8},
		{"not granted", wire.FeatureErrorCodes, 256, 1},
		{"granted without a window", wire.FeaturePublishPipeline, 0, 1},
		{"nothing", 0, 0, 1},
	}
	for _, tt := range tests {
		if got := ackWindow(tt.features, tt.window); got != tt.want {
			t.Errorf("%s: ackWindow(%#x, %d) = %d, want %d", tt.name, tt.features, tt.window, got, tt.want)
		}
	}
}
