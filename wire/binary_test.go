package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"
)

func TestPublishRoundTrip(t *testing.T) {
	scope := Scope{Tenant: "acme", Namespace: "orders", Stream: "created"}
	tests := []struct {
		name      string
		give      Publish
		wantFlags uint16
	}{
		{
			name:      "unacked",
			give:      Publish{Scope: scope, Payloads: [][]byte{[]byte("hello")}},
			wantFlags: FlagPublishBatch,
		},
		{
			name:      "acked per message",
			give:      Publish{RequestID: 42, Ack: AckPerMessage, Scope: scope, Payloads: [][]byte{[]byte("a"), []byte("b")}},
			wantFlags: FlagPublishBatch | FlagPublishAcked,
		},
		{
			name:      "acked per batch, max request id",
			give:      Publish{RequestID: math.MaxUint64, Ack: AckPerBatch, Scope: scope, Payloads: [][]byte{[]byte("x")}},
			wantFlags: FlagPublishBatch | FlagPublishAcked,
		},
		{
			name:      "keyed unacked",
			give:      Publish{Key: []byte("user-17"), Scope: scope, Payloads: [][]byte{[]byte("x")}},
			wantFlags: FlagPublishBatch | FlagPublishKeyed,
		},
		{
			name:      "keyed acked",
			give:      Publish{RequestID: 1, Ack: AckPerBatch, Key: []byte{0, 1, 0xff}, Scope: scope, Payloads: [][]byte{[]byte("x"), nil}},
			wantFlags: FlagPublishBatch | FlagPublishAcked | FlagPublishKeyed,
		},
		{
			name:      "conditional keyed",
			give:      Publish{RequestID: 9, Ack: AckPerBatch, Conditional: true, Expected: math.MaxUint64, Key: []byte("k"), Scope: scope, Payloads: [][]byte{[]byte("x")}},
			wantFlags: FlagPublishBatch | FlagPublishAcked | FlagPublishIf | FlagPublishKeyed,
		},
		{
			name:      "conditional expecting 0",
			give:      Publish{RequestID: 10, Ack: AckPerMessage, Conditional: true, Scope: scope, Payloads: [][]byte{[]byte("x")}},
			wantFlags: FlagPublishBatch | FlagPublishAcked | FlagPublishIf,
		},
		{
			name:      "idempotent keyed",
			give:      Publish{RequestID: 11, Ack: AckPerBatch, Idempotent: true, ProducerID: math.MaxUint64, Sequence: 1 << 40, Key: []byte("k"), Scope: scope, Payloads: [][]byte{[]byte("x"), []byte("y")}},
			wantFlags: FlagPublishBatch | FlagPublishAcked | FlagPublishIdempotent | FlagPublishKeyed,
		},
		{
			name:      "idempotent sequence 0",
			give:      Publish{RequestID: 12, Ack: AckPerMessage, Idempotent: true, ProducerID: 1, Scope: scope, Payloads: [][]byte{[]byte("x")}},
			wantFlags: FlagPublishBatch | FlagPublishAcked | FlagPublishIdempotent,
		},
		{
			name:      "empty key is still keyed",
			give:      Publish{Key: []byte{}, Scope: scope, Payloads: [][]byte{[]byte("x")}},
			wantFlags: FlagPublishBatch | FlagPublishKeyed,
		},
		{
			name:      "max-length key",
			give:      Publish{Key: bytes.Repeat([]byte("k"), 0xffff), Scope: scope, Payloads: [][]byte{[]byte("x")}},
			wantFlags: FlagPublishBatch | FlagPublishKeyed,
		},
		{
			name:      "empty-string scope",
			give:      Publish{Payloads: [][]byte{[]byte("x")}},
			wantFlags: FlagPublishBatch,
		},
		{
			name:      "empty tenant only",
			give:      Publish{Scope: Scope{Namespace: "n", Stream: "s"}, Payloads: [][]byte{[]byte("x")}},
			wantFlags: FlagPublishBatch,
		},
		{
			name:      "max-length names",
			give:      Publish{Scope: Scope{strings.Repeat("t", MaxNameLen), strings.Repeat("n", MaxNameLen), strings.Repeat("s", MaxNameLen)}, Payloads: [][]byte{[]byte("x")}},
			wantFlags: FlagPublishBatch,
		},
		{
			name:      "zero-length payload",
			give:      Publish{Scope: scope, Payloads: [][]byte{{}}},
			wantFlags: FlagPublishBatch,
		},
		{
			name:      "zero-length payloads, acked",
			give:      Publish{RequestID: 3, Ack: AckPerMessage, Scope: scope, Payloads: [][]byte{nil, {}, nil}},
			wantFlags: FlagPublishBatch | FlagPublishAcked,
		},
		{
			name:      "many payloads",
			give:      Publish{RequestID: 9, Ack: AckPerMessage, Scope: scope, Payloads: seqPayloads(5000)},
			wantFlags: FlagPublishBatch | FlagPublishAcked,
		},
		{
			name:      "large payload",
			give:      Publish{Scope: scope, Payloads: [][]byte{bytes.Repeat([]byte{0xa5}, 1<<20)}},
			wantFlags: FlagPublishBatch,
		},
		{
			name:      "binary payload",
			give:      Publish{Scope: scope, Payloads: [][]byte{{0, 0, 0, 0}, {0xff, 0xff, 0xff, 0xff}, []byte("FLX1")}},
			wantFlags: FlagPublishBatch,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			frame := AppendPublish(nil, &tt.give)
			h, payload := splitFrame(t, frame)
			if h.Flags != tt.wantFlags {
				t.Fatalf("flags = %#04x, want %#04x", h.Flags, tt.wantFlags)
			}
			got, err := DecodePublish(h.Flags, payload)
			if err != nil {
				t.Fatalf("DecodePublish: %v", err)
			}
			assertPublishEqual(t, &got, &tt.give)
			if got.Bytes() != tt.give.Bytes() {
				t.Errorf("Bytes() = %d, want %d", got.Bytes(), tt.give.Bytes())
			}
			// Re-encoding the decoded publish is byte-identical.
			if again := AppendPublish(nil, &got); !bytes.Equal(again, frame) {
				t.Errorf("re-encoded frame differs from the original")
			}
		})
	}
}

// AppendPublish appends to dst without disturbing what is already there.
func TestAppendPublishAppends(t *testing.T) {
	p := &Publish{Scope: Scope{"t", "n", "s"}, Payloads: [][]byte{[]byte("x")}}
	one := AppendPublish(nil, p)
	two := AppendPublish(append([]byte(nil), one...), p)
	if !bytes.Equal(two, append(append([]byte(nil), one...), one...)) {
		t.Fatalf("AppendPublish onto a frame = % x", two)
	}
}

// Decoded payloads alias the frame: no copy on the fan-out path, and each
// payload's capacity ends where it does so appending to one cannot
// overwrite the next.
func TestDecodePublishAliasesPayload(t *testing.T) {
	frame := AppendPublish(nil, &Publish{Scope: Scope{"t", "n", "s"}, Payloads: [][]byte{[]byte("first"), []byte("second")}})
	h, payload := splitFrame(t, frame)
	p, err := DecodePublish(h.Flags, payload)
	if err != nil {
		t.Fatal(err)
	}
	p.Payloads[0][0] = 'F'
	if !bytes.Contains(payload, []byte("First")) {
		t.Fatal("decoded payload does not alias the frame buffer")
	}
	if cap(p.Payloads[0]) != len(p.Payloads[0]) {
		t.Fatalf("payload 0 has cap %d, len %d: an append would overwrite payload 1", cap(p.Payloads[0]), len(p.Payloads[0]))
	}
	_ = append(p.Payloads[0], 'X')
	if string(p.Payloads[1]) != "second" {
		t.Fatalf("appending to payload 0 changed payload 1 to %q", p.Payloads[1])
	}
}

// publishPayload builds a publish payload by hand so tests can break it.
type publishPayload struct {
	acked     bool
	requestID uint64
	ack       byte
	key       []byte // keyed when non-nil
	scope     Scope
	count     uint32
	payloads  [][]byte
}

func (pp publishPayload) flags() uint16 {
	f := FlagPublishBatch
	if pp.acked {
		f |= FlagPublishAcked
	}
	if pp.key != nil {
		f |= FlagPublishKeyed
	}
	return f
}

func (pp publishPayload) bytes() []byte {
	var b []byte
	if pp.acked {
		b = binary.BigEndian.AppendUint64(b, pp.requestID)
		b = append(b, pp.ack)
	}
	if pp.key != nil {
		b = appendBytes16(b, pp.key)
	}
	b = appendBytes16(b, []byte(pp.scope.Tenant))
	b = appendBytes16(b, []byte(pp.scope.Namespace))
	b = appendBytes16(b, []byte(pp.scope.Stream))
	b = binary.BigEndian.AppendUint32(b, pp.count)
	for _, p := range pp.payloads {
		b = binary.BigEndian.AppendUint32(b, uint32(len(p)))
		b = append(b, p...)
	}
	return b
}

func TestDecodePublishRejects(t *testing.T) {
	scope := Scope{"t", "n", "s"}
	valid := publishPayload{acked: true, requestID: 1, ack: byte(AckPerBatch), key: []byte("k"), scope: scope, count: 1, payloads: [][]byte{[]byte("x")}}
	with := func(f func(*publishPayload)) publishPayload { pp := valid; f(&pp); return pp }

	tests := []struct {
		name  string
		flags uint16
		give  []byte
	}{
		{name: "no flags", flags: 0, give: valid.bytes()},
		{name: "acked without batch", flags: FlagPublishAcked | FlagPublishKeyed, give: valid.bytes()},
		{name: "with event batch flag", flags: valid.flags() | FlagEventBatch, give: valid.bytes()},
		{name: "with ack flag", flags: valid.flags() | FlagPublishAck, give: valid.bytes()},
		{name: "conditional unacked", flags: FlagPublishBatch | FlagPublishIf, give: append(make([]byte, 8), publishPayload{scope: scope, count: 1, payloads: [][]byte{[]byte("x")}}.bytes()...)},
		{name: "conditional flag without its offset", flags: valid.flags() | FlagPublishIf, give: valid.bytes()[:9]},
		{name: "idempotent unacked", flags: FlagPublishBatch | FlagPublishIdempotent, give: append(make([]byte, 16), publishPayload{scope: scope, count: 1, payloads: [][]byte{[]byte("x")}}.bytes()...)},
		{name: "idempotent without its sequence", flags: valid.flags() | FlagPublishIdempotent, give: valid.bytes()[:9+8]},
		{name: "idempotent and conditional", flags: valid.flags() | FlagPublishIdempotent | FlagPublishIf, give: append(append(valid.bytes()[:9:9], make([]byte, 24)...), valid.bytes()[9:]...)},
		{name: "nil payload", flags: FlagPublishBatch, give: nil},
		{name: "empty payload", flags: valid.flags(), give: []byte{}},
		{name: "empty batch", flags: FlagPublishBatch, give: publishPayload{scope: scope}.bytes()},
		{name: "empty batch, acked", flags: valid.flags(), give: with(func(p *publishPayload) { p.count, p.payloads = 0, nil }).bytes()},
		{name: "ack mode none", flags: valid.flags(), give: with(func(p *publishPayload) { p.ack = byte(AckNone) }).bytes()},
		{name: "ack mode 3", flags: valid.flags(), give: with(func(p *publishPayload) { p.ack = 3 }).bytes()},
		{name: "ack mode 255", flags: valid.flags(), give: with(func(p *publishPayload) { p.ack = 255 }).bytes()},
		{name: "count max", flags: valid.flags(), give: with(func(p *publishPayload) { p.count = math.MaxUint32 }).bytes()},
		{name: "count one past what fits", flags: FlagPublishBatch, give: publishPayload{scope: scope, count: 3, payloads: [][]byte{nil, nil}}.bytes()},
		// 2 declared, room for 2 length prefixes, but the first payload eats the second's prefix.
		{name: "count fits, payloads do not", flags: FlagPublishBatch, give: publishPayload{scope: scope, count: 2, payloads: [][]byte{[]byte("abcd")}}.bytes()},
		{name: "trailing byte", flags: valid.flags(), give: append(valid.bytes(), 0)},
		{name: "trailing payload", flags: valid.flags(), give: with(func(p *publishPayload) { p.payloads = append(p.payloads, []byte("extra")) }).bytes()},
		{name: "keyed flag without key", flags: valid.flags(), give: with(func(p *publishPayload) { p.key = nil }).bytes()},
		{name: "key without keyed flag", flags: valid.flags() &^ FlagPublishKeyed, give: valid.bytes()},
		{name: "acked flag without prefix", flags: valid.flags(), give: with(func(p *publishPayload) { p.acked = false }).bytes()},
		{name: "payload length past end", flags: FlagPublishBatch, give: append(publishPayload{scope: scope, count: 1}.bytes(), 0, 0, 0, 9, 'x')},
		{name: "payload length max", flags: FlagPublishBatch, give: append(publishPayload{scope: scope, count: 1}.bytes(), 0xff, 0xff, 0xff, 0xff)},
		{name: "tenant length past end", flags: FlagPublishBatch, give: []byte{0xff, 0xff, 't'}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := DecodePublish(tt.flags, tt.give); !errors.Is(err, ErrMalformed) {
				t.Fatalf("DecodePublish(%#04x, % x) error = %v, want ErrMalformed", tt.flags, tt.give, err)
			}
		})
	}
}

// A count the payload could never hold is refused before anything is
// allocated for it.
func TestDecodePublishHugeCountDoesNotAllocate(t *testing.T) {
	give := publishPayload{scope: Scope{"t", "n", "s"}, count: math.MaxUint32}.bytes()
	allocated := bytesAllocated(20, func() { _, _ = DecodePublish(FlagPublishBatch, give) })
	if allocated > 1<<10 {
		t.Fatalf("refusing a count of 2^32-1 allocated %d bytes per call", allocated)
	}
}

func TestDecodePublishTruncated(t *testing.T) {
	for _, p := range []*Publish{
		{Scope: Scope{"t", "n", "s"}, Payloads: [][]byte{[]byte("one"), []byte("two")}},
		{RequestID: 5, Ack: AckPerMessage, Key: []byte("key"), Scope: Scope{"t", "n", "s"}, Payloads: [][]byte{[]byte("one"), {}}},
	} {
		h, payload := splitFrame(t, AppendPublish(nil, p))
		for n := 0; n < len(payload); n++ {
			if _, err := DecodePublish(h.Flags, payload[:n]); !errors.Is(err, ErrMalformed) {
				t.Fatalf("flags %#04x, payload cut at %d of %d: error = %v, want ErrMalformed", h.Flags, n, len(payload), err)
			}
		}
	}
}

func TestAckRoundTrip(t *testing.T) {
	owner := &Owner{NodeID: "node-2", Addr: "10.0.0.2:5000", Generation: math.MaxUint64}
	tests := []struct {
		name      string
		give      Ack
		want      Ack
		wantFlags uint16
	}{
		{name: "success", give: Ack{RequestID: 1, Count: 1}},
		{name: "success, batch", give: Ack{RequestID: math.MaxUint64, Count: math.MaxUint32}},
		{name: "zero", give: Ack{}},
		{
			name: "error",
			give: Ack{RequestID: 7, Count: 3, Err: &Error{Code: CodeOverloaded, Retry: RetryAfter, Message: "slow down"}},
		},
		{
			name: "error with empty message",
			give: Ack{RequestID: 8, Count: 1, Err: &Error{Code: CodeNotLeader, Retry: RetryRedirect}},
		},
		{
			name: "error with unknown code and retry class",
			give: Ack{RequestID: 9, Err: &Error{Code: 0xffff, Retry: 0xff, Message: "future"}},
		},
		{
			name: "error with code zero",
			give: Ack{RequestID: 10, Err: &Error{Message: "no code"}},
		},
		{
			name: "error from NewError",
			give: Ack{RequestID: 11, Count: 2, Err: NewError(CodeQuorumTimeout, "shard %d timed out", 4)},
		},
		{
			name: "message at the limit",
			give: Ack{RequestID: 12, Err: &Error{Code: CodeInternal, Message: strings.Repeat("m", 0xffff)}},
		},
		{
			name: "message over the limit is truncated",
			give: Ack{RequestID: 13, Err: &Error{Code: CodeInternal, Message: strings.Repeat("m", 0xffff+10)}},
			want: Ack{RequestID: 13, Err: &Error{Code: CodeInternal, Message: strings.Repeat("m", 0xffff)}},
		},
		{
			name:      "success with offset",
			give:      Ack{RequestID: 14, Count: 2, Offset: math.MaxUint64, HasOffset: true},
			wantFlags: FlagPublishAckOffset,
		},
		{
			name: "error drops the offset",
			give: Ack{RequestID: 15, Err: &Error{Code: CodeStorage}, Offset: 3, HasOffset: true},
			want: Ack{RequestID: 15, Err: &Error{Code: CodeStorage}},
		},
		{
			name:      "not_leader with its owner",
			give:      Ack{RequestID: 16, Count: 4, Err: &Error{Code: CodeNotLeader, Retry: RetryRedirect, Message: "moved", Owner: owner}},
			wantFlags: FlagPublishAckOwner,
		},
		{
			name:      "owner with empty fields",
			give:      Ack{RequestID: 17, Err: &Error{Code: CodeShardUnavailable, Retry: Retry, Owner: &Owner{}}},
			wantFlags: FlagPublishAckOwner,
		},
		{
			name:      "owner fields over the limit are truncated",
			give:      Ack{RequestID: 18, Err: &Error{Code: CodeNotLeader, Owner: &Owner{NodeID: strings.Repeat("n", 0xffff+1), Addr: strings.Repeat("a", 0xffff+2), Generation: 1}}},
			want:      Ack{RequestID: 18, Err: &Error{Code: CodeNotLeader, Owner: &Owner{NodeID: strings.Repeat("n", 0xffff), Addr: strings.Repeat("a", 0xffff), Generation: 1}}},
			wantFlags: FlagPublishAckOwner,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := tt.want
			if want.RequestID == 0 && want.Err == nil && !want.HasOffset {
				want = tt.give
			}
			h, payload := splitFrame(t, AppendAck(nil, &tt.give))
			if h.Flags != FlagPublishAck|tt.wantFlags {
				t.Fatalf("flags = %#04x, want %#04x", h.Flags, FlagPublishAck|tt.wantFlags)
			}
			got, err := DecodeAck(h.Flags, payload)
			if err != nil {
				t.Fatalf("DecodeAck: %v", err)
			}
			if got.RequestID != want.RequestID || got.Count != want.Count {
				t.Errorf("got request %d count %d, want %d %d", got.RequestID, got.Count, want.RequestID, want.Count)
			}
			if got.HasOffset != want.HasOffset || got.Offset != want.Offset {
				t.Errorf("got offset %d (present %t), want %d (%t)", got.Offset, got.HasOffset, want.Offset, want.HasOffset)
			}
			if !sameError(got.Err, want.Err) {
				t.Errorf("Err = %+v (owner %+v), want %+v (owner %+v)", got.Err, ownerOf(got.Err), want.Err, ownerOf(want.Err))
			}
			if want.Err != nil && !errors.Is(got.Err, &Error{Code: want.Err.Code}) {
				t.Errorf("decoded error does not match its code with errors.Is")
			}
		})
	}
}

func ownerOf(e *Error) *Owner {
	if e == nil {
		return nil
	}
	return e.Owner
}

func TestDecodeAckRejects(t *testing.T) {
	valid := AppendAck(nil, &Ack{RequestID: 1, Count: 1, Err: &Error{Code: CodeDraining, Retry: Retry, Message: "bye"}})[HeaderLen:]
	withStatus := func(s byte) []byte { b := append([]byte(nil), valid...); b[0] = s; return b }
	ownerFrame := AppendAck(nil, &Ack{RequestID: 2, Err: &Error{Code: CodeNotLeader, Owner: &Owner{NodeID: "n", Addr: "a:1", Generation: 3}}})
	withOwner := ownerFrame[HeaderLen:]
	// The same owner fields after a successful ack's prefix.
	okOwner := append(append([]byte(nil), AppendAck(nil, &Ack{RequestID: 2})[HeaderLen:]...), withOwner[len(withOwner)-2-1-2-3-8:]...)
	offsetAck := AppendAck(nil, &Ack{RequestID: 3, Offset: 9, HasOffset: true})[HeaderLen:]
	both := FlagPublishAck | FlagPublishAckOffset | FlagPublishAckOwner
	tests := []struct {
		name  string
		flags uint16
		give  []byte
	}{
		{name: "nil", flags: FlagPublishAck, give: nil},
		{name: "status 2", flags: FlagPublishAck, give: withStatus(2)},
		{name: "status 255", flags: FlagPublishAck, give: withStatus(255)},
		{name: "trailing byte", flags: FlagPublishAck, give: append(append([]byte(nil), valid...), 0)},
		{name: "message length past end", flags: FlagPublishAck, give: append(append([]byte(nil), valid[:16]...), 0, 9, 'x')},
		{name: "owner flag without the owner", flags: FlagPublishAck | FlagPublishAckOwner, give: valid},
		{name: "owner without the flag", flags: FlagPublishAck, give: withOwner},
		{name: "owner on a successful ack", flags: FlagPublishAck | FlagPublishAckOwner, give: okOwner},
		{name: "owner and offset on an error ack", flags: both, give: append(append([]byte(nil), valid...), append(make([]byte, 8), withOwner[len(withOwner)-16:]...)...)},
		{name: "owner flags on a success with offset", flags: both, give: append(append([]byte(nil), offsetAck...), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)},
		{name: "owner trailing byte", flags: FlagPublishAck | FlagPublishAckOwner, give: append(append([]byte(nil), withOwner...), 0)},
		{name: "not an ack", flags: FlagPublishAckOwner, give: withOwner},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := DecodeAck(tt.flags, tt.give); !errors.Is(err, ErrMalformed) {
				t.Fatalf("DecodeAck(%#04x, % x) error = %v, want ErrMalformed", tt.flags, tt.give, err)
			}
		})
	}
	for n := 0; n < len(valid); n++ {
		if _, err := DecodeAck(FlagPublishAck, valid[:n]); !errors.Is(err, ErrMalformed) {
			t.Fatalf("ack cut at %d of %d: error = %v, want ErrMalformed", n, len(valid), err)
		}
	}
	for n := 0; n < len(withOwner); n++ {
		if _, err := DecodeAck(FlagPublishAck|FlagPublishAckOwner, withOwner[:n]); !errors.Is(err, ErrMalformed) {
			t.Fatalf("owner ack cut at %d of %d: error = %v, want ErrMalformed", n, len(withOwner), err)
		}
	}
}

func TestEventBatchRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		give [][]byte
	}{
		{name: "nil", give: nil},
		{name: "one", give: [][]byte{[]byte("event")}},
		{name: "zero-length events", give: [][]byte{{}, nil, {}}},
		{name: "mixed", give: [][]byte{[]byte("a"), {}, []byte("FLX1"), {0, 0, 0, 0}}},
		{name: "64 events", give: seqPayloads(64)},
		{name: "many events", give: seqPayloads(10000)},
		{name: "large event", give: [][]byte{bytes.Repeat([]byte{1}, 1<<20)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			frame := AppendEventBatch(nil, tt.give)
			if n := EventBatchLen(tt.give); n != len(frame) {
				t.Fatalf("EventBatchLen = %d, len(AppendEventBatch) = %d", n, len(frame))
			}
			h, payload := splitFrame(t, frame)
			if h.Flags != FlagEventBatch {
				t.Fatalf("flags = %#04x, want FlagEventBatch", h.Flags)
			}
			got, err := DecodeEventBatch(payload)
			if err != nil {
				t.Fatalf("DecodeEventBatch: %v", err)
			}
			if len(got) != len(tt.give) {
				t.Fatalf("got %d events, want %d", len(got), len(tt.give))
			}
			for i := range got {
				if !bytes.Equal(got[i], tt.give[i]) {
					t.Fatalf("event %d = %q, want %q", i, got[i], tt.give[i])
				}
			}
			if again := AppendEventBatch(nil, got); !bytes.Equal(again, frame) {
				t.Fatalf("re-encoded batch differs from the original")
			}
		})
	}
}

// The same encoding appended after other bytes is unchanged, so one batch
// can be written into a shared buffer.
func TestAppendEventBatchAppends(t *testing.T) {
	events := [][]byte{[]byte("a"), []byte("bb")}
	want := AppendEventBatch(nil, events)
	got := AppendEventBatch([]byte("prefix"), events)
	if !bytes.Equal(got[len("prefix"):], want) || string(got[:len("prefix")]) != "prefix" {
		t.Fatalf("AppendEventBatch onto a prefix = % x", got)
	}
}

func TestDecodeEventBatchRejects(t *testing.T) {
	u32 := func(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	tests := []struct {
		name string
		give []byte
	}{
		{name: "nil", give: nil},
		{name: "short count", give: []byte{0, 0, 1}},
		{name: "count max", give: u32(math.MaxUint32)},
		{name: "count one past what fits", give: cat(u32(3), u32(0), u32(0))},
		{name: "count fits, events do not", give: cat(u32(2), u32(4), []byte("abcd"))},
		{name: "event length past end", give: cat(u32(1), u32(5), []byte("abcd"))},
		{name: "event length max", give: cat(u32(1), u32(math.MaxUint32))},
		{name: "trailing byte", give: cat(u32(1), u32(1), []byte("ab"))},
		{name: "trailing bytes, empty batch", give: cat(u32(0), []byte{0})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := DecodeEventBatch(tt.give); !errors.Is(err, ErrMalformed) {
				t.Fatalf("DecodeEventBatch(% x) error = %v, want ErrMalformed", tt.give, err)
			}
		})
	}
	_, payload := splitFrame(t, AppendEventBatch(nil, [][]byte{[]byte("one"), {}, []byte("three")}))
	for n := 0; n < len(payload); n++ {
		if _, err := DecodeEventBatch(payload[:n]); !errors.Is(err, ErrMalformed) {
			t.Fatalf("batch cut at %d of %d: error = %v, want ErrMalformed", n, len(payload), err)
		}
	}
}

// An empty event batch (count 0) is well-formed, unlike an empty publish.
func TestDecodeEventBatchEmpty(t *testing.T) {
	got, err := DecodeEventBatch([]byte{0, 0, 0, 0})
	if err != nil || len(got) != 0 {
		t.Fatalf("DecodeEventBatch(count 0) = %v, %v; want no events, no error", got, err)
	}
}

func TestDecodeEventBatchHugeCountDoesNotAllocate(t *testing.T) {
	give := []byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}
	allocated := bytesAllocated(20, func() { _, _ = DecodeEventBatch(give) })
	if allocated > 1<<10 {
		t.Fatalf("refusing a count of 2^32-1 allocated %d bytes per call", allocated)
	}
}

// The shared event batch is encoded once per batch and written to every
// subscriber; with a buffer sized by EventBatchLen the encode must not
// allocate at all.
func TestAppendEventBatchAllocs(t *testing.T) {
	events := seqPayloads(64)
	dst := make([]byte, 0, EventBatchLen(events))
	var out []byte
	allocs := testing.AllocsPerRun(100, func() { out = AppendEventBatch(dst[:0], events) })
	if allocs != 0 {
		t.Fatalf("AppendEventBatch into a pre-sized buffer made %v allocations, want 0", allocs)
	}
	if len(out) != cap(dst) {
		t.Fatalf("encoded %d bytes, EventBatchLen said %d", len(out), cap(dst))
	}
}

func BenchmarkAppendEventBatch(b *testing.B) {
	events := seqPayloads(64)
	b.Run("nil dst", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = AppendEventBatch(nil, events)
		}
	})
	b.Run("presized dst", func(b *testing.B) {
		dst := make([]byte, 0, EventBatchLen(events))
		b.ReportAllocs()
		for b.Loop() {
			_ = AppendEventBatch(dst[:0], events)
		}
	})
}

func TestAckModeNames(t *testing.T) {
	tests := []struct {
		give AckMode
		want string
	}{
		{give: AckNone, want: "none"},
		{give: AckPerMessage, want: "message"},
		{give: AckPerBatch, want: "batch"},
		{give: 7, want: "ack(7)"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := tt.give.String(); got != tt.want {
				t.Fatalf("String() = %q, want %q", got, tt.want)
			}
			got, err := ParseAckMode(tt.want)
			if tt.give > AckPerBatch {
				if err == nil {
					t.Fatalf("ParseAckMode(%q) = %v, want an error", tt.want, got)
				}
				return
			}
			if err != nil || got != tt.give {
				t.Fatalf("ParseAckMode(%q) = %v, %v; want %v", tt.want, got, err, tt.give)
			}
		})
	}
	for _, bad := range []string{"", "None", "per-message", "1"} {
		if _, err := ParseAckMode(bad); err == nil {
			t.Errorf("ParseAckMode(%q) succeeded, want an error", bad)
		}
	}
}
