package persistence

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"time"
)

// Read caps: zero or negative arguments to Read and Cursor.Next mean these.
const (
	// DefaultMaxRecordsPerRead bounds the records of one read, whatever
	// its byte cap allows.
	DefaultMaxRecordsPerRead = 10000
	DefaultMaxReadBytes      = 1 << 20
)

// Read sizes: a cursor reads at least minReadChunk at a time so that small
// batches do not cost a syscall each, and at most maxReadChunk beyond one
// batch so that a page never reads far past what it returns.
const (
	minReadChunk = 64 << 10
	maxReadChunk = 4 << 20
)

// Record is one record read back.
type Record struct {
	Offset uint64
	Time   time.Time // the batch's append time
	Value  []byte    // owned by the caller; the log keeps no reference
	// Attrs is the record's attributes (EncodeAttrs' bytes; DecodeAttrs
	// reads them), nil when it has none. Owned like Value.
	Attrs []byte
}

// Page is the result of one read.
type Page struct {
	Records []Record
	Next    uint64 // the offset to read from next
}

// Read returns records from offset from on, at most maxRecords of them and,
// past the first, at most maxBytes of values. It never waits: at the log's
// end it returns an empty page. A read below StartOffset is ErrOffsetTooOld,
// beyond NextOffset ErrOffsetInFuture, both carrying the nearest offset that
// works. Every batch is checked against its checksum; a damaged one is
// ErrCorrupt, returned once the records before it have been returned.
//
// Read sees every appended record, durable or not; a reader that must not
// expose records a crash could still take back stops at Synced.
func (l *Log) Read(from uint64, maxRecords, maxBytes int) (Page, error) {
	c, err := l.Cursor(from)
	if err != nil {
		return Page{Next: from}, err
	}
	page, err := c.Next(maxRecords, maxBytes)
	if cerr := c.Close(); err == nil {
		err = cerr
	}
	return page, err
}

// Cursor reads a log forward page by page. It holds the segment it is
// reading: retention may remove that segment from the log meanwhile, but its
// file is unlinked only when the cursor moves past it or is closed, so a
// replay that started never loses the segment under it. Moving on to a
// segment retention already removed is ErrOffsetTooOld. A Cursor is for one
// goroutine at a time; Close it when done.
//
// TruncateEntries may remove records from under a cursor. One that has not
// returned any of them carries on where its next record now is (the
// records appended after the truncation). One that has returned some fails
// with ErrTruncated from then on: its reader has seen records the log no
// longer holds, and offsets it has passed may now hold different ones. A
// page read while a truncation ran loses the records at or past the cut,
// which the next page reads again.
type Cursor struct {
	l       *Log
	seg     *segment // nil once closed
	pos     int64    // where the batch holding next starts, or a batch before it
	posBase uint64   // the offset of the batch at pos
	next    uint64   // the next offset to return
	err     error    // a deferred unlink that failed, for Close
	epoch   uint64   // l.truncations when the cursor last checked its position
	// cut, guarded by l.mu, is the lowest end TruncateEntries left the log
	// at since the cursor last checked, or noCut.
	cut uint64
}

// noCut is a Cursor's cut when no truncation is pending for it.
const noCut = ^uint64(0)

// Cursor returns a cursor at offset from, which must be between StartOffset
// and NextOffset.
func (l *Log) Cursor(from uint64) (*Cursor, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.closed {
		return nil, ErrClosed
	}
	if err := l.checkReadableLocked(from); err != nil {
		return nil, err
	}
	s := l.segmentForLocked(from)
	s.refs++
	pos, base := s.locateLocked(from)
	c := &Cursor{l: l, seg: s, pos: pos, posBase: base, next: from, epoch: l.truncations.Load(), cut: noCut}
	l.mu.cursors[c] = struct{}{}
	return c, nil
}

// Offset is the next offset the cursor returns.
func (c *Cursor) Offset() uint64 { return c.next }

// Close releases the cursor's segment, unlinking it if retention or
// TruncateEntries removed it meanwhile. It returns an unlink that failed.
func (c *Cursor) Close() error {
	if c.seg == nil {
		return c.err
	}
	l := c.l
	l.mu.Lock()
	delete(l.mu.cursors, c)
	last := l.releaseLocked(c.seg)
	l.mu.Unlock()
	var err error
	if last {
		err = c.seg.finalize(l.fs)
	}
	c.seg = nil
	return errors.Join(c.err, err)
}

// Next returns the next page, with Read's caps and errors.
func (c *Cursor) Next(maxRecords, maxBytes int) (Page, error) {
	if c.seg == nil {
		return Page{Next: c.next}, ErrClosed
	}
	from := c.next
	page, err := c.read(maxRecords, maxBytes)
	if c.l.truncations.Load() != c.epoch {
		return c.trimTruncated(from, page, err)
	}
	return page, err
}

// trimTruncated finishes a page read while TruncateEntries ran: the records
// at or past its cut may be removed ones or bytes being rewritten, so they
// are dropped, and so is a read error, which the cut may explain. The next
// call repositions the cursor (advance) and reads them again, or reports
// real damage then.
func (c *Cursor) trimTruncated(from uint64, page Page, err error) (Page, error) {
	c.l.mu.Lock()
	cut := c.cut
	c.l.mu.Unlock()
	switch {
	case cut == noCut:
		return page, err
	case from > cut:
		return Page{Next: from}, ErrTruncated
	}
	n := sort.Search(len(page.Records), func(i int) bool { return page.Records[i].Offset >= cut })
	page.Records = page.Records[:n]
	c.next = min(c.next, cut)
	page.Next = c.next
	return page, nil
}

// read is Next without the truncation check.
func (c *Cursor) read(maxRecords, maxBytes int) (Page, error) {
	if maxRecords <= 0 {
		maxRecords = DefaultMaxRecordsPerRead
	}
	if maxBytes <= 0 {
		maxBytes = DefaultMaxReadBytes
	}
	var page Page
	var r chunkReader
	size := 0
	limit := int64(-1)
	for full := false; !full; {
		if c.pos >= limit {
			var err error
			if limit, err = c.advance(); err != nil {
				if len(page.Records) > 0 {
					break // the error comes back on the next call
				}
				return Page{Next: c.next}, err
			}
			if c.pos >= limit {
				break // at the log's end
			}
			// fresh: values alias the buffers, so none is ever reused.
			r = chunkReader{f: c.seg.log, size: limit, chunk: min(max(maxBytes, minReadChunk), maxReadChunk), fresh: true}
		}
		v, n, err := r.batchAt(c.pos)
		if err == nil && v.base != c.posBase {
			err = &offsetMismatch{got: v.base, want: c.posBase}
		}
		if err != nil {
			if len(page.Records) > 0 {
				break
			}
			return Page{Next: c.next}, readFailure(c.seg, c.pos, err)
		}
		if v.next() > c.next {
			if page.Records == nil {
				// Size the page from the first batch's record size, so
				// a long page does not grow through many copies.
				held := max(int(v.held()), 1)
				avg := max(len(v.records)/held, 1)
				page.Records = make([]Record, 0, min(maxRecords, max(held, maxBytes/avg)+1))
			}
			t := time.UnixMicro(v.time)
			for off, rec := range v.withAttrs() {
				value := rec[0]
				if off < c.next {
					continue
				}
				if len(page.Records) > 0 && (len(page.Records) >= maxRecords || size+len(value) > maxBytes) {
					full = true
					break
				}
				page.Records = append(page.Records, Record{Offset: off, Time: t, Value: value, Attrs: rec[1]})
				size += len(value)
				c.next = off + 1
			}
			if !full {
				// A compacted batch may end in a gap: its span, not its
				// last record, is where the next batch starts.
				c.next = v.next()
			}
		}
		if c.next >= v.next() {
			c.pos += int64(n)
			c.posBase = v.next()
		}
		full = full || len(page.Records) >= maxRecords || size >= maxBytes
	}
	page.Next = c.next
	return page, nil
}

// advance returns how far the cursor's segment may be read, first moving
// the cursor back onto the log if TruncateEntries cut it, and to the next
// segment if it has read all of a sealed one.
func (c *Cursor) advance() (int64, error) {
	l := c.l
	l.mu.Lock()
	if l.mu.closed {
		l.mu.Unlock()
		return 0, ErrClosed
	}
	var done []*segment
	fail := func(err error) (int64, error) {
		l.mu.Unlock()
		c.finalize(done)
		return 0, err
	}
	if c.cut != noCut {
		if c.next > c.cut {
			return fail(ErrTruncated) // and again on every call: cut stays
		}
		c.cut = noCut
		if err := l.checkReadableLocked(c.next); err != nil {
			return fail(err)
		}
		done = c.moveToLocked(l.segmentForLocked(c.next), done)
	}
	c.epoch = l.truncations.Load()
	for c.pos >= c.seg.size && c.seg != l.mu.segments[len(l.mu.segments)-1] {
		if err := l.checkReadableLocked(c.next); err != nil {
			return fail(err)
		}
		done = c.moveToLocked(l.segmentForLocked(c.next), done)
	}
	limit := c.seg.size
	l.mu.Unlock()
	c.finalize(done)
	return limit, nil
}

// moveToLocked points the cursor at c.next in s, trading its reference to
// its old segment for one to s; a segment whose last reference went is
// added to done, for finalize. REQUIRES: l.mu is held.
func (c *Cursor) moveToLocked(s *segment, done []*segment) []*segment {
	if s != c.seg {
		s.refs++
		if c.l.releaseLocked(c.seg) {
			done = append(done, c.seg)
		}
		c.seg = s
	}
	c.pos, c.posBase = s.locateLocked(c.next)
	return done
}

func (c *Cursor) finalize(segs []*segment) {
	for _, s := range segs {
		c.err = errors.Join(c.err, s.finalize(c.l.fs))
	}
}

// OffsetForTime returns the offset of the first record appended at or after
// t, StartOffset if t is before every retained record (retention deleted
// the older ones), and NextOffset if every record is older. Batch times never
// decrease (Append clamps them), so the time index answers with one binary
// search and a scan of at most one index interval.
//
// A lookup that fails while TruncateEntries rewrites the segment it reads
// is tried again, up to maxTruncatedRetries times.
func (l *Log) OffsetForTime(t time.Time) (uint64, error) {
	us := unixMicro(t)
	for attempt := 0; ; attempt++ {
		epoch := l.truncations.Load()
		off, err := l.offsetForTime(us)
		if err == nil || attempt == maxTruncatedRetries || l.truncations.Load() == epoch {
			return off, err
		}
	}
}

// maxTruncatedRetries bounds how often a reader tries again because
// TruncateEntries ran under it. Truncations are rare (a raft follower meets
// a conflicting tail), so a second attempt nearly always finds the log
// still.
const maxTruncatedRetries = 3

func (l *Log) offsetForTime(us int64) (uint64, error) {
	l.mu.Lock()
	if l.mu.closed {
		l.mu.Unlock()
		return 0, ErrClosed
	}
	var s *segment
	for _, seg := range l.mu.segments {
		if seg.size > 0 && seg.lastTime >= us {
			s = seg
			break
		}
	}
	if s == nil {
		next := l.mu.next
		l.mu.Unlock()
		return next, nil
	}
	s.refs++
	pos, base := int64(0), s.base
	if e, ok := floorBeforeTime(s.entries, us); ok {
		pos, base = int64(e.pos), s.base+uint64(e.rel)
	}
	limit := s.size
	l.mu.Unlock()

	r := chunkReader{f: s.log, size: limit, chunk: minReadChunk}
	off, err := func() (uint64, error) {
		for pos < limit {
			v, n, err := r.batchAt(pos)
			if err == nil && v.base != base {
				err = &offsetMismatch{got: v.base, want: base}
			}
			if err != nil {
				return 0, readFailure(s, pos, err)
			}
			if v.time >= us {
				// A raft entry without records answers its base, the
				// offset of the first record after it: every record
				// before it is older than t.
				return v.base, nil
			}
			pos += int64(n)
			base = v.next()
		}
		return 0, &ErrCorrupt{Segment: s.name(), Position: pos, Reason: fmt.Sprintf("no batch at or after time %d, though the segment's last is at %d", us, s.lastTime)}
	}()
	if rerr := l.release(s); err == nil {
		err = rerr
	}
	return off, err
}

// The times whose microseconds since 1970 fit an int64, about 292 000
// years either side of it.
var (
	minMicroTime = time.UnixMicro(math.MinInt64)
	maxMicroTime = time.UnixMicro(math.MaxInt64)
)

// unixMicro is t.UnixMicro clamped to the int64 range. Unclamped, a time
// past it wraps to a negative number, and a lookup far in the future (a
// client's time_ms near MaxInt64) would answer the oldest record instead
// of the end.
func unixMicro(t time.Time) int64 {
	switch {
	case t.Before(minMicroTime):
		return math.MinInt64
	case t.After(maxMicroTime):
		return math.MaxInt64
	}
	return t.UnixMicro()
}

// readFailure reports a batch a read could not use: damage is ErrCorrupt,
// anything else an I/O error.
func readFailure(s *segment, pos int64, err error) error {
	var mismatch *offsetMismatch
	if isFrameError(err) || err == errMalformed || errors.As(err, &mismatch) {
		return &ErrCorrupt{Segment: s.name(), Position: pos, Reason: err.Error()}
	}
	return fmt.Errorf("persistence: read %s at byte %d: %w", s.name(), pos, err)
}

// offsetMismatch is a checksummed batch whose offset is not the one its
// position promises.
type offsetMismatch struct{ got, want uint64 }

func (e *offsetMismatch) Error() string {
	return fmt.Sprintf("batch has offset %d, expected %d", e.got, e.want)
}

// checkReadableLocked REQUIRES: l.mu is held.
func (l *Log) checkReadableLocked(off uint64) error {
	if start := l.startLocked(); off < start {
		return &ErrOffsetTooOld{Requested: off, Available: start}
	}
	if off > l.mu.next {
		return &ErrOffsetInFuture{Requested: off, Available: l.mu.next}
	}
	return nil
}

// segmentForLocked returns the segment holding off, or the active one for
// off == NextOffset. REQUIRES: l.mu is held and off is readable.
func (l *Log) segmentForLocked(off uint64) *segment {
	segs := l.mu.segments
	i := sort.Search(len(segs), func(i int) bool { return segs[i].base > off })
	return segs[i-1]
}

// chunkReader reads batches from a file through a buffer of at least chunk
// bytes, so a scan costs one syscall per chunk rather than two per batch.
type chunkReader struct {
	f     File
	size  int64 // read nothing at or past it
	chunk int
	fresh bool // allocate a new buffer on every refill: callers keep slices of the old one
	buf   []byte
	start int64 // file position of buf[0]
}

// bytes returns the n bytes at pos, valid until the next call unless fresh.
func (r *chunkReader) bytes(pos int64, n int) ([]byte, error) {
	if pos+int64(n) > r.size {
		return nil, errShortFrame
	}
	if pos >= r.start && pos+int64(n) <= r.start+int64(len(r.buf)) {
		return r.buf[pos-r.start : pos-r.start+int64(n)], nil
	}
	want := int(min(int64(max(n, r.chunk, minReadChunk)), r.size-pos))
	if r.fresh || cap(r.buf) < want {
		r.buf = make([]byte, want)
	}
	r.buf = r.buf[:want]
	if _, err := r.f.ReadAt(r.buf, pos); err != nil {
		r.buf = r.buf[:0]
		return nil, readError(err)
	}
	r.start = pos
	return r.buf[:n], nil
}

// frameAt returns the whole frame starting at pos.
func (r *chunkReader) frameAt(pos int64) ([]byte, error) {
	hdr, err := r.bytes(pos, frameHeaderLen)
	if err != nil {
		return nil, err
	}
	n, err := frameLen(hdr)
	if err != nil {
		return nil, err
	}
	return r.bytes(pos, n)
}

// headerAt decodes the header of the batch at pos, reading no record and
// checking no checksum, and returns it with the frame's length. Its
// meta.Control aliases the reader's buffer.
func (r *chunkReader) headerAt(pos int64) (batchView, int, error) {
	hdr, err := r.bytes(pos, frameHeaderLen)
	if err != nil {
		return batchView{}, 0, err
	}
	n, err := frameLen(hdr)
	if err != nil {
		return batchView{}, 0, err
	}
	fixed, _ := fixedLen(hdr[0])
	if hdr, err = r.bytes(pos, frameHeaderLen+fixed); err != nil {
		return batchView{}, 0, err
	}
	hl := headerLen(hdr)
	if hl > n {
		return batchView{}, 0, errMalformed
	}
	if hl > len(hdr) {
		if hdr, err = r.bytes(pos, hl); err != nil {
			return batchView{}, 0, err
		}
	}
	v, err := decodeHeader(hdr)
	return v, n, err
}

// batchAt decodes the batch at pos.
func (r *chunkReader) batchAt(pos int64) (batchView, int, error) {
	frame, err := r.frameAt(pos)
	if err != nil {
		return batchView{}, 0, err
	}
	return decodeBatch(frame)
}
