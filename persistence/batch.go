package persistence

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"iter"
)

// A batch is the unit the log writes, checksums and indexes. On disk:
//
//	magic     u8   batchMagicV1; batchMagicV2 for a stamped batch;
//	               batchMagicV3 for a raft entry (AppendEntry);
//	               batchMagicV1A, batchMagicV2A: V1, V2 whose records
//	               carry attributes (attrs.go); batchMagicC for a
//	               compacted batch (below)
//	length    u32  bytes after the checksum field
//	checksum  u32  CRC-32C (Castagnoli) of those bytes
//	base      u64  offset of the first record
//	count     u32  records in the batch: at least 1, except 0 for a V3
//	               entry of a kind without records
//	time      u64  append time, unix microseconds
//	(V2 only) producer u64, sequence u64, digest u64: the batch's Stamp
//	(V3 only) index u64, term u64: the raft entry's
//	          kind u8: an EntryKind
//	          flags u8: bit 0 set when a stamp follows, bit 1 when the
//	                    records carry attributes (as V1A's); the others 0
//	          control length u32
//	          (if stamped) producer u64, sequence u64, digest u64
//	          control: a conf change's bytes
//	count × { length u32, value }
//
// A compacted batch (C, written only by compaction, compact.go) keeps some
// records of the offsets it covers, each at its own offset, so offsets
// stay what they were and the log has gaps, as Kafka's compacted topics
// do. Its count is the span of offsets it covers, [base, base+count), at
// least 1; the batches around it still continue from one to the next, so
// recovery, the indexes and retention see one more batch of a known span:
//
//	(C only)  kept u32: records held, at most count
//	kept × { delta u32, length u32, value }: offset base+delta, deltas
//	          increasing and below count
//
// A compacted raft entry (CE, also written only by compaction) is a V3
// entry of records whose records compaction thinned: the V3 header as it
// was (index, term, kind, flags, control length 0, its stamp if it had
// one), its count still the span of offsets the entry took, then the
// compacted batch's kept records:
//
//	(CE only) index u64, term u64, kind u8 (always records), flags u8
//	          (bit 0 only: attributed entries are not compacted),
//	          control length u32 (always 0), kept u32
//	          (if stamped) producer u64, sequence u64, digest u64
//	kept × { delta u32, length u32, value }
//
// An entry whose records all went stays, holding none: the entries around
// it still follow one from the next by index, and by offset, so recovery
// and the replication layer's window of indexes and terms read the log as
// they did. Its records are no longer the ones raft replicated, so it is
// never served as an entry again (ReadEntries refuses it).
//
// Integers are big-endian, as on the wire. The magic is not zero, so a
// zero-filled tail (a file the file system extended without its data after a
// crash, or a preallocated one) reads as damage, never as a batch. A batch
// without a stamp is still written as V1, so logs written before stamps
// existed and logs that never use them are byte for byte what they were.
//
// base, count and time sit at the same place in every version, so one
// decoder reads the part all readers need. V3 puts its fixed-size fields
// before its variable ones: a reader of headers (Stamps, EntryHeaders)
// learns the whole header's length from one fixed-size read, and never
// reads a record. A V3 entry without records still has a base: the log's
// next offset when it was written, which the next batch shares.
const (
	batchMagicV1    byte = 0xFB
	batchMagicV2    byte = 0xFC
	batchMagicV3    byte = 0xFD
	batchMagicV1A   byte = 0xF9
	batchMagicV2A   byte = 0xFA
	batchMagicC     byte = 0xF8
	batchMagicCE    byte = 0xF7
	keptLen              = 4
	sparseHeaderLen      = 4 + recordHeaderLen
	frameHeaderLen       = 1 + 4 + 4
	batchFixedLen        = 8 + 4 + 8
	stampLen             = 8 + 8 + 8
	entryFixedLen        = 8 + 8 + 1 + 1 + 4
	batchHeaderLen       = frameHeaderLen + batchFixedLen
	recordHeaderLen      = 4
	// minFrameLen is the shortest frame of any version: a V1 batch of one
	// empty record. A V3 entry without records is longer.
	minFrameLen = batchHeaderLen + recordHeaderLen

	// entryStamped is the V3 flag saying a stamp follows; entryAttributed
	// says the records carry attributes.
	entryStamped    byte = 1
	entryAttributed byte = 2

	// maxBatchBytes bounds one batch's encoding. It keeps a damaged length
	// field from asking for gigabytes, and every file position below
	// maxSegmentBytes+maxBatchBytes fits the indexes' u32. Felix appends at
	// most 64 publishes or 1 MiB at a time, far below it.
	maxBatchBytes = 64 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Frame errors: what a crash can leave at the end of a file. Recovery treats
// them as a torn tail when nothing valid follows (see checkSegments). They
// never leave the package except as an ErrCorrupt's Reason, hence no prefix.
var (
	errShortFrame  = errors.New("short batch")
	errBadMagic    = errors.New("bad batch magic")
	errBadLength   = errors.New("bad batch length")
	errBadChecksum = errors.New("batch checksum mismatch")
)

// errMalformed is a batch whose checksum is right but whose body does not
// parse: written that way, so never a torn write.
var errMalformed = errors.New("malformed batch body")

// Stamp is what an idempotent producer's batch carries into the log: the
// producer, its sequence and a digest of the batch's content, so that the
// producer table can be rebuilt from the log after a restart (Log.Stamps).
// The log stores it and checksums it; it gives it no meaning.
type Stamp struct {
	Producer, Sequence, Digest uint64
}

// batchView is a decoded batch. records and meta.Control alias the decoded
// bytes, and records has been validated to hold exactly count records.
type batchView struct {
	base    uint64
	count   uint32
	time    int64  // unix microseconds
	stamp   *Stamp // nil for a V1 batch and an unstamped V3 one
	entry   bool   // a V3 batch: meta is the raft entry's
	meta    EntryMeta
	records []byte

	// attributed: a V1A or V2A batch, each record a value and its
	// attributes (splitRecord).
	attributed bool
	// sparse: a compacted batch holding kept records of count offsets,
	// each prefixed by its offset's delta from base.
	sparse bool
	kept   uint32
}

// held is how many records the batch holds: count, or a compacted
// batch's kept.
func (v batchView) held() uint32 {
	if v.sparse {
		return v.kept
	}
	return v.count
}

// next is the offset after the batch's last record.
func (v batchView) next() uint64 { return v.base + uint64(v.count) }

// all yields each record's offset and value. The values alias the batch.
func (v batchView) all() iter.Seq2[uint64, []byte] {
	return func(yield func(uint64, []byte) bool) {
		for off, value := range v.stored() {
			if v.attributed {
				value, _, _ = splitRecord(value) // decodeBatch checked it splits
			}
			if !yield(off, value) {
				return
			}
		}
	}
}

// withAttrs yields each record's offset, value and attributes' bytes (nil
// in a batch without them). They alias the batch.
func (v batchView) withAttrs() iter.Seq2[uint64, [2][]byte] {
	return func(yield func(uint64, [2][]byte) bool) {
		for off, value := range v.stored() {
			var attrs []byte
			if v.attributed {
				value, attrs, _ = splitRecord(value)
			}
			if !yield(off, [2][]byte{value, attrs}) {
				return
			}
		}
	}
}

// stored yields each record as stored.
func (v batchView) stored() iter.Seq2[uint64, []byte] {
	return func(yield func(uint64, []byte) bool) {
		rest := v.records
		if v.sparse {
			for len(rest) > 0 {
				delta := binary.BigEndian.Uint32(rest)
				n := binary.BigEndian.Uint32(rest[4:])
				if !yield(v.base+uint64(delta), rest[sparseHeaderLen:sparseHeaderLen+n]) {
					return
				}
				rest = rest[sparseHeaderLen+n:]
			}
			return
		}
		for off := v.base; len(rest) > 0; off++ {
			n := binary.BigEndian.Uint32(rest)
			if !yield(off, rest[recordHeaderLen:recordHeaderLen+n]) {
				return
			}
			rest = rest[recordHeaderLen+n:]
		}
	}
}

// encodedLen is the length appendBatch produces for records.
func encodedLen(records [][]byte, stamped bool) int {
	n := batchHeaderLen + recordsLen(records)
	if stamped {
		n += stampLen
	}
	return n
}

// entryEncodedLen is the length appendEntryBatch produces.
func entryEncodedLen(meta EntryMeta, records [][]byte, stamped bool) int {
	n := batchHeaderLen + entryFixedLen + len(meta.Control) + recordsLen(records)
	if stamped {
		n += stampLen
	}
	return n
}

func recordsLen(records [][]byte) int {
	n := 0
	for _, r := range records {
		n += recordHeaderLen + len(r)
	}
	return n
}

// appendBatch appends the framed batch to dst: V2 with stamp, V1 without;
// V2A or V1A when the records are attributed (joinRecords encoded them).
func appendBatch(dst []byte, base uint64, time int64, records [][]byte, stamp *Stamp, attributed bool) []byte {
	start := len(dst)
	magic := batchMagicV1
	switch {
	case stamp != nil && attributed:
		magic = batchMagicV2A
	case stamp != nil:
		magic = batchMagicV2
	case attributed:
		magic = batchMagicV1A
	}
	dst = appendCommonHeader(dst, magic, base, uint32(len(records)), time)
	if stamp != nil {
		dst = appendStamp(dst, stamp)
	}
	return finishFrame(appendRecords(dst, records), start)
}

// appendEntryBatch appends a V3 batch holding one raft entry.
func appendEntryBatch(dst []byte, base uint64, time int64, meta EntryMeta, records [][]byte, stamp *Stamp) []byte {
	start := len(dst)
	dst = appendCommonHeader(dst, batchMagicV3, base, uint32(len(records)), time)
	dst = binary.BigEndian.AppendUint64(dst, meta.Index)
	dst = binary.BigEndian.AppendUint64(dst, meta.Term)
	var flags byte
	if stamp != nil {
		flags |= entryStamped
	}
	if meta.Attributed {
		flags |= entryAttributed
	}
	dst = append(dst, byte(meta.Kind), flags)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(meta.Control)))
	if stamp != nil {
		dst = appendStamp(dst, stamp)
	}
	dst = append(dst, meta.Control...)
	return finishFrame(appendRecords(dst, records), start)
}

// appendCommonHeader appends the frame header, its length and checksum left
// for finishFrame, and the fields every version has.
func appendCommonHeader(dst []byte, magic byte, base uint64, count uint32, time int64) []byte {
	dst = append(dst, magic, 0, 0, 0, 0, 0, 0, 0, 0)
	dst = binary.BigEndian.AppendUint64(dst, base)
	dst = binary.BigEndian.AppendUint32(dst, count)
	return binary.BigEndian.AppendUint64(dst, uint64(time))
}

func appendStamp(dst []byte, stamp *Stamp) []byte {
	dst = binary.BigEndian.AppendUint64(dst, stamp.Producer)
	dst = binary.BigEndian.AppendUint64(dst, stamp.Sequence)
	return binary.BigEndian.AppendUint64(dst, stamp.Digest)
}

func appendRecords(dst []byte, records [][]byte) []byte {
	for _, r := range records {
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(r)))
		dst = append(dst, r...)
	}
	return dst
}

// finishFrame fills in the length and checksum of the frame at dst[start:].
func finishFrame(dst []byte, start int) []byte {
	body := dst[start+frameHeaderLen:]
	binary.BigEndian.PutUint32(dst[start+1:], uint32(len(body)))
	binary.BigEndian.PutUint32(dst[start+5:], crc32.Checksum(body, castagnoli))
	return dst
}

// frameLen reads a frame header and returns the length of the whole frame,
// so a reader knows how much to read before decodeBatch.
func frameLen(hdr []byte) (int, error) {
	if len(hdr) < frameHeaderLen {
		return 0, errShortFrame
	}
	fixed, ok := fixedLen(hdr[0])
	if !ok {
		return 0, errBadMagic
	}
	least := fixed
	if hdr[0] != batchMagicV3 && hdr[0] != batchMagicC && hdr[0] != batchMagicCE {
		least += recordHeaderLen // V1 and V2 hold at least one record
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n < uint32(least) || n > maxBatchBytes-frameHeaderLen {
		return 0, errBadLength
	}
	return frameHeaderLen + int(n), nil
}

// fixedLen is the length of the fixed part of a body (after the frame
// header) for a magic, and whether the magic is one. Only V3 has a variable
// part after it (headerLen).
func fixedLen(magic byte) (int, bool) {
	switch magic {
	case batchMagicV1, batchMagicV1A:
		return batchFixedLen, true
	case batchMagicV2, batchMagicV2A:
		return batchFixedLen + stampLen, true
	case batchMagicV3:
		return batchFixedLen + entryFixedLen, true
	case batchMagicC:
		return batchFixedLen + keptLen, true
	case batchMagicCE:
		return batchFixedLen + entryFixedLen + keptLen, true
	}
	return 0, false
}

// headerLen is the length of a batch's header, frame header included: all
// but the records. hdr holds the frame header and the fixed part. The result
// may exceed the frame (a damaged control length); decodeHeader's callers
// check.
func headerLen(hdr []byte) int {
	fixed, _ := fixedLen(hdr[0])
	n := frameHeaderLen + fixed
	if hdr[0] == batchMagicV3 || hdr[0] == batchMagicCE {
		entry := hdr[frameHeaderLen+batchFixedLen:]
		if entry[17]&entryStamped != 0 {
			n += stampLen
		}
		n += int(binary.BigEndian.Uint32(entry[18:]))
	}
	return n
}

// decodeHeader reads the header of a batch whose frame header frameLen
// accepted; hdr is exactly headerLen bytes. It checks everything a header
// alone can say, but not the checksum: Log.Stamps and EntryHeaders read
// headers only.
func decodeHeader(hdr []byte) (batchView, error) {
	body := hdr[frameHeaderLen:]
	v := batchView{
		base:  binary.BigEndian.Uint64(body),
		count: binary.BigEndian.Uint32(body[8:]),
		time:  int64(binary.BigEndian.Uint64(body[12:])),
	}
	switch hdr[0] {
	case batchMagicV1A:
		v.attributed = true
	case batchMagicV2A:
		v.attributed = true
		v.stamp = decodeStamp(body[batchFixedLen:])
	case batchMagicV2:
		v.stamp = decodeStamp(body[batchFixedLen:])
	case batchMagicV3:
		if err := decodeEntryHeader(&v, body[batchFixedLen:], entryFixedLen); err != nil {
			return batchView{}, err
		}
	case batchMagicCE:
		entry := body[batchFixedLen:]
		if err := decodeEntryHeader(&v, entry, entryFixedLen+keptLen); err != nil {
			return batchView{}, err
		}
		v.sparse, v.kept = true, binary.BigEndian.Uint32(entry[entryFixedLen:])
		if v.kept > v.count || v.meta.Kind != EntryRecords || v.attributed || v.meta.Control != nil {
			return batchView{}, errMalformed
		}
	case batchMagicC:
		v.sparse, v.kept = true, binary.BigEndian.Uint32(body[batchFixedLen:])
		if v.kept > v.count {
			return batchView{}, errMalformed
		}
	}
	if (v.count == 0 && !v.entry) || v.base > ^uint64(0)-uint64(v.count) {
		return batchView{}, errMalformed
	}
	return v, nil
}

// decodeEntryHeader reads the V3 part of a header (a V3's, or a CE's whose
// fixed part is longer by its kept count) into v and checks that the
// entry's kind, records, control and stamp go together as AppendEntry
// allows.
func decodeEntryHeader(v *batchView, b []byte, fixed int) error {
	v.entry = true
	v.meta = EntryMeta{
		Index: binary.BigEndian.Uint64(b),
		Term:  binary.BigEndian.Uint64(b[8:]),
		Kind:  EntryKind(b[16]),
	}
	flags := b[17]
	control := b[fixed:]
	if flags&entryStamped != 0 {
		v.stamp = decodeStamp(control)
		control = control[stampLen:]
	}
	if len(control) > 0 {
		v.meta.Control = control
	}
	v.meta.Attributed = flags&entryAttributed != 0
	v.attributed = v.meta.Attributed
	if flags&^(entryStamped|entryAttributed) != 0 || checkEntryShape(v.meta, int(v.count), v.stamp != nil) != "" {
		return errMalformed
	}
	return nil
}

func decodeStamp(b []byte) *Stamp {
	return &Stamp{
		Producer: binary.BigEndian.Uint64(b),
		Sequence: binary.BigEndian.Uint64(b[8:]),
		Digest:   binary.BigEndian.Uint64(b[16:]),
	}
}

// decodeBatch decodes the batch at the front of b and returns it with its
// encoded length. The view aliases b.
func decodeBatch(b []byte) (batchView, int, error) {
	size, err := frameLen(b)
	if err != nil {
		return batchView{}, 0, err
	}
	if len(b) < size {
		return batchView{}, 0, errShortFrame
	}
	body := b[frameHeaderLen:size]
	if crc32.Checksum(body, castagnoli) != binary.BigEndian.Uint32(b[5:]) {
		return batchView{}, 0, errBadChecksum
	}
	hl := headerLen(b)
	if hl > size {
		return batchView{}, 0, errMalformed
	}
	v, err := decodeHeader(b[:hl])
	if err != nil {
		return batchView{}, 0, err
	}
	v.records = b[hl:size]
	if v.sparse {
		if err := checkSparse(v); err != nil {
			return batchView{}, 0, err
		}
		return v, size, nil
	}
	// Bound count by the bytes present before walking, so a lying count
	// costs nothing.
	if uint64(v.count) > uint64(len(v.records)/recordHeaderLen) {
		return batchView{}, 0, errMalformed
	}
	rest := v.records
	for range v.count {
		if len(rest) < recordHeaderLen {
			return batchView{}, 0, errMalformed
		}
		n := binary.BigEndian.Uint32(rest)
		if uint64(n) > uint64(len(rest)-recordHeaderLen) {
			return batchView{}, 0, errMalformed
		}
		if _, _, ok := splitRecord(rest[recordHeaderLen : recordHeaderLen+n]); v.attributed && !ok {
			return batchView{}, 0, errMalformed
		}
		rest = rest[recordHeaderLen+n:]
	}
	if len(rest) != 0 {
		return batchView{}, 0, errMalformed
	}
	return v, size, nil
}

// checkSparse checks a compacted batch's records: kept of them, bounded
// by the bytes present before the walk, offsets increasing inside the span.
func checkSparse(v batchView) error {
	if uint64(v.kept) > uint64(len(v.records)/sparseHeaderLen) {
		return errMalformed
	}
	rest := v.records
	var next uint64 // the least delta the next record may have
	for range v.kept {
		if len(rest) < sparseHeaderLen {
			return errMalformed
		}
		delta, n := binary.BigEndian.Uint32(rest), binary.BigEndian.Uint32(rest[4:])
		if uint64(delta) < next || delta >= v.count || uint64(n) > uint64(len(rest)-sparseHeaderLen) {
			return errMalformed
		}
		next = uint64(delta) + 1
		rest = rest[sparseHeaderLen+n:]
	}
	if len(rest) != 0 {
		return errMalformed
	}
	return nil
}

// sparseRecord is one record of a compacted batch: its offset and value.
type sparseRecord struct {
	offset uint64
	value  []byte
}

// appendSparseBatch appends a compacted batch covering [base, base+span)
// and holding records, whose offsets are inside it and increasing.
func appendSparseBatch(dst []byte, base uint64, span uint32, time int64, records []sparseRecord) []byte {
	start := len(dst)
	dst = appendCommonHeader(dst, batchMagicC, base, span, time)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(records)))
	for _, r := range records {
		dst = binary.BigEndian.AppendUint32(dst, uint32(r.offset-base))
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(r.value)))
		dst = append(dst, r.value...)
	}
	return finishFrame(dst, start)
}

// appendCompactedEntry appends a compacted raft entry: meta, span, time and
// stamp as the entry's V3 batch had them, holding records, whose offsets
// are inside [base, base+span) and increasing.
func appendCompactedEntry(dst []byte, base uint64, span uint32, time int64, meta EntryMeta, stamp *Stamp, records []sparseRecord) []byte {
	start := len(dst)
	dst = appendCommonHeader(dst, batchMagicCE, base, span, time)
	dst = binary.BigEndian.AppendUint64(dst, meta.Index)
	dst = binary.BigEndian.AppendUint64(dst, meta.Term)
	var flags byte
	if stamp != nil {
		flags |= entryStamped
	}
	dst = append(dst, byte(meta.Kind), flags)
	dst = binary.BigEndian.AppendUint32(dst, 0)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(records)))
	if stamp != nil {
		dst = appendStamp(dst, stamp)
	}
	for _, r := range records {
		dst = binary.BigEndian.AppendUint32(dst, uint32(r.offset-base))
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(r.value)))
		dst = append(dst, r.value...)
	}
	return finishFrame(dst, start)
}

// isFrameError reports whether err is damage a torn write can cause, as
// opposed to a checksummed batch that is inconsistent.
func isFrameError(err error) bool {
	return err == errShortFrame || err == errBadMagic || err == errBadLength || err == errBadChecksum
}
