package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

// rawHeader builds a header with arbitrary magic and version, which
// AppendHeader cannot.
func rawHeader(magic uint32, version, flags uint16, length uint32) []byte {
	b := binary.BigEndian.AppendUint32(nil, magic)
	b = binary.BigEndian.AppendUint16(b, version)
	b = binary.BigEndian.AppendUint16(b, flags)
	return binary.BigEndian.AppendUint32(b, length)
}

func TestAppendHeaderLayout(t *testing.T) {
	got := AppendHeader([]byte("x"), FlagPublishBatch|FlagPublishAcked, 0x01020304)
	want := []byte{'x', 'F', 'L', 'X', '1', 0, 1, 0, 0x09, 1, 2, 3, 4}
	if !bytes.Equal(got, want) {
		t.Fatalf("AppendHeader = % x, want % x", got, want)
	}
}

func TestParseHeader(t *testing.T) {
	const maxLen = 1 << 16
	tests := []struct {
		name    string
		give    []byte
		maxLen  int
		want    Header
		wantErr error
	}{
		{name: "control", give: AppendHeader(nil, 0, 5), maxLen: maxLen, want: Header{Length: 5}},
		{name: "empty payload", give: AppendHeader(nil, FlagEventBatch, 0), maxLen: maxLen, want: Header{Flags: FlagEventBatch}},
		{name: "all known flags", give: AppendHeader(nil, knownFlags, 1), maxLen: maxLen, want: Header{Flags: knownFlags, Length: 1}},
		{name: "exactly the cap", give: AppendHeader(nil, 0, maxLen), maxLen: maxLen, want: Header{Length: maxLen}},
		{name: "zero cap, empty frame", give: AppendHeader(nil, 0, 0), maxLen: 0, want: Header{}},
		{name: "trailing bytes ignored", give: append(AppendHeader(nil, 0, 1), 0xff), maxLen: maxLen, want: Header{Length: 1}},

		{name: "nil", give: nil, maxLen: maxLen, wantErr: ErrMalformed},
		{name: "11 bytes", give: AppendHeader(nil, 0, 0)[:11], maxLen: maxLen, wantErr: ErrMalformed},
		{name: "bad magic", give: rawHeader(0x464C5832, Version, 0, 0), maxLen: maxLen, wantErr: ErrBadMagic},
		{name: "http", give: []byte("GET / HTTP/1.1\r\n"), maxLen: maxLen, wantErr: ErrBadMagic},
		{name: "zero magic", give: make([]byte, HeaderLen), maxLen: maxLen, wantErr: ErrBadMagic},
		{name: "version 0", give: rawHeader(Magic, 0, 0, 0), maxLen: maxLen, wantErr: ErrBadVersion},
		{name: "version 2", give: rawHeader(Magic, 2, 0, 0), maxLen: maxLen, wantErr: ErrBadVersion},
		{name: "version max", give: rawHeader(Magic, 0xffff, 0, 0), maxLen: maxLen, wantErr: ErrBadVersion},
		{name: "flag 0x0002", give: AppendHeader(nil, 0x0002, 0), maxLen: maxLen, wantErr: ErrUnknownFlags},
		{name: "flag 0x0400", give: AppendHeader(nil, 0x0400, 0), maxLen: maxLen, wantErr: ErrUnknownFlags},
		{name: "flag 0x8000", give: AppendHeader(nil, 0x8000, 0), maxLen: maxLen, wantErr: ErrUnknownFlags},
		{name: "known plus unknown", give: AppendHeader(nil, FlagPublishBatch|0x0400, 0), maxLen: maxLen, wantErr: ErrUnknownFlags},
		{name: "all flags", give: AppendHeader(nil, 0xffff, 0), maxLen: maxLen, wantErr: ErrUnknownFlags},
		{name: "one over the cap", give: AppendHeader(nil, 0, maxLen+1), maxLen: maxLen, wantErr: ErrFrameTooLarge},
		{name: "4 GiB", give: rawHeader(Magic, Version, 0, 0xffffffff), maxLen: maxLen, wantErr: ErrFrameTooLarge},
		{name: "zero cap", give: AppendHeader(nil, 0, 1), maxLen: 0, wantErr: ErrFrameTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseHeader(tt.give, tt.maxLen)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("ParseHeader error = %v, want %v", err, tt.wantErr)
				}
				if got != (Header{}) {
					t.Errorf("ParseHeader returned %+v with its error, want the zero Header", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseHeader: %v", err)
			}
			if got != tt.want {
				t.Fatalf("ParseHeader = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// Magic, version and flags are checked in that order, so a peer that does not
// speak Felix at all is told so, not that its flags are odd.
func TestParseHeaderCheckOrder(t *testing.T) {
	tests := []struct {
		name string
		give []byte
		want error
	}{
		{name: "magic before version", give: rawHeader(0, 9, 0xffff, 0xffffffff), want: ErrBadMagic},
		{name: "version before flags", give: rawHeader(Magic, 9, 0xffff, 0xffffffff), want: ErrBadVersion},
		{name: "flags before length", give: rawHeader(Magic, Version, 0xffff, 0xffffffff), want: ErrUnknownFlags},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ParseHeader(tt.give, 16); !errors.Is(err, tt.want) {
				t.Fatalf("ParseHeader error = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestFrameReaderStream(t *testing.T) {
	pub := AppendPublish(nil, &Publish{Scope: Scope{"t", "n", "s"}, Payloads: [][]byte{[]byte("p")}})
	ack := AppendAck(nil, &Ack{RequestID: 7, Count: 1})
	events := AppendEventBatch(nil, [][]byte{[]byte("e1"), []byte("e2")})
	msg, err := AppendMessage(nil, &OK{RequestID: 9})
	if err != nil {
		t.Fatal(err)
	}
	empty := AppendHeader(nil, FlagEventBatch, 0)
	stream := bytes.Join([][]byte{pub, ack, events, msg, empty}, nil)

	readers := []struct {
		name string
		r    func() io.Reader
	}{
		{name: "whole", r: func() io.Reader { return bytes.NewReader(stream) }},
		{name: "one byte at a time", r: func() io.Reader { return iotest.OneByteReader(bytes.NewReader(stream)) }},
		{name: "half reads", r: func() io.Reader { return iotest.HalfReader(bytes.NewReader(stream)) }},
		{name: "data with EOF", r: func() io.Reader { return iotest.DataErrReader(bytes.NewReader(stream)) }},
	}
	for _, rr := range readers {
		t.Run(rr.name, func(t *testing.T) {
			fr := NewFrameReader(rr.r(), 1<<16)
			for i, want := range [][]byte{pub, ack, events, msg, empty} {
				h, payload, err := fr.Next()
				if err != nil {
					t.Fatalf("frame %d: %v", i, err)
				}
				wantH, wantPayload := splitFrame(t, want)
				if h != wantH || !bytes.Equal(payload, wantPayload) {
					t.Fatalf("frame %d = %+v % x, want %+v % x", i, h, payload, wantH, wantPayload)
				}
			}
			for i := 0; i < 2; i++ {
				if _, _, err := fr.Next(); err != io.EOF {
					t.Fatalf("Next at end of stream = %v, want io.EOF", err)
				}
			}
		})
	}
}

// The payload must be a fresh allocation: publish payloads are shared
// uncopied with subscribers, so a reused buffer would corrupt them.
func TestFrameReaderPayloadNotReused(t *testing.T) {
	stream := append(AppendEventBatch(nil, [][]byte{[]byte("aaaa")}), AppendEventBatch(nil, [][]byte{[]byte("bbbb")})...)
	fr := NewFrameReader(bytes.NewReader(stream), 1<<16)
	_, first, err := fr.Next()
	if err != nil {
		t.Fatal(err)
	}
	keep := append([]byte(nil), first...)
	if _, _, err := fr.Next(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first, keep) {
		t.Fatalf("first payload changed after reading the second frame: % x, was % x", first, keep)
	}
}

func TestFrameReaderEmpty(t *testing.T) {
	fr := NewFrameReader(bytes.NewReader(nil), 1<<16)
	if _, _, err := fr.Next(); err != io.EOF {
		t.Fatalf("Next on an empty stream = %v, want io.EOF", err)
	}
}

func TestFrameReaderTruncated(t *testing.T) {
	frame := AppendEventBatch(nil, [][]byte{[]byte("hello"), []byte("world")})
	for n := 1; n < len(frame); n++ {
		fr := NewFrameReader(bytes.NewReader(frame[:n]), 1<<16)
		_, _, err := fr.Next()
		if !errors.Is(err, ErrMalformed) {
			t.Fatalf("stream cut at %d of %d bytes: error = %v, want ErrMalformed", n, len(frame), err)
		}
		// A truncated frame must never look like a clean close.
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("stream cut at %d of %d bytes: error %v matches an io EOF error", n, len(frame), err)
		}
	}
}

// A truncation after a complete frame is reported on the next frame only.
func TestFrameReaderTruncatedSecondFrame(t *testing.T) {
	frame := AppendEventBatch(nil, [][]byte{[]byte("x")})
	stream := append(append([]byte(nil), frame...), frame[:HeaderLen+2]...)
	fr := NewFrameReader(bytes.NewReader(stream), 1<<16)
	if _, _, err := fr.Next(); err != nil {
		t.Fatalf("first frame: %v", err)
	}
	if _, _, err := fr.Next(); !errors.Is(err, ErrMalformed) {
		t.Fatalf("second frame: error = %v, want ErrMalformed", err)
	}
}

func TestFrameReaderRejectsHeader(t *testing.T) {
	tests := []struct {
		name    string
		give    []byte
		wantErr error
	}{
		{name: "bad magic", give: rawHeader(0xdeadbeef, Version, 0, 0), wantErr: ErrBadMagic},
		{name: "bad version", give: rawHeader(Magic, 2, 0, 0), wantErr: ErrBadVersion},
		{name: "unknown flags", give: AppendHeader(nil, 0x0400, 0), wantErr: ErrUnknownFlags},
		{name: "over the cap", give: AppendHeader(nil, 0, 1<<16+1), wantErr: ErrFrameTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The header is followed by plenty of bytes: the reader must
			// stop at the header, not try to read a payload.
			fr := NewFrameReader(bytes.NewReader(append(tt.give, make([]byte, 64)...)), 1<<16)
			if _, _, err := fr.Next(); !errors.Is(err, tt.wantErr) {
				t.Fatalf("Next error = %v, want %v", err, tt.wantErr)
			}
		})
	}
}

// A 12-byte header claiming 4 GiB must be refused before the payload buffer
// is allocated: the cap check happens in ParseHeader, ahead of make.
func TestFrameReaderHugeHeaderDoesNotAllocate(t *testing.T) {
	header := rawHeader(Magic, Version, FlagPublishBatch, 0xffffffff)
	var err error
	allocated := bytesAllocated(20, func() {
		_, _, err = NewFrameReader(bytes.NewReader(header), 64<<10).Next()
	})
	if !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("Next error = %v, want ErrFrameTooLarge", err)
	}
	if allocated > 4<<10 {
		t.Fatalf("refusing a 4 GiB header allocated %d bytes per call", allocated)
	}
}

func TestFrameReaderRaiseMaxLen(t *testing.T) {
	big := AppendEventBatch(nil, [][]byte{make([]byte, 1000)})
	stream := append(append([]byte(nil), big...), big...)
	fr := NewFrameReader(bytes.NewReader(stream), 2000)
	if _, _, err := fr.Next(); err != nil {
		t.Fatalf("frame under the cap: %v", err)
	}
	fr.MaxLen = 100
	if _, _, err := fr.Next(); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("frame over a lowered cap: error = %v, want ErrFrameTooLarge", err)
	}

	fr = NewFrameReader(bytes.NewReader(big), 100)
	fr.MaxLen = 1 << 20
	if _, _, err := fr.Next(); err != nil {
		t.Fatalf("frame under a raised cap: %v", err)
	}
}

// Errors other than end of stream reach the caller as they are.
func TestFrameReaderPassesReadErrors(t *testing.T) {
	boom := errors.New("boom")
	frame := AppendEventBatch(nil, [][]byte{[]byte("payload")})
	tests := []struct {
		name string
		give io.Reader
	}{
		{name: "before the header", give: iotest.ErrReader(boom)},
		{name: "inside the header", give: io.MultiReader(bytes.NewReader(frame[:5]), iotest.ErrReader(boom))},
		{name: "inside the payload", give: io.MultiReader(bytes.NewReader(frame[:HeaderLen+3]), iotest.ErrReader(boom))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := NewFrameReader(tt.give, 1<<16).Next()
			if !errors.Is(err, boom) {
				t.Fatalf("Next error = %v, want %v", err, boom)
			}
		})
	}
}

// TestFrameReaderGrowsAsBytesArrive: a body read a byte at a time, across
// several growths of its buffer, arrives whole and exact; a body cut short
// is malformed.
func TestFrameReaderGrowsAsBytesArrive(t *testing.T) {
	body := make([]byte, 3*growStep+17)
	for i := range body {
		body[i] = byte(i * 7)
	}
	frame := append(AppendHeader(nil, 0, len(body)), body...)
	fr := NewFrameReader(iotest.OneByteReader(bytes.NewReader(frame)), len(body))
	_, got, err := fr.Next()
	if err != nil || !bytes.Equal(got, body) || cap(got) != len(body) {
		t.Fatalf("Next: %d bytes (cap %d), err %v; want the %d-byte body exactly", len(got), cap(got), err, len(body))
	}
	fr = NewFrameReader(bytes.NewReader(frame[:HeaderLen+10]), len(body))
	if _, _, err := fr.Next(); !errors.Is(err, ErrMalformed) {
		t.Fatalf("a body cut short: err = %v, want ErrMalformed", err)
	}
}
