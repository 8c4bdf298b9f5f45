package replication

// window is what Storage keeps in memory of the entries it can serve: each
// one's term and base offset, by index. Raft asks for terms far more often
// than for entries (every append it receives is matched by term), and the
// base offset is where the log finds an entry, so neither needs a read.
//
// slots[0] is the compaction point, as in raft's MemoryStorage: its term is
// kept because raft matches on Term(FirstIndex-1), but its entry is not
// served. A fresh log's compaction point is index 0, term 0.
type window struct {
	first uint64 // index of slots[0]
	slots []slot
}

type slot struct {
	term uint64
	base uint64 // the entry's Base in the log
}

func newWindow(index, term, base uint64) window {
	return window{first: index, slots: []slot{{term: term, base: base}}}
}

// firstIndex is the first index served.
func (w *window) firstIndex() uint64 { return w.first + 1 }

func (w *window) lastIndex() uint64 { return w.first + uint64(len(w.slots)) - 1 }

// has reports whether index is in the window, compaction point included.
func (w *window) has(index uint64) bool { return index >= w.first && index <= w.lastIndex() }

// at returns index's slot. REQUIRES: w.has(index).
func (w *window) at(index uint64) slot { return w.slots[index-w.first] }

func (w *window) append(term, base uint64) {
	w.slots = append(w.slots, slot{term: term, base: base})
}

// truncate drops the slots from index on. REQUIRES: w.first < index.
func (w *window) truncate(index uint64) {
	if index <= w.lastIndex() {
		w.slots = w.slots[:index-w.first]
	}
}

// compact makes index the compaction point. The slots are copied so that
// the dropped ones are freed rather than kept alive at the head of the
// array. REQUIRES: w.has(index).
func (w *window) compact(index uint64) {
	w.slots = append([]slot(nil), w.slots[index-w.first:]...)
	w.first = index
}
