package webfront

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/coder/websocket"
)

// link is what a browser connection runs over: a WebSocket, or a
// WebTransport session (its control stream, and a stream per
// subscription). conn holds the protocol; a link only moves frames.
type link interface {
	// read returns the next control frame the browser sent, of at most
	// limit bytes; a larger one closes the link (WebSocket status 1009,
	// or the WebTransport session with code 1009) and returns an error.
	read(ctx context.Context, limit int) ([]byte, error)
	// write sends one control frame.
	write(ctx context.Context, frame []byte) error
	// refuse closes the link with a policy violation (1008) and reason, a
	// sentence a page can show.
	refuse(reason string) error
	// closeNow drops the link.
	closeNow()
	// events is where subscription sub's events frames go.
	events(sub uint64) eventStream
}

// eventStream carries one subscription's events frames. Its writes come
// from one goroutine at a time (the subscription's writer); abort may
// come from another.
type eventStream interface {
	write(ctx context.Context, frame []byte) error
	// finish ends the stream cleanly after the last write.
	finish(ctx context.Context)
	// abort ends it at once with a wire.StreamCode*.
	abort(code uint64)
}

// Close codes, WebSocket's (RFC 6455) and used as WebTransport session
// error codes too, so a page reads one set of codes on either.
const (
	closePolicyViolation = uint32(websocket.StatusPolicyViolation) // 1008
	closeMessageTooBig   = uint32(websocket.StatusMessageTooBig)   // 1009
)

// errTextMessage is read's error for a WebSocket text message, which is
// answered, not fatal.
var errTextMessage = errors.New("webfront: frames are binary WebSocket messages")

// wsLink is a WebSocket: every frame is one binary message, events frames
// included, all on the connection's one byte stream. raw is the hijacked
// connection under it.
type wsLink struct {
	ws  *websocket.Conn
	raw net.Conn
}

// tooBigCloseWait bounds the close handshake after a frame over the
// limit: reading the frame's rest and the page's close frame.
const tooBigCloseWait = 2 * time.Second

func (l wsLink) read(ctx context.Context, limit int) ([]byte, error) {
	l.ws.SetReadLimit(int64(limit))
	typ, msg, err := l.ws.Read(ctx)
	if err == nil && typ != websocket.MessageBinary {
		err = errTextMessage
	}
	if errors.Is(err, websocket.ErrMessageTooBig) {
		// The 1009 close frame is written. Closed at once, the socket
		// would be reset with the rest of the frame unread, and a page
		// often sees only 1006 and never the reason: Close reads the
		// frame's rest and waits for the page's close, within the
		// deadline whatever the page announced or sends.
		if l.raw != nil {
			_ = l.raw.SetReadDeadline(time.Now().Add(tooBigCloseWait))
		}
		_ = l.ws.Close(websocket.StatusMessageTooBig, "")
	}
	return msg, err
}

func (l wsLink) write(ctx context.Context, frame []byte) error {
	return l.ws.Write(ctx, websocket.MessageBinary, frame)
}

func (l wsLink) refuse(reason string) error {
	return l.ws.Close(websocket.StatusPolicyViolation, closeReason(reason))
}

func (l wsLink) closeNow() { _ = l.ws.CloseNow() }

func (l wsLink) events(uint64) eventStream { return l }

func (l wsLink) finish(context.Context) {}

func (l wsLink) abort(uint64) {}
