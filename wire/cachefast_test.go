package wire

import (
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

var fastTypes = []MsgType{TypeCachePut, TypeCacheGet, TypeCacheResult, TypeCacheValue}

func fastSeeds(t testing.TB) [][]byte {
	v := uint64(7)
	msgs := []Message{
		&CachePut{RequestID: 1, Tenant: "t", Namespace: "ns", Cache: "c", Key: "k", Value: []byte("value")},
		&CachePut{RequestID: 1 << 40, Key: "k", Value: []byte{}, TTLMS: 1500, IfAbsent: true},
		&CachePut{RequestID: 2, Key: "k", IfVersion: &v, TTLMS: -1},
		&CacheGet{RequestID: 3, Tenant: "t", Namespace: "ns", Cache: "c", Key: "user/1"},
		&CacheResult{RequestID: 4, Applied: true, Version: 1 << 33, Present: true, HadPrev: true, Prev: []byte("old")},
		&CacheResult{RequestID: 5, Reason: "version_mismatch", Version: 9},
		&CacheValue{RequestID: 6, Found: true, Key: "k", Value: make([]byte, 300), Version: 12, ExpiresMS: 1 << 41},
		&CacheValue{RequestID: 7, Key: "gone"},
	}
	var out [][]byte
	for _, m := range msgs {
		b, err := msgpack.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// generic decodes body as DecodeMessageLimit's general path does.
func generic(t MsgType, body []byte) (Message, error) {
	m := newMessage(t)
	if err := checkIntRanges(body, m); err != nil {
		return nil, err
	}
	return m, msgpack.Unmarshal(body, m)
}

// sameAsGeneric fails when the fast decoder takes body but the general
// path reads it otherwise, or refuses it.
func sameAsGeneric(t *testing.T, typ MsgType, body []byte) bool {
	if CheckMsgpack(body, maxControlDepth) != nil {
		return false
	}
	fast := newMessage(typ)
	if !fast.(fastBody).decodeFast(body) {
		return false
	}
	slow, err := generic(typ, body)
	if err != nil {
		t.Fatalf("%s %x: the fast decoder took %+v, the general path refused: %v", typ, body, fast, err)
	}
	if !reflect.DeepEqual(fast, slow) {
		t.Fatalf("%s %x: the fast decoder read %+v, the general path %+v", typ, body, fast, slow)
	}
	return true
}

// TestCacheFastDecodeTakesWhatTheEncoderWrites: every body this package
// writes for the four messages takes the fast path, and reads as the
// general path reads it; whole frames decode to the message encoded.
func TestCacheFastDecodeTakesWhatTheEncoderWrites(t *testing.T) {
	for _, body := range fastSeeds(t) {
		taken := false
		for _, typ := range fastTypes {
			taken = sameAsGeneric(t, typ, body) || taken
		}
		if !taken {
			t.Errorf("%x: no fast decoder took it", body)
		}
	}
	v := uint64(3)
	want := &CachePut{RequestID: 9, Tenant: "t", Key: "k", Value: []byte("v"), IfVersion: &v}
	frame, err := AppendMessage(nil, want)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeMessageLimit(frame[HeaderLen:], MaxControlBytes)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded %+v, %v; want %+v", got, err, want)
	}
}

// TestCacheFastDecodeLeavesOtherShapes: a body the fast decoder does not
// take (an unknown field, another kind of value, an array) still decodes,
// through the general path.
func TestCacheFastDecodeLeavesOtherShapes(t *testing.T) {
	tests := []struct {
		name string
		body any
	}{
		{"an unknown field", map[string]any{"request_id": 1, "key": "k", "later": true}},
		{"a string as bytes", map[string]any{"request_id": 1, "key": "k", "value": "text"}},
		{"a negative request id", map[string]any{"request_id": -1, "key": "k"}},
	}
	for _, tt := range tests {
		body, err := msgpack.Marshal(tt.body)
		if err != nil {
			t.Fatal(err)
		}
		if (&CachePut{}).decodeFast(body) {
			t.Errorf("%s: the fast decoder took %x", tt.name, body)
		}
		payload, err := msgpack.Marshal(&envelope{Type: TypeCachePut, Body: body})
		if err != nil {
			t.Fatal(err)
		}
		_, gerr := generic(TypeCachePut, body)
		_, err = DecodeMessageLimit(payload, MaxControlBytes)
		if (err == nil) != (gerr == nil) {
			t.Errorf("%s: DecodeMessageLimit %v, the general path %v", tt.name, err, gerr)
		}
	}
}

// FuzzCacheFastDecode: whatever body the fast decoders take, the general
// path reads the same.
func FuzzCacheFastDecode(f *testing.F) {
	for _, b := range fastSeeds(f) {
		for i := range fastTypes {
			f.Add(uint8(i), b)
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		sameAsGeneric(t, fastTypes[int(which)%len(fastTypes)], body)
	})
}

// BenchmarkDecodeCachePut: a 128 B cache_put's control payload through
// DecodeMessageLimit (fast) and through the general path alone.
func BenchmarkDecodeCachePut(b *testing.B) {
	frame, err := AppendMessage(nil, &CachePut{RequestID: 12345, Tenant: "default", Namespace: "default", Cache: "bench-cache", Key: "c3.k417", Value: make([]byte, 128)})
	if err != nil {
		b.Fatal(err)
	}
	payload := frame[HeaderLen:]
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeMessageLimit(payload, MaxControlBytes); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("general", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := checkMsgpack(payload); err != nil {
				b.Fatal(err)
			}
			var env envelope
			if err := msgpack.Unmarshal(payload, &env); err != nil {
				b.Fatal(err)
			}
			if _, err := generic(env.Type, env.Body); err != nil {
				b.Fatal(err)
			}
		}
	})
}
