package wire

// Tests in this file show defects found while writing the wire tests. They
// fail until the fixes described on each land in the non-test code.

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// The control envelope is documented as the msgpack array [type, body]. The
// envelope struct marks itself as_array on a field named "_", but msgpack/v5
// only reads that option from a field named "_msgpack", so AppendMessage
// writes the map {"Type": type, "Body": body} instead: a different wire
// layout from the documented one (and from any peer that implements it).
// DecodeMessage accepts both, which is why round trips alone do not catch it.
//
// Fix (messages.go, envelope): rename the blank field "_" to "_msgpack",
// keeping its tag msgpack:",as_array".
func TestAppendMessageEnvelopeIsArray(t *testing.T) {
	for _, m := range allMessages {
		t.Run(string(m.Type()), func(t *testing.T) {
			frame, err := AppendMessage(nil, m)
			if err != nil {
				t.Fatal(err)
			}
			body, err := msgpack.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			want, err := msgpack.Marshal([]any{string(m.Type()), msgpack.RawMessage(body)})
			if err != nil {
				t.Fatal(err)
			}
			if got := frame[HeaderLen:]; !bytes.Equal(got, want) {
				t.Fatalf("control payload is not [type, body]:\n got % x\nwant % x", got, want)
			}
		})
	}
}

// Integer fields of control messages are narrower than msgpack integers,
// and msgpack/v5 stores decoded values with reflect's SetUint/SetInt, which
// truncate silently. A code of 70000 decodes as code 4464, a retry class of
// 257 as Retry (1), client_flags 0x10001 as FlagPublishBatch, and a negative
// request id as 2^64-1: wrong values instead of ErrMalformed.
//
// Fix (messages.go, DecodeMessage): range-check integer fields, e.g. decode
// the body with a msgpack.Decoder and check each value against its field's
// width, or give Code, RetryClass and the flag/feature fields
// DecodeMsgpack methods that reject out-of-range values.
func TestDecodeMessageRejectsOutOfRangeIntegers(t *testing.T) {
	tests := []struct {
		name string
		typ  MsgType
		body map[string]any
	}{
		{name: "code over u16", typ: TypeError, body: map[string]any{"code": 70000}},
		{name: "retry over u8", typ: TypeError, body: map[string]any{"retry": 257}},
		{name: "negative request id", typ: TypeOK, body: map[string]any{"request_id": -1}},
		{name: "client flags over u16", typ: TypeAuth, body: map[string]any{"client_flags": 0x1_0001}},
		{name: "negative client features", typ: TypeAuth, body: map[string]any{"client_features": -1}},
		{name: "server features over u32", typ: TypeAuthOK, body: map[string]any{"server_features": uint64(1) << 32}},
		{name: "queue capacity over i64", typ: TypeSubscribe, body: map[string]any{"queue_capacity": uint64(math.MaxUint64)}},
		{name: "nested shard over u32", typ: TypeShardOwnersView, body: map[string]any{"owners": []any{map[string]any{"shard": uint64(1) << 32}}}},
		{name: "nested negative generation", typ: TypeShardOwnersView, body: map[string]any{"owners": []any{map[string]any{"owner": map[string]any{"generation": -1}}}}},
		{name: "owner pointer generation negative", typ: TypeError, body: map[string]any{"owner": map[string]any{"generation": -1}}},
		{name: "stream info shards over u32", typ: TypeStreamInfos, body: map[string]any{"streams": []any{map[string]any{"shards": uint64(1) << 33}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := DecodeMessage(envelopeBytes(t, string(tt.typ), tt.body))
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("DecodeMessage(%v) = %+v, %v; want ErrMalformed", tt.body, m, err)
			}
		})
	}
}

// The binary decoders refuse trailing bytes; DecodeMessage ignores anything
// after the envelope, because msgpack.Unmarshal stops after one value.
//
// Fix (messages.go, DecodeMessage): decode with
// msgpack.NewDecoder(bytes.NewReader(payload)) and refuse the payload when
// the reader has bytes left (r.Len() != 0).
func TestDecodeMessageRejectsTrailingBytes(t *testing.T) {
	frame, err := AppendMessage(nil, &OK{RequestID: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, trailing := range [][]byte{{0}, {0xc0}, []byte("garbage")} {
		payload := append(append([]byte(nil), frame[HeaderLen:]...), trailing...)
		if m, err := DecodeMessage(payload); !errors.Is(err, ErrMalformed) {
			t.Errorf("DecodeMessage with trailing % x = %+v, %v; want ErrMalformed", trailing, m, err)
		}
	}
}

// A msgpack str/bin header can claim up to 4 GiB in 5 bytes. DecodeMessage
// hands the payload to msgpack.Unmarshal, which takes a pooled Decoder and
// reads strings with readNGrow: that allocates up to 1 MiB beyond the
// buffer it already has before noticing the input is short, and on error
// still stores the grown buffer in the pooled Decoder (d.buf, err =
// readNGrow(...)). So every such payload grows a process-wide pooled buffer
// by at least 1 MiB and copies it: the same 6-byte payload costs ~1 MiB on
// the first call, ~45 MiB on the 32nd and ~340 MiB on the 64th, with 1.3 GiB
// of heap in use after 64 calls. Control payloads are read before
// authentication (64 KiB cap), so an unauthenticated peer can exhaust the
// broker's memory with a few dozen 18-byte frames; a broker can do the same
// to a client.
//
// Fix (messages.go, DecodeMessage): before msgpack sees the payload, walk it
// with a small iterative validator that refuses any str/bin/ext length, and
// any array/map count, larger than the bytes left in the payload (and caps
// nesting depth, see the next test). Using a fresh msgpack.NewDecoder per
// call instead of Unmarshal avoids the pooled growth but still allocates
// 1 MiB per payload, so it is not enough on its own.
func TestDecodeMessageAllocationBounded(t *testing.T) {
	tests := []struct {
		name string
		give []byte
	}{
		{name: "type str32 claims 4 GiB", give: []byte{0x92, 0xdb, 0xff, 0xff, 0xff, 0xff}},
		{name: "body bin32 claims 4 GiB", give: []byte{0x92, 0xa2, 'o', 'k', 0xc6, 0xff, 0xff, 0xff, 0xff}},
		{name: "field str32 claims 4 GiB", give: []byte{0x92, 0xa4, 'a', 'u', 't', 'h', 0x81, 0xa6, 't', 'e', 'n', 'a', 'n', 't', 0xdb, 0xff, 0xff, 0xff, 0xff}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Few calls on purpose: the cost grows with every call.
			var perCall []uint64
			var ms runtime.MemStats
			for i := 0; i < 10; i++ {
				runtime.ReadMemStats(&ms)
				before := ms.TotalAlloc
				_, err := DecodeMessage(tt.give)
				runtime.ReadMemStats(&ms)
				perCall = append(perCall, ms.TotalAlloc-before)
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("DecodeMessage error = %v, want ErrMalformed", err)
				}
			}
			for _, n := range perCall {
				if n > 64<<10 {
					t.Fatalf("a %d-byte payload allocated %v bytes on successive calls", len(tt.give), perCall)
				}
			}
		})
	}
}

// msgpack/v5 skips a RawMessage (the envelope body) recursively, about 120
// bytes of stack per nesting level, and nothing bounds the depth. A control
// payload of ~4.5 MiB of 0x91 bytes (fixarray of one element, nested)
// exceeds Go's 1 GB stack limit: "fatal error: stack overflow", which
// recover cannot catch, so the whole broker (or client) process dies. That
// fits under the post-handshake frame cap (16 MiB by default), so any
// authenticated client can kill the broker with one frame. FuzzFrameReader
// cannot reach this: it reads with the 64 KiB pre-handshake cap.
//
// Fix (messages.go, DecodeMessage): refuse control payloads over a small
// fixed size whatever the frame cap (control messages are well under 64
// KiB), and have the validator from the previous test refuse nesting deeper
// than a few levels (the envelope and bodies need at most 2 or 3).
//
// The decode runs in a child process so the crash does not take the test
// binary with it.
func TestDecodeMessageDeepNestingDoesNotCrash(t *testing.T) {
	const depth = 6 << 20 // bytes, under the 16 MiB post-handshake frame cap
	if os.Getenv("WIRE_TEST_DEEP_NESTING_CHILD") == "1" {
		payload := append([]byte{0x92, 0xa2, 'o', 'k'}, bytes.Repeat([]byte{0x91}, depth)...)
		payload = append(payload, 0xc0)
		_, err := DecodeMessage(payload)
		fmt.Printf("decoded: %v\n", err)
		return
	}
	if testing.Short() {
		t.Skip("needs a child process with up to 1 GB of stack")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestDecodeMessageDeepNestingDoesNotCrash$", "-test.v")
	cmd.Env = append(os.Environ(), "WIRE_TEST_DEEP_NESTING_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("decoded:")) {
		if i := bytes.Index(out, []byte("fatal error")); i >= 0 {
			out = out[i:]
		}
		t.Fatalf("DecodeMessage of a %d-deep nested control payload killed the process (%v):\n%.200s", depth, err, out)
	}
}

// ParseHeader compares through uint64, so a negative maxLen becomes a cap of
// 2^64-1 and every length passes; a FrameReader whose MaxLen was set from a
// negative int (AuthOK.MaxFrameBytes is a signed int chosen by the peer)
// would allocate whatever a header claims, up to 4 GiB per frame.
//
// Fix (frame.go, ParseHeader): treat maxLen < 0 as 0, e.g.
// `if maxLen < 0 || uint64(h.Length) > uint64(maxLen)`.
// (Only ParseHeader is called here: FrameReader.Next would allocate 4 GiB.)
func TestParseHeaderNegativeMaxLen(t *testing.T) {
	for _, length := range []uint32{1, 0xffffffff} {
		if h, err := ParseHeader(rawHeader(Magic, Version, 0, length), -1); !errors.Is(err, ErrFrameTooLarge) {
			t.Errorf("ParseHeader(length %d, maxLen -1) = %+v, %v; want ErrFrameTooLarge", length, h, err)
		}
	}
}
