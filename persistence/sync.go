package persistence

import (
	"fmt"
)

// waiter is one WaitDurable or WaitEntryDurable call: ch receives once
// every record below upTo and every raft entry up to index is fsynced, or
// the error that means it never will be.
type waiter struct {
	upTo  uint64
	index uint64
	ch    chan error
}

// WaitDurable returns a channel that receives nil once every record below
// upTo (Appended.Next) is on the device, or the error that poisoned the log,
// or ErrClosed. It never blocks, and it asks the syncer for a pass now,
// whatever the policy: under FsyncPeriodic or FsyncNone a caller that needs
// one batch durable need not wait for the interval. The channel is buffered,
// so nobody has to receive from it.
//
// Durability is monotonic, so a caller acking a stream of appends need wait
// only for the newest: the shard can post itself one message per completed
// wait instead of one per append.
//
// A raft entry without records takes no offset, so an offset alone cannot
// name it: WaitDurable(NextOffset()) also waits for every entry appended so
// far, which makes WaitDurable(a.Next) after an AppendEntry right for any
// kind. WaitEntryDurable names an entry by index. Records TruncateEntries
// removes before they are durable fail their waits with ErrTruncated.
func (l *Log) WaitDurable(upTo uint64) <-chan error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.waitDurableLocked(upTo)
}

// WaitEntryDurable is WaitDurable for the raft entries up to index: its
// channel receives nil once they are on the device. An index past the last
// entry is ErrNoEntry; TruncateEntries removing the entry before it is
// durable fails the wait with ErrTruncated.
func (l *Log) WaitEntryDurable(index uint64) <-chan error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var invalid error
	if !l.mu.hasLast || index > l.mu.last.Index {
		invalid = fmt.Errorf("%w: index %d is past the last entry", ErrNoEntry, index)
	}
	return l.addWaiterLocked(waiter{index: index}, invalid)
}

// Sync blocks until everything appended so far, records and raft entries,
// is durable. It is for callers that may block (tests, tools, shutdown); an
// actor uses WaitDurable.
func (l *Log) Sync() error {
	l.mu.Lock()
	ch := l.waitDurableLocked(l.mu.next)
	l.mu.Unlock()
	return <-ch
}

// waitDurableLocked REQUIRES: l.mu is held.
func (l *Log) waitDurableLocked(upTo uint64) <-chan error {
	w := waiter{upTo: upTo}
	var invalid error
	switch {
	case upTo > l.mu.next:
		invalid = &ErrOffsetInFuture{Requested: upTo, Available: l.mu.next}
	case upTo == l.mu.next && l.mu.hasLast:
		w.index = l.mu.last.Index
	}
	return l.addWaiterLocked(w, invalid)
}

// addWaiterLocked answers w at once if it can (invalid: why it can never
// complete), or queues it and asks for a pass. REQUIRES: l.mu is held.
func (l *Log) addWaiterLocked(w waiter, invalid error) <-chan error {
	w.ch = make(chan error, 1)
	switch {
	case l.mu.err != nil:
		w.ch <- l.mu.err
	case invalid == nil && l.coveredLocked(w):
		w.ch <- nil
	case l.mu.closed:
		w.ch <- ErrClosed
	case invalid != nil:
		w.ch <- invalid
	default:
		l.mu.waiters = append(l.mu.waiters, w)
		l.kick()
	}
	return w.ch
}

// coveredLocked reports whether the last sync pass covered w.
// REQUIRES: l.mu is held.
func (l *Log) coveredLocked(w waiter) bool {
	return w.upTo <= l.mu.synced && w.index <= l.mu.syncedIndex
}

// Err returns the error that poisoned the log (it matches ErrPoisoned), or
// nil. A poisoned log takes no more appends: Close it and Open the
// directory again.
func (l *Log) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.err
}

// kick asks the syncer for a pass. A pass already asked for covers this
// request too, which is what groups commits.
func (l *Log) kick() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// runSyncer is the log's only goroutine. It makes one pass per wake-up (a
// wait, a new segment, FsyncOnCommit's append, FsyncPeriodic's timer) and
// exits when Close closes l.stop; Close then makes the final pass
// itself. A pass that fails poisons the log, after which passes do nothing.
func (l *Log) runSyncer() {
	defer close(l.syncerDone)
	for {
		select {
		case <-l.stop:
			return
		case <-l.wake:
		}
		l.syncOnce()
	}
}

// syncOnce fsyncs every segment written since the last pass, the directory
// if a segment was created, then the durable mark, and completes the waiters
// the pass covers. Appends may run meanwhile: they land in the next pass.
// TruncateEntries may not (syncMu).
func (l *Log) syncOnce() {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	l.mu.Lock()
	target := markPoint{offset: l.mu.next}
	if l.mu.hasLast {
		target.index = l.mu.last.Index
	}
	if l.mu.err != nil || (len(l.mu.dirty) == 0 && !l.mu.dirDirty && l.mu.synced == target.offset && l.mu.syncedIndex == target.index) {
		l.mu.Unlock()
		return
	}
	segs := l.mu.dirty
	for _, s := range segs {
		s.dirty = false
	}
	l.mu.dirty = nil
	syncDir := l.mu.dirDirty
	l.mu.dirDirty = false
	l.mu.Unlock()

	err := l.syncFiles(segs, syncDir, target)

	l.mu.Lock()
	if err != nil {
		l.poisonLocked(err)
	} else {
		l.mu.synced, l.mu.syncedIndex = target.offset, target.index
		l.completeWaitersLocked()
	}
	var last []*segment
	for _, s := range segs {
		if l.releaseLocked(s) {
			last = append(last, s)
		}
	}
	l.mu.Unlock()
	for _, s := range last {
		// Only a segment retention or TruncateEntries removed can end
		// here, and its unlink failing leaves a *.deleted file that Open
		// removes.
		_ = s.finalize(l.fs)
	}
}

// completeWaitersLocked completes the waiters the last pass covered.
// REQUIRES: l.mu is held.
func (l *Log) completeWaitersLocked() {
	kept := l.mu.waiters[:0]
	for _, w := range l.mu.waiters {
		if l.coveredLocked(w) {
			w.ch <- nil
		} else {
			kept = append(kept, w)
		}
	}
	clear(l.mu.waiters[len(kept):])
	l.mu.waiters = kept
}

// syncFiles is the I/O of one pass, in the order that makes the mark true:
// the data and the directory entries first, the mark after them.
func (l *Log) syncFiles(segs []*segment, syncDir bool, target markPoint) error {
	for _, s := range segs {
		if err := s.log.Sync(); err != nil {
			return &ErrIO{Op: "fsync", Path: s.path(logExt), Err: err}
		}
	}
	if syncDir {
		if err := l.fs.SyncDir(l.dir); err != nil {
			return &ErrIO{Op: "fsync", Path: l.dir, Err: err}
		}
	}
	if err := l.mark.write(target); err != nil {
		return &ErrIO{Op: "write and fsync", Path: l.mark.path, Err: err}
	}
	return nil
}

// poisonLocked records the log's first I/O error, fails every waiter with
// it, and returns the poison (the first error, not necessarily err).
// REQUIRES: l.mu is held.
func (l *Log) poisonLocked(err error) error {
	if l.mu.err == nil {
		l.mu.err = err
		l.failWaitersLocked(err)
	}
	return l.mu.err
}

// failWaitersLocked REQUIRES: l.mu is held.
func (l *Log) failWaitersLocked(err error) {
	for _, w := range l.mu.waiters {
		w.ch <- err
	}
	l.mu.waiters = nil
}
