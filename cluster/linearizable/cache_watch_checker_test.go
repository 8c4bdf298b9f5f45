package linearizable_test

import (
	"strings"
	"testing"
)

// The watch check against hand-made logs: each passes a correct one and
// flags the same one corrupted. Pure and fast: no processes.

const testMarker = "k~"

// watchedWrites: the marker at 0, then on k a put at 2, a put of unknown
// outcome that applied at 4, a put at 6 and a delete at 8; on j a put at
// 3; the marker's last write at 10. A put of unknown outcome that did
// not apply (z) and a delete of unknown outcome on j complete them.
func watchedWrites() []cacheWrite {
	return []cacheWrite{
		{key: testMarker, value: "start", acked: true, version: 0},
		{key: "k", value: "a", acked: true, version: 2},
		{key: "j", value: "x", acked: true, version: 3},
		{key: "k", value: "b"},
		{key: "k", value: "c", acked: true, version: 6},
		{key: "k", deleted: true, acked: true, version: 8},
		{key: "k", value: "z"},
		{key: testMarker, value: "end", acked: true, version: 10},
	}
}

func change(key, value string, version uint64) seenEvent {
	return seenEvent{key: key, value: value, version: version}
}

func deletion(key string, version uint64) seenEvent {
	return seenEvent{key: key, deleted: true, version: version}
}

func kept(key, value string, version, at uint64) seenEvent {
	return seenEvent{key: key, value: value, version: version, retained: true, resume: at}
}

// goodWatch started retained at 1 (its snapshot holds the marker alone)
// and saw every change, the unknown put's included.
func goodWatch() watchLog {
	return watchLog{name: "good", start: 1, watching: true, events: []seenEvent{
		kept(testMarker, "start", 0, 1),
		change("k", "a", 2), change("j", "x", 3), change("k", "b", 4), change("k", "c", 6),
		deletion("k", 8), change(testMarker, "end", 10),
	}}
}

// wantWatchProblem checks that l fails the check with a problem naming want.
func wantWatchProblem(t *testing.T, l watchLog, want string) {
	t.Helper()
	err := checkWatch(watchedWrites(), testMarker, l)
	if err == nil {
		t.Fatalf("watch log %s passed the check, want a problem with %q; events %+v", l.name, want, l.events)
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("watch log %s: %v, want a problem with %q", l.name, err, want)
	}
}

func TestWatchCheckAcceptsGoodLog(t *testing.T) {
	if err := checkWatch(watchedWrites(), testMarker, goodWatch()); err != nil {
		t.Fatalf("a watcher that saw every change: %v", err)
	}
	// Not watching to the end: a prefix of the changes is fine.
	l := goodWatch()
	l.events, l.watching = l.events[:3], false
	if err := checkWatch(watchedWrites(), testMarker, l); err != nil {
		t.Fatalf("a watcher that ended after %d events: %v", len(l.events), err)
	}
}

func TestWatchCheckFlagsMissingEvent(t *testing.T) {
	l := goodWatch()
	l.events = append(l.events[:4:4], l.events[5:]...) // k=c at 6
	wantWatchProblem(t, l, `missing k="c", acknowledged at 6`)
	// The unknown put's event is not owed.
	l = goodWatch()
	l.events = append(l.events[:3:3], l.events[4:]...)
	if err := checkWatch(watchedWrites(), testMarker, l); err != nil {
		t.Fatalf("a watcher that missed a put of unknown outcome: %v", err)
	}
	// A watcher started after a write does not owe its event.
	l = goodWatch()
	l.start, l.events = 5, []seenEvent{kept("j", "x", 3, 5), kept("k", "b", 4, 5), kept(testMarker, "start", 0, 5), change("k", "c", 6), deletion("k", 8), change(testMarker, "end", 10)}
	if err := checkWatch(watchedWrites(), testMarker, l); err != nil {
		t.Fatalf("a watcher started at 5: %v", err)
	}
}

func TestWatchCheckFlagsOutOfOrderEvent(t *testing.T) {
	l := goodWatch()
	l.events[3], l.events[4] = l.events[4], l.events[3] // k=c at 6 before k=b at 4
	wantWatchProblem(t, l, `k="b" at 4 after k's version 6: out of order`)
	// A change below where the watch started.
	l = goodWatch()
	l.start = 3
	l.events[0].resume = 3
	wantWatchProblem(t, l, `k="a" at 2, below where its changes start (3)`)
}

func TestWatchCheckFlagsWrongValue(t *testing.T) {
	l := goodWatch()
	l.events[4] = change("k", "a", 6)
	wantWatchProblem(t, l, `k="a" at 6, where k="c" was acknowledged`)
	l = goodWatch()
	l.events[5] = deletion("j", 8)
	wantWatchProblem(t, l, `delete j at 8, where delete k was acknowledged`)
	l = goodWatch()
	l.events[2] = change("j", "y", 5)
	wantWatchProblem(t, l, `a value nobody wrote`)
	l = goodWatch()
	l.events[3] = change("k", "x", 4)
	wantWatchProblem(t, l, `the value was written to j`)
	l = goodWatch()
	l.events = append(l.events[:1:1], append([]seenEvent{change("k", "a", 1)}, l.events[2:]...)...)
	wantWatchProblem(t, l, `that write was acknowledged at 2`)
}

// TestWatchCheckResnapshot: a watch resumed too far back starts over
// retained, and its snapshot stands for what it missed, when it shows
// every key's newest acknowledged write.
func TestWatchCheckResnapshot(t *testing.T) {
	resnapshot := func(snapshot ...seenEvent) watchLog {
		l := goodWatch()
		l.events = append(append(l.events[:2:2], snapshot...), deletion("k", 8), change(testMarker, "end", 10))
		return l
	}
	l := resnapshot(kept("j", "x", 3, 7), kept("k", "c", 6, 7), kept(testMarker, "start", 0, 7))
	if err := checkWatch(watchedWrites(), testMarker, l); err != nil {
		t.Fatalf("a resnapshot at 7 after k=a: %v", err)
	}
	l = resnapshot(kept("j", "x", 3, 7), kept("k", "a", 2, 7), kept(testMarker, "start", 0, 7))
	wantWatchProblem(t, l, `the snapshot at 7 shows k="a" at 2, but k="c" was acknowledged at 6`)
	l = resnapshot(kept("j", "x", 3, 7), kept(testMarker, "start", 0, 7))
	wantWatchProblem(t, l, `the snapshot at 7 lacks k, whose newest acknowledged write below it is k="c" at 6`)
	// Cut short before the marker (j alone), then changes.
	l = resnapshot(kept("j", "x", 3, 7))
	wantWatchProblem(t, l, `after a snapshot (at 7) that ended before the marker key`)
	// Cut short, then a whole snapshot at a later version.
	l = resnapshot(kept("j", "x", 3, 5), kept("j", "x", 3, 7), kept("k", "c", 6, 7), kept(testMarker, "start", 0, 7))
	if err := checkWatch(watchedWrites(), testMarker, l); err != nil {
		t.Fatalf("a snapshot at 5 cut short, then one at 7: %v", err)
	}
	// A snapshot showing a version at or past its own.
	l = resnapshot(kept("j", "x", 3, 7), kept("k", "c", 6, 6), kept(testMarker, "start", 0, 6))
	wantWatchProblem(t, l, `the snapshot at 6 shows k="c" at 6, at or past the snapshot`)
}

// TestWatchCheckAcrossWatchers: two watchers that disagree on a version
// are flagged, even where each alone cannot be (an unknown write).
func TestWatchCheckAcrossWatchers(t *testing.T) {
	a, b := goodWatch(), goodWatch()
	b.name = "other"
	if err := checkWatches(watchedWrites(), testMarker, []watchLog{a, b}); err != nil {
		t.Fatalf("two good watchers: %v", err)
	}
	b.events[3] = change("k", "z", 4)
	err := checkWatches(watchedWrites(), testMarker, []watchLog{a, b})
	if err == nil || !strings.Contains(err.Error(), `version 4: watcher other saw k="z", another watcher k="b"`) {
		t.Fatalf("watchers disagreeing at 4: %v", err)
	}
}
