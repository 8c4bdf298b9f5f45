package peerlink

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The link's stream carries frames:
//
//	length u32   bytes after this field
//	kind   u8    frameHello or frameMessage
//	hello:   node id (the rest of the frame)
//	message: group length u16, group, data (the rest)
//
// The dialing member opens one stream per connection and writes a hello
// first; everything after it is messages.
const (
	frameHello   byte = 1
	frameMessage byte = 2

	// MaxFrameBytes bounds one frame: a damaged or hostile length must not
	// make the reader allocate more. Raft messages are bounded well below
	// it by raft.Config.MaxSizePerMsg.
	MaxFrameBytes = 16 << 20
	maxGroupLen   = 1 << 10
	maxNodeIDLen  = 256
)

// ErrMalformed is a frame that does not parse.
var ErrMalformed = errors.New("peerlink: malformed frame")

// Message is one message for one group.
type Message struct {
	Group string
	Data  []byte
}

// appendHello appends a hello frame naming the sender.
func appendHello(b []byte, nodeID string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(1+len(nodeID)))
	b = append(b, frameHello)
	return append(b, nodeID...)
}

// appendMessage appends a message frame.
func appendMessage(b []byte, m Message) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(1+2+len(m.Group)+len(m.Data)))
	b = append(b, frameMessage)
	b = binary.BigEndian.AppendUint16(b, uint16(len(m.Group)))
	b = append(b, m.Group...)
	return append(b, m.Data...)
}

// CheckMessage says whether m can be sent: the receiving member reads a
// frame with an empty or too long group, or longer than MaxFrameBytes, as
// malformed and drops the whole connection, losing what was queued behind
// it; Send refuses such a message instead.
func CheckMessage(m Message) error {
	if len(m.Group) == 0 || len(m.Group) > maxGroupLen {
		return fmt.Errorf("%w: group of %d bytes (1 to %d)", ErrMalformed, len(m.Group), maxGroupLen)
	}
	if n := frameSize(m) - 4; n > MaxFrameBytes {
		return fmt.Errorf("%w: message of %d bytes, more than %d", ErrMalformed, n, MaxFrameBytes)
	}
	return nil
}

// frameSize is a message's encoded size.
func frameSize(m Message) int { return 4 + 1 + 2 + len(m.Group) + len(m.Data) }

// readFrame reads one frame's kind and body. The body is freshly
// allocated: messages outlive the read.
func readFrame(r io.Reader, hdr []byte) (kind byte, body []byte, err error) {
	if _, err := io.ReadFull(r, hdr[:4]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:4])
	if n < 1 || n > MaxFrameBytes {
		return 0, nil, fmt.Errorf("%w: length %d", ErrMalformed, n)
	}
	body = make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, nil, err
	}
	return body[0], body[1:], nil
}

// decodeHello reads a hello's node id.
func decodeHello(kind byte, body []byte) (string, error) {
	if kind != frameHello {
		return "", fmt.Errorf("%w: first frame is kind %d, not a hello", ErrMalformed, kind)
	}
	if len(body) == 0 || len(body) > maxNodeIDLen {
		return "", fmt.Errorf("%w: node id of %d bytes", ErrMalformed, len(body))
	}
	return string(body), nil
}

// decodeMessage reads a message frame's body; Data aliases body.
func decodeMessage(kind byte, body []byte) (Message, error) {
	if kind != frameMessage {
		return Message{}, fmt.Errorf("%w: kind %d after the hello", ErrMalformed, kind)
	}
	if len(body) < 2 {
		return Message{}, fmt.Errorf("%w: message without a group length", ErrMalformed)
	}
	gl := int(binary.BigEndian.Uint16(body))
	if gl == 0 || gl > maxGroupLen || 2+gl > len(body) {
		return Message{}, fmt.Errorf("%w: group of %d bytes in a %d-byte message", ErrMalformed, gl, len(body))
	}
	return Message{Group: string(body[2 : 2+gl]), Data: body[2+gl:]}, nil
}
