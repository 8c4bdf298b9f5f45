package persistence

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"time"
)

// A log of raft entries is the storage of one shard's raft group:
// every entry is one V3 batch (see batch.go), so a replica writes each
// record once, and the log is both raft's log and the shard's offsets. An
// entry's records take offsets as a plain batch's do; an entry without
// records (EntryEmpty, the conf changes) takes none, so its Base is the
// offset of the next record, shared with the batch after it. Readers of
// records (Read, Cursor, OffsetForTime, Stamps) skip such entries; readers
// of entries (EntryHeaders, ReadEntries) see them all.
//
// A log holds raft entries or plain batches (Append), never both
// (ErrMixedFormats): its first batch decides, until TruncateEntries empties
// it.

// EntryKind is what a raft entry holds.
type EntryKind uint8

const (
	EntryRecords      EntryKind = iota // records (raftpb.EntryNormal with data); at least one record
	EntryEmpty                         // raftpb.EntryNormal without data: a new leader's first entry; no records
	EntryConfChange                    // raftpb.EntryConfChange; Control holds its bytes; no records
	EntryConfChangeV2                  // raftpb.EntryConfChangeV2; Control holds its bytes; no records
)

func (k EntryKind) String() string {
	switch k {
	case EntryRecords:
		return "records"
	case EntryEmpty:
		return "empty"
	case EntryConfChange:
		return "conf_change"
	case EntryConfChangeV2:
		return "conf_change_v2"
	}
	return fmt.Sprintf("entry_kind(%d)", uint8(k))
}

// EntryMeta is what a raft entry's batch carries besides its records.
type EntryMeta struct {
	Index, Term uint64
	Kind        EntryKind
	Control     []byte // a conf change's bytes (nil when it has none); nil otherwise
	// Attributed: the records are stored joined with their attributes
	// (JoinRecords); readers of records get the values (Read) and the
	// attributes (Record.Attrs), ReadEntries the stored form.
	Attributed bool
}

// Entry is one raft entry as stored: its meta, where its records start, and
// what it holds.
type Entry struct {
	EntryMeta
	// Base is the offset of its first record; for an entry without
	// records, the log's next offset when it was written.
	Base    uint64
	Time    time.Time // stored time (as Appended.Time)
	Stamp   *Stamp    // an idempotent producer's stamp, or nil
	Records [][]byte  // nil from EntryHeaders
	// Compacted: compaction dropped or rewrote some of its records
	// (batch.go's CE). Only EntryHeaders returns such an entry.
	Compacted bool
}

// logFormat is which batches a log holds.
type logFormat uint8

const (
	formatUnknown logFormat = iota // no batch yet, or TruncateEntries removed them all
	formatPlain                    // V1 and V2 batches (Append)
	formatEntries                  // V3 batches (AppendEntry)
)

// lastEntry is an entry's header as the log keeps it: with its own copy of
// Control, and its stamp by value, so that keeping the last entry costs
// AppendEntry no allocation.
type lastEntry struct {
	EntryMeta
	base    uint64
	time    int64 // unix µs
	stamp   Stamp
	stamped bool
}

// lastEntryOf copies v's header, which may alias a read buffer.
func lastEntryOf(v batchView) lastEntry {
	e := lastEntry{EntryMeta: v.meta, base: v.base, time: v.time}
	e.Control = cloneControl(v.meta.Control)
	if v.stamp != nil {
		e.stamp, e.stamped = *v.stamp, true
	}
	return e
}

func (e lastEntry) entry() Entry {
	out := Entry{EntryMeta: e.EntryMeta, Base: e.base, Time: time.UnixMicro(e.time)}
	out.Control = cloneControl(e.Control)
	if e.stamped {
		s := e.stamp
		out.Stamp = &s
	}
	return out
}

// cloneControl copies control bytes, nil when there are none, as decoding
// gives them.
func cloneControl(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return bytes.Clone(b)
}

// checkEntryShape says why an entry's kind, record count, control bytes and
// stamp do not go together, or "". AppendEntry and the decoder apply the
// same rules, so a batch written is a batch read.
func checkEntryShape(meta EntryMeta, count int, stamped bool) string {
	switch {
	case meta.Index == 0:
		return "index 0 (raft's first entry is 1)"
	case meta.Kind > EntryConfChangeV2:
		return fmt.Sprintf("unknown kind %d", uint8(meta.Kind))
	case meta.Kind == EntryRecords && count == 0:
		return "a records entry without records"
	case meta.Kind != EntryRecords && count > 0:
		return fmt.Sprintf("an %v entry with records", meta.Kind)
	case meta.Kind != EntryRecords && stamped:
		return fmt.Sprintf("an %v entry with a stamp", meta.Kind)
	case (meta.Kind == EntryRecords || meta.Kind == EntryEmpty) && len(meta.Control) > 0:
		return fmt.Sprintf("an %v entry with control bytes", meta.Kind)
	case meta.Kind != EntryRecords && meta.Attributed:
		return fmt.Sprintf("an %v entry with attributed records", meta.Kind)
	}
	return ""
}

// AppendEntry writes one raft entry as one batch (V3) at the log's next
// offset and returns once the bytes are in the page cache; its records take
// offsets from NextOffset on, as Append's do. Records only for EntryRecords
// (at least one); none for the other kinds, which take no offset
// (a.Base == a.Next). Control only for the conf change kinds; a stamp only
// with records. Anything else is ErrBadEntry.
//
// meta.Index must be one more than the last entry's Index (ErrEntryIndex);
// any index goes for the first entry of an empty log, and right after
// TruncateEntries any index above the last remaining entry's (indexes never
// go back: recovery and the lookups rely on their order). Index 0 is
// refused: raft's entries start at 1. Terms never go back either.
//
// A log of plain batches refuses it (ErrMixedFormats). Durability is as for
// Append: WaitDurable(a.Next) right after it, Sync or WaitEntryDurable learn
// when the entry is on the device, whatever its kind. A failed write returns
// ErrIO and poisons the log.
//
// It costs what Append costs: for an entry with records it allocates
// nothing once the log is warm. A conf change's Control is copied, for
// LastEntry.
func (l *Log) AppendEntry(meta EntryMeta, records [][]byte, now time.Time, stamp *Stamp) (Appended, error) {
	if reason := checkEntryShape(meta, len(records), stamp != nil); reason != "" {
		return Appended{}, fmt.Errorf("%w: %s", ErrBadEntry, reason)
	}
	if n := entryEncodedLen(meta, records, stamp != nil); n > maxBatchBytes {
		return Appended{}, fmt.Errorf("%w: %d bytes, at most %d", ErrBatchTooLarge, n, maxBatchBytes)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.appendableLocked(formatEntries); err != nil {
		return Appended{}, err
	}
	if err := l.followsLastLocked(meta); err != nil {
		return Appended{}, err
	}
	base := l.mu.next
	t := max(now.UnixMicro(), l.mu.lastTime)
	buf := l.keepScratchLocked(appendEntryBatch(l.mu.scratch[:0], base, t, meta, records, stamp))
	if err := l.writeLocked(buf, base, len(records), t); err != nil {
		return Appended{}, err
	}
	l.mu.format = formatEntries
	l.mu.last = lastEntry{EntryMeta: meta, base: base, time: t}
	l.mu.last.Control = cloneControl(meta.Control)
	if stamp != nil {
		l.mu.last.stamp, l.mu.last.stamped = *stamp, true
	}
	l.mu.hasLast, l.mu.anyIndex = true, false
	return Appended{Base: base, Next: l.mu.next, Time: time.UnixMicro(t)}, nil
}

// followsLastLocked says why meta cannot follow the last entry, if it
// cannot. REQUIRES: l.mu is held.
func (l *Log) followsLastLocked(meta EntryMeta) error {
	if !l.mu.hasLast {
		return nil
	}
	last := l.mu.last
	if meta.Index != last.Index+1 && !(l.mu.anyIndex && meta.Index > last.Index) {
		return &ErrEntryIndex{Last: last.Index, Got: meta.Index}
	}
	if meta.Term < last.Term {
		return fmt.Errorf("%w: term %d below the last entry's %d", ErrBadEntry, meta.Term, last.Term)
	}
	return nil
}

// LastEntry is the last entry's meta, Base, Time and Stamp (Records nil),
// if the log has entries. Open finds it by reading the log's tail.
func (l *Log) LastEntry() (Entry, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.mu.hasLast {
		return Entry{}, false
	}
	return l.mu.last.entry(), true
}

// SetEntryFloor tells the log that entries up to index are committed:
// TruncateEntries refuses to remove them (ErrBelowFloor). The floor only
// rises (a lower index is ignored) and is not stored: after Open it is 0
// until the replication layer sets it from its own commit index.
func (l *Log) SetEntryFloor(index uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mu.floor = max(l.mu.floor, index)
}

// EntryHeaders walks the entry batches from the first whose Base is at
// least from (a Base the caller remembered, or the log's start), in log
// order, reading headers only (no records, no checksums), so a replication
// layer can rebuild its index → base map at open; fn returning false stops.
// Entries without records share their Base with the batch after them, so a
// walk from an entry's Base may begin with the entries without records just
// before it. The walk goes on to what is appended meanwhile.
//
// from must be between StartOffset and NextOffset. A log of plain batches is
// ErrMixedFormats; a header that does not parse or whose offsets do not
// follow on is ErrCorrupt; TruncateEntries running meanwhile is
// ErrTruncated (walk again). Like a Cursor, the walk holds the segment it
// reads against retention, and moving on to a segment retention removed is
// ErrOffsetTooOld.
func (l *Log) EntryHeaders(from uint64, fn func(Entry) bool) (err error) {
	w, err := l.walkEntries(from)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := w.close(); err == nil {
			err = cerr
		}
	}()
	for {
		v, _, _, ok, err := w.next()
		if err != nil || !ok {
			return err
		}
		if v.base >= from && !fn(headerEntry(v)) {
			return nil
		}
	}
}

// ReadEntries returns consecutive entries starting with the one whose Index
// is index, found by reading headers forward from offset base (that entry's
// Base, or any offset before it), up to maxBytes of record values and
// control bytes (at least one entry, whatever its size; maxBytes <= 0 means
// just that one). Every batch returned is checked against its checksum.
// Records and Control are copies the caller owns.
//
// It stops at the log's end, and before an index gap TruncateEntries let in.
// An index the log does not hold at or after base is ErrNoEntry. A read
// that TruncateEntries ran under is done again (up to maxTruncatedRetries
// times), so the entries returned were all in the log together.
func (l *Log) ReadEntries(base, index uint64, maxBytes int) ([]Entry, error) {
	for attempt := 0; ; attempt++ {
		epoch := l.truncations.Load()
		entries, err := l.readEntries(base, index, maxBytes)
		if attempt == maxTruncatedRetries || l.truncations.Load() == epoch {
			return entries, err
		}
	}
}

func (l *Log) readEntries(base, index uint64, maxBytes int) (entries []Entry, err error) {
	w, err := l.walkEntries(base)
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := w.close(); err == nil {
			err = cerr
		}
	}()
	size := 0
	for {
		v, pos, n, ok, err := w.next()
		if err != nil && len(entries) > 0 {
			break // the error comes back on the next call
		}
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		if len(entries) == 0 {
			if v.base < base || v.meta.Index < index {
				continue
			}
			if v.meta.Index > index {
				break
			}
			if v.sparse {
				return nil, fmt.Errorf("%w: index %d", ErrEntryCompacted, index)
			}
		} else if v.meta.Index != entries[len(entries)-1].Index+1 || v.sparse {
			break
		}
		full, err := w.batchAt(pos, n)
		if err != nil && len(entries) > 0 {
			break
		}
		if err != nil {
			return nil, err
		}
		vsize := len(full.records) - recordHeaderLen*int(full.count) + len(full.meta.Control)
		if len(entries) > 0 && (maxBytes <= 0 || size+vsize > maxBytes) {
			break
		}
		entries = append(entries, copyEntry(full))
		size += vsize
	}
	if len(entries) == 0 {
		return nil, fmt.Errorf("%w: index %d at or after offset %d", ErrNoEntry, index, base)
	}
	return entries, nil
}

// headerEntry is v's entry without records, its Control copied.
func headerEntry(v batchView) Entry {
	e := Entry{EntryMeta: v.meta, Base: v.base, Time: time.UnixMicro(v.time), Stamp: v.stamp, Compacted: v.sparse}
	e.Control = cloneControl(v.meta.Control)
	return e
}

// copyEntry is v's entry with copies of its records, all in one array.
func copyEntry(v batchView) Entry {
	e := headerEntry(v)
	if v.count == 0 {
		return e
	}
	values := make([]byte, 0, len(v.records)-recordHeaderLen*int(v.count))
	e.Records = make([][]byte, 0, v.count)
	for _, r := range v.stored() {
		values = append(values, r...)
		e.Records = append(e.Records, values[len(values)-len(r):len(values):len(values)])
	}
	return e
}

// entryWalk reads the batches of an entry log in order, from the first
// whose base is at least the offset it started at. Like a Cursor it holds
// the segment it reads, so retention cannot unlink it meanwhile; unlike one
// it gives up (ErrTruncated) when TruncateEntries runs, rather than
// repositioning, since its caller has seen entries that may be gone.
type entryWalk struct {
	l       *Log
	seg     *segment
	pos     int64
	posBase uint64 // the base the batch at pos must have
	limit   int64  // how far seg may be read
	epoch   uint64 // l.truncations when the walk started
	r       chunkReader
	err     error // a deferred unlink that failed, for close
}

func (l *Log) walkEntries(from uint64) (*entryWalk, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.mu.closed:
		return nil, ErrClosed
	case l.mu.format == formatPlain:
		return nil, ErrMixedFormats
	}
	if err := l.checkReadableLocked(from); err != nil {
		return nil, err
	}
	// The first segment that can hold a batch at from or later: one that
	// ends at from may end with entries without records based there.
	segs := l.mu.segments
	s := segs[sort.Search(len(segs), func(i int) bool { return segs[i].next >= from })]
	s.refs++
	pos, base := s.locateBeforeLocked(from)
	w := &entryWalk{l: l, seg: s, pos: pos, posBase: base, limit: s.size, epoch: l.truncations.Load()}
	w.r = chunkReader{f: s.log, size: s.size, chunk: minReadChunk}
	return w, nil
}

// next returns the header of the next batch, with its position and length,
// or ok false at the log's end. Its Control aliases the walk's buffer until
// the next call.
func (w *entryWalk) next() (v batchView, pos int64, n int, ok bool, err error) {
	if w.pos >= w.limit {
		if err := w.advance(); err != nil {
			return batchView{}, 0, 0, false, err
		}
		if w.pos >= w.limit {
			return batchView{}, 0, 0, false, nil
		}
	}
	pos = w.pos
	v, n, err = w.r.headerAt(pos)
	if err == nil && v.base != w.posBase {
		err = &offsetMismatch{got: v.base, want: w.posBase}
	}
	if err != nil {
		return batchView{}, 0, 0, false, w.failure(pos, err)
	}
	if !v.entry {
		return batchView{}, 0, 0, false, &ErrCorrupt{Segment: w.seg.name(), Position: pos, Reason: "a plain batch among raft entries"}
	}
	w.pos += int64(n)
	w.posBase = v.next()
	return v, pos, n, true, nil
}

// batchAt decodes, checksum and all, the batch next returned at pos.
func (w *entryWalk) batchAt(pos int64, n int) (batchView, error) {
	frame, err := w.r.bytes(pos, n)
	var v batchView
	if err == nil {
		v, _, err = decodeBatch(frame)
	}
	if err != nil {
		return batchView{}, w.failure(pos, err)
	}
	return v, nil
}

// failure reports a batch the walk could not read: ErrTruncated if
// TruncateEntries ran meanwhile (the bytes may have been cut or rewritten),
// else as readFailure does.
func (w *entryWalk) failure(pos int64, err error) error {
	if w.l.truncations.Load() != w.epoch {
		return ErrTruncated
	}
	return readFailure(w.seg, pos, err)
}

// advance refreshes how far the walk may read, first moving it to the next
// segment if it has read all of a sealed one.
func (w *entryWalk) advance() error {
	l := w.l
	l.mu.Lock()
	switch {
	case l.mu.closed:
		l.mu.Unlock()
		return ErrClosed
	case l.truncations.Load() != w.epoch:
		l.mu.Unlock()
		return ErrTruncated
	}
	var done []*segment
	for segs := l.mu.segments; w.pos >= w.seg.size && w.seg != segs[len(segs)-1]; {
		// Retention may have removed w.seg and the segments after it:
		// the walk must not skip to what is left.
		if err := l.checkReadableLocked(w.posBase); err != nil {
			l.mu.Unlock()
			w.finalize(done)
			return err
		}
		s := segs[sort.Search(len(segs), func(i int) bool { return segs[i].base > w.seg.base })]
		s.refs++
		if l.releaseLocked(w.seg) {
			done = append(done, w.seg)
		}
		w.seg, w.pos, w.posBase = s, 0, s.base
	}
	w.limit = w.seg.size
	l.mu.Unlock()
	w.r = chunkReader{f: w.seg.log, size: w.limit, chunk: minReadChunk}
	w.finalize(done)
	return nil
}

func (w *entryWalk) finalize(segs []*segment) {
	for _, s := range segs {
		w.err = errors.Join(w.err, s.finalize(w.l.fs))
	}
}

func (w *entryWalk) close() error { return errors.Join(w.err, w.l.release(w.seg)) }
