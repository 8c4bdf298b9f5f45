package persistence

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"
)

// FuzzDecodeBatch feeds arbitrary bytes to the batch decoder.
//
// Invariants:
//   - never panics;
//   - an error is a frame error (short, bad magic, length or checksum) or
//     errMalformed, and nothing else;
//   - a decoded batch has at least one record, except a V3 entry of a kind
//     without records, which has none; its records iterate to exactly its
//     count; a V3 entry's kind, control and stamp go together as
//     AppendEntry allows; a compacted entry (CE) is an entry of records,
//     neither attributed nor with control bytes, its kept records inside
//     its span;
//   - decoding the header alone (as Stamps and EntryHeaders do) gives the
//     same batch;
//   - encoding it again gives back the input's first size bytes.
func FuzzDecodeBatch(f *testing.F) {
	for _, s := range batchSeeds() {
		f.Add(s.data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, size, err := decodeBatch(data)
		if err != nil {
			if !isFrameError(err) && err != errMalformed {
				t.Fatalf("decodeBatch: unexpected error %v", err)
			}
			return
		}
		if size > len(data) || (v.count == 0) != (v.entry && v.meta.Kind != EntryRecords) {
			t.Fatalf("decoded size %d of %d bytes, count %d, entry %v kind %v", size, len(data), v.count, v.entry, v.meta.Kind)
		}
		if v.entry != (data[0] == batchMagicV3 || data[0] == batchMagicCE) {
			t.Fatalf("magic %#x decoded as entry %v", data[0], v.entry)
		}
		if ce := data[0] == batchMagicCE; ce && (!v.sparse || v.meta.Kind != EntryRecords || v.attributed || v.meta.Control != nil) {
			t.Fatalf("compacted entry decoded as %+v", v)
		}
		if v.entry {
			if reason := checkEntryShape(v.meta, int(v.count), v.stamp != nil); reason != "" {
				t.Fatalf("decoded an entry AppendEntry refuses: %s", reason)
			}
		}
		hv, err := decodeHeader(data[:headerLen(data)])
		if err != nil || hv.base != v.base || hv.count != v.count || hv.time != v.time || hv.entry != v.entry ||
			hv.meta.Index != v.meta.Index || hv.meta.Term != v.meta.Term || hv.meta.Kind != v.meta.Kind ||
			!bytes.Equal(hv.meta.Control, v.meta.Control) || (hv.stamp == nil) != (v.stamp == nil) || (hv.stamp != nil && *hv.stamp != *v.stamp) ||
			hv.sparse != v.sparse || hv.kept != v.kept {
			t.Fatalf("header alone decodes as %+v, %v; the batch as %+v", hv, err, v)
		}
		var records [][]byte
		var sparse []sparseRecord
		for off, r := range v.stored() {
			switch {
			case v.sparse && (off >= v.next() || (len(sparse) > 0 && off <= sparse[len(sparse)-1].offset)):
				t.Fatalf("compacted record %d has offset %d, span [%d, %d)", len(sparse), off, v.base, v.next())
			case !v.sparse && off != v.base+uint64(len(records)):
				t.Fatalf("record %d has offset %d, base %d", len(records), off, v.base)
			}
			records = append(records, r)
			sparse = append(sparse, sparseRecord{offset: off, value: r})
		}
		if len(records) != int(v.held()) {
			t.Fatalf("iterated %d records, held %d", len(records), v.held())
		}
		if v.sparse {
			again := appendSparseBatch(nil, v.base, v.count, v.time, sparse)
			if v.entry {
				again = appendCompactedEntry(nil, v.base, v.count, v.time, v.meta, v.stamp, sparse)
			}
			if !bytes.Equal(again, data[:size]) {
				t.Fatalf("re-encoded compacted batch differs:\n got %x\nwant %x", again, data[:size])
			}
			return
		}
		if !v.entry && (v.stamp != nil) != (data[0] == batchMagicV2 || data[0] == batchMagicV2A) {
			t.Fatalf("magic %#x decoded with stamp %v", data[0], v.stamp)
		}
		again := appendBatch(nil, v.base, v.time, records, v.stamp, v.attributed)
		if v.entry {
			again = appendEntryBatch(nil, v.base, v.time, v.meta, records, v.stamp)
		}
		if !bytes.Equal(again, data[:size]) {
			t.Fatalf("re-encoded batch differs:\n got %x\nwant %x", again, data[:size])
		}
	})
}

// FuzzOpenSegment writes arbitrary bytes as the only segment of a log and
// opens it.
//
// Invariants:
//   - never panics;
//   - Open either refuses with ErrCorrupt or succeeds, and then every
//     record reads back, Stamps walks the log, and an append at NextOffset
//     works;
//   - a recovered log of raft entries walks with EntryHeaders, every entry
//     it walks reads back with ReadEntries (a compacted one is refused
//     with ErrEntryCompacted), the next entry appends, and
//     TruncateEntries removes it again; a log of plain batches refuses
//     entries.
func FuzzOpenSegment(f *testing.F) {
	for _, s := range batchSeeds() {
		f.Add(s.data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, segmentName(0, logExt)), data, 0o644); err != nil {
			t.Fatal(err)
		}
		l, err := Open(dir, Config{IndexIntervalBytes: 64, Fsync: FsyncNone})
		if err != nil {
			if !errors.As(err, new(*ErrCorrupt)) {
				t.Fatalf("Open: %v, want success or ErrCorrupt", err)
			}
			return
		}
		defer l.Close()
		next := uint64(0)
		for next < l.NextOffset() {
			// A compacted batch may hold no record: the page moves on.
			page, err := l.Read(next, 0, 0)
			if err != nil || page.Next <= next {
				t.Fatalf("Read(%d) of a recovered log: %d records, next %d, %v", next, len(page.Records), page.Next, err)
			}
			next = page.Next
		}
		if err := l.Stamps(l.StartOffset(), func(Stamp, uint64, uint32) bool { return true }); err != nil {
			t.Fatalf("Stamps of a recovered log: %v", err)
		}
		last, entries := l.LastEntry()
		if !entries {
			if _, err := l.Append(next, [][]byte{[]byte("after")}, t0); err != nil {
				t.Fatalf("Append after recovery: %v", err)
			}
			if _, err := l.AppendEntry(EntryMeta{Index: 1, Kind: EntryEmpty}, nil, t0, nil); !errors.Is(err, ErrMixedFormats) {
				t.Fatalf("AppendEntry to plain batches: %v, want ErrMixedFormats", err)
			}
			return
		}
		walked := 0
		if err := l.EntryHeaders(l.StartOffset(), func(e Entry) bool {
			walked++
			got, err := l.ReadEntries(e.Base, e.Index, 0)
			if e.Compacted {
				if !errors.Is(err, ErrEntryCompacted) {
					t.Fatalf("ReadEntries(%d, %d) of a compacted entry: %v, %v", e.Base, e.Index, got, err)
				}
				return true
			}
			if err != nil || len(got) != 1 || got[0].Index != e.Index || got[0].Base != e.Base {
				t.Fatalf("ReadEntries(%d, %d) of a walked entry: %v, %v", e.Base, e.Index, got, err)
			}
			return true
		}); err != nil || walked == 0 {
			t.Fatalf("EntryHeaders of a recovered log: %d entries, %v", walked, err)
		}
		after := EntryMeta{Index: last.Index + 1, Term: last.Term, Kind: EntryRecords}
		if _, err := l.AppendEntry(after, [][]byte{[]byte("after")}, t0, nil); err != nil {
			t.Fatalf("AppendEntry after recovery: %v", err)
		}
		if err := l.TruncateEntries(after.Index); err != nil {
			t.Fatalf("TruncateEntries of the appended entry: %v", err)
		}
		if got, ok := l.LastEntry(); !ok || got.Index != last.Index || l.NextOffset() != next {
			t.Fatalf("after truncating the appended entry: last %d, next %d; want %d, %d", got.Index, l.NextOffset(), last.Index, next)
		}
	})
}

var genCorpus = flag.Bool("gen-corpus", false, "rewrite the seed corpus files in testdata/fuzz")

// TestGenerateFuzzCorpus writes batchSeeds to testdata/fuzz/<Fuzz>/seed-<name>
// in Go's corpus format, so plain `go test` runs them. Regenerate after a
// layout change with:
//
//	go test ./persistence/ -run TestGenerateFuzzCorpus -args -gen-corpus
func TestGenerateFuzzCorpus(t *testing.T) {
	if !*genCorpus {
		t.Skip("pass -gen-corpus to rewrite testdata/fuzz")
	}
	for _, target := range []string{"FuzzDecodeBatch", "FuzzOpenSegment"} {
		dir := filepath.Join("testdata", "fuzz", target)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, s := range batchSeeds() {
			content := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", s.data)
			if err := os.WriteFile(filepath.Join(dir, "seed-"+s.name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

type batchSeed struct {
	name string
	data []byte
}

// batchSeeds are valid batches, several in a row, and their damaged
// variants: truncated, flipped, lying counts and lengths.
func batchSeeds() []batchSeed {
	one := appendBatch(nil, 0, 1_700_000_000_000_000, [][]byte{[]byte("hello")}, nil, false)
	three := appendBatch(nil, 1, 1_700_000_000_000_001, [][]byte{[]byte("a"), {}, bytes.Repeat([]byte("z"), 300)}, nil, false)
	stamp := &Stamp{Producer: 0xFE11C5, Sequence: 7, Digest: 0xD16E57}
	stamped := appendBatch(nil, 0, 1_700_000_000_000_000, [][]byte{[]byte("hello")}, stamp, false)
	stampedThree := appendBatch(nil, 1, 1_700_000_000_000_001, [][]byte{[]byte("a"), {}, bytes.Repeat([]byte("z"), 300)}, stamp, false)
	attrs := [][]byte{EncodeAttrs([]byte("k"), []Header{{Key: "h", Value: []byte("v")}}), nil}
	attributed := appendBatch(nil, 0, 1_700_000_000_000_000, joinRecords([][]byte{[]byte("a"), []byte("b")}, attrs), nil, true)
	attributedStamped := appendBatch(nil, 0, 1_700_000_000_000_000, joinRecords([][]byte{[]byte("a")}, attrs), stamp, true)
	compacted := appendSparseBatch(nil, 0, 5, 1_700_000_000_000_000, []sparseRecord{{offset: 1, value: []byte("b")}, {offset: 4, value: nil}})
	gapOnly := appendSparseBatch(nil, 5, 3, 1_700_000_000_000_001, nil)
	seeds := []batchSeed{
		{"compacted", compacted},
		{"compacted-gap-then-plain", append(append(append([]byte{}, compacted...), gapOnly...), appendBatch(nil, 8, 1_700_000_000_000_002, [][]byte{[]byte("c")}, nil, false)...)},
		{"compacted-short", compacted[:len(compacted)-2]},
		{"attributed", attributed},
		{"attributed-stamped", attributedStamped},
		{"one-record", one},
		{"three-records", three},
		{"two-batches", append(append([]byte{}, one...), three...)},
		{"empty", nil},
		{"header-only", one[:frameHeaderLen]},
		{"short-body", one[:len(one)-1]},
		{"zeros", make([]byte, 64)},
		{"trailing-garbage", append(append([]byte{}, one...), 0xFB, 0xFF, 0x00)},
	}
	seeds = append(seeds,
		batchSeed{"v2-one-record", stamped},
		batchSeed{"v2-three-records", stampedThree},
		batchSeed{"v1-then-v2", append(append([]byte{}, one...), stampedThree...)},
		batchSeed{"v2-then-v1", append(append([]byte{}, stamped...), three...)},
		batchSeed{"v2-cut-in-stamp", stamped[:frameHeaderLen+batchFixedLen+10]},
		batchSeed{"v2-short-body", stamped[:len(stamped)-1]},
	)
	flippedStamp := append([]byte{}, stamped...)
	flippedStamp[batchHeaderLen+3] ^= 1
	seeds = append(seeds, batchSeed{"v2-flipped-stamp", flippedStamp})
	// A V1 body under a V2 magic, checksummed: too short for the stamp, or
	// its records read as a stamp.
	v1AsV2 := append([]byte{}, one...)
	v1AsV2[0] = batchMagicV2
	seeds = append(seeds, batchSeed{"v1-body-v2-magic", rechecksum(v1AsV2)})
	v1AsV2Long := append([]byte{}, three...)
	v1AsV2Long[0] = batchMagicV2
	seeds = append(seeds, batchSeed{"v1-long-body-v2-magic", rechecksum(v1AsV2Long)})
	v2AsV1 := append([]byte{}, stamped...)
	v2AsV1[0] = batchMagicV1
	seeds = append(seeds, batchSeed{"v2-body-v1-magic", rechecksum(v2AsV1)})

	flipped := append([]byte{}, one...)
	flipped[batchHeaderLen] ^= 1
	seeds = append(seeds, batchSeed{"flipped-body", flipped})

	// Checksummed lies: the CRC is right, the body is not.
	lie := func(name string, edit func(body []byte) []byte) {
		b := append([]byte{}, one...)
		body := edit(append([]byte{}, b[frameHeaderLen:]...))
		seeds = append(seeds, batchSeed{name, rechecksum(append(b[:frameHeaderLen:frameHeaderLen], body...))})
	}
	lie("count-zero", func(b []byte) []byte { b[8], b[9], b[10], b[11] = 0, 0, 0, 0; return b })
	lie("count-too-big", func(b []byte) []byte { b[11] = 9; return b })
	lie("record-length-too-big", func(b []byte) []byte { b[batchFixedLen+3] = 200; return b })
	lie("extra-bytes", func(b []byte) []byte { return append(b, 1, 2, 3) })
	lie("offset-overflow", func(b []byte) []byte {
		for i := range 8 {
			b[i] = 0xFF
		}
		return b
	})
	lieV2 := func(name string, edit func(body []byte) []byte) {
		b := append([]byte{}, stamped...)
		body := edit(append([]byte{}, b[frameHeaderLen:]...))
		seeds = append(seeds, batchSeed{name, rechecksum(append(b[:frameHeaderLen:frameHeaderLen], body...))})
	}
	lieV2("v2-count-zero", func(b []byte) []byte { b[8], b[9], b[10], b[11] = 0, 0, 0, 0; return b })
	lieV2("v2-count-too-big", func(b []byte) []byte { b[11] = 9; return b })
	lieV2("v2-record-length-too-big", func(b []byte) []byte { b[batchFixedLen+stampLen+3] = 200; return b })
	return append(seeds, entrySeeds()...)
}

// entrySeeds are V3 batches, raft entries of every kind in a row, and
// their damaged variants.
func entrySeeds() []batchSeed {
	const at = 1_700_000_000_000_000
	stamp := &Stamp{Producer: 0xFE11C5, Sequence: 7, Digest: 0xD16E57}
	empty := appendEntryBatch(nil, 0, at, EntryMeta{Index: 1, Term: 1, Kind: EntryEmpty}, nil, nil)
	conf := appendEntryBatch(nil, 0, at, EntryMeta{Index: 2, Term: 1, Kind: EntryConfChange, Control: []byte("add node 2")}, nil, nil)
	records := appendEntryBatch(nil, 0, at+1, EntryMeta{Index: 3, Term: 1}, [][]byte{[]byte("a"), {}, []byte("ccc")}, nil)
	stamped := appendEntryBatch(nil, 3, at+2, EntryMeta{Index: 4, Term: 2}, [][]byte{[]byte("hello")}, stamp)
	leave := appendEntryBatch(nil, 4, at+2, EntryMeta{Index: 5, Term: 2, Kind: EntryConfChangeV2}, nil, nil)
	cat := func(frames ...[]byte) []byte { return bytes.Join(frames, nil) }
	seeds := []batchSeed{
		{"v3-empty", empty},
		{"v3-conf-change", conf},
		{"v3-records", records},
		{"v3-stamped", stamped},
		{"v3-conf-change-v2-no-bytes", leave},
		{"v3-log", cat(empty, conf, records, stamped, leave)},
		{"v3-cut-in-header", stamped[:frameHeaderLen+batchFixedLen+10]},
		{"v3-cut-in-stamp", stamped[:frameHeaderLen+batchFixedLen+entryFixedLen+5]},
		{"v3-cut-in-control", conf[:len(conf)-3]},
		{"v3-log-torn-tail", cat(empty, conf, records, stamped[:len(stamped)-2])},
		{"v1-then-v3", cat(appendBatch(nil, 0, at, [][]byte{[]byte("x")}, nil, false), appendEntryBatch(nil, 1, at, EntryMeta{Index: 1, Term: 1}, [][]byte{[]byte("y")}, nil))},
		{"v3-then-v1", cat(records, appendBatch(nil, 3, at+1, [][]byte{[]byte("x")}, nil, false))},
		{"v3-index-repeated", cat(empty, appendEntryBatch(nil, 0, at, EntryMeta{Index: 1, Term: 1, Kind: EntryEmpty}, nil, nil))},
		{"v3-term-going-back", cat(appendEntryBatch(nil, 0, at, EntryMeta{Index: 1, Term: 5, Kind: EntryEmpty}, nil, nil), appendEntryBatch(nil, 0, at, EntryMeta{Index: 2, Term: 4, Kind: EntryEmpty}, nil, nil))},
		{"v3-index-gap", cat(empty, appendEntryBatch(nil, 0, at, EntryMeta{Index: 9, Term: 1, Kind: EntryEmpty}, nil, nil))},
	}
	flipped := bytes.Clone(conf)
	flipped[len(flipped)-2] ^= 1
	seeds = append(seeds, batchSeed{"v3-flipped-control", flipped})
	// Checksummed lies about the entry part: byte i of the V3 fields
	// (index, term, kind, flags, control length) set to x.
	lie := func(name string, frame []byte, edit func(entry []byte)) {
		b := bytes.Clone(frame)
		edit(b[frameHeaderLen+batchFixedLen:])
		seeds = append(seeds, batchSeed{name, rechecksum(b)})
	}
	lie("v3-index-zero", empty, func(e []byte) { clear(e[:8]) })
	lie("v3-unknown-kind", empty, func(e []byte) { e[16] = 9 })
	lie("v3-unknown-flag", empty, func(e []byte) { e[17] = 2 })
	lie("v3-stamp-flag-without-stamp", empty, func(e []byte) { e[17] = entryStamped })
	lie("v3-control-too-long", conf, func(e []byte) { e[21] = 200 })
	lie("v3-control-on-empty", conf, func(e []byte) { e[16] = byte(EntryEmpty) })
	lie("v3-records-kind-without-records", empty, func(e []byte) { e[16] = byte(EntryRecords) })
	lie("v3-empty-kind-with-records", records, func(e []byte) { e[16] = byte(EntryEmpty) })
	lie("v3-stamp-on-conf-change", stamped, func(e []byte) { e[16] = byte(EntryConfChange) })
	countOnEmpty := bytes.Clone(empty)
	countOnEmpty[frameHeaderLen+11] = 1
	seeds = append(seeds, batchSeed{"v3-count-on-empty", rechecksum(countOnEmpty)})
	v1AsV3 := appendBatch(nil, 0, at, [][]byte{bytes.Repeat([]byte("z"), 40)}, nil, false)
	v1AsV3[0] = batchMagicV3
	seeds = append(seeds, batchSeed{"v1-body-v3-magic", rechecksum(v1AsV3)})
	return append(seeds, compactedEntrySeeds()...)
}

// compactedEntrySeeds are compacted raft entries (CE) among V3 ones, and
// their damaged variants.
func compactedEntrySeeds() []batchSeed {
	const at = 1_700_000_000_000_000
	stamp := &Stamp{Producer: 0xFE11C5, Sequence: 7, Digest: 0xD16E57}
	empty := appendEntryBatch(nil, 0, at, EntryMeta{Index: 1, Term: 1, Kind: EntryEmpty}, nil, nil)
	thinned := appendCompactedEntry(nil, 0, 4, at+1, EntryMeta{Index: 2, Term: 1}, nil, []sparseRecord{{offset: 1, value: []byte("b")}, {offset: 3, value: nil}})
	allGone := appendCompactedEntry(nil, 4, 2, at+2, EntryMeta{Index: 3, Term: 1}, nil, nil)
	stamped := appendCompactedEntry(nil, 6, 3, at+3, EntryMeta{Index: 4, Term: 2}, stamp, []sparseRecord{{offset: 8, value: []byte("z")}})
	after := appendEntryBatch(nil, 9, at+4, EntryMeta{Index: 5, Term: 2}, [][]byte{[]byte("kept as written")}, nil)
	cat := func(frames ...[]byte) []byte { return bytes.Join(frames, nil) }
	seeds := []batchSeed{
		{"ce-thinned", thinned},
		{"ce-all-gone", allGone},
		{"ce-stamped", stamped},
		{"ce-log", cat(empty, thinned, allGone, stamped, after)},
		{"ce-log-torn-tail", cat(empty, thinned, allGone[:len(allGone)-3])},
		{"ce-cut-in-header", stamped[:frameHeaderLen+batchFixedLen+entryFixedLen+2]},
		{"ce-span-gap", cat(thinned, appendEntryBatch(nil, 5, at+2, EntryMeta{Index: 3, Term: 1}, [][]byte{[]byte("x")}, nil))},
		{"ce-among-plain", cat(appendBatch(nil, 0, at, [][]byte{[]byte("x")}, nil, false), appendCompactedEntry(nil, 1, 1, at, EntryMeta{Index: 1, Term: 1}, nil, nil))},
	}
	lie := func(name string, frame []byte, edit func(entry []byte)) {
		b := bytes.Clone(frame)
		edit(b[frameHeaderLen+batchFixedLen:])
		seeds = append(seeds, batchSeed{name, rechecksum(b)})
	}
	lie("ce-kind-empty", thinned, func(e []byte) { e[16] = byte(EntryEmpty) })
	lie("ce-kind-conf-change", allGone, func(e []byte) { e[16] = byte(EntryConfChange) })
	lie("ce-attributed", thinned, func(e []byte) { e[17] = entryAttributed })
	lie("ce-control-length", thinned, func(e []byte) { e[21] = 1 })
	lie("ce-kept-over-span", thinned, func(e []byte) { e[entryFixedLen+3] = 5 })
	lie("ce-kept-too-many", thinned, func(e []byte) { e[entryFixedLen+3] = 3 })
	lie("ce-delta-past-span", thinned, func(e []byte) { e[entryFixedLen+keptLen+3] = 4 })
	lie("ce-deltas-not-increasing", thinned, func(e []byte) { e[entryFixedLen+keptLen+3] = 3 })
	spanZero := bytes.Clone(allGone)
	spanZero[frameHeaderLen+11] = 0
	seeds = append(seeds, batchSeed{"ce-span-zero", rechecksum(spanZero)})
	v3AsCE := bytes.Clone(after)
	v3AsCE[0] = batchMagicCE
	return append(seeds, batchSeed{"v3-body-ce-magic", rechecksum(v3AsCE)})
}

// rechecksum fixes a frame's length and CRC after its body was edited.
func rechecksum(frame []byte) []byte {
	body := frame[frameHeaderLen:]
	binary.BigEndian.PutUint32(frame[1:], uint32(len(body)))
	binary.BigEndian.PutUint32(frame[5:], crc32.Checksum(body, castagnoli))
	return frame
}

// FuzzDecodeCompactState decodes arbitrary bytes as a compaction journal.
//
// Invariants: never panics; a journal that decodes encodes back to the
// same bytes, and names at most maxPendingSegments bases.
func FuzzDecodeCompactState(f *testing.F) {
	f.Add(encodeCompactState(compactState{}))
	f.Add(encodeCompactState(compactState{horizon: 1 << 40, pending: []uint64{0, 4096, 1 << 33}}))
	f.Add([]byte("FXCP"))
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := decodeCompactState(data)
		if err != nil {
			if err != errBadCompactState {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if len(st.pending) > maxPendingSegments || !bytes.Equal(encodeCompactState(st), data) {
			t.Fatalf("%x decodes as %+v, which encodes differently", data, st)
		}
	})
}

// The compacted entry's layout: the well-formed seeds decode to what was
// encoded, and each checksummed lie is errMalformed, never a batch.
func TestCompactedEntryFormat(t *testing.T) {
	seeds := map[string][]byte{}
	for _, s := range compactedEntrySeeds() {
		seeds[s.name] = s.data
	}
	v, _, err := decodeBatch(seeds["ce-thinned"])
	if err != nil {
		t.Fatal(err)
	}
	var got []sparseRecord
	for off, r := range v.stored() {
		got = append(got, sparseRecord{offset: off, value: r})
	}
	if !v.entry || !v.sparse || v.meta.Index != 2 || v.meta.Term != 1 || v.meta.Kind != EntryRecords ||
		v.base != 0 || v.next() != 4 || v.held() != 2 || len(got) != 2 || got[0].offset != 1 || string(got[0].value) != "b" || got[1].offset != 3 {
		t.Fatalf("ce-thinned decoded as %+v, records %v", v, got)
	}
	v, _, err = decodeBatch(seeds["ce-stamped"])
	if err != nil || v.stamp == nil || v.stamp.Sequence != 7 || v.held() != 1 || v.next() != 9 {
		t.Fatalf("ce-stamped decoded as %+v, %v", v, err)
	}
	if v, _, err = decodeBatch(seeds["ce-all-gone"]); err != nil || v.held() != 0 || v.count != 2 {
		t.Fatalf("ce-all-gone decoded as %+v, %v", v, err)
	}
	for _, name := range []string{"ce-kind-empty", "ce-kind-conf-change", "ce-attributed", "ce-control-length",
		"ce-kept-over-span", "ce-kept-too-many", "ce-delta-past-span", "ce-deltas-not-increasing", "ce-span-zero", "v3-body-ce-magic"} {
		if _, _, err := decodeBatch(seeds[name]); err != errMalformed {
			t.Errorf("%s: %v, want errMalformed", name, err)
		}
	}
}
