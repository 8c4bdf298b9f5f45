package cache

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// sampleRecords has one record of each kind and condition.
var sampleRecords = []Record{
	{Kind: KindPut, At: 5, Key: "k", Value: []byte("v")},
	{Kind: KindPut, At: 6, Key: "k", Value: []byte{}, Expires: 1e9, Cond: Cond{Kind: CondAbsent}},
	{Kind: KindPut, At: -1, Key: "k", Value: []byte("v"), Cond: Cond{Kind: CondVersion, Version: 1 << 40}},
	{Kind: KindDelete, At: 7, Key: "k"},
	{Kind: KindDelete, At: 7, Key: "k", Cond: Cond{Kind: CondVersion, Version: 3}},
	{Kind: KindExpire, At: 8, Key: "k", Version: 9},
	{Kind: KindCounterAdd, At: 9, Key: "n", Delta: -12},
	{Kind: KindCounterSet, At: 9, Key: "n", Delta: 1 << 62},
	{Kind: KindCommit, At: 10, Event: []byte("e"), Ops: []Op{
		{Key: "a", Value: []byte("1"), Expires: 3},
		{Key: "b", Delete: true},
	}},
	{Kind: KindCommit, At: 11, Event: []byte{}, Ops: []Op{}},
}

func TestRecordRoundTrip(t *testing.T) {
	for _, r := range sampleRecords {
		b, err := AppendRecord([]byte("prefix"), &r)
		if err != nil {
			t.Fatalf("encode %+v: %v", r, err)
		}
		if !bytes.HasPrefix(b, []byte("prefix")) {
			t.Fatalf("encode %+v did not append", r)
		}
		got, err := DecodeRecord(b[len("prefix"):])
		if err != nil {
			t.Fatalf("decode %+v: %v", r, err)
		}
		if !reflect.DeepEqual(normalise(got), normalise(r)) {
			t.Fatalf("round trip: got %+v, want %+v", got, r)
		}
	}
}

// normalise makes empty and nil slices equal, as the encoding does.
func normalise(r Record) Record {
	if len(r.Value) == 0 {
		r.Value = nil
	}
	if len(r.Event) == 0 {
		r.Event = nil
	}
	if len(r.Ops) == 0 {
		r.Ops = nil
	}
	for i := range r.Ops {
		if len(r.Ops[i].Value) == 0 {
			r.Ops[i].Value = nil
		}
	}
	return r
}

func TestAppendRecordRefuses(t *testing.T) {
	tests := []struct {
		name string
		give Record
	}{
		{"no kind", Record{Key: "k"}},
		{"unknown kind", Record{Kind: kindEnd, Key: "k"}},
		{"empty key", Record{Kind: KindPut}},
		{"long key", Record{Kind: KindPut, Key: strings.Repeat("k", MaxKeyBytes+1)}},
		{"long value", Record{Kind: KindPut, Key: "k", Value: make([]byte, MaxValueBytes+1)}},
		{"delete if absent", Record{Kind: KindDelete, Key: "k", Cond: Cond{Kind: CondAbsent}}},
		{"condition on an add", Record{Kind: KindCounterAdd, Key: "k", Cond: Cond{Kind: CondVersion}}},
		{"unknown condition", Record{Kind: KindPut, Key: "k", Cond: Cond{Kind: condEnd}}},
		{"too many ops", Record{Kind: KindCommit, Ops: make([]Op, MaxCommitOps+1)}},
		{"op without key", Record{Kind: KindCommit, Ops: []Op{{Value: []byte("v")}}}},
		{"key twice", Record{Kind: KindCommit, Ops: []Op{{Key: "a"}, {Key: "a", Delete: true}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if b, err := AppendRecord(nil, &tt.give); !errors.Is(err, ErrBadRecord) {
				t.Fatalf("AppendRecord(%+v) = %x, %v; want ErrBadRecord", tt.give, b, err)
			}
		})
	}
}

func TestDecodeRecordRefuses(t *testing.T) {
	put, _ := AppendRecord(nil, &sampleRecords[0])
	commit, _ := AppendRecord(nil, &sampleRecords[8])
	header := func(kind Kind) []byte { return append([]byte{recordVersion, byte(kind)}, make([]byte, 8)...) }
	tests := []struct {
		name string
		give []byte
	}{
		{"empty", nil},
		{"other version", append([]byte{2}, put[1:]...)},
		{"header only", put[:10]},
		{"truncated", put[:len(put)-1]},
		{"trailing byte", append(bytes.Clone(put), 0)},
		{"unknown kind", header(kindEnd)},
		{"unknown condition", append(header(KindPut), 9)},
		// A length claiming more than the record holds is refused before
		// anything is allocated for it.
		{"lying length", binary.AppendUvarint(append(header(KindPut), 0), 1<<40)},
		{"overlong varint", append(append(header(KindPut), 0), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01)},
		{"lying op count", binary.AppendUvarint(append(header(KindCommit), 0), MaxCommitOps)},
		{"op kind", append(append(header(KindCommit), 0, 1), 7)},
		{"truncated commit", commit[:len(commit)-2]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if r, err := DecodeRecord(tt.give); !errors.Is(err, ErrBadRecord) {
				t.Fatalf("DecodeRecord(%x) = %+v, %v; want ErrBadRecord", tt.give, r, err)
			}
		})
	}
}

// FuzzDecodeRecord: any input decodes or fails with ErrBadRecord, never
// panics; what decodes encodes back to a record that decodes the same,
// and applies to an index without panicking.
func FuzzDecodeRecord(f *testing.F) {
	for _, r := range sampleRecords {
		b, _ := AppendRecord(nil, &r)
		f.Add(b)
	}
	f.Add([]byte{recordVersion, byte(KindCommit), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRecord(b)
		if err != nil {
			if !errors.Is(err, ErrBadRecord) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		again, err := AppendRecord(nil, &r)
		if err != nil {
			t.Fatalf("decoded %+v does not encode: %v", r, err)
		}
		back, err := DecodeRecord(again)
		if err != nil || !reflect.DeepEqual(normalise(back), normalise(r)) {
			t.Fatalf("re-encoding changed the record: %+v vs %+v (%v)", back, r, err)
		}
		x := New(WithMaxKeys(2))
		x.Apply(0, &Record{Kind: KindPut, Key: "k", Value: []byte("v"), Expires: 5})
		x.Apply(1, &r)
		x.Apply(2, &r)
		x.Due(1<<62, 10)
		x.List("", "", 0, 0)
	})
}
