package client

import (
	"errors"
	"fmt"
	"io"

	"github.com/getfelix/felix-go/wire"
)

// eventReader reads an event stream's frames into one buffer it reuses, for
// a subscription read with NextBatch: a frame's payload is valid until the
// next call. A read cut partway through a frame (a read deadline, when the
// caller's context ends) keeps what arrived, and the next call goes on
// from there: wire.FrameReader, built on io.ReadFull, would lose the
// frame's first bytes and its place in the stream.
type eventReader struct {
	r      io.Reader
	maxLen int

	header  [wire.HeaderLen]byte
	nHeader int         // header bytes read of the frame in progress
	inFrame bool        // the header is whole and parsed into h
	h       wire.Header // the frame in progress
	buf     []byte      // its payload so far; between frames, the last one
}

// retainFrameBytes is the largest payload buffer an eventReader keeps for
// the next frame: a rare huge batch is not held on to.
const retainFrameBytes = 1 << 20

// frameGrowStep is a payload buffer's first size: it doubles as bytes
// arrive, so a frame costs at most twice what was sent of it, never what
// its header announced (as wire.FrameReader does).
const frameGrowStep = 64 << 10

func newEventReader(r io.Reader, maxLen int) *eventReader {
	return &eventReader{r: r, maxLen: maxLen}
}

// next returns the next whole frame. Its payload aliases a buffer the next
// call reuses. io.EOF means the stream ended cleanly between frames; an
// error from the stream with a frame in progress leaves it in progress,
// so a call after a deadline continues it.
func (er *eventReader) next() (wire.Header, []byte, error) {
	if !er.inFrame && er.nHeader == 0 && cap(er.buf) > retainFrameBytes {
		er.buf = nil // the last frame was a rare huge one: let it go
	}
	for er.nHeader < wire.HeaderLen {
		n, err := er.r.Read(er.header[er.nHeader:])
		er.nHeader += n
		if er.nHeader == wire.HeaderLen {
			break
		}
		if err != nil {
			if errors.Is(err, io.EOF) && er.nHeader > 0 {
				return wire.Header{}, nil, fmt.Errorf("%w: stream ended inside a frame header", wire.ErrMalformed)
			}
			return wire.Header{}, nil, err
		}
	}
	if !er.inFrame {
		h, err := wire.ParseHeader(er.header[:], er.maxLen)
		if err != nil {
			return wire.Header{}, nil, err
		}
		er.h, er.inFrame, er.buf = h, true, er.buf[:0]
	}
	n := int(er.h.Length)
	for len(er.buf) < n {
		if len(er.buf) == cap(er.buf) {
			grown := make([]byte, len(er.buf), min(n, max(frameGrowStep, 2*cap(er.buf))))
			copy(grown, er.buf)
			er.buf = grown
		}
		// Never past the frame: the next frame's header is not ours yet.
		m, err := er.r.Read(er.buf[len(er.buf):min(n, cap(er.buf))])
		er.buf = er.buf[:len(er.buf)+m]
		if err != nil && len(er.buf) < n {
			if errors.Is(err, io.EOF) {
				return wire.Header{}, nil, fmt.Errorf("%w: stream ended inside a %d-byte frame", wire.ErrMalformed, n)
			}
			return wire.Header{}, nil, err
		}
	}
	er.nHeader, er.inFrame = 0, false
	return er.h, er.buf[:n], nil
}
