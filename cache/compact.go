package cache

import "slices"

// History bounds: how many changes per key compaction keeps below its
// horizon (a cache's --history). One is the newest value only; more lets a
// watcher that resumes below the horizon still see the key's last changes.
const (
	DefaultHistory = 1
	MaxHistory     = 64
)

// Planner decides what compaction keeps of a log, in two passes over the
// records below the horizon: Observe each in offset order, then Decide
// each. Its rule keeps the state at the horizon exact (every key at its
// version, every counter at its total), so every record at or above the
// horizon, kept as it is, applies to the compacted log exactly as it did
// to the whole one: a put-if there still finds the version it named.
//
// Below the horizon it keeps, per key, the newest History records that
// changed it (none if the newest is a delete or an expiry: the key is
// absent and nothing older is kept to bring it back), each rewritten to
// the effect it had (no condition); per counter the newest record, as a
// set to its total; of a commit the ops it keeps, without the event (an
// event below the horizon is history no watcher can resume to). A record
// that changed nothing is dropped.
//
// Memory is one window of History offsets per key below the horizon.
type Planner struct {
	horizon uint64
	history int
	// x replays the records below the horizon to learn what each changed.
	x        *Index
	windows  map[string]*window
	counters map[string]Counter
}

type window struct {
	offsets []uint64 // the newest changes, oldest first
	deleted bool     // whether the newest change deleted the key
}

// NewPlanner returns a planner for compaction below horizon keeping
// history (at least 1) changes per key; opts must be the shard index's, so
// that the planner's replay refuses what the shard's did.
func NewPlanner(horizon uint64, history int, opts ...Option) *Planner {
	return &Planner{
		horizon: horizon, history: max(history, 1), x: New(opts...),
		windows: map[string]*window{}, counters: map[string]Counter{},
	}
}

// Horizon is the offset below which the planner compacts.
func (p *Planner) Horizon() uint64 { return p.horizon }

// Observe is the first pass: every record below the horizon, in offset
// order. Records at or above it are ignored.
func (p *Planner) Observe(offset uint64, r *Record) {
	if offset >= p.horizon {
		return
	}
	res := p.x.Apply(offset, r)
	if res.Err != nil {
		return
	}
	if r.Kind == KindCounterAdd || r.Kind == KindCounterSet {
		p.counters[r.Key] = Counter{Value: res.Counter, Version: offset}
		return
	}
	for _, c := range res.Changes {
		w := p.windows[c.Key]
		if w == nil {
			w = &window{}
			p.windows[c.Key] = w
		}
		if len(w.offsets) == p.history {
			w.offsets = append(w.offsets[:0], w.offsets[1:]...)
		}
		w.offsets = append(w.offsets, offset)
		w.deleted = c.Deleted
	}
}

// Decide is the second pass: whether the record at offset stays, and as
// what. A record at or above the horizon stays as it is.
func (p *Planner) Decide(offset uint64, r *Record) (Record, bool) {
	if offset >= p.horizon {
		return *r, true
	}
	out := *r
	out.Cond = Cond{}
	switch r.Kind {
	case KindPut, KindDelete, KindExpire:
		return out, p.keeps(r.Key, offset)
	case KindCounterAdd, KindCounterSet:
		c, ok := p.counters[r.Key]
		if !ok || c.Version != offset {
			return Record{}, false
		}
		out.Kind, out.Delta = KindCounterSet, c.Value
		return out, true
	case KindCommit:
		out.Event, out.Ops = nil, nil
		for _, op := range r.Ops {
			if p.keeps(op.Key, offset) {
				out.Ops = append(out.Ops, op)
			}
		}
		return out, len(out.Ops) > 0
	}
	return Record{}, false
}

func (p *Planner) keeps(key string, offset uint64) bool {
	w := p.windows[key]
	return w != nil && !w.deleted && slices.Contains(w.offsets, offset)
}
