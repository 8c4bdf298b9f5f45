// Package persistence owns the durable log of one stream shard: a directory
// of append-only segments holding checksummed record batches, their sparse
// offset and time indexes, the fsync policy with group commit, crash
// recovery, and retention. It is a plain library, not an actor: the shard
// actor owns one Log, assigns every offset, and learns of durability
// asynchronously (WaitDurable), so it never waits on an fsync in Receive.
//
// A log holds plain batches (Append) or, for a replicated shard, raft
// entries (AppendEntry, see entries.go): the same segments, indexes and
// recovery then serve as raft's log storage, so each record is written once
// per replica.
//
// # Layout
//
// A log directory holds, per segment, <base>.log, <base>.index and
// <base>.timeindex, named by the segment's first offset, and one
// durable.mark: the offset below which every record has been fsynced (and,
// in a log of raft entries, the index up to which every entry has), in two
// checksummed slots written alternately so a torn write of the mark leaves
// the previous value readable.
//
// # Recovery
//
// Open scans every batch the durable mark does not cover, starting from the
// last index entry below the mark (every batch of every segment with
// Config.VerifyOnOpen, or of a segment whose index had to be rebuilt), and
// applies these rules at the first damaged batch:
//
//   - Damage a crash can leave (a short header or body, a bad magic, length
//     or checksum) at or above the durable mark, in the last segment (or in a
//     segment followed only by empty ones), with no checksummed batch
//     anywhere after it in that file, is a torn tail: the file is truncated
//     back to the last complete batch and the log continues at the next
//     offset.
//   - Anything else is ErrCorrupt and Open refuses: damage below the durable
//     mark (those records were fsynced, and under FsyncOnCommit
//     acknowledged, so they are not a torn write; a raft entry counts as
//     below the mark when the mark's index reaches it, which matters for
//     entries without records, whose offset says nothing), damage followed
//     by a valid batch, damage in a sealed segment, a checksummed batch with
//     the wrong offset, offsets that do not continue from one segment to the
//     next, raft entries whose indexes or terms go back or that mix with
//     plain batches, or a log that ends below the durable mark.
//
// The mark is what separates a torn, never-synced tail from a bit flip in
// synced data: without it the last batch of the log is ambiguous, and a
// damaged but acknowledged last batch would be truncated silently. Keeping
// it costs a second, tiny fsync per group commit. A missing durable.mark
// reads as 0 (every tail may be truncated) and is recreated; an unreadable
// one is ErrCorrupt (delete it to open with the weaker rule).
//
// Under FsyncOnCommit nothing is acknowledged above the mark, so the rule
// never truncates an acknowledged record. Under FsyncPeriodic and FsyncNone
// records are acknowledged before they are synced; losing a damaged tail of
// them is the loss window those policies accept.
//
// Synced batches before the scan's starting point are not read on Open:
// damage there is found when a read reaches it (ErrCorrupt from Read), never
// served, and never truncated. Open finishes by fsyncing what it recovered
// and moving the mark to the log's end.
//
// The mark only rises, except in TruncateEntries, which removes synced
// entries: it lowers the mark before it removes anything (see there), so a
// crash in the middle recovers either log, never one that ends below its
// mark.
//
// Known limits, each refused rather than guessed at: a power cut between a
// segment roll and the next sync pass can leave the sealed segment short
// while the new one holds data, and Open then reports ErrCorrupt (kill -9
// cannot cause it: the page cache survives). An index entry damaged in a way
// its own CRC cannot see is caught only when a read lands on a batch with the
// wrong offset (ErrCorrupt). Indexes of all segments stay in memory.
//
// # Durability
//
// Append writes to the page cache and returns. One background goroutine, the
// syncer, fsyncs the segments written since its last pass, then the mark,
// and completes every WaitDurable the pass covered: appends that arrive
// while an fsync runs are served together by the next one (group commit). A
// failed write or fsync poisons the log (ErrPoisoned): Linux may have dropped
// the dirty pages, so retrying the fsync could report success for lost data
// (the "fsyncgate" lesson).
//
// # Batches, retention and the rest
//
// Batches are V1, or V2 carrying an idempotent producer's Stamp
// (AppendStamped; Stamps walks the stamped batches reading headers only),
// V1A/V2A when records carry attributes, a key and headers (attrs.go), and
// V3 raft entries (entries.go), C compacted batches; see batch.go for the
// layouts. Compaction (compact.go) rewrites sealed segments keeping chosen
// records at their offsets, so a compacted log has gaps a read steps over;
// a journal (compactstate.go) makes its swap all or nothing across a
// crash. Retention by
// bytes and age removes whole segments and never deletes one under a
// reader (Cursor). Logs open their files through a FileCache that bounds
// the descriptors many logs hold together, and through an FS (OSFS, or one
// that fails on demand under --chaos). A durable shard's log lives at
// <data_dir>/streams/<t>/<ns>/<s>/<shard>. Verify and Repair (verify.go,
// repair.go) are the offline tools for a log Open refuses: they reuse
// recovery's scan, and Open is unchanged.
package persistence

import (
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// FsyncPolicy says when appended records are fsynced.
type FsyncPolicy uint8

const (
	// FsyncPeriodic fsyncs every Config.SyncInterval, and whenever
	// WaitDurable asks. A crash can lose the last interval's appends. It is
	// the zero value and Felix's default.
	FsyncPeriodic FsyncPolicy = iota
	// FsyncOnCommit fsyncs after every append, grouping the appends that
	// arrive during one fsync into the next.
	FsyncOnCommit
	// FsyncNone fsyncs only when WaitDurable asks, when a segment is sealed
	// and on Close.
	FsyncNone
)

// String returns the policy's configuration name.
func (p FsyncPolicy) String() string {
	switch p {
	case FsyncPeriodic:
		return "periodic"
	case FsyncOnCommit:
		return "on_commit"
	case FsyncNone:
		return "none"
	}
	return fmt.Sprintf("fsync(%d)", uint8(p))
}

// ParseFsyncPolicy reads a policy's configuration name.
func ParseFsyncPolicy(s string) (FsyncPolicy, error) {
	switch s {
	case "periodic", "":
		return FsyncPeriodic, nil
	case "on_commit":
		return FsyncOnCommit, nil
	case "none":
		return FsyncNone, nil
	}
	return FsyncPeriodic, fmt.Errorf("persistence: unknown fsync policy %q (want none, periodic or on_commit)", s)
}

// Defaults: durable_segment_bytes's, and an index entry every 4 KiB of
// records.
const (
	defaultSegmentBytes       = 256 << 20
	defaultIndexIntervalBytes = 4096
	defaultSyncInterval       = 250 * time.Millisecond
	// maxSegmentBytes keeps every position below maxSegmentBytes+maxBatchBytes,
	// inside the indexes' u32 positions.
	maxSegmentBytes = 1 << 30
)

// Config tunes a log. The zero Config is valid.
type Config struct {
	// SegmentBytes is the size at which the active segment is sealed and a
	// new one started: a batch that would take the segment past it goes to a
	// new segment. Zero means 256 MiB; at most 1 GiB. A batch larger than it
	// gets a segment of its own.
	SegmentBytes int64
	// IndexIntervalBytes is the spacing of index entries. Zero means 4096.
	// Each entry costs 16 bytes of memory and 28 on disk.
	IndexIntervalBytes int
	// Fsync is the fsync policy. The zero value is FsyncPeriodic.
	Fsync FsyncPolicy
	// SyncInterval is FsyncPeriodic's interval. Zero means 250 ms.
	SyncInterval time.Duration
	// RetentionBytes lets EnforceRetention delete the oldest sealed segments
	// while the log is larger than this. Zero means no size limit.
	RetentionBytes int64
	// RetentionAge lets EnforceRetention delete sealed segments whose newest
	// batch is older than this. Zero means no age limit.
	RetentionAge time.Duration
	// VerifyOnOpen makes Open read and checksum every batch of every segment
	// instead of only each segment's end. Slow on a large log.
	VerifyOnOpen bool
}

func (c Config) withDefaults() (Config, error) {
	if c.SegmentBytes == 0 {
		c.SegmentBytes = defaultSegmentBytes
	}
	if c.IndexIntervalBytes == 0 {
		c.IndexIntervalBytes = defaultIndexIntervalBytes
	}
	if c.SyncInterval == 0 {
		c.SyncInterval = defaultSyncInterval
	}
	switch {
	case c.SegmentBytes < 0 || c.SegmentBytes > maxSegmentBytes:
		return c, fmt.Errorf("persistence: segment bytes %d out of range (1..%d)", c.SegmentBytes, maxSegmentBytes)
	case c.IndexIntervalBytes < 0:
		return c, fmt.Errorf("persistence: negative index interval %d", c.IndexIntervalBytes)
	case c.SyncInterval < 0:
		return c, fmt.Errorf("persistence: negative sync interval %v", c.SyncInterval)
	case c.RetentionBytes < 0 || c.RetentionAge < 0:
		return c, fmt.Errorf("persistence: negative retention (%d bytes, %v)", c.RetentionBytes, c.RetentionAge)
	case c.Fsync > FsyncNone:
		return c, fmt.Errorf("persistence: unknown fsync policy %v", c.Fsync)
	}
	return c, nil
}

// Log is the durable log of one shard. It is safe for concurrent use, but
// offsets make appends sequential: one owner (the shard actor) appends,
// while any goroutine may read.
type Log struct {
	dir string
	cfg Config
	fs  FS
	// mark is written by a sync pass or TruncateEntries, each holding
	// syncMu, or by Open and Close while the syncer is not running.
	mark *markFile

	// syncMu is held by a sync pass from the moment it takes its target
	// until it has written the mark, and by TruncateEntries: otherwise a
	// pass could write a mark computed before a truncation after it, and
	// the mark would claim entries the log no longer holds. Lock order:
	// syncMu, then mu.
	syncMu sync.Mutex

	// truncations counts the TruncateEntries calls that removed something.
	// A reader that reads a file without l.mu compares it before and after:
	// a change means the bytes under it may have been cut or rewritten.
	truncations atomic.Uint64

	wake chan struct{} // capacity 1: a sync is wanted
	// periodic is FsyncPeriodic's timer: armed (mu.periodicArmed) when
	// the log becomes dirty, it asks for a pass SyncInterval later. A log
	// with nothing to sync has no timer running: a member's thousands of
	// idle shards would each wake their syncer four times a second for
	// nothing.
	periodic   *time.Timer
	stop       chan struct{} // closed by Close: the syncer exits
	syncerDone chan struct{}

	mu struct {
		sync.Mutex
		segments    []*segment // oldest first; the last is the active one
		next        uint64     // offset the next append must start at
		synced      uint64     // every record below it is fsynced
		syncedIndex uint64     // every raft entry up to this index is fsynced; 0 for none
		lastTime    int64      // time of the newest batch, unix µs
		dirty       []*segment // written since the syncer's last pass, each holding a reference
		dirDirty    bool       // a segment file was created since the last directory fsync
		waiters     []waiter
		err         error // the poison: set once, by a failed write or fsync
		closed      bool
		// periodicArmed: the periodic timer runs (armPeriodicLocked).
		periodicArmed bool
		scratch       []byte // Append's encoding buffer

		format  logFormat
		last    lastEntry // the newest raft entry, when hasLast
		hasLast bool
		// anyIndex: TruncateEntries ran since the last AppendEntry, which
		// may then skip indexes (not go back).
		anyIndex bool
		floor    uint64 // SetEntryFloor's: no TruncateEntries at or below it
		// compactedBelow is the last committed compaction's horizon
		// (compact.go): offsets below it may be gaps.
		compactedBelow uint64
		cursors        map[*Cursor]struct{} // open cursors: TruncateEntries tells each where it cut
	}
}

// Appended describes a batch Append wrote.
type Appended struct {
	Base uint64 // offset of the first record
	Next uint64 // offset after the last record; pass it to WaitDurable
	// Time is the batch's stored time: the now given to Append, raised to
	// the previous batch's time if the clock went back, so that time order
	// is offset order (OffsetForTime relies on it).
	Time time.Time
}

// maxKeptScratch bounds the encoding buffer the log keeps between appends,
// so one huge batch does not pin its size forever.
const maxKeptScratch = 1 << 20

// Append writes records as one batch at offsets base, base+1, … and returns
// once the bytes are in the page cache. base must be NextOffset
// (ErrOffsetMismatch otherwise): the caller assigns offsets, the log makes
// sure none is reused or skipped. Under FsyncOnCommit it wakes the syncer;
// WaitDurable(a.Next) learns when the batch is on the device.
//
// A failed write returns ErrIO and poisons the log. Whatever part of the
// batch reached the file is not part of the log: readers never see it, and
// Open truncates it as a torn tail. A log of raft entries (AppendEntry)
// refuses plain batches: ErrMixedFormats.
func (l *Log) Append(base uint64, records [][]byte, now time.Time) (Appended, error) {
	return l.AppendStamped(base, records, now, nil)
}

// AppendStamped is Append for a batch that carries a producer's Stamp
// (stamp nil: a plain batch, exactly as Append writes it). The stamp is
// written in the batch's header, under its checksum; Stamps reads it back.
func (l *Log) AppendStamped(base uint64, records [][]byte, now time.Time, stamp *Stamp) (Appended, error) {
	return l.appendBatch(base, records, now, stamp, false)
}

// appendBatch writes one batch of plain records; attributed says they are
// joinRecords' encoding (AppendAttributed).
func (l *Log) appendBatch(base uint64, records [][]byte, now time.Time, stamp *Stamp, attributed bool) (Appended, error) {
	if len(records) == 0 {
		return Appended{}, ErrEmptyBatch
	}
	if n := encodedLen(records, stamp != nil); n > maxBatchBytes {
		return Appended{}, fmt.Errorf("%w: %d bytes, at most %d", ErrBatchTooLarge, n, maxBatchBytes)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.appendableLocked(formatPlain); err != nil {
		return Appended{}, err
	}
	if base != l.mu.next {
		return Appended{}, &ErrOffsetMismatch{Want: l.mu.next, Got: base}
	}
	t := max(now.UnixMicro(), l.mu.lastTime)
	buf := l.keepScratchLocked(appendBatch(l.mu.scratch[:0], base, t, records, stamp, attributed))
	if err := l.writeLocked(buf, base, len(records), t); err != nil {
		return Appended{}, err
	}
	l.mu.format = formatPlain
	return Appended{Base: base, Next: l.mu.next, Time: time.UnixMicro(t)}, nil
}

// appendableLocked says why an append of format f cannot go in now, if it
// cannot. REQUIRES: l.mu is held.
func (l *Log) appendableLocked(f logFormat) error {
	switch {
	case l.mu.closed:
		return ErrClosed
	case l.mu.err != nil:
		return l.mu.err
	case l.mu.format != formatUnknown && l.mu.format != f:
		return ErrMixedFormats
	}
	return nil
}

// keepScratchLocked keeps buf's array as the next append's encoding buffer
// unless it grew too large, and returns buf. REQUIRES: l.mu is held.
func (l *Log) keepScratchLocked(buf []byte) []byte {
	if cap(buf) <= maxKeptScratch {
		l.mu.scratch = buf[:0]
	}
	return buf
}

// writeLocked writes one encoded batch holding count records from base,
// stored at time t: it rolls to a new segment first if the batch does not
// fit, indexes it when due, and queues the segment for the syncer. A failed
// write poisons the log. REQUIRES: l.mu is held.
func (l *Log) writeLocked(buf []byte, base uint64, count int, t int64) error {
	s, err := l.segmentToWriteLocked(len(buf), base)
	if err != nil {
		return err
	}
	// The index entry goes first: if the batch's write then fails, the
	// entry points past the log's end and Open rebuilds the index, whereas
	// the other order could leave a complete batch whose Append failed.
	pos := s.size
	indexed := indexDue(pos, s.lastIndexed, l.cfg.IndexIntervalBytes, base, s.base, count)
	entry := indexEntry{rel: uint32(base - s.base), pos: uint32(pos), time: t}
	if indexed {
		if err := s.writeIndexEntryLocked(entry); err != nil {
			return l.poisonLocked(err)
		}
	}
	if _, err := s.log.WriteAt(buf, pos); err != nil {
		// Best effort: cut the partial batch now. If that fails too, Open
		// finds it as a torn tail above the durable mark.
		_ = s.log.Truncate(pos)
		return l.poisonLocked(&ErrIO{Op: "write", Path: s.path(logExt), Err: err})
	}
	if indexed {
		s.entries = append(s.entries, entry)
		s.lastIndexed = pos
	}
	s.size += int64(len(buf))
	s.next = base + uint64(count)
	s.lastTime = t
	l.mu.next = s.next
	l.mu.lastTime = t
	l.markDirtyLocked(s)
	if l.cfg.Fsync == FsyncOnCommit {
		l.kick()
	}
	return nil
}

// segmentToWriteLocked returns the segment a batch of n bytes at base goes
// to: the active one, or a new one if the batch would take the active one
// past SegmentBytes. A segment that holds raft entries without records only
// does not roll: the new segment would have its base, hence its file name.
// Such entries are few and small (a new leader's first, conf changes), so
// it outgrows SegmentBytes until a batch with records lets it roll, up to
// the size whose positions the indexes can hold. REQUIRES: l.mu is held.
func (l *Log) segmentToWriteLocked(n int, base uint64) (*segment, error) {
	s := l.mu.segments[len(l.mu.segments)-1]
	end := s.size + int64(n)
	switch {
	case s.size == 0 || end <= l.cfg.SegmentBytes:
		return s, nil
	case s.next > s.base:
		s, err := l.rollLocked(base)
		if err != nil {
			return nil, l.poisonLocked(err)
		}
		return s, nil
	case end > maxSegmentBytes+maxBatchBytes:
		return nil, fmt.Errorf("persistence: %s holds %d bytes of entries without records, as many as one segment can index", s.name(), s.size)
	}
	return s, nil
}

// rollLocked seals the active segment and starts one at base. The syncer
// fsyncs the sealed segment and the directory soon after, whatever the
// policy, so that a sealed segment is complete on the device (Open treats
// damage in one as corruption). REQUIRES: l.mu is held.
func (l *Log) rollLocked(base uint64) (*segment, error) {
	s, err := createSegment(l.fs, l.dir, base)
	if err != nil {
		return nil, &ErrIO{Op: "create", Path: filepath.Join(l.dir, segmentName(base, logExt)), Err: err}
	}
	l.mu.segments[len(l.mu.segments)-1].closeIndexFiles()
	l.mu.segments = append(l.mu.segments, s)
	l.mu.dirDirty = true
	l.kick()
	return s, nil
}

// markDirtyLocked queues s for the syncer's next pass, holding a reference
// so retention cannot close it under an fsync. REQUIRES: l.mu is held.
func (l *Log) markDirtyLocked(s *segment) {
	if !s.dirty {
		s.dirty = true
		s.refs++
		l.mu.dirty = append(l.mu.dirty, s)
		l.armPeriodicLocked()
	}
}

// armPeriodicLocked starts FsyncPeriodic's interval, unless it runs: the
// log has something to sync. REQUIRES: l.mu is held.
func (l *Log) armPeriodicLocked() {
	if l.periodic != nil && !l.mu.periodicArmed && !l.mu.closed {
		l.mu.periodicArmed = true
		l.periodic.Reset(l.cfg.SyncInterval)
	}
}

// periodicDue is the periodic timer's: the interval since the log became
// dirty is over, a pass is due.
func (l *Log) periodicDue() {
	l.mu.Lock()
	l.mu.periodicArmed = false
	l.mu.Unlock()
	l.kick()
}

// NextOffset is the offset the next Append must start at.
func (l *Log) NextOffset() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.next
}

// StartOffset is the oldest retained offset. It equals NextOffset for an
// empty log.
func (l *Log) StartOffset() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.startLocked()
}

// startLocked REQUIRES: l.mu is held.
func (l *Log) startLocked() uint64 { return l.mu.segments[0].base }

// Synced is the offset below which every record is on the device.
func (l *Log) Synced() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.synced
}

// Closed reports whether Close was called: a metrics collector holding
// the log drops it then.
func (l *Log) Closed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.closed
}

// Close stops the syncer, fsyncs what is not yet durable (under every
// policy), completes or fails the pending WaitDurables, and closes the files
// no reader holds; a Cursor still open keeps its segment's file until it is
// closed. Close returns nil when everything appended is durable, else the
// error that poisoned the log.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.mu.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	l.mu.closed = true
	l.mu.Unlock()
	if l.periodic != nil {
		l.periodic.Stop()
	}

	close(l.stop)
	<-l.syncerDone
	l.syncOnce()

	l.mu.Lock()
	err := l.mu.err
	l.failWaitersLocked(ErrClosed)
	var last []*segment
	// On a poisoned log the final pass did nothing, and the segments it
	// would have synced still hold the syncer's references: without
	// dropping them their files stayed open for ever, and a deleted
	// stream's disk space came back only with a restart.
	for _, s := range l.mu.dirty {
		s.dirty = false
		if l.releaseLocked(s) {
			last = append(last, s)
		}
	}
	l.mu.dirty = nil
	for _, s := range l.mu.segments {
		if l.releaseLocked(s) {
			last = append(last, s)
		}
	}
	// l.mu.segments stays, for StartOffset: every method that would touch
	// a file checks l.mu.closed first.
	l.mu.Unlock()

	for _, s := range last {
		if ferr := s.finalize(l.fs); ferr != nil && err == nil {
			err = fmt.Errorf("persistence: close %s: %w", s.name(), ferr)
		}
	}
	if cerr := l.mark.close(); cerr != nil && err == nil {
		err = fmt.Errorf("persistence: close %s: %w", markName, cerr)
	}
	return err
}

// releaseLocked drops one reference and reports whether it was the last, in
// which case the caller must call finalize once it has let go of l.mu.
// REQUIRES: l.mu is held.
func (l *Log) releaseLocked(s *segment) bool {
	s.refs--
	if s.refs < 0 {
		panic(fmt.Sprintf("persistence: segment %s released more often than acquired", s.name()))
	}
	return s.refs == 0
}

// release drops one reference taken without l.mu held.
func (l *Log) release(s *segment) error {
	l.mu.Lock()
	last := l.releaseLocked(s)
	l.mu.Unlock()
	if last {
		return s.finalize(l.fs)
	}
	return nil
}
