package linearizable_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/wire"
)

// The cache workload's watchers: ClusterClient watches of the prefix
// every workload key shares, started retained before the clients and
// read through the faults (a ClusterClient watches again at the new
// owner, from the version after the last event, when its watch's
// connection or owner goes), then checked against the history's writes
// (checkWatches). They watch the prefix, not single keys: a key watch
// resumed as a snapshot while its key is absent is sent no event at all,
// so nothing in its events would tell the check that a snapshot replaced
// the changes it missed; the prefix's marker key is in every snapshot.
const (
	cacheWatchers = 3
	// watchPrefix covers every workload key and the marker.
	watchPrefix = "k"
	// watchMarker sorts after every workload key and is never deleted,
	// so every snapshot of the prefix ends with it (the check needs to
	// know where one ends); it is written before the watchers start and
	// once more after the final reads, and a watcher that sees that last
	// write has every change before it.
	watchMarker = "k~"
	// markerClient is the history's client id for the marker's writes.
	markerClient = cacheClients + cacheMemberReaders + 1
)

// cacheWatcher is one watcher and what it saw. Its goroutine owns w and
// appends to mu.log; markerSeen wakes the test when it saw the marker.
type cacheWatcher struct {
	name       string
	w          *client.Watcher
	markerSeen chan struct{}
	stop       context.CancelFunc
	done       chan struct{}
	mu         struct {
		sync.Mutex
		log    watchLog
		marker uint64 // the newest marker version seen
		err    error  // what ended Next, other than stop
	}
}

// writeMarker puts the marker until a put is acknowledged, each attempt
// with a value of its own recorded in the history as the clients' are,
// and returns the acknowledged version.
func writeMarker(t *testing.T, r *run, cc *client.ClusterClient, what string) uint64 {
	t.Helper()
	k := cacheOf(r.stream)
	deadline := time.Now().Add(finalReadTimeout)
	for n := 0; ; n++ {
		in := cacheInput{kind: cachePut, key: watchMarker, value: fmt.Sprintf("%s-%d", what, n)}
		ctx, cancel := r.opContext()
		call := r.h.now()
		res, err := cc.Put(ctx, k, watchMarker, []byte(in.value), client.PutOptions{})
		ret := r.h.now()
		cancel()
		if err == nil {
			r.h.add(markerClient, in, cacheOutput{outcome: written, version: res.Version, hadPrev: res.HadPrev, prev: string(res.Prev)}, call, ret)
			return res.Version
		}
		if a, _ := classify(err); a != answerFailed {
			r.h.add(markerClient, in, cacheOutput{outcome: unknown}, call, pendingReturn)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no put of the watch marker (%s) acknowledged within %s: %v", what, finalReadTimeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startWatchers starts the watchers, each on a ClusterClient of its own,
// once the marker is written.
func startWatchers(t *testing.T, r *run) []*cacheWatcher {
	t.Helper()
	writeMarker(t, r, r.dial(t), "start")
	var out []*cacheWatcher
	for i := range cacheWatchers {
		cc := r.dial(t)
		ctx, cancel := r.opContext()
		w, err := cc.Watch(ctx, cacheOf(r.stream), client.WatchPrefix(watchPrefix), client.WatchFrom{Retained: true})
		cancel()
		if err != nil {
			t.Fatalf("watch %q: %v", watchPrefix, err)
		}
		life, stop := context.WithCancel(r.ctx)
		cw := &cacheWatcher{name: fmt.Sprintf("w%d", i), w: w, markerSeen: make(chan struct{}, 1), stop: stop, done: make(chan struct{})}
		cw.mu.log = watchLog{name: cw.name, start: w.Resume()[0]}
		t.Cleanup(func() {
			stop()
			<-cw.done
			_ = w.Close(context.Background())
		})
		go cw.run(life)
		out = append(out, cw)
	}
	return out
}

// run reads events until stopped or ended.
func (cw *cacheWatcher) run(ctx context.Context) {
	defer close(cw.done)
	for {
		ev, err := cw.w.Next(ctx)
		if err != nil {
			if ctx.Err() == nil {
				cw.mu.Lock()
				cw.mu.err = err
				cw.mu.Unlock()
			}
			return
		}
		if ev.Kind == wire.WatchSnapshotEnd {
			continue // marks where a shard's snapshot ends; no key's change
		}
		e := seenEvent{key: ev.Key, value: string(ev.Value), deleted: ev.Kind != wire.WatchPut,
			version: ev.Version, retained: ev.Retained, resume: cw.w.Resume()[ev.Shard]}
		cw.mu.Lock()
		cw.mu.log.events = append(cw.mu.log.events, e)
		if ev.Key == watchMarker {
			cw.mu.marker = max(cw.mu.marker, ev.Version)
		}
		cw.mu.Unlock()
		if ev.Key == watchMarker {
			select {
			case cw.markerSeen <- struct{}{}:
			default:
			}
		}
	}
}

// finish waits, until deadline, for the watcher to see the marker at
// version end or later, stops it and returns its log: watching to the
// end if it saw that write.
func (cw *cacheWatcher) finish(end uint64, deadline <-chan struct{}) (watchLog, error) {
wait:
	for {
		cw.mu.Lock()
		seen, ended := cw.mu.marker >= end, cw.mu.err != nil
		cw.mu.Unlock()
		if seen || ended {
			break
		}
		select {
		case <-cw.markerSeen:
		case <-cw.done:
		case <-deadline:
			break wait // the log says it did not see end
		}
	}
	cw.stop()
	<-cw.done
	cw.mu.Lock()
	defer cw.mu.Unlock()
	l := cw.mu.log
	l.watching = cw.mu.marker >= end
	return l, cw.mu.err
}

// checkWatchers writes the marker's last value, waits for every watcher
// to see it, and checks what they saw against the history's writes. A
// watcher that ended with an error, or did not see the marker's last
// write in time, is a failure: a ClusterClient's watch must follow the
// shard's owner through every fault.
func checkWatchers(t *testing.T, r *run, watchers []*cacheWatcher) {
	t.Helper()
	end := writeMarker(t, r, r.dial(t), "end")
	wait, cancel := context.WithTimeout(r.ctx, finalReadTimeout)
	defer cancel()
	var logs []watchLog
	for _, cw := range watchers {
		l, err := cw.finish(end, wait.Done())
		t.Logf("watcher %s: from %d, %d events, %d watches made again, saw the marker's last write (at %d): %v", l.name, l.start, len(l.events), cw.w.Resumed(), end, l.watching)
		if err != nil {
			t.Errorf("watcher %s ended: %v", l.name, err)
		} else if !l.watching {
			t.Errorf("watcher %s did not see the marker's last write (at %d) within %s", l.name, end, finalReadTimeout)
		}
		logs = append(logs, l)
	}
	if err := checkWatches(cacheWrites(r.h.operations()), watchMarker, logs); err != nil {
		t.Errorf("watch events: %v", err)
	}
}
