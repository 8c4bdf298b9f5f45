package persistence

import (
	"bytes"
	"reflect"
	"testing"
	"time"
)

// FuzzAttrs: splitRecord and DecodeAttrs never panic, and what they
// accept survives a round trip: joining a split record's parts splits
// into the same parts; encoding decoded attributes decodes to the same key
// and headers (the encoding they accept may be non-canonical varints, so
// bytes are not compared).
func FuzzAttrs(f *testing.F) {
	f.Add(EncodeAttrs([]byte("key"), []Header{{Key: "a", Value: []byte("1")}, {Key: "", Value: nil}}))
	f.Add(EncodeAttrs(nil, []Header{{Key: "only", Value: []byte{}}}))
	f.Add(EncodeAttrs([]byte{}, nil))
	f.Add([]byte{0, 0xff, 0xff, 0xff, 0xff, 0x0f}) // a lying header count
	f.Fuzz(func(t *testing.T, b []byte) {
		if v, a, ok := splitRecord(b); ok {
			v2, a2, ok2 := splitRecord(joinRecords([][]byte{v}, [][]byte{a})[0])
			if !ok2 || !bytes.Equal(v, v2) || !bytes.Equal(a, a2) {
				t.Fatalf("split %x into (%x, %x); joined and split again: (%x, %x, %v)", b, v, a, v2, a2, ok2)
			}
		}
		key, headers, err := DecodeAttrs(b)
		if err != nil {
			return
		}
		key2, headers2, err := DecodeAttrs(EncodeAttrs(key, headers))
		if err != nil || !bytes.Equal(key, key2) || (key == nil) != (key2 == nil) || len(headers) != len(headers2) {
			t.Fatalf("decoded %x as key %q headers %v; re-encoded: key %q headers %v, %v", b, key, headers, key2, headers2, err)
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
