package peerlink

import (
	"bytes"
	"testing"
)

// FuzzReadFrame: whatever a peer sends, reading it returns a frame or an
// error, never panics, and never allocates past MaxFrameBytes.
func FuzzReadFrame(f *testing.F) {
	f.Add(appendHello(nil, "node-1"))
	f.Add(appendMessage(appendHello(nil, "n"), Message{Group: "t/ns/s/0", Data: []byte("raft")}))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1})
	f.Add([]byte{0, 0, 0, 3, frameMessage, 0, 9})
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		hdr := make([]byte, 4)
		kind, body, err := readFrame(r, hdr)
		if err != nil {
			return
		}
		if _, err := decodeHello(kind, body); err != nil {
			_, _ = decodeMessage(kind, body)
		}
		for {
			kind, body, err := readFrame(r, hdr)
			if err != nil {
				return
			}
			m, err := decodeMessage(kind, body)
			if err == nil && (len(m.Group) == 0 || len(m.Group) > maxGroupLen) {
				t.Fatalf("decoded a group of %d bytes", len(m.Group))
			}
		}
	})
}

func TestMessageRoundTrip(t *testing.T) {
	m := Message{Group: "t/ns/s/3", Data: []byte{1, 2, 3}}
	b := appendMessage(nil, m)
	if len(b) != frameSize(m) {
		t.Fatalf("encoded %d bytes, frameSize says %d", len(b), frameSize(m))
	}
	kind, body, err := readFrame(bytes.NewReader(b), make([]byte, 4))
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeMessage(kind, body)
	if err != nil || got.Group != m.Group || !bytes.Equal(got.Data, m.Data) {
		t.Fatalf("round trip = %+v, %v", got, err)
	}
}
