package wire

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// allMessages has one populated and one zero value of every control message
// type; TestAllMessagesCovered keeps it in step with newMessage.
var allMessages = []Message{
	&Auth{Tenant: "acme", Token: "secret", ClientFlags: FlagPublishBatch | FlagPublishAcked, ClientFeatures: SupportedFeatures, ClientName: "felix-go/test"},
	&Auth{},
	&AuthOK{ServerFlags: SupportedFlags, ServerFeatures: FeatureErrorCodes, PublishWindow: 1024, MaxFrameBytes: 16 << 20},
	&AuthOK{},
	&Subscribe{RequestID: 1, Tenant: "acme", Namespace: "orders", Stream: "created", QueueCapacity: 4096},
	&Subscribe{QueueCapacity: -1},
	&Subscribed{RequestID: 1, SubscriptionID: math.MaxUint64, QueueCapacity: 4096},
	&Subscribed{},
	&Unsubscribe{RequestID: 2, SubscriptionID: 3},
	&Unsubscribe{},
	&OK{RequestID: math.MaxUint64},
	&OK{},
	&ErrorMsg{RequestID: 4, Code: CodeLimitExceeded, Retry: RetryFatal, Message: "too many subscriptions"},
	&ErrorMsg{Code: 0xffff, Retry: 0xff},
	&EventStreamHello{SubscriptionID: 3},
	&PublishRefused{RequestID: 7, Reason: ReasonOffsetMismatch, Expected: 5, Tail: math.MaxUint64, Message: "expected 5"},
	&PublishRefused{},
	&EventStreamHello{},
	&StreamCreate{RequestID: 5, Tenant: "acme", Namespace: "orders", Stream: "created", Shards: 4, Durable: true, Routing: "jump", RetentionBytes: 1 << 30, RetentionAgeMS: 3_600_000},
	&StreamCreate{},
	&StreamGet{RequestID: 6, Tenant: "acme", Namespace: "orders", Stream: "created"},
	&StreamGet{},
	&StreamList{RequestID: 7, Tenant: "acme", Namespace: "orders"},
	&StreamList{},
	&StreamDelete{RequestID: 8, Tenant: "acme", Namespace: "orders", Stream: "created"},
	&StreamDelete{},
	&StreamInfo{RequestID: 9, Tenant: "acme", Namespace: "orders", Stream: "created", Shards: 4, Durable: true, Routing: "jump", Implicit: true, CreatedAtMS: 1_767_225_600_000},
	&StreamInfo{},
	&StreamInfos{RequestID: 10, Streams: []StreamInfo{{Tenant: "acme", Namespace: "orders", Stream: "created", Shards: 1, Routing: "modulo"}}},
	&StreamInfos{},
	&StreamRead{RequestID: 11, Tenant: "acme", Namespace: "orders", Stream: "created", Shard: 2, From: 100, End: ptr(uint64(200)), MaxRecords: 10, MaxBytes: 1 << 20, FollowerMaxLagMS: 500},
	&StreamRead{},
	&StreamRecords{RequestID: 11, Records: []StreamRecord{{Offset: 100, TimeMS: 1_767_225_600_000, Payload: []byte("x")}}, NextOffset: 101, Committed: 200, Follower: true},
	&StreamRecords{},
	&SubscribeCursorError{RequestID: 12, Reason: "too_old", Requested: 3, Available: 40},
	&SubscribeCursorError{},
	&SubscriptionLagged{SubscriptionID: 13, ResumeFrom: 4096},
	&SubscriptionLagged{},
	&OffsetForTime{RequestID: 14, Tenant: "acme", Namespace: "orders", Stream: "created", Shard: 3, TimeMS: 1_767_225_600_000},
	&OffsetForTime{},
	&TimeOffset{RequestID: 14, Offset: math.MaxUint64},
	&TimeOffset{},
	&ProducerInit{RequestID: 15},
	&ProducerInit{},
	&ProducerInitOK{RequestID: 15, ProducerID: math.MaxUint64},
	&ProducerInitOK{},
	&PublishRefused{RequestID: 16, Reason: ReasonSequenceGap, Expected: 3},
	&PublishRefused{RequestID: 17, Reason: ReasonUnknownProducer},
	&ErrorMsg{RequestID: 18, Code: CodeNotLeader, Retry: RetryRedirect, Message: "shard 2 is owned by n2",
		Owner: &Owner{NodeID: "n2", Addr: "10.0.0.2:5000", Generation: math.MaxUint64}},
	&ErrorMsg{RequestID: 19, Code: CodeShardUnavailable, Retry: Retry, Owner: &Owner{}},
	&ShardOwners{RequestID: 20, Tenant: "acme", Namespace: "orders", Stream: "created"},
	&ShardOwners{},
	&ShardOwnersView{RequestID: 20, Shards: 3, Routing: "jump", Durable: true, Owners: []ShardOwner{
		{Shard: 0, Owner: Owner{NodeID: "n1", Addr: "10.0.0.1:5000", Generation: 4}, Available: true},
		{Shard: 1, Owner: Owner{NodeID: "n2", Addr: "10.0.0.2:5000", Generation: 7}},
		{Shard: math.MaxUint32, Available: true},
	}},
	&ShardOwnersView{},
}

var allTypes = []MsgType{
	TypeAuth, TypeAuthOK, TypeSubscribe, TypeSubscribed, TypeUnsubscribe, TypeOK, TypeError, TypeEventStreamHello,
	TypeStreamCreate, TypeStreamGet, TypeStreamList, TypeStreamDelete, TypeStreamInfo, TypeStreamInfos,
	TypeStreamRead, TypeSubscribeCursorError, TypeSubscriptionLagged, TypeStreamRecords,
	TypeOffsetForTime, TypeTimeOffset, TypePublishRefused, TypeProducerInit, TypeProducerInitOK,
	TypeShardOwners, TypeShardOwnersView,
}

func ptr[T any](v T) *T { return &v }

func TestAllMessagesCovered(t *testing.T) {
	covered := map[MsgType]bool{}
	for _, m := range allMessages {
		covered[m.Type()] = true
	}
	for _, typ := range allTypes {
		if !covered[typ] {
			t.Errorf("no test message of type %q", typ)
		}
		m := newMessage(typ)
		if m == nil {
			t.Errorf("newMessage(%q) = nil", typ)
			continue
		}
		if m.Type() != typ {
			t.Errorf("newMessage(%q).Type() = %q", typ, m.Type())
		}
	}
}

func TestMessageRoundTrip(t *testing.T) {
	for _, give := range allMessages {
		t.Run(string(give.Type()), func(t *testing.T) {
			frame, err := AppendMessage(nil, give)
			if err != nil {
				t.Fatalf("AppendMessage: %v", err)
			}
			h, payload := readOneFrame(t, frame)
			if h.Flags != 0 {
				t.Fatalf("control frame flags = %#04x, want 0", h.Flags)
			}
			got, err := DecodeMessage(payload)
			if err != nil {
				t.Fatalf("DecodeMessage: %v", err)
			}
			if !reflect.DeepEqual(got, give) {
				t.Fatalf("DecodeMessage = %#v, want %#v", got, give)
			}
			again, err := AppendMessage(nil, got)
			if err != nil || !bytes.Equal(again, frame) {
				t.Fatalf("re-encoded frame differs (err %v)", err)
			}
		})
	}
}

// Control frames append like the binary ones do.
func TestAppendMessageAppends(t *testing.T) {
	one, err := AppendMessage(nil, &OK{RequestID: 1})
	if err != nil {
		t.Fatal(err)
	}
	two, err := AppendMessage(append([]byte(nil), one...), &OK{RequestID: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(two, append(append([]byte(nil), one...), one...)) {
		t.Fatalf("AppendMessage onto a frame = % x", two)
	}
}

func TestErrorMsgErr(t *testing.T) {
	m := &ErrorMsg{RequestID: 1, Code: CodeOverloaded, Retry: RetryAfter, Message: "busy"}
	err := m.Err()
	if *err != (Error{Code: CodeOverloaded, Retry: RetryAfter, Message: "busy"}) {
		t.Fatalf("Err() = %+v", *err)
	}
	if !errors.Is(err, ErrOverloaded) {
		t.Fatalf("errors.Is(ErrorMsg.Err(), ErrOverloaded) = false")
	}
}

// An error's owner is what a client follows on not_leader; Err must not
// drop it on the way from the message.
func TestErrorMsgErrKeepsOwner(t *testing.T) {
	owner := Owner{NodeID: "n2", Addr: "10.0.0.2:5000", Generation: 9}
	m := &ErrorMsg{RequestID: 1, Code: CodeNotLeader, Retry: RetryRedirect, Message: "moved", Owner: &owner}
	err := m.Err()
	if err.Owner == nil || *err.Owner != owner {
		t.Fatalf("Err().Owner = %+v, want %+v", err.Owner, owner)
	}
	if !errors.Is(err, ErrNotLeader) {
		t.Fatalf("errors.Is(%v, ErrNotLeader) = false", err)
	}
}

// Every reply a client waits for must name its request, or the client's
// control reader has no one to hand it to.
func TestShardOwnersViewAnswers(t *testing.T) {
	var r Reply = &ShardOwnersView{RequestID: 42}
	if r.AnswerTo() != 42 {
		t.Fatalf("ShardOwnersView.AnswerTo() = %d, want 42", r.AnswerTo())
	}
}

func TestSubscribeScope(t *testing.T) {
	s := &Subscribe{Tenant: "t", Namespace: "n", Stream: "s"}
	if got := s.Scope(); got != (Scope{"t", "n", "s"}) {
		t.Fatalf("Scope() = %+v", got)
	}
}

// envelopeBytes encodes [typ, body] with arbitrary values, so tests can
// build control payloads AppendMessage would never write.
func envelopeBytes(t testing.TB, typ, body any) []byte {
	t.Helper()
	b, err := msgpack.Marshal([]any{typ, body})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDecodeMessageUnknownType(t *testing.T) {
	tests := []struct {
		name string
		give string
	}{
		{name: "unknown", give: "publish"},
		{name: "empty", give: ""},
		{name: "case", give: "AUTH"},
		{name: "long", give: string(bytes.Repeat([]byte("x"), 1000))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeMessage(envelopeBytes(t, tt.give, map[string]any{}))
			if !errors.Is(err, ErrUnknownMessage) {
				t.Fatalf("DecodeMessage error = %v, want ErrUnknownMessage", err)
			}
			if len(err.Error()) > 200 {
				t.Errorf("error echoes %d bytes of the type: %.80s...", len(err.Error()), err)
			}
		})
	}
}

func TestDecodeMessageMalformed(t *testing.T) {
	valid, err := AppendMessage(nil, &Subscribe{RequestID: 1, Tenant: "t", Namespace: "n", Stream: "s"})
	if err != nil {
		t.Fatal(err)
	}
	valid = valid[HeaderLen:]

	tests := []struct {
		name string
		give []byte
		// alsoOK is a second acceptable error: an envelope with no type in
		// it decodes today to type "" and is refused as ErrUnknownMessage.
		alsoOK error
	}{
		{name: "nil", give: nil},
		{name: "reserved byte 0xc1", give: []byte{0xc1}},
		{name: "text", give: []byte("hello, broker")},
		{name: "msgpack nil envelope", give: []byte{0xc0}, alsoOK: ErrUnknownMessage},
		{name: "empty array", give: []byte{0x90}, alsoOK: ErrUnknownMessage},
		{name: "map envelope", give: mustMarshal(t, map[string]any{"type": "ok", "body": map[string]any{}}), alsoOK: ErrUnknownMessage},
		{name: "one-element array", give: []byte{0x91, 0xa2, 'o', 'k'}},
		{name: "truncated envelope", give: envelopeBytes(t, "ok", nil)[:4]},
		{name: "nil body", give: envelopeBytes(t, "subscribed", nil)},
		{name: "three-element array", give: mustMarshal(t, []any{"ok", map[string]any{}, 1})},
		{name: "type is an int", give: envelopeBytes(t, 1, map[string]any{})},
		{name: "type is an array", give: envelopeBytes(t, []string{"ok"}, map[string]any{})},
		{name: "body is a string", give: envelopeBytes(t, "ok", "request_id")},
		{name: "body is an int", give: envelopeBytes(t, "subscribe", 5)},
		{name: "field has the wrong type", give: envelopeBytes(t, "subscribe", map[string]any{"tenant": 5})},
		{name: "int field is a string", give: envelopeBytes(t, "ok", map[string]any{"request_id": "1"})},
		{name: "str32 length past end", give: []byte{0x92, 0xdb, 0xff, 0xff, 0xff, 0xff}},
		{name: "array32 length past end", give: []byte{0xdd, 0xff, 0xff, 0xff, 0xff}},
		{name: "map32 length past end", give: []byte{0x92, 0xa2, 'o', 'k', 0xdf, 0xff, 0xff, 0xff, 0xff}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := DecodeMessage(tt.give)
			if tt.alsoOK != nil && errors.Is(err, tt.alsoOK) {
				return
			}
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("DecodeMessage(% x) = %#v, %v; want ErrMalformed", tt.give, m, err)
			}
		})
	}
	for n := 0; n < len(valid); n++ {
		if m, err := DecodeMessage(valid[:n]); !errors.Is(err, ErrMalformed) {
			t.Fatalf("message cut at %d of %d = %#v, %v; want ErrMalformed", n, len(valid), m, err)
		}
	}
}

// The body is decoded as msgpack, not as a fixed layout: peers may send
// fields in any order, omit them, or add ones this version does not know.
func TestDecodeMessageTolerantBody(t *testing.T) {
	tests := []struct {
		name string
		give []byte
		want Message
	}{
		{
			name: "unknown field ignored",
			give: envelopeBytes(t, "ok", map[string]any{"request_id": 5, "future": []int{1, 2}}),
			want: &OK{RequestID: 5},
		},
		{
			name: "missing fields are zero",
			give: envelopeBytes(t, "auth", map[string]any{"tenant": "acme"}),
			want: &Auth{Tenant: "acme"},
		},
		{
			name: "empty map body is the zero message",
			give: envelopeBytes(t, "subscribed", map[string]any{}),
			want: &Subscribed{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeMessage(tt.give)
			if err != nil {
				t.Fatalf("DecodeMessage: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("DecodeMessage = %#v, want %#v", got, tt.want)
			}
		})
	}
}

// A body must be a map: the integer range check reads fields by name, and a
// positional body would skip it.
func TestDecodeMessageRejectsArrayBody(t *testing.T) {
	_, err := DecodeMessage(envelopeBytes(t, "unsubscribe", []any{7, 8}))
	if !errors.Is(err, ErrMalformed) {
		t.Fatalf("DecodeMessage(array body) error = %v, want ErrMalformed", err)
	}
}

func mustMarshal(t testing.TB, v any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// BenchmarkDecodeMessage compares a real control message with a 6-byte
// payload whose str32 header claims 4 GiB (see TestDecodeMessageAllocationBounded).
func BenchmarkDecodeMessage(b *testing.B) {
	auth, err := AppendMessage(nil, allMessages[0])
	if err != nil {
		b.Fatal(err)
	}
	for _, bb := range []struct {
		name string
		give []byte
	}{
		{name: "auth", give: auth[HeaderLen:]},
		{name: "str32 claims 4 GiB", give: []byte{0x92, 0xdb, 0xff, 0xff, 0xff, 0xff}},
	} {
		b.Run(bb.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = DecodeMessage(bb.give)
			}
		})
	}
}
