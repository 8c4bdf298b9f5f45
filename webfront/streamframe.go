package webfront

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// A WebTransport stream is a byte stream, not a sequence of messages, so
// each frame on it (the same frames a WebSocket message carries) is
// preceded by its length: a big-endian u32.
const streamFrameHeaderLen = 4

// ErrFrameTooLarge is returned for a stream frame whose length prefix is
// over the limit; nothing of its body has been read.
var ErrFrameTooLarge = errors.New("webfront: frame too large")

// ReadStreamFrame reads one length-prefixed frame of at most limit bytes
// from r. The body's buffer grows as its bytes arrive (bytes.Buffer, at
// most twice what was sent), never to the announced length up front, so a
// header that claims limit bytes and sends none costs nothing. An empty
// frame is ErrMalformed; a stream that ends inside a frame is
// io.ErrUnexpectedEOF, and one that ends between frames io.EOF.
func ReadStreamFrame(r io.Reader, limit int) ([]byte, error) {
	var h [streamFrameHeaderLen]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(h[:])
	switch {
	case n == 0:
		return nil, fmt.Errorf("%w: an empty frame", ErrMalformed)
	case uint64(n) > uint64(limit):
		return nil, fmt.Errorf("%w: a frame of %d bytes is over the limit of %d", ErrFrameTooLarge, n, limit)
	}
	var buf bytes.Buffer
	got, err := buf.ReadFrom(io.LimitReader(r, int64(n)))
	if err != nil {
		return nil, err
	}
	if got < int64(n) {
		return nil, io.ErrUnexpectedEOF
	}
	return buf.Bytes(), nil
}

// AppendStreamFrame appends frame with its length prefix.
func AppendStreamFrame(b, frame []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(frame)))
	return append(b, frame...)
}
