package actors

import (
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// Directory records every actor a broker spawns: its path, kind, mailbox,
// what it serves, and its restarts. The supervision tree is built from it,
// and the metrics read mailbox depths from it, without asking any actor: an
// actor stuck in Receive can still be inspected. Entries whose mailbox has
// closed (the actor stopped) are pruned when listed.
type Directory struct {
	mu      sync.Mutex
	entries map[string]*Entry
	// pruneAt is the size at which Add next drops stopped actors' entries:
	// without it a broker nobody scrapes kept an entry for every connection
	// and subscription it ever had.
	pruneAt int
}

// minPruneAt is the smallest size at which Add prunes.
const minPruneAt = 1024

// Entry is one actor's record. Labels are set at registration and never
// change; the counters are atomics.
type Entry struct {
	PID     *actor.PID
	Kind    Kind
	Mailbox *Mailbox // nil for actors on protoactor's default mailbox
	Labels  map[string]string

	restarts    atomic.Int64
	lastFailure atomic.Pointer[Failure]
}

// Failure is an actor's most recent crash.
type Failure struct {
	At     time.Time `json:"at"`
	Reason string    `json:"reason"`
}

// Restarts counts the supervisor's restarts of this actor.
func (e *Entry) Restarts() int64 { return e.restarts.Load() }

// LastFailure is the most recent crash, or nil.
func (e *Entry) LastFailure() *Failure { return e.lastFailure.Load() }

// NewDirectory returns an empty directory.
func NewDirectory() *Directory { return &Directory{entries: make(map[string]*Entry)} }

// Add records an actor. Registering a path again replaces the old entry
// (a name reused after the actor stopped).
func (d *Directory) Add(pid *actor.PID, kind Kind, mb *Mailbox, labels map[string]string) {
	if d == nil || pid == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.entries[pid.Id] = &Entry{PID: pid, Kind: kind, Mailbox: mb, Labels: labels}
	if len(d.entries) >= max(d.pruneAt, minPruneAt) {
		// Amortised: the next prune waits until the live ones doubled.
		d.pruneLocked()
		d.pruneAt = 2 * len(d.entries)
	}
}

// pruneLocked drops the entries of stopped actors. REQUIRES: d.mu is held.
func (d *Directory) pruneLocked() {
	for path, e := range d.entries {
		if e.Mailbox != nil && e.Mailbox.IsClosed() {
			delete(d.entries, path)
		}
	}
}

// Len is the number of entries held, stopped actors' included until pruned.
func (d *Directory) Len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.entries)
}

// RecordFailure counts a supervisor decision on the actor at path.
func (d *Directory) RecordFailure(path string, directive actor.Directive, reason string) {
	if d == nil {
		return
	}
	d.mu.Lock()
	e := d.entries[path]
	d.mu.Unlock()
	if e == nil {
		return
	}
	if directive == actor.RestartDirective || directive == actor.ResumeDirective {
		e.restarts.Add(1)
	}
	e.lastFailure.Store(&Failure{At: time.Now(), Reason: reason})
}

// Lookup returns the live entry at path.
func (d *Directory) Lookup(path string) (*Entry, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e, ok := d.entries[path]
	if ok && e.Mailbox != nil && e.Mailbox.IsClosed() {
		delete(d.entries, path)
		return nil, false
	}
	return e, ok
}

// List returns the live entries sorted by path, so a parent precedes its
// children.
func (d *Directory) List() []*Entry {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]*Entry, 0, len(d.entries))
	for path, e := range d.entries {
		if e.Mailbox != nil && e.Mailbox.IsClosed() {
			delete(d.entries, path)
			continue
		}
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID.Id < out[j].PID.Id })
	return out
}

// Parent is the path of an actor's parent: protoactor names a child
// parent + "/" + name.
func Parent(path string) string {
	if i := strings.LastIndexByte(path, '/'); i > 0 {
		return path[:i]
	}
	return ""
}

// KindTotals sums a kind's live mailboxes.
type KindTotals struct {
	Mailboxes int // live actors of the kind with a mailbox of ours
	Depth     int
	Bytes     int64
	PeakBytes int64 // the largest PeakBytes of any live mailbox of the kind
	Capacity  int
	Dropped   uint64
	Evicted   uint64
}

// Totals sums the live mailboxes of each kind.
func (d *Directory) Totals() map[Kind]KindTotals {
	out := make(map[Kind]KindTotals)
	for _, e := range d.List() {
		t := out[e.Kind]
		if m := e.Mailbox; m != nil {
			t.Mailboxes++
			t.Depth += m.UserMessageCount()
			t.Bytes += m.Bytes()
			t.PeakBytes = max(t.PeakBytes, m.PeakBytes())
			t.Capacity += m.Config().Capacity
			t.Dropped += m.Dropped()
			t.Evicted += m.Evicted()
		}
		out[e.Kind] = t
	}
	return out
}
