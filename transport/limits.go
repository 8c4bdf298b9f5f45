package transport

import (
	"context"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
)

// What one client connection may make the broker hold. Each
// bound stops the broker reading a stream when it is full, so QUIC flow
// control pushes back on the client; none of them drops anything.
const (
	// frameBytesInFlight bounds the bytes of frames being read on one
	// connection: announced by their headers and not yet complete. A
	// stream whose frame would go past it waits before reading the body.
	// It is raised to max_frame_bytes when that is larger, so one frame of
	// the cap always fits. Four 16 MiB frames at once are more than any
	// client of ours sends (it has at most PublishShardStreams+1 publish
	// streams, and frames are usually far below the cap).
	frameBytesInFlight = 64 << 20
	// smallFrameBytes: a frame up to this size does not take from
	// frameBytesInFlight, so control requests and small publishes never
	// wait behind large frames (a stalled one holds its share until
	// frame_read_timeout_ms). Small frames are bounded by the stream
	// count instead: 256 streams × 64 KiB = 16 MiB a connection.
	smallFrameBytes = 64 << 10
	// answerStreamMaxBytes and answerConnMaxBytes bound the bytes of
	// answers owed on one stream and on one connection: made, not yet
	// written because the client does not read them. Before a request is
	// read its answer's size is reserved (a stream_read page:
	// readAnswerReserve; anything else: controlAnswerReserve) and the
	// stream waits while that would go past either bound (an empty stream
	// always gets one answer in). Publish acks are bounded by
	// publish_window instead. Kafka does the same: it stops reading a
	// connection's requests while a response is owed.
	answerStreamMaxBytes = 8 << 20
	answerConnMaxBytes   = 32 << 20
	// readAnswerReserve is what a stream_read answer may take: the
	// broker's page cap (readfront's maxReadBytes, 4 MiB) plus the
	// records' framing. An answer larger than its reservation is charged in
	// full when it is made.
	readAnswerReserve    = 4<<20 + 64<<10
	controlAnswerReserve = 16 << 10
	// flushBytes is how much of small ready answers the responder
	// gathers into one write; a larger answer is written on its own,
	// uncopied.
	flushBytes = 64 << 10
)

// byteGate is a byte bound several goroutines take from and give back to.
// acquire waits while the bound would be passed, except when nothing is
// held: one item larger than the bound still gets through, alone.
type byteGate struct {
	max int64
	mu  struct {
		sync.Mutex
		n    int64
		wake chan struct{} // closed and cleared when bytes are given back
	}
}

func newByteGate(max int64) *byteGate { return &byteGate{max: max} }

// acquire takes n bytes, waiting until they fit or ctx ends.
func (g *byteGate) acquire(ctx context.Context, n int64) error {
	for {
		g.mu.Lock()
		if g.mu.n == 0 || g.mu.n+n <= g.max {
			g.mu.n += n
			g.mu.Unlock()
			return nil
		}
		if g.mu.wake == nil {
			g.mu.wake = make(chan struct{})
		}
		wake := g.mu.wake
		g.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// add changes what is held by n without waiting: a charge past the bound
// for an answer larger than its reservation, or (n < 0) a give-back.
func (g *byteGate) add(n int64) {
	g.mu.Lock()
	g.mu.n += n
	if n < 0 && g.mu.wake != nil {
		close(g.mu.wake)
		g.mu.wake = nil
	}
	g.mu.Unlock()
}

func (g *byteGate) release(n int64) { g.add(-n) }

// held is what is taken now, for tests and metrics.
func (g *byteGate) held() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.mu.n
}

// streamReader is what a client stream's FrameReader reads through. It
// gives a frame FrameReadTimeout to complete from its first byte (a
// stream idle between frames has no deadline: the stream count bounds
// those), and takes the frame's length from the connection's
// frameBytesInFlight budget before the body is read.
type streamReader struct {
	st      *quic.Stream
	ctx     context.Context
	timeout time.Duration
	frames  *byteGate
	armed   bool
}

func (sr *streamReader) Read(p []byte) (int, error) {
	n, err := sr.st.Read(p)
	if n > 0 && !sr.armed && sr.timeout > 0 {
		sr.armed = true
		_ = sr.st.SetReadDeadline(time.Now().Add(sr.timeout))
	}
	return n, err
}

// Acquire implements wire.FrameBudget. Waiting for the budget is not the
// frame's own slowness, so the deadline starts again once it is granted.
func (sr *streamReader) Acquire(n int) error {
	if n <= smallFrameBytes {
		return nil
	}
	if err := sr.frames.acquire(sr.ctx, int64(n)); err != nil {
		return err
	}
	if sr.armed {
		_ = sr.st.SetReadDeadline(time.Now().Add(sr.timeout))
	}
	return nil
}

// Release implements wire.FrameBudget.
func (sr *streamReader) Release(n int) {
	if n > smallFrameBytes {
		sr.frames.release(int64(n))
	}
}

// frameDone clears the deadline between frames.
func (sr *streamReader) frameDone() {
	if sr.armed {
		sr.armed = false
		_ = sr.st.SetReadDeadline(time.Time{})
	}
}
