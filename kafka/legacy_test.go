package kafka

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"
	"time"

	"github.com/golang/snappy"
)

// legacyEntry builds one message-set entry of magic 0 or 1 (timestamp
// only for 1) with codec's attribute bits.
func legacyEntry(magic byte, attrs byte, ts int64, key, value []byte) []byte {
	msg := []byte{0, 0, 0, 0, magic, attrs}
	if magic == 1 {
		msg = binary.BigEndian.AppendUint64(msg, uint64(ts))
	}
	for _, b := range [][]byte{key, value} {
		if b == nil {
			msg = binary.BigEndian.AppendUint32(msg, ^uint32(0))
			continue
		}
		msg = binary.BigEndian.AppendUint32(msg, uint32(len(b)))
		msg = append(msg, b...)
	}
	binary.BigEndian.PutUint32(msg, crc32.ChecksumIEEE(msg[4:]))
	entry := binary.BigEndian.AppendUint64(nil, 0)
	entry = binary.BigEndian.AppendUint32(entry, uint32(len(msg)))
	return append(entry, msg...)
}

func gzipped(b []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	_, _ = w.Write(b)
	_ = w.Close()
	return buf.Bytes()
}

// TestParseMessageSet: the old formats decode to the same records a
// RecordBatch would give (values, keys, a magic 1 CreateTime), through a
// gzip or snappy wrapper too; what Kafka refuses or cannot be read is
// refused with a typed error; the bound counts decompressed entries.
func TestParseMessageSet(t *testing.T) {
	at := time.UnixMilli(1588291200123)
	plain := append(legacyEntry(0, 0, 0, []byte("k0"), []byte("v0")), legacyEntry(0, 0, 0, nil, nil)...)
	v1 := append(legacyEntry(1, 0, at.UnixMilli(), nil, []byte("a")), legacyEntry(1, 0, -1, []byte("k"), []byte("b"))...)
	b, err := parseMessageSet(plain, 1<<20)
	if err != nil || len(b.values) != 2 || string(b.values[0]) != "v0" || len(b.values[1]) != 0 || b.values[1] == nil ||
		string(b.attrs[0].Key) != "k0" || b.attrs[1].Key != nil || b.producerID != -1 {
		t.Fatalf("magic 0: %+v, %v", b, err)
	}
	for name, set := range map[string][]byte{
		"magic 1":        v1,
		"gzip wrapper":   legacyEntry(1, codecGzip, at.UnixMilli(), nil, gzipped(v1)),
		"snappy wrapper": legacyEntry(1, codecSnappy, at.UnixMilli(), nil, snappy.Encode(nil, v1)),
	} {
		b, err := parseMessageSet(set, 1<<20)
		if err != nil || len(b.values) != 2 || string(b.values[0]) != "a" || string(b.values[1]) != "b" ||
			!b.attrs[0].Time.Equal(at) || !b.attrs[1].Time.IsZero() || string(b.attrs[1].Key) != "k" {
			t.Fatalf("%s: %+v, %v", name, b, err)
		}
	}
	corrupt := bytes.Clone(plain)
	corrupt[len(corrupt)-1] ^= 1
	batch := seedBatch(codecNone, [][]byte{[]byte("v")}) // a RecordBatch where a message set belongs
	for name, tc := range map[string]struct {
		set  []byte
		max  int
		want error
	}{
		"bad CRC":            {corrupt, 1 << 20, ErrCorruptBatch},
		"empty":              {nil, 1 << 20, ErrCorruptBatch},
		"torn entry":         {plain[:len(plain)-3], 1 << 20, ErrCorruptBatch},
		"a RecordBatch":      {batch, 1 << 20, ErrUnsupportedBatch},
		"nested compression": {legacyEntry(1, codecGzip, 0, nil, gzipped(legacyEntry(1, codecGzip, 0, nil, gzipped(v1)))), 1 << 20, ErrCorruptBatch},
		"lz4 in magic 0":     {legacyEntry(0, codecLZ4, 0, nil, []byte("x")), 1 << 20, ErrUnsupportedBatch},
		"zstd":               {legacyEntry(1, codecZstd, 0, nil, []byte("x")), 1 << 20, ErrUnsupportedBatch},
		"as sent past max":   {plain, len(plain) - 1, ErrBatchTooLarge},
		"inflated past max":  {legacyEntry(1, codecGzip, 0, nil, gzipped(bytes.Repeat(legacyEntry(1, 0, 0, nil, nil), 1000))), 1000, ErrBatchTooLarge},
		"magic 1 too short":  {legacyEntry(0, 0, 0, nil, nil)[:12+14], 1 << 20, nil},
	} {
		if _, err := parseMessageSet(tc.set, tc.max); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
}

// FuzzMessageSet: parseMessageSet never panics and never returns more
// than its bound, whatever the set, compressed or not; every value it
// returns has a record, and attrs, when set, are parallel to them.
func FuzzMessageSet(f *testing.F) {
	v1 := append(legacyEntry(1, 0, 5, nil, []byte("a")), legacyEntry(1, 0, -1, []byte("k"), nil)...)
	f.Add(legacyEntry(0, 0, 0, []byte("k"), []byte("v")))
	f.Add(v1)
	f.Add(legacyEntry(1, codecGzip, 0, nil, gzipped(v1)))
	f.Add(legacyEntry(1, codecSnappy, 0, nil, snappy.Encode(nil, v1)))
	f.Add(legacyEntry(1, codecGzip, 0, nil, gzipped(bytes.Repeat(legacyEntry(1, 0, 0, nil, nil), 5000))))
	const max = 64 << 10
	f.Fuzz(func(t *testing.T, set []byte) {
		b, err := parseMessageSet(set, max)
		if err != nil {
			if !errors.Is(err, ErrCorruptBatch) && !errors.Is(err, ErrBatchTooLarge) && !errors.Is(err, ErrUnsupportedBatch) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if b.size > max || len(b.values) == 0 || (b.attrs != nil && len(b.attrs) != len(b.values)) {
			t.Fatalf("size %d (max %d), %d values, %d attrs", b.size, max, len(b.values), len(b.attrs))
		}
	})
}
