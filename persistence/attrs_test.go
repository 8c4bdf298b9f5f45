package persistence

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"testing"
	"time"
)

// FuzzAttrs: splitRecord and DecodeRecordAttrs never panic, and what they
// accept survives a round trip: joining a split record's parts splits
// into the same parts; encoding decoded attributes decodes to the same key,
// headers and time (the encoding they accept may be non-canonical varints, so
// bytes are not compared).
func FuzzAttrs(f *testing.F) {
	f.Add(EncodeAttrs([]byte("key"), []Header{{Key: "a", Value: []byte("1")}, {Key: "", Value: nil}}))
	f.Add(EncodeAttrs(nil, []Header{{Key: "only", Value: []byte{}}}))
	f.Add(EncodeAttrs([]byte{}, nil))
	f.Add([]byte{0, 0xff, 0xff, 0xff, 0xff, 0x0f}) // a lying header count
	f.Add(EncodeRecordAttrs(RecordAttrs{Time: time.UnixMilli(1767323045123)}))
	f.Add(EncodeRecordAttrs(RecordAttrs{Key: []byte("k"), Time: time.UnixMilli(0)}))
	f.Add([]byte{0, 0, 2, 0}) // a codec of 0
	f.Add(EncodeRecordAttrs(RecordAttrs{Key: []byte("k"), Time: time.UnixMilli(7), Codec: 1}))
	f.Add([]byte{0, 0, 2, 1, 1, 0}) // the codec before the time
	f.Add(EncodeRecordAttrs(RecordAttrs{Codec: 2, Batch: 3}))
	f.Add([]byte{0, 0, 4, 0})                                                          // an unknown field
	f.Add([]byte{0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}) // a time past the year 9999
	f.Fuzz(func(t *testing.T, b []byte) {
		if v, a, ok := splitRecord(b); ok {
			v2, a2, ok2 := splitRecord(joinRecords([][]byte{v}, [][]byte{a})[0])
			if !ok2 || !bytes.Equal(v, v2) || !bytes.Equal(a, a2) {
				t.Fatalf("split %x into (%x, %x); joined and split again: (%x, %x, %v)", b, v, a, v2, a2, ok2)
			}
		}
		a, err := DecodeRecordAttrs(b)
		if err != nil {
			return
		}
		a2, err := DecodeRecordAttrs(EncodeRecordAttrs(a))
		key, headers, key2, headers2 := a.Key, a.Headers, a2.Key, a2.Headers
		if err != nil || !bytes.Equal(key, key2) || (key == nil) != (key2 == nil) || len(headers) != len(headers2) || !a.Time.Equal(a2.Time) || a.Codec != a2.Codec || a.Batch != a2.Batch {
			t.Fatalf("decoded %x as %+v; re-encoded: %+v, %v", b, a, a2, err)
		}
		for i := range headers {
			if headers[i].Key != headers2[i].Key || !bytes.Equal(headers[i].Value, headers2[i].Value) || (headers[i].Value == nil) != (headers2[i].Value == nil) {
				t.Fatalf("header %d: %+v became %+v", i, headers[i], headers2[i])
			}
		}
	})
}

// TestAppendAttributed: keys and headers come back from Read with their
// values, before and after a reopen; a plain batch beside them reads
// without attributes; a batch without attributes is still V1 byte for byte.
func TestAppendAttributed(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, smallConfig())
	now := time.Now()
	headers := []Header{{Key: "trace", Value: []byte("abc")}, {Key: "null", Value: nil}}
	attrs := [][]byte{EncodeAttrs([]byte("k0"), headers), nil, EncodeAttrs(nil, headers[:1])}
	if _, err := l.AppendAttributed(0, [][]byte{[]byte("v0"), []byte("v1"), []byte("v2")}, attrs, now, &Stamp{Producer: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(3, [][]byte{[]byte("plain")}, now); err != nil {
		t.Fatal(err)
	}
	check := func(l *Log) {
		t.Helper()
		page, err := l.Read(0, 10, 1<<20)
		if err != nil || len(page.Records) != 4 {
			t.Fatalf("read %d records, %v; want 4", len(page.Records), err)
		}
		for i, want := range append(attrs, nil) {
			r := page.Records[i]
			if !bytes.Equal(r.Attrs, want) {
				t.Fatalf("record %d: attrs %x, want %x", i, r.Attrs, want)
			}
		}
		key, hs, err := DecodeAttrs(page.Records[0].Attrs)
		if err != nil || string(key) != "k0" || !reflect.DeepEqual(hs, headers) || string(page.Records[0].Value) != "v0" {
			t.Fatalf("record 0: value %q key %q headers %v (%v)", page.Records[0].Value, key, hs, err)
		}
		if string(page.Records[3].Value) != "plain" {
			t.Fatalf("record 3: %q", page.Records[3].Value)
		}
	}
	check(l)
	mustClose(t, l)
	l = mustOpen(t, dir, smallConfig())
	defer mustClose(t, l)
	check(l)

	plain := appendBatch(nil, 0, 1, [][]byte{[]byte("x")}, nil, false)
	if plain[0] != batchMagicV1 {
		t.Fatalf("a batch without attributes has magic %#x, want V1", plain[0])
	}
}

// TestRecordAttrsTime: a record's own time survives the encoding to the
// millisecond, with or without a key and headers; a record with only a
// time is attributed; a time outside what is kept is dropped, not
// wrapped.
func TestRecordAttrsTime(t *testing.T) {
	at := time.UnixMilli(1767323045123)
	tests := []struct {
		name string
		give RecordAttrs
		want time.Time
	}{
		{"time only", RecordAttrs{Time: at}, at},
		{"key headers and time", RecordAttrs{Key: []byte("k"), Headers: []Header{{Key: "h", Value: []byte("v")}}, Time: at}, at},
		{"the epoch", RecordAttrs{Time: time.UnixMilli(0)}, time.UnixMilli(0)},
		{"negative", RecordAttrs{Key: []byte("k"), Time: time.UnixMilli(-5)}, time.Time{}},
		{"past the year 9999", RecordAttrs{Key: []byte("k"), Time: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}, time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := EncodeRecordAttrs(tt.give)
			if b == nil {
				t.Fatalf("EncodeRecordAttrs(%+v) is nil, want attributes", tt.give)
			}
			got, err := DecodeRecordAttrs(b)
			if err != nil || !got.Time.Equal(tt.want) || got.Time.IsZero() != tt.want.IsZero() || !bytes.Equal(got.Key, tt.give.Key) {
				t.Fatalf("round trip of %+v: %+v, %v; want time %v", tt.give, got, err, tt.want)
			}
		})
	}
	if b := EncodeRecordAttrs(RecordAttrs{Time: time.UnixMilli(-1)}); b != nil {
		t.Fatalf("a record with nothing kept encodes as %x, want nil", b)
	}
}

// TestRecordAttrsCodec: a record's codec and batch length survive the
// encoding alone or with a time; bytes written before codecs were kept (a time last) decode
// with none; fields out of order, repeated, unknown or a codec out of
// range are malformed, and a codec past the range is not kept.
func TestRecordAttrsCodec(t *testing.T) {
	at := time.UnixMilli(1767323045123)
	for _, give := range []RecordAttrs{{Codec: 1}, {Time: at, Codec: 4}, {Key: []byte("k"), Codec: maxAttrCodec}, {Codec: 1, Batch: 3}, {Batch: maxAttrBatch}} {
		got, err := DecodeRecordAttrs(EncodeRecordAttrs(give))
		if err != nil || got.Codec != give.Codec || got.Batch != give.Batch || !got.Time.Equal(give.Time) || !bytes.Equal(got.Key, give.Key) {
			t.Fatalf("round trip of %+v: %+v, %v", give, got, err)
		}
	}
	// What the encoder wrote before codecs: no key, no headers, a time.
	before := binary.AppendVarint([]byte{0, 0, attrTagTime}, at.UnixMilli())
	if got, err := DecodeRecordAttrs(before); err != nil || got.Codec != 0 || !got.Time.Equal(at) {
		t.Fatalf("pre-codec bytes %x: %+v, %v; want the time and no codec", before, got, err)
	}
	for name, b := range map[string][]byte{
		"codec before time":  {0, 0, attrTagCodec, 1, attrTagTime, 0},
		"codec twice":        {0, 0, attrTagCodec, 1, attrTagCodec, 1},
		"codec zero":         {0, 0, attrTagCodec, 0},
		"codec past range":   {0, 0, attrTagCodec, maxAttrCodec + 1},
		"batch zero":         {0, 0, attrTagBatch, 0},
		"batch before codec": {0, 0, attrTagBatch, 1, attrTagCodec, 1},
		"unknown tag":        {0, 0, attrTagBatch + 1, 0},
		"truncated codec":    {0, 0, attrTagCodec},
	} {
		if _, err := DecodeRecordAttrs(b); !errors.Is(err, ErrBadAttrs) {
			t.Errorf("%s (%x): %v, want ErrBadAttrs", name, b, err)
		}
	}
	if b := EncodeRecordAttrs(RecordAttrs{Codec: maxAttrCodec + 1, Batch: maxAttrBatch + 1}); b != nil {
		t.Fatalf("a codec past the range encodes as %x, want nil", b)
	}
}

// TestOpenLogBeforeRecordTimes opens a log written before records had a
// time of their own (testdata/oldlog-v1, written at commit ebe4094 by
// Append and AppendAttributed: offsets 0-1 plain, 2-3 with a key and
// headers on 2, 4 stamped with a key): it opens, verifies, reads every
// record with its batch's time, and its attributes decode as before, with
// no time of their own.
func TestOpenLogBeforeRecordTimes(t *testing.T) {
	dir := t.TempDir()
	copyDir(t, "testdata/oldlog-v1", dir)
	l, err := Open(dir, Config{})
	if err != nil {
		t.Fatalf("open the old log: %v", err)
	}
	defer l.Close()
	page, err := l.Read(0, 0, 0)
	if err != nil || len(page.Records) != 5 {
		t.Fatalf("read: %d records, %v; want 5", len(page.Records), err)
	}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	want := []struct {
		value, key string
		headers    int
		at         time.Time
	}{
		{"plain-0", "", 0, t0}, {"plain-1", "", 0, t0},
		{"attr-2", "k2", 1, t0.Add(time.Second)}, {"attr-3", "", 0, t0.Add(time.Second)},
		{"stamped-4", "k4", 0, t0.Add(2 * time.Second)},
	}
	for i, r := range page.Records {
		a, err := DecodeRecordAttrs(r.Attrs)
		w := want[i]
		if err != nil || string(r.Value) != w.value || string(a.Key) != w.key || len(a.Headers) != w.headers || !a.Time.IsZero() || !r.Time.Equal(w.at) {
			t.Fatalf("record %d: value %q attrs %+v (%v) time %v; want %+v", r.Offset, r.Value, a, err, r.Time, w)
		}
	}
	var stamps []Stamp
	if err := l.Stamps(0, func(s Stamp, _ uint64, _ uint32) bool { stamps = append(stamps, s); return true }); err != nil || len(stamps) != 1 || stamps[0].Producer != 7 {
		t.Fatalf("stamps of the old log: %+v, %v; want producer 7's one", stamps, err)
	}
}
