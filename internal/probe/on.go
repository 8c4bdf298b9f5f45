//go:build felixprobe

package probe

import (
	"sync/atomic"
	"time"
)

// Enabled says whether this build records marks (built with -tags felixprobe).
const Enabled = true

// origin makes marks monotonic: time.Since reads the monotonic clock.
var origin = time.Now()

var marks [NumHops]atomic.Int64

// Mark records that hop h ran now.
func Mark(h Hop) { marks[h].Store(int64(time.Since(origin))) }

// Reset forgets every mark.
func Reset() {
	for i := range marks {
		marks[i].Store(0)
	}
}

// Snapshot returns the latest time of each hop, in nanoseconds since the
// process's start; zero for a hop not marked since Reset.
func Snapshot() (s [NumHops]int64) {
	for i := range marks {
		s[i] = marks[i].Load()
	}
	return s
}
