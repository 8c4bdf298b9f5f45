package client

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"testing"
	"time"

	"github.com/getfelix/felix-go/wire"
)

// repeatStream serves frame over and over, n times (n < 0: without end),
// then io.EOF; it never waits, so a benchmark over it counts the reading
// and decoding alone.
type repeatStream struct {
	frame []byte
	pos   int
	n     int
}

func (r *repeatStream) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, io.EOF
	}
	m := copy(p, r.frame[r.pos:])
	r.pos += m
	if r.pos == len(r.frame) {
		r.pos = 0
		if r.n > 0 {
			r.n--
		}
	}
	return m, nil
}

func (*repeatStream) SetReadDeadline(time.Time) error { return nil }

// benchFrame is an event batch of 64 × 128 B with offsets from 1000, as a
// durable stream's subscriber gets them.
func benchFrame() []byte {
	payloads := make([][]byte, 64)
	for i := range payloads {
		payloads[i] = bytes.Repeat([]byte{byte(i)}, 128)
	}
	return wire.AppendEventBatchOffsets(nil, 1000, payloads)
}

// newTestSubscription is a subscription of a client with no connection,
// for reading streams made in the test: its error paths other than io.EOF
// would look at the connection, so the streams end cleanly.
func newTestSubscription(batches deadlineStream) *Subscription {
	s := &Subscription{c: &Client{done: make(chan struct{})}, done: make(chan struct{})}
	if batches != nil {
		s.batches = newBatchReader(batches)
	} else {
		s.events = make(chan Event, 1024)
	}
	return s
}

// BenchmarkSubscriptionRead is the client's side of receiving an event
// batch (64 × 128 B), from the stream's bytes to the events in the
// caller's hands, without the network: "events" is the reader goroutine
// feeding Events, drained by the benchmark's goroutine (a hop per event,
// a frame buffer per batch); "batches" is NextBatch on the caller's
// goroutine. An op is one batch.
func BenchmarkSubscriptionRead(b *testing.B) {
	frame := benchFrame()
	b.Run("events", func(b *testing.B) {
		s := newTestSubscription(nil)
		s.c.wg.Add(1)
		b.ReportAllocs()
		b.ResetTimer()
		go s.read(&repeatStream{frame: frame, n: b.N})
		var n int
		for range s.Events() {
			n++
		}
		s.c.wg.Wait()
		if n != 64*b.N || !errors.Is(s.Err(), io.EOF) {
			b.Fatalf("got %d events and %v, want %d and io.EOF", n, s.Err(), 64*b.N)
		}
	})
	b.Run("batches", func(b *testing.B) {
		s := newTestSubscription(&repeatStream{frame: frame, n: -1})
		ctx := context.Background()
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			evs, err := s.NextBatch(ctx)
			if err != nil || len(evs) != 64 {
				b.Fatalf("NextBatch = %d events, %v; want 64", len(evs), err)
			}
		}
	})
}

// TestNextBatchAllocatesNothing: once its buffers exist, a batch read with
// NextBatch allocates nothing, with a context that is never done and with
// one that can be but is the same on every call.
func TestNextBatchAllocatesNothing(t *testing.T) {
	frame := benchFrame()
	cancellable, cancel := context.WithCancel(context.Background())
	defer cancel()
	for name, ctx := range map[string]context.Context{"background": context.Background(), "cancellable": cancellable} {
		s := newTestSubscription(&repeatStream{frame: frame, n: -1})
		if _, err := s.NextBatch(ctx); err != nil {
			t.Fatal(err)
		}
		allocs := testing.AllocsPerRun(200, func() {
			if evs, err := s.NextBatch(ctx); err != nil || len(evs) != 64 || evs[63].Offset != 1063 || !evs[63].HasOffset {
				t.Fatalf("NextBatch = %d events (last %+v), %v; want 64 ending at offset 1063", len(evs), evs[len(evs)-1], err)
			}
		})
		if allocs != 0 {
			t.Errorf("%s context: NextBatch allocated %.1f times per batch, want 0", name, allocs)
		}
	}
}

// cutStream serves data in the chunk sizes given, failing the read after
// each chunk whose index is in cuts with a deadline error, as a QUIC read
// cut by SetReadDeadline does.
type cutStream struct {
	data   []byte
	chunks []int
	cuts   map[int]bool
	i      int
}

func (c *cutStream) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := len(c.data)
	if c.i < len(c.chunks) {
		n = min(n, c.chunks[c.i])
	}
	n = copy(p, c.data[:n])
	c.data = c.data[n:]
	cut := c.cuts[c.i]
	c.i++
	if cut {
		return n, os.ErrDeadlineExceeded
	}
	return n, nil
}

// TestEventReaderResumesACutFrame: a read cut inside a frame's header or
// payload keeps what arrived, and the next call returns the whole frame,
// then the one after it, untouched.
func TestEventReaderResumesACutFrame(t *testing.T) {
	first := wire.AppendEventBatch(nil, [][]byte{[]byte("alpha"), []byte("beta")})
	second := wire.AppendEventBatch(nil, [][]byte{[]byte("gamma")})
	data := append(append([]byte{}, first...), second...)
	// Cut after 5 header bytes, and after the header's rest and 3 payload
	// bytes, then read the rest of the first frame and all of the second.
	cs := &cutStream{data: data, chunks: []int{5, wire.HeaderLen - 5, 3, len(data)}, cuts: map[int]bool{0: true, 2: true}}
	er := newEventReader(cs, 1<<20)
	for range 2 {
		if _, _, err := er.next(); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("a cut read: next = %v, want the deadline error", err)
		}
	}
	for i, want := range [][]string{{"alpha", "beta"}, {"gamma"}} {
		h, payload, err := er.next()
		if err != nil {
			t.Fatalf("frame %d after the cuts: %v", i, err)
		}
		_, evs, err := wire.DecodeEventBatchInto(nil, h.Flags, payload)
		if err != nil || len(evs) != len(want) {
			t.Fatalf("frame %d decodes to %q, %v; want %q", i, evs, err, want)
		}
		for j := range want {
			if string(evs[j]) != want[j] {
				t.Errorf("frame %d event %d = %q, want %q", i, j, evs[j], want[j])
			}
		}
	}
	if _, _, err := er.next(); !errors.Is(err, io.EOF) {
		t.Errorf("after the last frame: %v, want io.EOF", err)
	}
}

// FuzzEventReader feeds arbitrary bytes, in arbitrary read sizes, to an
// eventReader. Invariants: it never panics, never returns a payload
// longer than its cap or than the input, and ends with an error once the
// input is used up.
func FuzzEventReader(f *testing.F) {
	f.Add(benchFrame(), uint8(7))
	f.Add(wire.AppendEventBatch(nil, [][]byte{[]byte("x")}), uint8(1))
	f.Add(append(wire.AppendHeader(nil, wire.FlagEventBatch, 1<<30), 1, 2, 3), uint8(200))
	f.Add([]byte{0, 1, 2}, uint8(0))
	f.Fuzz(func(t *testing.T, data []byte, step uint8) {
		const maxLen = 64 << 10
		chunks := make([]int, len(data)+1)
		for i := range chunks {
			chunks[i] = int(step)%17 + 1
		}
		er := newEventReader(&cutStream{data: data, chunks: chunks}, maxLen)
		for range len(data) + 2 {
			_, payload, err := er.next()
			if err != nil {
				return
			}
			if len(payload) > maxLen || len(payload) > len(data) {
				t.Fatalf("a %d-byte payload from %d bytes of input, cap %d", len(payload), len(data), maxLen)
			}
		}
		t.Fatalf("no error after %d frames from %d bytes", len(data)+2, len(data))
	})
}
