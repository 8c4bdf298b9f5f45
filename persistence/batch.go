package persistence

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"iter"
)

// A batch is the unit the log writes, checksums and indexes. On disk:
//
//	magic     u8   batchMagicV1, or batchMagicV2 for a stamped batch
//	length    u32  bytes after the checksum field
//	checksum  u32  CRC-32C (Castagnoli) of those bytes
//	base      u64  offset of the first record
//	count     u32  records in the batch, at least 1
//	time      u64  append time, unix microseconds
//	(V2 only) producer u64, sequence u64, digest u64: the batch's Stamp
//	count × { length u32, value }
//
// Integers are big-endian, as on the wire. The magic is not zero, so a
// zero-filled tail (a file the file system extended without its data after a
// crash, or a preallocated one) reads as damage, never as a batch. A batch
// without a stamp is still written as V1, so logs written before stamps
// existed and logs that never use them are byte for byte what they were.
const (
	batchMagicV1    byte = 0xFB
	batchMagicV2    byte = 0xFC
	frameHeaderLen       = 1 + 4 + 4
	batchFixedLen        = 8 + 4 + 8
	stampLen             = 8 + 8 + 8
	batchHeaderLen       = frameHeaderLen + batchFixedLen
	recordHeaderLen      = 4
	minFrameLen          = batchHeaderLen + recordHeaderLen

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

// batchView is a decoded batch. records aliases the decoded bytes and has
// been validated to hold exactly count records.
type batchView struct {
	base    uint64
	count   uint32
	time    int64  // unix microseconds
	stamp   *Stamp // nil for a V1 batch
	records []byte
}

// next is the offset after the batch's last record.
func (v batchView) next() uint64 { return v.base + uint64(v.count) }

// all yields each record's offset and value. The values alias the batch.
func (v batchView) all() iter.Seq2[uint64, []byte] {
	return func(yield func(uint64, []byte) bool) {
		rest := v.records
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
	n := batchHeaderLen
	if stamped {
		n += stampLen
	}
	for _, r := range records {
		n += recordHeaderLen + len(r)
	}
	return n
}

// appendBatch appends the framed batch to dst: V2 with stamp, V1 without.
func appendBatch(dst []byte, base uint64, time int64, records [][]byte, stamp *Stamp) []byte {
	start := len(dst)
	magic := batchMagicV1
	if stamp != nil {
		magic = batchMagicV2
	}
	dst = append(dst, magic, 0, 0, 0, 0, 0, 0, 0, 0)
	dst = binary.BigEndian.AppendUint64(dst, base)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(records)))
	dst = binary.BigEndian.AppendUint64(dst, uint64(time))
	if stamp != nil {
		dst = binary.BigEndian.AppendUint64(dst, stamp.Producer)
		dst = binary.BigEndian.AppendUint64(dst, stamp.Sequence)
		dst = binary.BigEndian.AppendUint64(dst, stamp.Digest)
	}
	for _, r := range records {
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(r)))
		dst = append(dst, r...)
	}
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
	n := binary.BigEndian.Uint32(hdr[1:])
	if n < uint32(fixed+recordHeaderLen) || n > maxBatchBytes-frameHeaderLen {
		return 0, errBadLength
	}
	return frameHeaderLen + int(n), nil
}

// fixedLen is the length of the fixed part of a body (after the frame
// header) for a magic, and whether the magic is one.
func fixedLen(magic byte) (int, bool) {
	switch magic {
	case batchMagicV1:
		return batchFixedLen, true
	case batchMagicV2:
		return batchFixedLen + stampLen, true
	}
	return 0, false
}

// decodeHeader reads the fixed part of a batch whose frame header frameLen
// accepted: everything but the records. hdr holds at least the frame header
// and the fixed part. The checksum is not checked (Log.Stamps reads headers
// only).
func decodeHeader(hdr []byte) batchView {
	body := hdr[frameHeaderLen:]
	v := batchView{
		base:  binary.BigEndian.Uint64(body),
		count: binary.BigEndian.Uint32(body[8:]),
		time:  int64(binary.BigEndian.Uint64(body[12:])),
	}
	if hdr[0] == batchMagicV2 {
		v.stamp = &Stamp{
			Producer: binary.BigEndian.Uint64(body[batchFixedLen:]),
			Sequence: binary.BigEndian.Uint64(body[batchFixedLen+8:]),
			Digest:   binary.BigEndian.Uint64(body[batchFixedLen+16:]),
		}
	}
	return v
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
	fixed, _ := fixedLen(b[0])
	v := decodeHeader(b)
	v.records = body[fixed:]
	// Bound count by the bytes present before walking, so a lying count
	// costs nothing.
	if v.count == 0 || uint64(v.count) > uint64(len(v.records)/recordHeaderLen) {
		return batchView{}, 0, errMalformed
	}
	if v.base > ^uint64(0)-uint64(v.count) {
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
		rest = rest[recordHeaderLen+n:]
	}
	if len(rest) != 0 {
		return batchView{}, 0, errMalformed
	}
	return v, size, nil
}

// isFrameError reports whether err is damage a torn write can cause, as
// opposed to a checksummed batch that is inconsistent.
func isFrameError(err error) bool {
	return err == errShortFrame || err == errBadMagic || err == errBadLength || err == errBadChecksum
}
