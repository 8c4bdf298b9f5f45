package wire

import (
	"encoding/binary"
	"fmt"
	"slices"
)

// MaxKeyLen is the longest routing key a publish can carry (a u16 length).
const MaxKeyLen = 0xffff

// AckMode says which answers a publish wants.
type AckMode uint8

const (
	// AckNone is fire-and-forget: no answer, not even an error.
	AckNone AckMode = 0
	// AckPerMessage answers every message of a batch with its own ack.
	AckPerMessage AckMode = 1
	// AckPerBatch answers the whole batch with one ack.
	AckPerBatch AckMode = 2
)

// String returns the CLI name of the mode.
func (m AckMode) String() string {
	switch m {
	case AckNone:
		return "none"
	case AckPerMessage:
		return "message"
	case AckPerBatch:
		return "batch"
	}
	return fmt.Sprintf("ack(%d)", uint8(m))
}

// ParseAckMode reads a CLI name: none, message or batch.
func ParseAckMode(s string) (AckMode, error) {
	switch s {
	case "none":
		return AckNone, nil
	case "message":
		return AckPerMessage, nil
	case "batch":
		return AckPerBatch, nil
	}
	return AckNone, fmt.Errorf("wire: unknown ack mode %q (want none, message or batch)", s)
}

// Publish is a decoded binary publish batch. Payloads alias the frame buffer.
type Publish struct {
	RequestID uint64
	Ack       AckMode
	// Conditional publishes (FlagPublishIf) are written only if they would
	// start at Expected; they are always acked.
	Conditional bool
	Expected    uint64
	// Idempotent publishes (FlagPublishIdempotent) carry their producer's
	// id and the batch's sequence on its shard; they are always acked and
	// never conditional.
	Idempotent bool
	ProducerID uint64
	Sequence   uint64
	Key        []byte
	Scope      Scope
	Payloads   [][]byte
}

// Bytes sums the payload sizes.
func (p *Publish) Bytes() int64 { return PayloadBytes(p.Payloads) }

// PayloadBytes sums the sizes of payloads.
func PayloadBytes(payloads [][]byte) int64 {
	var n int64
	for _, b := range payloads {
		n += int64(len(b))
	}
	return n
}

// AppendPublish appends a whole publish frame (header included). An acked
// publish (ack != AckNone) carries its request id.
func AppendPublish(b []byte, p *Publish) []byte {
	flags := FlagPublishBatch
	n := 2 + len(p.Scope.Tenant) + 2 + len(p.Scope.Namespace) + 2 + len(p.Scope.Stream) + 4
	for _, pl := range p.Payloads {
		n += 4 + len(pl)
	}
	if p.Ack != AckNone {
		flags |= FlagPublishAcked
		n += 9
	}
	if p.Conditional {
		flags |= FlagPublishIf
		n += 8
	}
	if p.Idempotent {
		flags |= FlagPublishIdempotent
		n += 16
	}
	if p.Key != nil {
		flags |= FlagPublishKeyed
		n += 2 + len(p.Key)
	}
	b = slices.Grow(b, HeaderLen+n)
	b = AppendHeader(b, flags, n)
	if p.Ack != AckNone {
		b = binary.BigEndian.AppendUint64(b, p.RequestID)
		b = append(b, byte(p.Ack))
	}
	if p.Conditional {
		b = binary.BigEndian.AppendUint64(b, p.Expected)
	}
	if p.Idempotent {
		b = binary.BigEndian.AppendUint64(b, p.ProducerID)
		b = binary.BigEndian.AppendUint64(b, p.Sequence)
	}
	if p.Key != nil {
		b = appendBytes16(b, p.Key)
	}
	b = appendBytes16(b, []byte(p.Scope.Tenant))
	b = appendBytes16(b, []byte(p.Scope.Namespace))
	b = appendBytes16(b, []byte(p.Scope.Stream))
	b = binary.BigEndian.AppendUint32(b, uint32(len(p.Payloads)))
	for _, pl := range p.Payloads {
		b = binary.BigEndian.AppendUint32(b, uint32(len(pl)))
		b = append(b, pl...)
	}
	return b
}

// DecodePublish decodes a publish payload whose header carried flags. It
// checks layout only; scope names are checked by Scope.Validate.
func DecodePublish(flags uint16, payload []byte) (Publish, error) {
	var p Publish
	if flags&FlagPublishBatch == 0 || flags&(FlagEventBatch|FlagPublishAck) != 0 {
		return p, fmt.Errorf("%w: flags %#04x are not a publish", ErrMalformed, flags)
	}
	d := decoder{b: payload}
	if flags&FlagPublishAcked != 0 {
		p.RequestID = d.u64()
		p.Ack = AckMode(d.u8())
		if d.err == nil && p.Ack != AckPerMessage && p.Ack != AckPerBatch {
			return p, fmt.Errorf("%w: ack mode %d", ErrMalformed, p.Ack)
		}
	}
	if flags&FlagPublishIf != 0 {
		if flags&FlagPublishAcked == 0 {
			return p, fmt.Errorf("%w: a conditional publish must be acked", ErrMalformed)
		}
		p.Conditional, p.Expected = true, d.u64()
	}
	if flags&FlagPublishIdempotent != 0 {
		if flags&FlagPublishAcked == 0 {
			return p, fmt.Errorf("%w: an idempotent publish must be acked", ErrMalformed)
		}
		if flags&FlagPublishIf != 0 {
			return p, fmt.Errorf("%w: a publish cannot be both conditional and idempotent", ErrMalformed)
		}
		p.Idempotent, p.ProducerID, p.Sequence = true, d.u64(), d.u64()
	}
	if flags&FlagPublishKeyed != 0 {
		p.Key = d.bytes16()
	}
	p.Scope.Tenant = string(d.bytes16())
	p.Scope.Namespace = string(d.bytes16())
	p.Scope.Stream = string(d.bytes16())
	count := d.u32()
	// Each payload costs at least its 4-byte length, so a count larger than
	// that could ever fit is a lie; refuse it before allocating for it.
	if d.err == nil && uint64(count)*4 > uint64(len(d.b)) {
		return p, fmt.Errorf("%w: %d payloads cannot fit in %d bytes", ErrMalformed, count, len(d.b))
	}
	if d.err == nil {
		p.Payloads = make([][]byte, 0, count)
		for i := uint32(0); i < count && d.err == nil; i++ {
			p.Payloads = append(p.Payloads, d.bytes32())
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%w: %d trailing bytes after publish", ErrMalformed, len(d.b))
	}
	if d.err == nil && count == 0 {
		d.err = fmt.Errorf("%w: empty publish batch", ErrMalformed)
	}
	return p, d.err
}

// Ack is a decoded binary publish ack. Count is how many messages of the
// request it answers (1 under AckPerMessage, the batch size under AckPerBatch).
type Ack struct {
	RequestID uint64
	Count     uint32
	// Err is nil on success. On a failed ack its Owner, when set, travels
	// too (FlagPublishAckOwner).
	Err *Error
	// Offset is the offset of the first record answered, on a durable
	// stream; HasOffset says it is present (FlagPublishAckOffset).
	Offset    uint64
	HasOffset bool
}

// AppendAck appends a whole ack frame (header included).
func AppendAck(b []byte, a *Ack) []byte {
	var msg string
	var code Code
	var retry RetryClass
	var owner *Owner
	status := byte(0)
	if a.Err != nil {
		status, code, retry, msg, owner = 1, a.Err.Code, a.Err.Retry, clip16(a.Err.Message), a.Err.Owner
	}
	flags, n := FlagPublishAck, 1+8+4+2+1+2+len(msg)
	withOffset := a.HasOffset && a.Err == nil
	if withOffset {
		flags |= FlagPublishAckOffset
		n += 8
	}
	var nodeID, addr string
	if owner != nil {
		nodeID, addr = clip16(owner.NodeID), clip16(owner.Addr)
		flags |= FlagPublishAckOwner
		n += 2 + len(nodeID) + 2 + len(addr) + 8
	}
	b = AppendHeader(b, flags, n)
	b = append(b, status)
	b = binary.BigEndian.AppendUint64(b, a.RequestID)
	b = binary.BigEndian.AppendUint32(b, a.Count)
	b = binary.BigEndian.AppendUint16(b, uint16(code))
	b = append(b, byte(retry))
	b = appendBytes16(b, []byte(msg))
	if withOffset {
		b = binary.BigEndian.AppendUint64(b, a.Offset)
	}
	if owner != nil {
		b = appendBytes16(b, []byte(nodeID))
		b = appendBytes16(b, []byte(addr))
		b = binary.BigEndian.AppendUint64(b, owner.Generation)
	}
	return b
}

// clip16 cuts s to what a u16 length can carry, so an oversized field
// costs its tail rather than a frame whose lengths lie.
func clip16(s string) string {
	if len(s) > 0xffff {
		return s[:0xffff]
	}
	return s
}

// DecodeAck decodes an ack payload whose header carried flags.
func DecodeAck(flags uint16, payload []byte) (Ack, error) {
	var a Ack
	if flags&FlagPublishAck == 0 || flags&^(FlagPublishAck|FlagPublishAckOffset|FlagPublishAckOwner) != 0 {
		return a, fmt.Errorf("%w: flags %#04x are not an ack", ErrMalformed, flags)
	}
	d := decoder{b: payload}
	status := d.u8()
	a.RequestID = d.u64()
	a.Count = d.u32()
	code := Code(d.u16())
	retry := RetryClass(d.u8())
	msg := d.bytes16()
	if flags&FlagPublishAckOffset != 0 {
		a.Offset, a.HasOffset = d.u64(), true
	}
	var owner *Owner
	if flags&FlagPublishAckOwner != 0 {
		owner = &Owner{NodeID: string(d.bytes16()), Addr: string(d.bytes16()), Generation: d.u64()}
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%w: %d trailing bytes after ack", ErrMalformed, len(d.b))
	}
	if d.err == nil && status > 1 {
		d.err = fmt.Errorf("%w: ack status %d", ErrMalformed, status)
	}
	if d.err == nil && status == 1 && a.HasOffset {
		d.err = fmt.Errorf("%w: an error ack carries no offset", ErrMalformed)
	}
	if d.err == nil && status == 0 && owner != nil {
		d.err = fmt.Errorf("%w: a successful ack carries no owner", ErrMalformed)
	}
	if d.err != nil {
		return a, d.err
	}
	if status == 1 {
		a.Err = &Error{Code: code, Retry: retry, Message: string(msg), Owner: owner}
	}
	return a, nil
}

// EventBatchLen is the encoded size of a shared event batch frame; with
// offsets it is 8 bytes more.
func EventBatchLen(payloads [][]byte) int {
	n := HeaderLen + 4
	for _, p := range payloads {
		n += 4 + len(p)
	}
	return n
}

// AppendEventBatch appends a shared event batch frame (header included):
// u32 count, then u32 length and bytes per event. It names no subscription,
// so one encoding serves every subscriber of the batch.
func AppendEventBatch(b []byte, payloads [][]byte) []byte {
	b = slices.Grow(b, EventBatchLen(payloads))
	b = AppendHeader(b, FlagEventBatch, EventBatchLen(payloads)-HeaderLen)
	return appendEvents(b, payloads)
}

// AppendEventBatchOffsets appends the same frame with a u64 base offset
// before the count (FlagEventBatchOffsets): event i is at base+i.
func AppendEventBatchOffsets(b []byte, base uint64, payloads [][]byte) []byte {
	n := EventBatchLen(payloads) + 8
	b = slices.Grow(b, n)
	b = AppendHeader(b, FlagEventBatch|FlagEventBatchOffsets, n-HeaderLen)
	b = binary.BigEndian.AppendUint64(b, base)
	return appendEvents(b, payloads)
}

func appendEvents(b []byte, payloads [][]byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(payloads)))
	for _, p := range payloads {
		b = binary.BigEndian.AppendUint32(b, uint32(len(p)))
		b = append(b, p...)
	}
	return b
}

// DecodeEventBatch decodes an event batch payload; the events alias payload.
func DecodeEventBatch(payload []byte) ([][]byte, error) {
	_, events, err := DecodeEventBatchFlags(FlagEventBatch, payload)
	return events, err
}

// DecodeEventBatchFlags decodes an event batch whose header carried flags,
// returning its base offset when FlagEventBatchOffsets is set.
func DecodeEventBatchFlags(flags uint16, payload []byte) (base uint64, events [][]byte, err error) {
	return DecodeEventBatchInto(nil, flags, payload)
}

// DecodeEventBatchInto is DecodeEventBatchFlags decoding into dst[:0] when it
// has room for the batch, so a reader that is done with one batch's slice
// decodes the next into it without allocating (the client's
// subscription read path).
func DecodeEventBatchInto(dst [][]byte, flags uint16, payload []byte) (base uint64, events [][]byte, err error) {
	if flags&FlagEventBatch == 0 || flags&^(FlagEventBatch|FlagEventBatchOffsets) != 0 {
		return 0, nil, fmt.Errorf("%w: flags %#04x are not an event batch", ErrMalformed, flags)
	}
	d := decoder{b: payload}
	if flags&FlagEventBatchOffsets != 0 {
		base = d.u64()
	}
	count := d.u32()
	if d.err == nil && uint64(count)*4 > uint64(len(d.b)) {
		return 0, nil, fmt.Errorf("%w: %d events cannot fit in %d bytes", ErrMalformed, count, len(d.b))
	}
	if d.err != nil {
		return 0, nil, d.err
	}
	if uint64(cap(dst)) >= uint64(count) {
		events = dst[:0]
	} else {
		events = make([][]byte, 0, count)
	}
	for i := uint32(0); i < count && d.err == nil; i++ {
		events = append(events, d.bytes32())
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%w: %d trailing bytes after event batch", ErrMalformed, len(d.b))
	}
	return base, events, d.err
}

func appendBytes16(b, v []byte) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(v)))
	return append(b, v...)
}

// decoder reads big-endian fields and remembers the first error, so a layout
// reads as a list of fields instead of a ladder of checks.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) need(n int) bool {
	if d.err != nil {
		return false
	}
	if len(d.b) < n {
		d.err = fmt.Errorf("%w: need %d bytes, have %d", ErrMalformed, n, len(d.b))
		return false
	}
	return true
}

func (d *decoder) u8() uint8 {
	if !d.need(1) {
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) u16() uint16 {
	if !d.need(2) {
		return 0
	}
	v := binary.BigEndian.Uint16(d.b)
	d.b = d.b[2:]
	return v
}

func (d *decoder) u32() uint32 {
	if !d.need(4) {
		return 0
	}
	v := binary.BigEndian.Uint32(d.b)
	d.b = d.b[4:]
	return v
}

func (d *decoder) u64() uint64 {
	if !d.need(8) {
		return 0
	}
	v := binary.BigEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func (d *decoder) bytes16() []byte {
	n := int(d.u16())
	if !d.need(n) {
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes32() []byte {
	n := d.u32()
	if d.err == nil && uint64(n) > uint64(len(d.b)) {
		d.err = fmt.Errorf("%w: need %d bytes, have %d", ErrMalformed, n, len(d.b))
	}
	if d.err != nil {
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}
