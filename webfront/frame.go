package webfront

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/getfelix/felix-go/wire"
)

// Frame kinds: the first byte of every WebSocket message.
const (
	KindControl byte = 0x01
	KindEvents  byte = 0x02
)

// Request ops a client sends.
const (
	OpAuth        = "auth"
	OpSubscribe   = "subscribe"
	OpUnsubscribe = "unsubscribe"
	OpPublish     = "publish"
	OpRead        = "read"
)

// Ops the broker sends.
const (
	OpReply = "reply"
	OpEnded = "ended"
)

// ErrMalformed is returned for a frame that does not decode.
var ErrMalformed = errors.New("webfront: malformed frame")

// maxDepth bounds msgpack nesting: requests nest two deep ({payloads: [bin]}),
// and msgpack/v5 decodes recursively.
const maxDepth = 8

// Request is one client request, every op's fields in one struct (the op
// says which apply). Integers travel as uint64 and are range-checked here:
// msgpack/v5 would truncate a wider value into a narrower field silently.
type Request struct {
	Op        string   `msgpack:"op"`
	ID        uint64   `msgpack:"id"`
	Tenant    string   `msgpack:"tenant"`
	Token     string   `msgpack:"token"`
	Namespace string   `msgpack:"ns"`
	Stream    string   `msgpack:"stream"`
	Shard     uint64   `msgpack:"shard"`
	Start     string   `msgpack:"start"`
	Offset    uint64   `msgpack:"offset"`
	Sub       uint64   `msgpack:"sub"`
	Key       []byte   `msgpack:"key"`
	Payloads  [][]byte `msgpack:"payloads"`
	From      uint64   `msgpack:"from"`
	Max       uint64   `msgpack:"max"`
}

// DecodeRequest decodes one client frame. It never panics and allocates
// at most a small multiple of len(b): the msgpack is walked first, so no
// claimed length larger than the bytes left reaches the library.
func DecodeRequest(b []byte) (*Request, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("%w: empty frame", ErrMalformed)
	}
	if b[0] != KindControl {
		return nil, fmt.Errorf("%w: a client sends control frames (kind 0x01), got kind %#02x", ErrMalformed, b[0])
	}
	body := b[1:]
	if err := checkMsgpack(body); err != nil {
		return nil, err
	}
	if len(body) == 0 || !isMap(body[0]) {
		return nil, fmt.Errorf("%w: a control frame is one msgpack map", ErrMalformed)
	}
	var r Request
	if err := msgpack.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if err := r.check(); err != nil {
		return nil, err
	}
	return &r, nil
}

func isMap(c byte) bool { return (c >= 0x80 && c <= 0x8f) || c == 0xde || c == 0xdf }

// check refuses unknown ops and fields out of their range.
func (r *Request) check() error {
	switch r.Op {
	case OpAuth, OpSubscribe, OpUnsubscribe, OpPublish, OpRead:
	default:
		return fmt.Errorf("%w: unknown op %q", ErrMalformed, r.Op)
	}
	if r.Shard > math.MaxUint32 {
		return fmt.Errorf("%w: shard %d does not fit 32 bits", ErrMalformed, r.Shard)
	}
	if r.Max > math.MaxInt32 {
		return fmt.Errorf("%w: max %d does not fit 31 bits", ErrMalformed, r.Max)
	}
	switch r.Start {
	case "", "latest", "earliest", "offset":
	default:
		return fmt.Errorf("%w: start %q is not latest, earliest or offset", ErrMalformed, r.Start)
	}
	return nil
}

// AppendRequest appends r as a control frame (the Go side of a client:
// tests and benchmarks).
func AppendRequest(b []byte, r *Request) ([]byte, error) {
	body, err := msgpack.Marshal(r)
	if err != nil {
		return b, err
	}
	return append(append(b, KindControl), body...), nil
}

// Reply is a message the broker sends in a control frame.
type Reply struct {
	Op          string        `msgpack:"op"`
	ID          uint64        `msgpack:"id,omitempty"`
	Error       *ReplyError   `msgpack:"error,omitempty"`
	Sub         uint64        `msgpack:"sub,omitempty"`
	Code        uint64        `msgpack:"code,omitempty"`
	Durable     bool          `msgpack:"durable,omitempty"`
	StartOffset uint64        `msgpack:"start_offset,omitempty"`
	LiveOffset  uint64        `msgpack:"live_offset,omitempty"`
	Offset      uint64        `msgpack:"offset,omitempty"`
	Records     []ReplyRecord `msgpack:"records,omitempty"`
	Next        uint64        `msgpack:"next,omitempty"`
	Committed   uint64        `msgpack:"committed,omitempty"`
}

// ReplyError is a refused request: felix/1's code, its name and retry
// class, and a sentence for people.
type ReplyError struct {
	Code    uint16 `msgpack:"code"`
	Name    string `msgpack:"name"`
	Retry   uint8  `msgpack:"retry"`
	Message string `msgpack:"message"`
}

// ReplyRecord is one record of a read.
type ReplyRecord struct {
	Offset uint64 `msgpack:"offset"`
	Value  []byte `msgpack:"value"`
	TimeMs int64  `msgpack:"time_ms"`
}

func replyError(err error) *ReplyError {
	var cursor *wire.CursorError
	if errors.As(err, &cursor) {
		return &ReplyError{Code: uint16(wire.CodeInvalidRequest), Name: "cursor_" + cursor.Reason, Retry: uint8(wire.RetryFatal), Message: cursor.Error()}
	}
	we := wire.AsError(err)
	return &ReplyError{Code: uint16(we.Code), Name: we.Code.String(), Retry: uint8(we.Retry), Message: we.Message}
}

// AppendReply appends r as a control frame.
func AppendReply(b []byte, r *Reply) []byte {
	body, err := msgpack.Marshal(r)
	if err != nil {
		panic("webfront: a reply does not encode: " + err.Error()) // our own struct: a defect
	}
	return append(append(b, KindControl), body...)
}

// DecodeReply decodes a broker control frame (the Go side of a client).
func DecodeReply(b []byte) (*Reply, error) {
	if len(b) == 0 || b[0] != KindControl {
		return nil, fmt.Errorf("%w: not a control frame", ErrMalformed)
	}
	if err := checkMsgpack(b[1:]); err != nil {
		return nil, err
	}
	var r Reply
	if err := msgpack.Unmarshal(b[1:], &r); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return &r, nil
}

// eventsHeaderLen is the kind byte, the subscription id and the flags.
const eventsHeaderLen = 1 + 8 + 2

// appendEvents appends an events frame around one felix/1 event batch
// payload, which travels unchanged.
func appendEvents(b []byte, sub uint64, flags uint16, payload []byte) []byte {
	b = append(b, KindEvents)
	b = binary.BigEndian.AppendUint64(b, sub)
	b = binary.BigEndian.AppendUint16(b, flags)
	return append(b, payload...)
}

// Events is one decoded events frame.
type Events struct {
	Sub      uint64
	Offsets  bool
	Base     uint64
	Payloads [][]byte
}

// DecodeEvents decodes an events frame; payloads alias b.
func DecodeEvents(b []byte) (*Events, error) {
	if len(b) < eventsHeaderLen || b[0] != KindEvents {
		return nil, fmt.Errorf("%w: not an events frame", ErrMalformed)
	}
	flags := binary.BigEndian.Uint16(b[9:])
	base, events, err := wire.DecodeEventBatchFlags(flags, b[eventsHeaderLen:])
	if err != nil {
		return nil, err
	}
	return &Events{Sub: binary.BigEndian.Uint64(b[1:]), Offsets: flags&wire.FlagEventBatchOffsets != 0, Base: base, Payloads: events}, nil
}

// checkMsgpack walks a frame's msgpack before msgpack/v5 decodes it
// (wire.CheckMsgpack), refusing as ErrMalformed.
func checkMsgpack(b []byte) error {
	if err := wire.CheckMsgpack(b, maxDepth); err != nil {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return nil
}
