package webfront

import (
	"bytes"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// FuzzDecodeRequest: DecodeRequest never panics, and what it accepts is a
// known op whose integers fit their fields and that encodes back to a frame
// it accepts again.
func FuzzDecodeRequest(f *testing.F) {
	for _, r := range []*Request{
		{Op: OpAuth, ID: 1, Tenant: "default", Token: "t"},
		{Op: OpSubscribe, ID: 2, Namespace: "ns", Stream: "s", Start: "offset", Offset: 10},
		{Op: OpPublish, ID: 3, Namespace: "ns", Stream: "s", Payloads: [][]byte{[]byte("hello")}},
		{Op: OpRead, ID: 4, Namespace: "ns", Stream: "s", From: 5, Max: 100},
		{Op: OpUnsubscribe, ID: 5, Sub: 9},
	} {
		b, err := AppendRequest(nil, r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{KindControl, 0x81, 0xa2, 'o', 'p', 0xdb, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{KindEvents})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRequest(b)
		if err != nil {
			return
		}
		if err := r.check(); err != nil {
			t.Fatalf("accepted a request its own check refuses: %v", err)
		}
		again, err := msgpack.Marshal(r)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		if _, err := DecodeRequest(append([]byte{KindControl}, again...)); err != nil {
			t.Fatalf("re-encoded request refused: %v", err)
		}
	})
}

// FuzzReadStreamFrame: reading a WebTransport stream's frames never panics,
// never returns a frame over the limit or an empty one, and what it
// returns, framed again, is the bytes it consumed.
func FuzzReadStreamFrame(f *testing.F) {
	ok, err := AppendRequest(nil, &Request{Op: OpAuth, ID: 1, Tenant: "default", Token: "t"})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(AppendStreamFrame(AppendStreamFrame(nil, ok), []byte{KindControl, 0x80}), 64)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1}, 1<<20)
	f.Add([]byte{0, 0, 0, 0}, 16)
	f.Add([]byte{0, 0, 0, 5, 1, 2}, 16)
	f.Fuzz(func(t *testing.T, b []byte, limit int) {
		if limit < 0 || limit > 1<<20 {
			return
		}
		r := bytes.NewReader(b)
		var again []byte
		for {
			frame, err := ReadStreamFrame(r, limit)
			if err != nil {
				break
			}
			if len(frame) == 0 || len(frame) > limit {
				t.Fatalf("a frame of %d bytes under the limit %d", len(frame), limit)
			}
			again = AppendStreamFrame(again, frame)
		}
		if !bytes.HasPrefix(b, again) {
			t.Fatal("the frames read, framed again, are not the stream's first bytes")
		}
	})
}
