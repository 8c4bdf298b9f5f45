package admin

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/getfelix/felix-go/wire"
)

// FanoutRates counts the records the shards fan out, per stream, for the
// streams a stream page is watching: an in-memory shard keeps no offset
// anyone outside it can read, and its fan-out report (the stream, not the
// shard) is all it exposes. Nothing is counted while no page watches, so
// a broker nobody looks at pays one atomic load per batch; a stream not
// asked for within rateWatchFor is forgotten, and at most maxRateWatches
// streams are watched at once.
//
// The broker's fan-out hook calls Count. The zero FanoutRates is ready, so
// the broker holds one from its start, before the endpoint (if any)
// starts, and hands it in as Config.Rates.
type FanoutRates struct {
	// until is when the last watch lapses (Unix nanoseconds), 0 once
	// Count saw it lapse: then Count is back to one atomic load.
	until atomic.Int64
	mu    sync.Mutex
	m     map[wire.Scope]*watchedRate
}

type watchedRate struct {
	records atomic.Uint64
	seen    time.Time // the last read, under FanoutRates.mu
}

const (
	// rateWatchFor is how long a stream stays watched after a page last
	// asked: a page polls every second, so a closed tab stops the
	// counting within this.
	rateWatchFor   = 30 * time.Second
	maxRateWatches = 64
)

// Count adds records fanned out by a shard of scope; the broker's fan-out
// hook calls it on the shard's goroutine.
func (r *FanoutRates) Count(scope wire.Scope, records int) {
	until := r.until.Load()
	if until == 0 {
		return
	}
	if time.Now().UnixNano() > until {
		r.until.CompareAndSwap(until, 0)
		return
	}
	r.mu.Lock()
	w := r.m[scope]
	r.mu.Unlock()
	if w != nil {
		w.records.Add(uint64(records))
	}
}

// read returns the records fanned out for scope since it is watched, and
// starts watching it (ok false when maxRateWatches others are).
func (r *FanoutRates) read(scope wire.Scope, now time.Time) (records uint64, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for s, w := range r.m {
		if now.Sub(w.seen) > rateWatchFor {
			delete(r.m, s)
		}
	}
	r.until.Store(now.Add(rateWatchFor).UnixNano())
	w := r.m[scope]
	if w == nil {
		if len(r.m) >= maxRateWatches {
			return 0, false
		}
		if r.m == nil {
			r.m = make(map[wire.Scope]*watchedRate)
		}
		w = &watchedRate{}
		r.m[scope] = w
	}
	w.seen = now
	return w.records.Load(), true
}
