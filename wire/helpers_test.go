package wire

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"testing"
)

// splitFrame parses the header of one whole frame and returns it with the
// payload, failing the test if the frame is not exactly header+payload.
func splitFrame(t testing.TB, frame []byte) (Header, []byte) {
	t.Helper()
	h, err := ParseHeader(frame, len(frame))
	if err != nil {
		t.Fatalf("ParseHeader: %v", err)
	}
	payload := frame[HeaderLen:]
	if int(h.Length) != len(payload) {
		t.Fatalf("header length %d, payload is %d bytes", h.Length, len(payload))
	}
	return h, payload
}

// readOneFrame reads frame through a FrameReader and checks that the stream
// then ends cleanly.
func readOneFrame(t testing.TB, frame []byte) (Header, []byte) {
	t.Helper()
	fr := NewFrameReader(bytes.NewReader(frame), len(frame))
	h, payload, err := fr.Next()
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	if _, _, err := fr.Next(); err != io.EOF {
		t.Fatalf("Next after the only frame: got %v, want io.EOF", err)
	}
	return h, payload
}

// assertPublishEqual compares publishes field by field, telling a nil key
// (unkeyed) from an empty one (keyed with "").
func assertPublishEqual(t testing.TB, got, want *Publish) {
	t.Helper()
	if got.RequestID != want.RequestID {
		t.Errorf("RequestID = %d, want %d", got.RequestID, want.RequestID)
	}
	if got.Ack != want.Ack {
		t.Errorf("Ack = %v, want %v", got.Ack, want.Ack)
	}
	if (got.Key == nil) != (want.Key == nil) || !bytes.Equal(got.Key, want.Key) {
		t.Errorf("Key = %q (nil %t), want %q (nil %t)", got.Key, got.Key == nil, want.Key, want.Key == nil)
	}
	if got.Scope != want.Scope {
		t.Errorf("Scope = %+v, want %+v", got.Scope, want.Scope)
	}
	if len(got.Payloads) != len(want.Payloads) {
		t.Fatalf("got %d payloads, want %d", len(got.Payloads), len(want.Payloads))
	}
	for i := range want.Payloads {
		if !bytes.Equal(got.Payloads[i], want.Payloads[i]) {
			t.Errorf("payload %d = %q, want %q", i, got.Payloads[i], want.Payloads[i])
		}
	}
}

// bytesAllocated reports the average heap bytes f allocates per call.
func bytesAllocated(runs int, f func()) uint64 {
	f() // warm up lazily initialised state (pools, type caches)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := 0; i < runs; i++ {
		f()
	}
	runtime.ReadMemStats(&after)
	return (after.TotalAlloc - before.TotalAlloc) / uint64(runs)
}

// frameErrs are the only errors a FrameReader over an in-memory stream may
// return, besides io.EOF.
var frameErrs = []error{ErrMalformed, ErrBadMagic, ErrBadVersion, ErrUnknownFlags, ErrFrameTooLarge}

func isFrameErr(err error) bool {
	for _, target := range frameErrs {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// seqPayloads returns n payloads of lengths 0, 1, 2, ... filled with a
// position-dependent pattern.
func seqPayloads(n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		p := make([]byte, i%97)
		for j := range p {
			p[j] = byte(i + j)
		}
		out[i] = p
	}
	return out
}

// sameError compares errors as they travel: code, retry class, message and
// the owner's value (nil only equals nil). Cause never travels.
func sameError(a, b *Error) bool {
	if a == nil || b == nil {
		return a == b
	}
	if (a.Owner == nil) != (b.Owner == nil) || a.Owner != nil && *a.Owner != *b.Owner {
		return false
	}
	return a.Code == b.Code && a.Retry == b.Retry && a.Message == b.Message
}
