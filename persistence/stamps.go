package persistence

// Stamps calls fn with every stamped batch (AppendStamped with a stamp)
// whose records reach offset from or later, oldest first, up to the log's
// end when it is called, until fn returns false. from must be between
// StartOffset and NextOffset.
//
// It reads batch headers only, one at a time through a small buffer, and
// never a whole payload: its cost is one pass over the headers (plus the
// read-ahead of the chunked reader). Checksums are not verified (that would
// mean reading every payload); a header whose frame does not parse, or
// whose offsets do not follow on, is ErrCorrupt. Like a Cursor, it holds the
// segment it reads, so retention running meanwhile does not pull it away.
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
		hdr, err := r.bytes(c.pos, frameHeaderLen)
		if err != nil {
			return readFailure(c.seg, c.pos, err)
		}
		n, err := frameLen(hdr)
		if err != nil {
			return readFailure(c.seg, c.pos, err)
		}
		fixed, _ := fixedLen(hdr[0])
		if hdr, err = r.bytes(c.pos, frameHeaderLen+fixed); err != nil {
			return readFailure(c.seg, c.pos, err)
		}
		v := decodeHeader(hdr)
		switch {
		case v.count == 0:
			return readFailure(c.seg, c.pos, errMalformed)
		case v.base != c.posBase:
			return readFailure(c.seg, c.pos, &offsetMismatch{got: v.base, want: c.posBase})
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
