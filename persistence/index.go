package persistence

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"sort"
)

// The indexes are sparse and derived: every IndexIntervalBytes of log, the
// batch that starts there gets one entry in each index file, so entry i of
// both files describes the same batch. Neither is ever fsynced: Open checks
// them and rebuilds them from the segment when anything is off.
//
//	.index      rel u32 (offset - segment base), position u32, crc u32
//	.timeindex  time u64 (unix µs), rel u32, crc u32
//
// Each entry carries its own CRC-32C because Open checks only the last
// entry against the log: the CRC is what catches a damaged entry in the
// middle without reading a batch per entry.
const (
	offsetEntryLen = 12
	timeEntryLen   = 16
)

// indexEntry locates one batch of a segment.
type indexEntry struct {
	rel  uint32
	pos  uint32
	time int64
}

// errBadIndex never leaves the package: a bad index is rebuilt.
var errBadIndex = errors.New("bad index")

// indexDue reports whether a batch at pos, holding count records from base,
// gets an index entry, given the position of the segment's last entry (0
// when it has none: the segment's start is its implicit first entry).
// Recovery rebuilds with the same rule.
//
// Only a batch with records above the segment's base is indexed. A raft
// entry without records takes no offset: it shares its base with the batch
// after it, and a segment may start with such entries before a batch at the
// segment's own base. Indexing either would give two entries one offset, or
// an entry the segment's start (rel 0), which parseIndexes refuses; so
// every entry names the one batch whose records start at its offset, and
// the batches without records are found by scanning from an entry.
func indexDue(pos, lastIndexed int64, interval int, base, segBase uint64, count int) bool {
	return count > 0 && base > segBase && pos-lastIndexed >= int64(interval)
}

func appendOffsetEntry(dst []byte, e indexEntry) []byte {
	start := len(dst)
	dst = binary.BigEndian.AppendUint32(dst, e.rel)
	dst = binary.BigEndian.AppendUint32(dst, e.pos)
	return binary.BigEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

func appendTimeEntry(dst []byte, e indexEntry) []byte {
	start := len(dst)
	dst = binary.BigEndian.AppendUint64(dst, uint64(e.time))
	dst = binary.BigEndian.AppendUint32(dst, e.rel)
	return binary.BigEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

// parseIndexes decodes both index files of a segment whose log holds
// logSize bytes. Any damage, any disagreement between the two files, or any
// entry out of order or past the log's end is errBadIndex: the caller
// rebuilds instead of guessing which entries to keep.
func parseIndexes(offsets, times []byte, logSize int64) ([]indexEntry, error) {
	if len(offsets)%offsetEntryLen != 0 || len(times)%timeEntryLen != 0 ||
		len(offsets)/offsetEntryLen != len(times)/timeEntryLen {
		return nil, errBadIndex
	}
	entries := make([]indexEntry, 0, len(offsets)/offsetEntryLen)
	for i := 0; i < len(offsets)/offsetEntryLen; i++ {
		o := offsets[i*offsetEntryLen : (i+1)*offsetEntryLen]
		t := times[i*timeEntryLen : (i+1)*timeEntryLen]
		if crc32.Checksum(o[:8], castagnoli) != binary.BigEndian.Uint32(o[8:]) ||
			crc32.Checksum(t[:12], castagnoli) != binary.BigEndian.Uint32(t[12:]) {
			return nil, errBadIndex
		}
		e := indexEntry{
			rel:  binary.BigEndian.Uint32(o),
			pos:  binary.BigEndian.Uint32(o[4:]),
			time: int64(binary.BigEndian.Uint64(t)),
		}
		if binary.BigEndian.Uint32(t[8:]) != e.rel || e.rel == 0 || e.pos == 0 || int64(e.pos) >= logSize {
			return nil, errBadIndex
		}
		if n := len(entries); n > 0 {
			p := entries[n-1]
			if e.rel <= p.rel || e.pos <= p.pos || e.time < p.time {
				return nil, errBadIndex
			}
		}
		entries = append(entries, e)
	}
	return entries, nil
}

// floorByOffset returns the entry of the last indexed batch starting at or
// before rel, or false when rel is before the first entry.
func floorByOffset(entries []indexEntry, rel uint64) (indexEntry, bool) {
	i := sort.Search(len(entries), func(i int) bool { return uint64(entries[i].rel) > rel })
	if i == 0 {
		return indexEntry{}, false
	}
	return entries[i-1], true
}

// floorBeforeTime returns the last entry whose time is before t, or false.
// Because a batch's time is never earlier than the batch before it, the
// first batch at or after t lies after that entry.
func floorBeforeTime(entries []indexEntry, t int64) (indexEntry, bool) {
	i := sort.Search(len(entries), func(i int) bool { return entries[i].time >= t })
	if i == 0 {
		return indexEntry{}, false
	}
	return entries[i-1], true
}
