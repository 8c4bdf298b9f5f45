package wire

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// fuzzMaxLen is the frame cap FuzzFrameReader reads with: the pre-handshake
// cap a broker would use.
const fuzzMaxLen = 64 << 10

// FuzzFrameReader feeds arbitrary bytes to a FrameReader and reads frames
// until it errors, then decodes each frame the way a broker or client would,
// dispatching on its flags.
//
// Invariants:
//   - never panics;
//   - every frame has only known flags and a payload of exactly the header's
//     length, at most MaxLen;
//   - the frames read, re-encoded with AppendHeader, are a prefix of the
//     input, and the whole input exactly when the reader ends with io.EOF;
//   - any other error is one of ErrMalformed, ErrBadMagic, ErrBadVersion,
//     ErrUnknownFlags or ErrFrameTooLarge (a truncated frame is never a bare
//     io.EOF or io.ErrUnexpectedEOF);
//   - each frame's decode holds the invariants of the matching FuzzDecode*
//     target below.
func FuzzFrameReader(f *testing.F) {
	for _, s := range fuzzSeeds()["FuzzFrameReader"] {
		f.Add(s.args[0].([]byte))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fr := NewFrameReader(bytes.NewReader(data), fuzzMaxLen)
		var rebuilt []byte
		var err error
		for frames := 0; ; frames++ {
			if frames > len(data)/HeaderLen {
				t.Fatalf("read %d frames from %d bytes", frames, len(data))
			}
			var h Header
			var payload []byte
			h, payload, err = fr.Next()
			if err != nil {
				break
			}
			if h.Flags&^knownFlags != 0 {
				t.Fatalf("frame %d has unknown flags %#04x", frames, h.Flags)
			}
			if int(h.Length) != len(payload) || len(payload) > fuzzMaxLen {
				t.Fatalf("frame %d: header length %d, payload %d bytes, cap %d", frames, h.Length, len(payload), fuzzMaxLen)
			}
			rebuilt = append(AppendHeader(rebuilt, h.Flags, len(payload)), payload...)
			if !bytes.HasPrefix(data, rebuilt) {
				t.Fatalf("frame %d re-encoded is not what was read", frames)
			}
			dispatchFrame(t, h, payload)
		}
		if err == io.EOF {
			if !bytes.Equal(rebuilt, data) {
				t.Fatalf("io.EOF after %d of %d bytes", len(rebuilt), len(data))
			}
			return
		}
		if !isFrameErr(err) {
			t.Fatalf("Next error %v (%T) is not a frame error", err, err)
		}
		if len(rebuilt) == len(data) {
			t.Fatalf("error %v after the whole input was read as frames", err)
		}
	})
}

// dispatchFrame decodes a frame as the receiving side would.
func dispatchFrame(t *testing.T, h Header, payload []byte) {
	switch {
	case h.Flags&FlagPublishBatch != 0:
		checkPublish(t, h.Flags, payload)
	case h.Flags&FlagEventBatch != 0:
		checkEventBatch(t, payload)
	case h.Flags&FlagPublishAck != 0:
		checkAck(t, h.Flags, payload)
	case h.Flags == 0:
		checkMessage(t, payload)
	default:
		// Only publish modifier bits, without FlagPublishBatch: not a
		// publish, and not a control message either.
		if _, err := DecodePublish(h.Flags, payload); !errors.Is(err, ErrMalformed) {
			t.Fatalf("DecodePublish(%#04x) = %v, want ErrMalformed", h.Flags, err)
		}
	}
}

// FuzzDecodePublish decodes an arbitrary payload under arbitrary flags.
//
// Invariants:
//   - never panics; every error is ErrMalformed;
//   - a successful decode has at least one payload and never more payloads
//     than the payload could hold (4 bytes of length each), and its payload
//     bytes fit in the input;
//   - a successful decode re-encodes to the same bytes: AppendPublish of the
//     result yields a payload identical to the input and, when the input
//     flags are all known, the same flags (ack and key presence preserved).
func FuzzDecodePublish(f *testing.F) {
	for _, s := range fuzzSeeds()["FuzzDecodePublish"] {
		f.Add(s.args[0].(uint16), s.args[1].([]byte))
	}
	f.Fuzz(checkPublish)
}

func checkPublish(t *testing.T, flags uint16, payload []byte) {
	p, err := DecodePublish(flags, payload)
	if err != nil {
		if !errors.Is(err, ErrMalformed) {
			t.Fatalf("DecodePublish error %v is not ErrMalformed", err)
		}
		return
	}
	if flags&FlagPublishBatch == 0 || flags&(FlagEventBatch|FlagPublishAck) != 0 {
		t.Fatalf("DecodePublish accepted non-publish flags %#04x", flags)
	}
	// Three u16 scope prefixes and a u32 count come before the payloads.
	if n := len(p.Payloads); n == 0 || n > (len(payload)-10)/4 {
		t.Fatalf("decoded %d payloads from %d bytes", n, len(payload))
	}
	if cap(p.Payloads) > (len(payload)-10)/4 {
		t.Fatalf("allocated room for %d payloads from %d bytes", cap(p.Payloads), len(payload))
	}
	if p.Bytes() > int64(len(payload)) {
		t.Fatalf("decoded %d payload bytes from %d bytes", p.Bytes(), len(payload))
	}
	acked := flags&FlagPublishAcked != 0
	if acked != (p.Ack != AckNone) || acked && p.Ack != AckPerMessage && p.Ack != AckPerBatch {
		t.Fatalf("flags %#04x decoded with ack mode %v", flags, p.Ack)
	}
	if keyed := flags&FlagPublishKeyed != 0; keyed != (p.Key != nil) {
		t.Fatalf("flags %#04x decoded with key %q (nil %t)", flags, p.Key, p.Key == nil)
	}
	frame := AppendPublish(nil, &p)
	h, err := ParseHeader(frame, len(frame))
	if err != nil {
		t.Fatalf("re-encoded publish: %v", err)
	}
	if !bytes.Equal(frame[HeaderLen:], payload) || int(h.Length) != len(payload) {
		t.Fatalf("re-encoded payload differs:\n got % x\nwant % x", frame[HeaderLen:], payload)
	}
	if flags&^knownFlags == 0 && h.Flags != flags {
		t.Fatalf("re-encoded flags %#04x, input %#04x", h.Flags, flags)
	}
}

// FuzzDecodeEventBatch decodes an arbitrary event batch payload.
//
// Invariants:
//   - never panics; every error is ErrMalformed;
//   - a successful decode never returns more events than the payload could
//     hold (4 bytes of length each after the 4-byte count);
//   - a successful decode re-encodes to the same bytes, and EventBatchLen
//     predicts the re-encoded size.
func FuzzDecodeEventBatch(f *testing.F) {
	for _, s := range fuzzSeeds()["FuzzDecodeEventBatch"] {
		f.Add(s.args[0].([]byte))
	}
	f.Fuzz(checkEventBatch)
}

func checkEventBatch(t *testing.T, payload []byte) {
	events, err := DecodeEventBatch(payload)
	if err != nil {
		if !errors.Is(err, ErrMalformed) {
			t.Fatalf("DecodeEventBatch error %v is not ErrMalformed", err)
		}
		return
	}
	if max := (len(payload) - 4) / 4; len(events) > max || cap(events) > max {
		t.Fatalf("decoded %d events (cap %d) from %d bytes", len(events), cap(events), len(payload))
	}
	// Decoding into a used slice gives the same events, whatever it held.
	used := [][]byte{[]byte("stale"), nil, {1}, nil}
	if _, into, err := DecodeEventBatchInto(used[:3], FlagEventBatch, payload); err != nil || len(into) != len(events) {
		t.Fatalf("DecodeEventBatchInto: %d events, %v; DecodeEventBatch: %d", len(into), err, len(events))
	} else {
		for i := range into {
			if !bytes.Equal(into[i], events[i]) {
				t.Fatalf("DecodeEventBatchInto event %d = %q, want %q", i, into[i], events[i])
			}
		}
	}
	frame := AppendEventBatch(nil, events)
	if EventBatchLen(events) != len(frame) {
		t.Fatalf("EventBatchLen = %d, encoded %d bytes", EventBatchLen(events), len(frame))
	}
	if !bytes.Equal(frame[HeaderLen:], payload) {
		t.Fatalf("re-encoded batch differs:\n got % x\nwant % x", frame[HeaderLen:], payload)
	}
}

// FuzzDecodeAck decodes an arbitrary ack payload under arbitrary flags.
//
// Invariants:
//   - never panics; every error is ErrMalformed;
//   - flags other than FlagPublishAck with its modifiers
//     (FlagPublishAckOffset, FlagPublishAckOwner) never decode;
//   - a successful decode has an offset only on success and an owner only
//     on an error, and re-encodes with the same flags to an ack that
//     decodes the same (its owner included);
//   - a failed-publish ack (status 1) re-encodes to the same bytes. A
//     success ack re-encodes to the same bytes except that code, retry class
//     and message are written as zero: DecodeAck does not require them to be
//     zero on success, so only those bytes may differ; its offset, when
//     present, ends both.
func FuzzDecodeAck(f *testing.F) {
	for _, s := range fuzzSeeds()["FuzzDecodeAck"] {
		f.Add(s.args[0].(uint16), s.args[1].([]byte))
	}
	f.Fuzz(checkAck)
}

func checkAck(t *testing.T, flags uint16, payload []byte) {
	a, err := DecodeAck(flags, payload)
	if err != nil {
		if !errors.Is(err, ErrMalformed) {
			t.Fatalf("DecodeAck error %v is not ErrMalformed", err)
		}
		return
	}
	if flags&FlagPublishAck == 0 || flags&^(FlagPublishAck|FlagPublishAckOffset|FlagPublishAckOwner) != 0 {
		t.Fatalf("DecodeAck accepted non-ack flags %#04x", flags)
	}
	if a.HasOffset && a.Err != nil || a.Err == nil && flags&FlagPublishAckOwner != 0 {
		t.Fatalf("flags %#04x decoded to offset present %t, error %v", flags, a.HasOffset, a.Err)
	}
	frame := AppendAck(nil, &a)
	h, re := splitFrame(t, frame)
	if h.Flags != flags {
		t.Fatalf("re-encoded flags %#04x, input %#04x", h.Flags, flags)
	}
	again, err := DecodeAck(h.Flags, re)
	if err != nil {
		t.Fatalf("re-encoded ack does not decode: %v", err)
	}
	if again.RequestID != a.RequestID || again.Count != a.Count || again.HasOffset != a.HasOffset ||
		again.Offset != a.Offset || !sameError(again.Err, a.Err) {
		t.Fatalf("ack changed in a round trip: %+v then %+v", a, again)
	}
	if bytes.Equal(re, payload) {
		return
	}
	// status u8, request id u64, count u32 come first; an offset ends it.
	if a.Err != nil || !bytes.Equal(re[:13], payload[:13]) || a.HasOffset && !bytes.Equal(re[len(re)-8:], payload[len(payload)-8:]) {
		t.Fatalf("re-encoded ack differs:\n got % x\nwant % x", re, payload)
	}
}

// FuzzDecodeMessage decodes an arbitrary control payload.
//
// Invariants:
//   - never panics; every error is ErrMalformed or ErrUnknownMessage;
//   - a successful decode is a known message type that AppendMessage can
//     encode, and that encoding, read back through a FrameReader, decodes to
//     an equal message and re-encodes to the same bytes. (The input bytes
//     themselves need not come back: msgpack has several encodings of one
//     value, and unknown fields are dropped.)
func FuzzDecodeMessage(f *testing.F) {
	for _, s := range fuzzSeeds()["FuzzDecodeMessage"] {
		f.Add(s.args[0].([]byte))
	}
	f.Fuzz(checkMessage)
}

func checkMessage(t *testing.T, payload []byte) {
	m, err := DecodeMessage(payload)
	if err != nil {
		if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrUnknownMessage) {
			t.Fatalf("DecodeMessage error %v is neither ErrMalformed nor ErrUnknownMessage", err)
		}
		return
	}
	if m == nil || newMessage(m.Type()) == nil {
		t.Fatalf("DecodeMessage = %#v", m)
	}
	frame, err := AppendMessage(nil, m)
	if err != nil {
		t.Fatalf("AppendMessage(%#v): %v", m, err)
	}
	h, body, err := NewFrameReader(bytes.NewReader(frame), len(frame)).Next()
	if err != nil || h.Flags != 0 {
		t.Fatalf("re-encoded frame: flags %#04x, %v", h.Flags, err)
	}
	again, err := DecodeMessage(body)
	if err != nil {
		t.Fatalf("re-encoded message does not decode: %v", err)
	}
	if !reflect.DeepEqual(again, m) {
		t.Fatalf("message changed in a round trip: %#v then %#v", m, again)
	}
	if frame2, err := AppendMessage(nil, again); err != nil || !bytes.Equal(frame2, frame) {
		t.Fatalf("second encoding differs from the first (err %v)", err)
	}
}

// --- seed corpus ---

var genCorpus = flag.Bool("gen-corpus", false, "rewrite the seed corpus files in testdata/fuzz")

// TestGenerateFuzzCorpus writes fuzzSeeds to testdata/fuzz/<Fuzz>/seed-<name>
// in Go's corpus file format, so plain `go test` runs them. Regenerate after
// a layout change with:
//
//	go test ./wire/ -run TestGenerateFuzzCorpus -args -gen-corpus
func TestGenerateFuzzCorpus(t *testing.T) {
	if !*genCorpus {
		t.Skip("pass -gen-corpus to rewrite testdata/fuzz")
	}
	for target, seeds := range fuzzSeeds() {
		dir := filepath.Join("testdata", "fuzz", target)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, s := range seeds {
			var b bytes.Buffer
			b.WriteString("go test fuzz v1\n")
			for _, arg := range s.args {
				switch v := arg.(type) {
				case []byte:
					fmt.Fprintf(&b, "[]byte(%q)\n", v)
				case uint16:
					fmt.Fprintf(&b, "uint16(%d)\n", v)
				default:
					t.Fatalf("seed %s/%s: no corpus encoding for %T", target, s.name, arg)
				}
			}
			if err := os.WriteFile(filepath.Join(dir, "seed-"+s.name), b.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

type fuzzSeed struct {
	name string
	args []any
}

// fuzzSeeds returns the seed inputs of every fuzz target: valid encodings of
// each layout and message type, plus truncated and corrupted variants.
func fuzzSeeds() map[string][]fuzzSeed {
	seeds := map[string][]fuzzSeed{}
	add := func(target, name string, args ...any) {
		seeds[target] = append(seeds[target], fuzzSeed{name: name, args: args})
	}
	cut := func(b []byte, n int) []byte { return append([]byte(nil), b[:len(b)-n]...) }
	flip := func(b []byte, i int) []byte { b = append([]byte(nil), b...); b[i] ^= 0xff; return b }
	plus := func(b []byte, extra ...byte) []byte { return append(append([]byte(nil), b...), extra...) }

	scope := Scope{"acme", "orders", "created"}
	publishes := []struct {
		name string
		p    Publish
	}{
		{"unacked", Publish{Scope: scope, Payloads: [][]byte{[]byte("hello")}}},
		{"acked-message", Publish{RequestID: 1, Ack: AckPerMessage, Scope: scope, Payloads: [][]byte{[]byte("a"), []byte("b")}}},
		{"acked-batch-keyed", Publish{RequestID: 2, Ack: AckPerBatch, Key: []byte("user-1"), Scope: scope, Payloads: [][]byte{[]byte("x")}}},
		{"keyed-empty-key", Publish{Key: []byte{}, Scope: scope, Payloads: [][]byte{{}}}},
		{"empty-scope-empty-payloads", Publish{Payloads: [][]byte{nil, nil, nil}}},
		{"conditional-keyed", Publish{RequestID: 3, Ack: AckPerBatch, Conditional: true, Expected: 1 << 40, Key: []byte("k"), Scope: scope, Payloads: [][]byte{[]byte("x")}}},
		{"idempotent-keyed", Publish{RequestID: 4, Ack: AckPerBatch, Idempotent: true, ProducerID: 1<<63 | 7, Sequence: 1 << 33, Key: []byte("k"), Scope: scope, Payloads: [][]byte{[]byte("x"), []byte("y")}}},
	}
	for _, pp := range publishes {
		frame := AppendPublish(nil, &pp.p)
		flags, payload := uint16(frame[6])<<8|uint16(frame[7]), frame[HeaderLen:]
		countLow := len(payload) - len(pp.p.Payloads)*4 - int(pp.p.Bytes()) - 1 // last byte of the u32 count
		add("FuzzDecodePublish", "publish-"+pp.name, flags, payload)
		add("FuzzDecodePublish", "publish-"+pp.name+"-truncated", flags, cut(payload, 1))
		add("FuzzDecodePublish", "publish-"+pp.name+"-trailing", flags, plus(payload, 0))
		add("FuzzDecodePublish", "publish-"+pp.name+"-count-flipped", flags, flip(payload, countLow))
		add("FuzzFrameReader", "publish-"+pp.name, frame)
	}
	acked := AppendPublish(nil, &publishes[2].p)
	add("FuzzDecodePublish", "publish-ack-mode-3", uint16(FlagPublishBatch|FlagPublishAcked|FlagPublishKeyed), func() []byte {
		b := append([]byte(nil), acked[HeaderLen:]...)
		b[8] = 3
		return b
	}())
	add("FuzzDecodePublish", "publish-keyed-payload-unkeyed-flags", uint16(FlagPublishBatch|FlagPublishAcked), acked[HeaderLen:])
	add("FuzzDecodePublish", "publish-not-a-publish", uint16(FlagEventBatch), acked[HeaderLen:])
	add("FuzzDecodePublish", "publish-unknown-flag", uint16(FlagPublishBatch|0x8000), AppendPublish(nil, &publishes[0].p)[HeaderLen:])
	add("FuzzDecodePublish", "publish-count-max", uint16(FlagPublishBatch), []byte{0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})
	add("FuzzDecodePublish", "publish-empty-batch", uint16(FlagPublishBatch), []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0})

	acks := []struct {
		name string
		a    Ack
	}{
		{"ok", Ack{RequestID: 1, Count: 1}},
		{"error", Ack{RequestID: 2, Count: 5, Err: &Error{Code: CodeOverloaded, Retry: RetryAfter, Message: "slow down"}}},
		{"error-empty-message", Ack{RequestID: 3, Err: &Error{Code: CodeNotLeader, Retry: RetryRedirect}}},
		{"ok-offset", Ack{RequestID: 4, Count: 2, Offset: 1 << 40, HasOffset: true}},
		{"error-owner", Ack{RequestID: 5, Count: 1, Err: &Error{Code: CodeNotLeader, Retry: RetryRedirect, Message: "moved",
			Owner: &Owner{NodeID: "node-2", Addr: "10.0.0.2:5000", Generation: 7}}}},
		{"error-owner-empty", Ack{RequestID: 6, Err: &Error{Code: CodeShardUnavailable, Retry: Retry, Owner: &Owner{}}}},
	}
	for _, aa := range acks {
		frame := AppendAck(nil, &aa.a)
		flags, payload := uint16(frame[6])<<8|uint16(frame[7]), frame[HeaderLen:]
		add("FuzzDecodeAck", "ack-"+aa.name, flags, payload)
		add("FuzzDecodeAck", "ack-"+aa.name+"-truncated", flags, cut(payload, 1))
		add("FuzzDecodeAck", "ack-"+aa.name+"-trailing", flags, plus(payload, 0))
		add("FuzzDecodeAck", "ack-"+aa.name+"-status-flipped", flags, flip(payload, 0))
		add("FuzzFrameReader", "ack-"+aa.name, frame)
	}
	okAck := AppendAck(nil, &acks[0].a)[HeaderLen:]
	add("FuzzDecodeAck", "ack-ok-with-error-fields", FlagPublishAck, func() []byte {
		b := append([]byte(nil), okAck[:13]...)
		return append(b, 0, 10, 2, 0, 1, 'x')
	}())
	add("FuzzDecodeAck", "ack-message-length-past-end", FlagPublishAck, append(append([]byte(nil), okAck[:16]...), 0xff, 0xff))
	ownerAck := AppendAck(nil, &acks[4].a)[HeaderLen:]
	add("FuzzDecodeAck", "ack-owner-without-flag", FlagPublishAck, ownerAck)
	add("FuzzDecodeAck", "ack-owner-and-offset-flags", FlagPublishAck|FlagPublishAckOffset|FlagPublishAckOwner, ownerAck)
	ownerLen := 2 + len("node-2") + 2 + len("10.0.0.2:5000") + 8
	add("FuzzDecodeAck", "ack-owner-node-length-past-end", FlagPublishAck|FlagPublishAckOwner, plus(ownerAck[:len(ownerAck)-ownerLen], 0xff, 0xff))
	add("FuzzDecodeAck", "ack-not-an-ack", FlagPublishAckOwner, ownerAck)

	batches := []struct {
		name   string
		events [][]byte
	}{
		{"one", [][]byte{[]byte("event")}},
		{"three", [][]byte{[]byte("a"), {}, []byte("FLX1")}},
		{"empty", nil},
		{"sixteen", seqPayloads(16)},
	}
	for _, bb := range batches {
		frame := AppendEventBatch(nil, bb.events)
		payload := frame[HeaderLen:]
		add("FuzzDecodeEventBatch", "events-"+bb.name, payload)
		add("FuzzDecodeEventBatch", "events-"+bb.name+"-truncated", cut(payload, 1))
		add("FuzzDecodeEventBatch", "events-"+bb.name+"-trailing", plus(payload, 0))
		add("FuzzDecodeEventBatch", "events-"+bb.name+"-count-flipped", flip(payload, 3))
		add("FuzzFrameReader", "events-"+bb.name, frame)
	}
	add("FuzzDecodeEventBatch", "events-count-max", []byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0})
	add("FuzzDecodeEventBatch", "events-length-max", []byte{0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff})

	for _, m := range allMessages {
		frame, err := AppendMessage(nil, m)
		if err != nil {
			panic(err)
		}
		payload := frame[HeaderLen:]
		name := string(m.Type())
		if reflect.ValueOf(m).Elem().IsZero() {
			name += "-zero"
		}
		add("FuzzDecodeMessage", "msg-"+name, payload)
		add("FuzzDecodeMessage", "msg-"+name+"-truncated", cut(payload, 1))
		add("FuzzFrameReader", "msg-"+name, frame)
		// The documented [type, body] array layout, which AppendMessage
		// does not write today (see TestAppendMessageEnvelopeIsArray).
		array := mustMarshalSeed([]any{string(m.Type()), msgpack.RawMessage(mustMarshalSeed(m))})
		add("FuzzDecodeMessage", "msg-"+name+"-array", array)
		add("FuzzFrameReader", "msg-"+name+"-array", append(AppendHeader(nil, 0, len(array)), array...))
	}
	okMsg, _ := msgpack.Marshal([]any{"ok", map[string]any{"request_id": 1}})
	add("FuzzDecodeMessage", "msg-trailing", plus(okMsg, 0xc0))
	add("FuzzDecodeMessage", "msg-unknown-type", mustMarshalSeed([]any{"publish", map[string]any{}}))
	add("FuzzDecodeMessage", "msg-error-code-overflow", mustMarshalSeed([]any{"error", map[string]any{"code": 70000, "retry": 257, "request_id": -1}}))
	add("FuzzDecodeMessage", "msg-array-body", mustMarshalSeed([]any{"unsubscribe", []any{7, 8}}))
	add("FuzzDecodeMessage", "msg-str32-huge", []byte{0x92, 0xdb, 0xff, 0xff, 0xff, 0xff})
	add("FuzzDecodeMessage", "msg-map32-huge", []byte{0x92, 0xa2, 'o', 'k', 0xdf, 0xff, 0xff, 0xff, 0xff})
	add("FuzzDecodeMessage", "msg-reserved-byte", []byte{0xc1})
	add("FuzzDecodeMessage", "msg-empty", []byte{})

	// Whole streams for the frame reader.
	var stream []byte
	for _, s := range seeds["FuzzFrameReader"] {
		stream = append(stream, s.args[0].([]byte)...)
	}
	add("FuzzFrameReader", "stream-all", stream)
	add("FuzzFrameReader", "stream-all-truncated", cut(stream, 1))
	add("FuzzFrameReader", "empty", []byte{})
	one := AppendEventBatch(nil, [][]byte{[]byte("e")})
	add("FuzzFrameReader", "truncated-header", one[:7])
	add("FuzzFrameReader", "truncated-payload", cut(one, 2))
	add("FuzzFrameReader", "header-only", one[:HeaderLen])
	add("FuzzFrameReader", "bad-magic", flip(one, 0))
	add("FuzzFrameReader", "bad-version", flip(one, 5))
	add("FuzzFrameReader", "unknown-flags", flip(one, 6))
	add("FuzzFrameReader", "too-large", rawHeader(Magic, Version, FlagPublishBatch, 0xffffffff))
	add("FuzzFrameReader", "one-over-cap", AppendHeader(nil, 0, fuzzMaxLen+1))
	add("FuzzFrameReader", "modifier-flags-only", append(AppendHeader(nil, FlagPublishAcked, 1), 0))
	add("FuzzFrameReader", "publish-and-event-flags", append(AppendHeader(nil, FlagPublishBatch|FlagEventBatch, 4), 0, 0, 0, 0))
	add("FuzzFrameReader", "frame-then-garbage", plus(one, 'G', 'E', 'T'))
	return seeds
}

func mustMarshalSeed(v any) []byte {
	b, err := msgpack.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
