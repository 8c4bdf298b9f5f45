package main

import (
	"runtime/debug"

	"github.com/rs/zerolog"
)

// A broker process's garbage collector. Go's default (GOGC=100: collect
// when the heap doubles) spent 7% of a broker's CPU in a fanout-1
// throughput run; at 400 the broker delivered 1.06× (fanout 1) and 1.03×
// (fanout 10), medians of 3 alternating runs (docs/BENCHMARKS.md). A
// larger GOGC lets the heap grow further between collections, so a soft
// memory limit at three quarters of the machine's memory makes the
// collector work harder before the heap gets there. Only `felix broker`
// does this: a program embedding the broker keeps its own settings. The
// operator's GOGC and GOMEMLIMIT, when set, win.
const (
	brokerGCPercent      = 400
	brokerMemoryLimitPct = 75
)

// gcSettings says what to set: the GC percent and memory limit, each only
// when the environment does not set it and (for the limit) memory is known.
func gcSettings(getenv func(string) string, memory int64) (percent int, setPercent bool, limit int64, setLimit bool) {
	if getenv("GOGC") == "" {
		percent, setPercent = brokerGCPercent, true
	}
	if getenv("GOMEMLIMIT") == "" && memory > 0 {
		limit, setLimit = memory/100*brokerMemoryLimitPct, true
	}
	return percent, setPercent, limit, setLimit
}

// tuneGC applies gcSettings to this process and logs what it chose.
func tuneGC(getenv func(string) string, memory int64, log zerolog.Logger) {
	percent, setPercent, limit, setLimit := gcSettings(getenv, memory)
	ev := log.Info()
	if setPercent {
		debug.SetGCPercent(percent)
		ev = ev.Int("gogc", percent)
	}
	if setLimit {
		debug.SetMemoryLimit(limit)
		ev = ev.Int64("gomemlimit_bytes", limit)
	}
	if setPercent || setLimit {
		ev.Msg("garbage collector tuned for a broker (set GOGC or GOMEMLIMIT to choose otherwise)")
	}
}
