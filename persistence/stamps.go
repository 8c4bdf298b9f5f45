package persistence

// Stamps calls fn with every stamped batch (AppendStamped, or AppendEntry,
// with a stamp) whose records reach offset from or later, oldest first, up
// to the log's end when it is called, until fn returns false. from must be
// between StartOffset and NextOffset.
//
// It reads batch headers only, one at a time through a small buffer, and
// never a whole payload: its cost is one pass over the headers (plus the
// read-ahead of the chunked reader). Checksums are not verified (that would
// mean reading every payload); a header whose frame does not parse, or
// whose offsets do not follow on, is ErrCorrupt. Like a Cursor, it holds the
// segment it reads, so retention running meanwhile does not pull it away;
// TruncateEntries running meanwhile makes it ErrTruncated.
func (l *Log) Stamps(from uint64, fn func(s Stamp, base uint64, count uint32) bool) (err error) {
	c, err := l.Cursor(from)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := c.Close(); err == nil {
			err = cerr
		}
	}()
	var r chunkReader
	limit := int64(-1)
	for {
		if c.pos >= limit {
			if limit, err = c.advance(); err != nil {
				return err
			}
			if c.pos >= limit {
				return nil // at the log's end
			}
			r = chunkReader{f: c.seg.log, size: limit, chunk: minReadChunk}
		}
		v, n, err := r.headerAt(c.pos)
		if err == nil && v.base != c.posBase {
			err = &offsetMismatch{got: v.base, want: c.posBase}
		}
		if err != nil {
			if l.truncations.Load() != c.epoch {
				return ErrTruncated // the bytes were cut or rewritten under the walk
			}
			return readFailure(c.seg, c.pos, err)
		}
		if v.stamp != nil && v.next() > from {
			if !fn(*v.stamp, v.base, v.count) {
				return nil
			}
		}
		c.pos += int64(n)
		c.posBase = v.next()
		c.next = max(c.next, c.posBase)
	}
}
