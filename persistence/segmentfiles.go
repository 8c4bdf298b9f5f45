package persistence

// SegmentFile is one segment's log file as a copy of the log sees it: its
// name in the log directory and the bytes of complete batches in it.
type SegmentFile struct {
	Name string
	Size int64
}

// SegmentFiles lists the log's segment files, oldest first, with the size
// of the complete batches each holds now. A replica that catches up from
// another's log copies these prefixes: every batch in them is whole, and
// appends only grow the last one. The index files are left out: Open
// rebuilds them. Retention may delete a listed file afterwards; a copy then
// fails to open it and starts over from a new list.
func (l *Log) SegmentFiles() []SegmentFile {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]SegmentFile, len(l.mu.segments))
	for i, s := range l.mu.segments {
		out[i] = SegmentFile{Name: s.name(), Size: s.size}
	}
	return out
}

// IsSegmentFileName reports whether name is a segment's log file name, as
// SegmentFiles gives them: a copy accepts only such names, so a request
// can never name another file (or another directory).
func IsSegmentFileName(name string) bool {
	if len(name) != 20+len(logExt) || name[20:] != logExt {
		return false
	}
	for _, c := range name[:20] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
