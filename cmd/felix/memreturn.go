package main

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// The broker process gives memory back to the kernel once it goes idle.
// What a subscriber that stopped reading made the broker hold (its queue
// and egress share: up to hundreds of MiB) is garbage once it leaves, but
// an idle broker allocates nothing, so no collection runs until the
// runtime's forced one every 2 minutes, and the background scavenger then
// returns the freed pages over minutes more: a frozen subscriber's 200
// MiB stayed in RSS for over 3 minutes. A busy process collects often and
// reuses its pages, so nothing is done while one collection follows
// another. This is the process's policy, not the embeddable broker's: an
// embedding program owns its own heap.
const (
	// idleMemoryCheck is how often the process looks, and how long it must
	// have run no collection to count as idle.
	idleMemoryCheck = 30 * time.Second
	// idleMemoryReturn is how much memory must be at stake (heap objects
	// grown since the last return, or free pages not yet returned) before
	// a return's forced collection is worth it.
	idleMemoryReturn = 64 << 20
)

// memSample is what the returner reads of the runtime each time.
type memSample struct {
	gcCycles uint64 // completed collections
	objects  uint64 // heap bytes in objects, garbage included until swept
	free     uint64 // free heap bytes not yet returned to the kernel
}

var memSampleNames = []string{"/gc/cycles/total:gc-cycles", "/memory/classes/heap/objects:bytes", "/memory/classes/heap/free:bytes"}

func readMemSample(buf []metrics.Sample) memSample {
	metrics.Read(buf)
	return memSample{gcCycles: buf[0].Value.Uint64(), objects: buf[1].Value.Uint64(), free: buf[2].Value.Uint64()}
}

// memReturner decides, one check at a time, when the idle process should
// collect and return its free memory.
type memReturner struct {
	last            memSample
	objectsReturned uint64 // heap objects after the last return
}

// check takes this check's sample and says whether to return memory now:
// only when no collection ran since the last check, and either the heap
// grew by idleMemoryReturn since the last return (garbage no collection
// has seen, perhaps) or that much is free and not yet returned.
func (m *memReturner) check(now memSample) bool {
	idle := now.gcCycles == m.last.gcCycles
	m.last = now
	if !idle {
		return false
	}
	grown := now.objects > m.objectsReturned && now.objects-m.objectsReturned >= idleMemoryReturn
	return grown || now.free >= idleMemoryReturn
}

// returned records the sample after a return.
func (m *memReturner) returned(after memSample) {
	m.last, m.objectsReturned = after, after.objects
}

// returnIdleMemory checks every idleMemoryCheck until ctx ends, and
// collects and returns free memory (debug.FreeOSMemory) when check says.
func returnIdleMemory(ctx context.Context) {
	buf := make([]metrics.Sample, len(memSampleNames))
	for i, name := range memSampleNames {
		buf[i].Name = name
	}
	var m memReturner
	m.last = readMemSample(buf)
	tick := time.NewTicker(idleMemoryCheck)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
		if m.check(readMemSample(buf)) {
			debug.FreeOSMemory()
			m.returned(readMemSample(buf))
		}
	}
}
