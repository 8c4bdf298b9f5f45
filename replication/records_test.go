package replication

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"reflect"
	"testing"
	"time"
)

func TestRecordsRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		give Batch
	}{
		{"one record", Batch{Time: time.UnixMicro(1_700_000_000_000_000), Records: [][]byte{[]byte("a")}}},
		{"empty record", Batch{Time: time.UnixMicro(1), Records: [][]byte{{}}}},
		{"stamped", Batch{Time: time.UnixMicro(2), Stamp: &Stamp{Producer: 7, Sequence: 1 << 40, Digest: math.MaxUint64}, Records: [][]byte{[]byte("x"), []byte("yz")}}},
		{"zero stamp", Batch{Time: time.UnixMicro(3), Stamp: &Stamp{}, Records: [][]byte{[]byte("x")}}},
		{"before 1970", Batch{Time: time.UnixMicro(-5), Records: [][]byte{[]byte("old")}}},
		{"zero time", Batch{Time: time.UnixMicro(time.Time{}.UnixMicro()), Records: [][]byte{[]byte("z")}}},
		{"many records", Batch{Time: time.UnixMicro(4), Records: bytes.Fields(bytes.Repeat([]byte("rec "), 300))}},
		{"long record", Batch{Time: time.UnixMicro(5), Records: [][]byte{bytes.Repeat([]byte{0xAB}, 70_000)}}},
		{"attributed", Batch{Time: time.UnixMicro(6), Attributed: true, Stamp: &Stamp{Producer: 1}, Records: [][]byte{{0}, {3, 'k', 'e', 'y', 'v'}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, err := EncodeRecords(nil, tt.give)
			if err != nil {
				t.Fatalf("EncodeRecords: %v", err)
			}
			got, err := DecodeRecords(data)
			if err != nil {
				t.Fatalf("DecodeRecords(%x): %v", data, err)
			}
			if !got.Time.Equal(tt.give.Time) || !reflect.DeepEqual(got.Stamp, tt.give.Stamp) || !reflect.DeepEqual(got.Records, tt.give.Records) || got.Attributed != tt.give.Attributed {
				t.Errorf("decoded %+v, want %+v", got, tt.give)
			}
		})
	}
}

func TestEncodeRecordsKeepsMicroseconds(t *testing.T) {
	give := time.Unix(10, 123_456_789)
	data, err := EncodeRecords(nil, Batch{Time: give, Records: [][]byte{{1}}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := DecodeRecords(data)
	if want := time.Unix(10, 123_456_000); err != nil || !b.Time.Equal(want) {
		t.Errorf("time %v encoded and decoded as %v (%v), want %v", give, b.Time, err, want)
	}
}

func TestEncodeRecordsRefusesNoRecords(t *testing.T) {
	if _, err := EncodeRecords(nil, Batch{}); !errors.Is(err, ErrNoRecords) {
		t.Errorf("EncodeRecords without records: %v, want ErrNoRecords", err)
	}
}

// TestDecodeRecordsRefusesMalformed: each malformation is refused with the
// position where decoding stopped.
func TestDecodeRecordsRefusesMalformed(t *testing.T) {
	valid := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	head := []byte{batchVersion1, 0, 0} // version, flags, time 0
	tests := []struct {
		name   string
		give   []byte
		wantAt int
	}{
		{"empty", nil, 0},
		{"no flags", []byte{batchVersion1}, 1},
		{"unknown flag", []byte{batchVersion1, 0x04, 0, 1, 1, 'a'}, 2},
		{"no time", []byte{batchVersion1, 0}, 2},
		{"time not minimal", []byte{batchVersion1, 0, 0x80, 0x00, 1, 1, 'a'}, 2},
		{"time overflows", valid([]byte{batchVersion1, 0}, bytes.Repeat([]byte{0xFF}, 10), []byte{1}), 2},
		{"short stamp", []byte{batchVersion1, flagStamped, 0, 1, 2}, 5},
		{"short digest", []byte{batchVersion1, flagStamped, 0, 1, 2, 0, 0, 0}, 5},
		{"no count", head, 3},
		{"zero records", valid(head, []byte{0}), 4},
		{"more records than bytes", valid(head, []byte{3, 0, 0}), 4},
		{"huge count", valid(head, binary.AppendUvarint(nil, math.MaxUint64), []byte{0}), 13},
		{"record longer than the data", valid(head, []byte{1, 5, 'a'}), 5},
		{"huge record length", valid(head, []byte{1}, binary.AppendUvarint(nil, math.MaxUint64)), 14},
		{"record length not minimal", valid(head, []byte{1, 0x81, 0x00, 'a'}), 4},
		{"bytes after the last record", valid(head, []byte{1, 1, 'a', 'b'}), 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeRecords(tt.give)
			var malformed *ErrMalformedBatch
			if !errors.As(err, &malformed) {
				t.Fatalf("DecodeRecords(%x) = %v, want *ErrMalformedBatch", tt.give, err)
			}
			if malformed.At != tt.wantAt {
				t.Errorf("DecodeRecords(%x) stopped at byte %d (%v), want %d", tt.give, malformed.At, err, tt.wantAt)
			}
		})
	}
}

func TestDecodeRecordsRefusesUnknownVersion(t *testing.T) {
	_, err := DecodeRecords([]byte{2, 0, 0, 1, 1, 'a'})
	var unsupported *ErrUnsupportedBatchVersion
	if !errors.As(err, &unsupported) || unsupported.Version != 2 {
		t.Errorf("DecodeRecords(version 2) = %v, want *ErrUnsupportedBatchVersion{2}", err)
	}
}

// TestDecodedRecordsDoNotOverlap: the records alias the data, each capped
// at its own end, so appending to one cannot overwrite the next.
func TestDecodedRecordsDoNotOverlap(t *testing.T) {
	data, _ := EncodeRecords(nil, Batch{Records: [][]byte{[]byte("ab"), []byte("cd")}})
	b, err := DecodeRecords(data)
	if err != nil {
		t.Fatal(err)
	}
	_ = append(b.Records[0], 'X')
	if string(b.Records[1]) != "cd" {
		t.Errorf("appending to record 0 changed record 1 to %q", b.Records[1])
	}
}

// FuzzDecodeRecords feeds arbitrary bytes to DecodeRecords.
//
// Invariants:
//   - never panics;
//   - an error is *ErrMalformedBatch or *ErrUnsupportedBatchVersion, and
//     nothing else;
//   - a decoded batch has at least one record, and encoding it again gives
//     back exactly the input: one encoding per batch.
func FuzzDecodeRecords(f *testing.F) {
	for _, b := range []Batch{
		{Time: time.UnixMicro(1_700_000_000_000_000), Records: [][]byte{[]byte("a")}},
		{Time: time.UnixMicro(-1), Stamp: &Stamp{Producer: 1, Sequence: 300, Digest: 0xDEADBEEF}, Records: [][]byte{{}, []byte("bc")}},
	} {
		data, err := EncodeRecords(nil, b)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte{batchVersion1, 0, 0, 3, 0, 0})
	f.Add([]byte{2, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := DecodeRecords(data)
		if err != nil {
			var malformed *ErrMalformedBatch
			var unsupported *ErrUnsupportedBatchVersion
			if !errors.As(err, &malformed) && !errors.As(err, &unsupported) {
				t.Fatalf("DecodeRecords(%x): unexpected error %T %v", data, err, err)
			}
			return
		}
		if len(b.Records) == 0 {
			t.Fatalf("DecodeRecords(%x) decoded no records", data)
		}
		again, err := EncodeRecords(nil, b)
		if err != nil || !bytes.Equal(again, data) {
			t.Fatalf("re-encoded batch differs (%v):\n got %x\nwant %x", err, again, data)
		}
	})
}
