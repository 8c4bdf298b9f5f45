package replication

import "go.etcd.io/raft/v3/raftpb"

// recentEntries keeps the latest entries Storage appended, as raft handed
// them over, up to maxRecentBytes of data. raft reads back almost every
// entry soon after it is persisted: a committed entry to apply (raft drops
// its own copy once the entry is stable, and an entry commits a round trip
// later), and on the leader the appends to a follower a little behind.
// Served from here, such a read costs no log read, and no decoding of the
// records and encoding them again into an entry.
type recentEntries struct {
	ents  []raftpb.Entry // consecutive indexes
	bytes int
}

// maxRecentBytes bounds the entries' data kept: a few of raft's 1 MiB
// appends, so what was persisted in the last Readies is still here when
// it commits.
const maxRecentBytes = 4 << 20

// add appends entries that follow the kept ones (or replace the kept tail
// from their first index), then drops the oldest beyond the bound.
func (r *recentEntries) add(ents []raftpb.Entry) {
	if len(ents) == 0 {
		return
	}
	if len(r.ents) > 0 {
		first := r.ents[0].Index
		switch at := ents[0].Index; {
		case at < first || at > r.last()+1:
			r.reset()
		case at <= r.last():
			r.truncate(at)
		}
	}
	for _, e := range ents {
		r.ents = append(r.ents, e)
		r.bytes += len(e.Data)
	}
	if r.bytes <= maxRecentBytes {
		return
	}
	// Down to three quarters of the bound, so that the copy of what stays
	// happens once in many appends, not on each.
	drop := 0
	for r.bytes > maxRecentBytes*3/4 && drop < len(r.ents)-1 {
		r.bytes -= len(r.ents[drop].Data)
		drop++
	}
	r.ents = append(r.ents[:0:0], r.ents[drop:]...)
}

func (r *recentEntries) last() uint64 { return r.ents[len(r.ents)-1].Index }

// truncate drops the kept entries from index on.
func (r *recentEntries) truncate(index uint64) {
	for len(r.ents) > 0 && r.last() >= index {
		r.bytes -= len(r.ents[len(r.ents)-1].Data)
		r.ents = r.ents[:len(r.ents)-1]
	}
}

// dropThrough forgets the entries up to index (compacted).
func (r *recentEntries) dropThrough(index uint64) {
	if len(r.ents) == 0 || r.ents[0].Index > index {
		return
	}
	if r.last() <= index {
		r.reset()
		return
	}
	n := int(index - r.ents[0].Index + 1)
	for _, e := range r.ents[:n] {
		r.bytes -= len(e.Data)
	}
	r.ents = append(r.ents[:0:0], r.ents[n:]...)
}

func (r *recentEntries) reset() { r.ents, r.bytes = nil, 0 }

// get returns the entries [lo, hi) within maxSize as raft limits them (the
// first always), when every one is kept; ok is false otherwise. The slice
// is the caller's; the entries' data is shared and must not be modified.
func (r *recentEntries) get(lo, hi, maxSize uint64) (out []raftpb.Entry, ok bool) {
	if len(r.ents) == 0 || lo < r.ents[0].Index || hi > r.last()+1 || lo >= hi {
		return nil, false
	}
	ents := r.ents[lo-r.ents[0].Index : hi-r.ents[0].Index]
	var size uint64
	n := 0
	for n < len(ents) {
		size += uint64(ents[n].Size())
		if n > 0 && size > maxSize {
			break
		}
		n++
		if size >= maxSize {
			break
		}
	}
	return append([]raftpb.Entry(nil), ents[:n]...), true
}
