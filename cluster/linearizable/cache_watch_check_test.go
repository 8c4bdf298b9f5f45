package linearizable_test

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/anishathalye/porcupine"
)

// The watch check: what each watcher of the cache workload saw, against
// the writes of the history. A watcher's events for a key must come in
// version order; each event must be a write of the history (a put's value
// is unique, so it names its write) at that write's version when the
// write was acknowledged; and a watcher that watched to the end must
// have seen every acknowledged write at or past its start, as an event,
// or inside a snapshot it was sent instead (a resume the shard could no
// longer replay starts over retained).
//
// A snapshot is what a retained (re)start sends: every present key the
// watch covers at the version it resumes from, in key order. The
// workload keeps a marker key that sorts after every other and is never
// deleted, so every snapshot ends with it: a snapshot that reached the
// marker is whole (a key it lacks was absent), one that did not was cut
// short by the watch's end and says nothing of the keys it lacks.

// cacheWrite is one write of the history as the watch check needs it.
type cacheWrite struct {
	key     string
	value   string // a put's, unique in the history; "" for a delete
	deleted bool
	// acked: applied at version; otherwise of unknown outcome (refused
	// writes changed nothing and are left out).
	acked   bool
	version uint64
}

// seenEvent is one event a watcher's Next returned.
type seenEvent struct {
	key      string
	value    string
	deleted  bool // a delete or an expiry
	version  uint64
	retained bool
	// resume is the watcher's resume version for the shard when Next
	// returned the event: for a retained one, the version its snapshot
	// was taken at (every write below it is reflected in it).
	resume uint64
}

// watchLog is one watcher's run.
type watchLog struct {
	name string
	// start is where its changes started: every write at or past it
	// reaches it as an event or in a snapshot.
	start  uint64
	events []seenEvent
	// watching says it watched to the end (it saw the last marker write),
	// so it must have seen every acknowledged write past start.
	watching bool
}

// cacheWrites takes the writes out of a cache workload's history: the
// applied ones at their versions and those of unknown outcome.
func cacheWrites(ops []porcupine.Operation) []cacheWrite {
	var out []cacheWrite
	for _, op := range ops {
		in, o := op.Input.(cacheInput), op.Output.(cacheOutput)
		if in.kind == cacheGet || o.outcome == refused {
			continue
		}
		out = append(out, cacheWrite{key: in.key, value: in.value, deleted: in.kind == cacheDeleteIf,
			acked: o.outcome == written, version: o.version})
	}
	return out
}

// maxWatchProblems bounds what one check reports.
const maxWatchProblems = 20

// checkWatches checks every watcher's log (checkWatch), and that no two
// watchers disagree on what a version holds.
func checkWatches(writes []cacheWrite, marker string, logs []watchLog) error {
	var errs []error
	type what struct {
		key, value string
		deleted    bool
	}
	at := map[uint64]what{}
	for _, l := range logs {
		if err := checkWatch(writes, marker, l); err != nil {
			errs = append(errs, err)
		}
		for _, e := range l.events {
			w := what{e.key, e.value, e.deleted}
			if prev, ok := at[e.version]; ok && prev != w {
				errs = append(errs, fmt.Errorf("version %d: watcher %s saw %s, another watcher %s", e.version, l.name, describe(e.key, e.value, e.deleted), describe(prev.key, prev.value, prev.deleted)))
				continue
			}
			at[e.version] = w
		}
	}
	return errors.Join(errs...)
}

// checkWatch checks one watcher's log against the history's writes.
func checkWatch(writes []cacheWrite, marker string, l watchLog) error {
	c := newWatchCheck(writes, l.start)
	for i := range l.events {
		c.event(&l.events[i], marker)
	}
	if c.snap != nil && !c.snap.whole && l.watching {
		c.problem("its last snapshot (at %d) ended before the marker key", c.snap.at)
	}
	if l.watching {
		c.complete()
	}
	if len(c.problems) == 0 {
		return nil
	}
	return fmt.Errorf("watcher %s (from %d, %d events, watching to the end %v): %w", l.name, l.start, len(l.events), l.watching, errors.Join(c.problems...))
}

// watchCheck is checkWatch's state over one log.
type watchCheck struct {
	start uint64
	// byValue: the puts, by their unique value; ackedAt: the applied
	// writes by version; byKey: each key's applied writes in version
	// order; unknownDelete: keys with a delete of unknown outcome.
	byValue       map[string]*cacheWrite
	ackedAt       map[uint64]*cacheWrite
	byKey         map[string][]*cacheWrite
	unknownDelete map[string]bool
	keys          []string

	// last: the version of each key the watcher last learnt (an event or
	// a snapshot); floor: its changes start at or past it (the start, or
	// the last snapshot's version).
	last  map[string]uint64
	floor uint64
	snap  *snapshotSeen
	// covered: applied writes the watcher saw, as an event or in a whole
	// snapshot, by version.
	covered  map[uint64]bool
	problems []error
}

// snapshotSeen is a snapshot being read.
type snapshotSeen struct {
	at      uint64
	lastKey string
	shown   map[string]bool
	whole   bool
}

func newWatchCheck(writes []cacheWrite, start uint64) *watchCheck {
	c := &watchCheck{start: start, floor: start, byValue: map[string]*cacheWrite{}, ackedAt: map[uint64]*cacheWrite{},
		byKey: map[string][]*cacheWrite{}, unknownDelete: map[string]bool{}, last: map[string]uint64{}, covered: map[uint64]bool{}}
	for i := range writes {
		w := &writes[i]
		if !w.deleted {
			c.byValue[w.value] = w
		}
		if _, ok := c.byKey[w.key]; !ok {
			c.keys = append(c.keys, w.key)
			c.byKey[w.key] = nil
		}
		switch {
		case w.acked:
			c.ackedAt[w.version] = w
			c.byKey[w.key] = append(c.byKey[w.key], w)
		case w.deleted:
			c.unknownDelete[w.key] = true
		}
	}
	slices.Sort(c.keys)
	for _, ws := range c.byKey {
		slices.SortFunc(ws, func(a, b *cacheWrite) int { return cmp.Compare(a.version, b.version) })
	}
	return c
}

func (c *watchCheck) problem(format string, args ...any) {
	if len(c.problems) < maxWatchProblems {
		c.problems = append(c.problems, fmt.Errorf(format, args...))
	}
}

func (c *watchCheck) event(e *seenEvent, marker string) {
	c.checkValue(e)
	if e.retained {
		c.retained(e, marker)
		return
	}
	if c.snap != nil {
		if !c.snap.whole {
			c.problem("changes at %d after a snapshot (at %d) that ended before the marker key", e.version, c.snap.at)
		}
		c.snap = nil
	}
	last, ok := c.last[e.key]
	switch {
	case e.version < c.floor:
		c.problem("%s at %d, below where its changes start (%d)", describe(e.key, e.value, e.deleted), e.version, c.floor)
	case ok && e.version <= last:
		c.problem("%s at %d after %s's version %d: out of order", describe(e.key, e.value, e.deleted), e.version, e.key, last)
	}
	c.last[e.key] = max(last, e.version)
	c.covered[e.version] = true
}

// retained reads one event of a snapshot: a snapshot starts at a retained
// event after a change, at a new resume version, or at a key not past the
// one before; it is whole once it reaches the marker.
func (c *watchCheck) retained(e *seenEvent, marker string) {
	if s := c.snap; s == nil || s.whole || s.at != e.resume || e.key <= s.lastKey {
		c.snap = &snapshotSeen{at: e.resume, shown: map[string]bool{}}
	}
	s := c.snap
	s.lastKey, s.shown[e.key] = e.key, true
	c.floor = e.resume
	if e.version >= s.at {
		c.problem("the snapshot at %d shows %s at %d, at or past the snapshot", s.at, describe(e.key, e.value, e.deleted), e.version)
	}
	if last, ok := c.last[e.key]; ok && e.version < last {
		c.problem("the snapshot at %d shows %s at %d, older than version %d already seen", s.at, describe(e.key, e.value, e.deleted), e.version, last)
	}
	c.last[e.key] = max(c.last[e.key], e.version)
	if w := c.newestBelow(e.key, s.at); w != nil && w.version > e.version {
		c.problem("the snapshot at %d shows %s at %d, but %s was acknowledged at %d", s.at, describe(e.key, e.value, e.deleted), e.version, describe(w.key, w.value, w.deleted), w.version)
	}
	c.coverBelow(e.key, s.at)
	if e.key != marker {
		return
	}
	s.whole = true
	for _, k := range c.keys {
		if s.shown[k] {
			continue
		}
		if w := c.newestBelow(k, s.at); w != nil && !w.deleted && !c.unknownDelete[k] {
			c.problem("the snapshot at %d lacks %s, whose newest acknowledged write below it is %s at %d", s.at, k, describe(w.key, w.value, w.deleted), w.version)
		}
		c.coverBelow(k, s.at)
	}
}

// checkValue checks that e is a write of the history, at its version if
// it was acknowledged.
func (c *watchCheck) checkValue(e *seenEvent) {
	if a := c.ackedAt[e.version]; a != nil && (a.key != e.key || a.deleted != e.deleted || a.value != e.value) {
		c.problem("%s at %d, where %s was acknowledged", describe(e.key, e.value, e.deleted), e.version, describe(a.key, a.value, a.deleted))
		return
	}
	if e.deleted {
		if c.ackedAt[e.version] == nil && !c.unknownDelete[e.key] {
			c.problem("a delete of %s at %d that no delete made", e.key, e.version)
		}
		return
	}
	w := c.byValue[e.value]
	switch {
	case w == nil:
		c.problem("%s at %d: a value nobody wrote (or a write refused)", describe(e.key, e.value, e.deleted), e.version)
	case w.key != e.key:
		c.problem("%s at %d: the value was written to %s", describe(e.key, e.value, e.deleted), e.version, w.key)
	case w.acked && w.version != e.version:
		c.problem("%s at %d: that write was acknowledged at %d", describe(e.key, e.value, e.deleted), e.version, w.version)
	}
}

// newestBelow is key's newest acknowledged write below version v.
func (c *watchCheck) newestBelow(key string, v uint64) *cacheWrite {
	ws := c.byKey[key]
	i, _ := slices.BinarySearchFunc(ws, v, func(w *cacheWrite, v uint64) int { return cmp.Compare(w.version, v) })
	if i == 0 {
		return nil
	}
	return ws[i-1]
}

// coverBelow marks key's acknowledged writes below v seen: a snapshot at v
// stands for them.
func (c *watchCheck) coverBelow(key string, v uint64) {
	for _, w := range c.byKey[key] {
		if w.version >= v {
			break
		}
		c.covered[w.version] = true
	}
}

// complete: every acknowledged write at or past start was seen.
func (c *watchCheck) complete() {
	for _, k := range c.keys {
		for _, w := range c.byKey[k] {
			if w.version >= c.start && !c.covered[w.version] {
				c.problem("missing %s, acknowledged at %d", describe(w.key, w.value, w.deleted), w.version)
			}
		}
	}
}

func describe(key, value string, deleted bool) string {
	if deleted {
		return "delete " + key
	}
	return fmt.Sprintf("%s=%q", key, value)
}
