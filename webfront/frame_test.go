package webfront

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/getfelix/felix-go/wire"
)

func TestRequestRoundTrip(t *testing.T) {
	want := &Request{Op: OpPublish, ID: 7, Namespace: "ns", Stream: "s", Key: []byte("k"), Payloads: [][]byte{[]byte("a"), {}}}
	b, err := AppendRequest(nil, want)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeRequest(b)
	if err != nil {
		t.Fatalf("DecodeRequest(%x): %v", b, err)
	}
	if got.Op != want.Op || got.ID != 7 || got.Stream != "s" || len(got.Payloads) != 2 || string(got.Payloads[0]) != "a" || string(got.Key) != "k" {
		t.Fatalf("round trip = %+v, want %+v", got, want)
	}
}

// control frames a hostile client could send; each must be refused
// ErrMalformed, never decoded into something else.
func TestDecodeRequestRefuses(t *testing.T) {
	enc := func(v any) []byte {
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return append([]byte{KindControl}, b...)
	}
	tests := []struct {
		name string
		give []byte
		want string
	}{
		{"empty", nil, "empty frame"},
		{"events kind from a client", []byte{KindEvents, 0}, "control frames"},
		{"not a map", enc([]int{1, 2}), "one msgpack map"},
		{"unknown op", enc(map[string]any{"op": "drop_all"}), "unknown op"},
		{"shard over 32 bits", enc(map[string]any{"op": "subscribe", "shard": uint64(1) << 40}), "32 bits"},
		{"bad start", enc(map[string]any{"op": "subscribe", "start": "yesterday"}), "start"},
		{"string claims 4 GiB", []byte{KindControl, 0x81, 0xa2, 'o', 'p', 0xdb, 0xff, 0xff, 0xff, 0xff}, "claims more"},
		{"array claims 4 G items", []byte{KindControl, 0x81, 0xa8, 'p', 'a', 'y', 'l', 'o', 'a', 'd', 's', 0xdd, 0xff, 0xff, 0xff, 0xff}, "claims more"},
		{"nested too deep", append([]byte{KindControl, 0x81, 0xa1, 'x'}, bytes.Repeat([]byte{0x91}, 20)...), "deeper"},
		{"trailing bytes", append(enc(map[string]any{"op": "auth"}), 0xc0), "trailing"},
		{"reserved code", []byte{KindControl, 0xc1}, "reserved"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeRequest(tt.give)
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("DecodeRequest(%x) = %v, want ErrMalformed mentioning %q", tt.give, err, tt.want)
			}
		})
	}
}

func TestEventsRoundTrip(t *testing.T) {
	frame := wire.AppendEventBatchOffsets(nil, 41, [][]byte{[]byte("x"), []byte("yz")})
	h, err := wire.ParseHeader(frame, len(frame))
	if err != nil {
		t.Fatal(err)
	}
	b := appendEvents(nil, 9, h.Flags, frame[wire.HeaderLen:])
	ev, err := DecodeEvents(b)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Sub != 9 || !ev.Offsets || ev.Base != 41 || len(ev.Payloads) != 2 || string(ev.Payloads[1]) != "yz" {
		t.Fatalf("events = %+v, want sub 9, base 41, [x yz]", ev)
	}
}
