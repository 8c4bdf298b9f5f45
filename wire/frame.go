// Package wire owns Felix's wire format: the fixed frame header, the binary
// publish, ack and event-batch layouts of the data path, the msgpack control
// messages, the feature flags, and the table of error codes. It does no I/O
// beyond reading and writing frames on an io.Reader or a byte slice, and it
// never panics on input: every decoder returns a typed error instead.
//
// Non-obvious behaviour of msgpack/v5:
//
//   - msgpack/v5 decodes recursively, preallocates from claimed lengths and
//     truncates integers: `CheckMsgpack` walks control payloads first and
//     integer fields are range-checked. It reads `as_array` only from `_msgpack`.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Magic opens every frame: "FLX1".
const Magic uint32 = 0x464C5831

// Version is the frame header version. It is frozen: capabilities are
// negotiated with flags and features instead of bumping it.
const Version uint16 = 1

// HeaderLen is the size of the fixed frame header.
const HeaderLen = 12

// ALPN is the TLS application protocol Felix brokers and clients speak.
const ALPN = "felix/1"

// QUIC stream error codes. StreamCodeSubscriptionEnded resets a
// subscription's event stream that the broker ended itself (its feeder,
// lane, writer or shard stopped), so the client can tell it from a clean
// Unsubscribe (FIN) and from a lost connection. StreamCodeUnauthenticated
// resets the subscriptions of a connection whose token expired.
// StreamCodePreAuth resets a stream a client opened before its handshake
// ended: until AuthOK only the control stream is read.
const (
	StreamCodeProtocol          uint64 = 1
	StreamCodePreAuth           uint64 = 2
	StreamCodeSubscriptionEnded uint64 = 0x10
	StreamCodeUnauthenticated   uint64 = 0x11
)

// Frame flags say how a frame's payload is laid out. A frame with no flag
// carries one msgpack control message.
const (
	// FlagPublishBatch is a binary publish batch; alone it is fire-and-forget.
	FlagPublishBatch uint16 = 0x0001
	// FlagEventBatch is the shared encode-once event batch (no subscription id).
	FlagEventBatch uint16 = 0x0004
	// FlagPublishAcked modifies FlagPublishBatch: a u64 request id and a u8 ack mode come first.
	FlagPublishAcked uint16 = 0x0008
	// FlagPublishAck is the broker's binary answer to an acked publish.
	FlagPublishAck uint16 = 0x0010
	// FlagPublishKeyed modifies FlagPublishBatch: a u16-prefixed routing key follows the acked prefix.
	FlagPublishKeyed uint16 = 0x0040
	// FlagEventBatchOffsets: a u64 base offset comes before the event count;
	// event i is at base+i. Sent only to clients that offered it, and only
	// for durable streams (an in-memory stream's events carry no offsets).
	FlagEventBatchOffsets uint16 = 0x0020
	// FlagPublishAckOffset: a successful ack ends with the u64 offset of the
	// request's first record.
	FlagPublishAckOffset uint16 = 0x1000
	// FlagPublishIf modifies an acked FlagPublishBatch (publish_if, with
	// FeaturePublishConditional): a u64 expected offset follows the acked
	// prefix, and the batch is written only if it would start there.
	FlagPublishIf uint16 = 0x0200
	// FlagPublishIdempotent modifies an acked FlagPublishBatch (an idempotent
	// producer's publish, with FeatureIdempotentProducer): a u64 producer id
	// and a u64 sequence follow the acked prefix. It does not combine with
	// FlagPublishIf (malformed).
	FlagPublishIdempotent uint16 = 0x0100
	// FlagPublishAckOwner: a failed ack ends with the shard's owner (u16
	// node id length, node id, u16 address length, address, u64
	// generation), so a client can go there. Sent only to clients that
	// negotiated FeatureRedirect; never on a successful ack.
	FlagPublishAckOwner uint16 = 0x0080

	// knownFlags is every bit this version understands. Unknown bits are
	// rejected, never masked, so a newer peer's layout is not misread.
	knownFlags = FlagPublishBatch | FlagEventBatch | FlagPublishAcked | FlagPublishAck | FlagPublishKeyed |
		FlagEventBatchOffsets | FlagPublishAckOffset | FlagPublishIf | FlagPublishIdempotent | FlagPublishAckOwner
)

// Header is a decoded frame header.
type Header struct {
	Flags  uint16
	Length uint32
}

// Errors returned by the frame codec. Decoders wrap them with detail; match
// with errors.Is.
var (
	// ErrBadMagic means the peer does not speak Felix's framing.
	ErrBadMagic = errors.New("wire: bad frame magic")
	// ErrBadVersion means an unsupported frame header version.
	ErrBadVersion = errors.New("wire: unsupported frame version")
	// ErrUnknownFlags means the frame sets flag bits this version does not know.
	ErrUnknownFlags = errors.New("wire: unknown frame flags")
	// ErrFrameTooLarge means the frame's length is over the connection's cap.
	ErrFrameTooLarge = errors.New("wire: frame too large")
	// ErrMalformed means a payload does not match its layout.
	ErrMalformed = errors.New("wire: malformed payload")
)

// AppendHeader appends a frame header for a payload of length bytes.
func AppendHeader(b []byte, flags uint16, length int) []byte {
	b = binary.BigEndian.AppendUint32(b, Magic)
	b = binary.BigEndian.AppendUint16(b, Version)
	b = binary.BigEndian.AppendUint16(b, flags)
	return binary.BigEndian.AppendUint32(b, uint32(length))
}

// ParseHeader decodes and checks a header against maxLen.
func ParseHeader(b []byte, maxLen int) (Header, error) {
	if len(b) < HeaderLen {
		return Header{}, fmt.Errorf("%w: header is %d bytes, want %d", ErrMalformed, len(b), HeaderLen)
	}
	if m := binary.BigEndian.Uint32(b); m != Magic {
		return Header{}, fmt.Errorf("%w: %#08x", ErrBadMagic, m)
	}
	if v := binary.BigEndian.Uint16(b[4:]); v != Version {
		return Header{}, fmt.Errorf("%w: %d", ErrBadVersion, v)
	}
	h := Header{Flags: binary.BigEndian.Uint16(b[6:]), Length: binary.BigEndian.Uint32(b[8:])}
	if unknown := h.Flags &^ knownFlags; unknown != 0 {
		return Header{}, fmt.Errorf("%w: %#04x", ErrUnknownFlags, unknown)
	}
	if maxLen < 0 || uint64(h.Length) > uint64(maxLen) {
		return Header{}, fmt.Errorf("%w: %d bytes, cap %d", ErrFrameTooLarge, h.Length, maxLen)
	}
	return h, nil
}

// FrameReader reads frames from one stream. It is not safe for concurrent use.
type FrameReader struct {
	r      io.Reader
	header [HeaderLen]byte
	// MaxLen caps a frame's payload; the caller raises it after the handshake.
	MaxLen int
	// Budget, when set, bounds the bytes of frames being read (announced by
	// their headers and not yet complete) over several readers: Next takes
	// a frame's length from it after the header and gives it back when the
	// frame is complete or has failed. Acquire may wait; its error ends Next.
	Budget FrameBudget
}

// FrameBudget is a byte bound shared by the FrameReaders of a connection.
type FrameBudget interface {
	Acquire(n int) error
	Release(n int)
}

// NewFrameReader reads frames from r with a payload cap of maxLen bytes.
func NewFrameReader(r io.Reader, maxLen int) *FrameReader {
	return &FrameReader{r: r, MaxLen: maxLen}
}

// growStep is the first allocation for a frame's payload. The buffer then
// doubles as bytes arrive, so a frame costs at most twice what was sent of
// it, never what its header announced (300 headers of 12 bytes
// each allocated 16 MiB at once and exhausted a 4 GB broker). Doubling
// rather than a fixed step keeps the copying linear in the frame's size.
const growStep = 64 << 10

// Next reads one frame. The payload is freshly allocated so the caller may
// keep slices of it (publish payloads are shared, uncopied, with every
// subscriber). io.EOF means the stream ended cleanly between frames.
func (fr *FrameReader) Next() (Header, []byte, error) {
	if _, err := io.ReadFull(fr.r, fr.header[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return Header{}, nil, fmt.Errorf("%w: stream ended inside a frame header", ErrMalformed)
		}
		return Header{}, nil, err
	}
	h, err := ParseHeader(fr.header[:], fr.MaxLen)
	if err != nil {
		return Header{}, nil, err
	}
	n := int(h.Length)
	if fr.Budget != nil && n > 0 {
		if err := fr.Budget.Acquire(n); err != nil {
			return Header{}, nil, err
		}
		defer fr.Budget.Release(n)
	}
	payload, err := fr.readPayload(n)
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return Header{}, nil, fmt.Errorf("%w: stream ended inside a %d-byte frame", ErrMalformed, h.Length)
		}
		return Header{}, nil, err
	}
	return h, payload, nil
}

// readPayload reads exactly n bytes into a buffer that grows as they arrive.
func (fr *FrameReader) readPayload(n int) ([]byte, error) {
	buf := make([]byte, 0, min(n, growStep))
	for len(buf) < n {
		if len(buf) == cap(buf) {
			grown := make([]byte, len(buf), min(n, 2*cap(buf)))
			copy(grown, buf)
			buf = grown
		}
		m, err := fr.r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+m]
		if err != nil && len(buf) < n {
			return nil, err
		}
	}
	return buf, nil
}
