package webfront_test

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/getfelix/felix-go/brokertest"
)

// TestOversizedFrameClosesWithinBound: a hostile client that announces a
// frame far over the bound, sends a little past the bound and then
// nothing, gets the 1009 close frame and then the end of the connection:
// the close handshake that reads the frame's rest is bounded, so the
// client cannot hold the connection by trickling the frame.
func TestOversizedFrameClosesWithinBound(t *testing.T) {
	cfg := brokertest.Config(t)
	cfg.BrowserListen = "127.0.0.1:0"
	b := brokertest.Start(t, cfg)
	nc, err := net.Dial("tcp", b.BrowserAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(30 * time.Second)) // the test's bound, far past the broker's
	req := "GET / HTTP/1.1\r\nHost: " + b.BrowserAddr().String() + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
	if _, err := io.WriteString(nc, req); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(nc)
	res, err := http.ReadResponse(br, nil)
	if err != nil || res.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v, %v", res, err)
	}
	// A masked binary frame announcing 1 GiB, then more than the
	// pre-auth bound of it, then silence.
	hdr := []byte{0x82, 0x80 | 127, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4}
	binary.BigEndian.PutUint64(hdr[2:10], 1<<30)
	if _, err := nc.Write(append(hdr, make([]byte, cfg.PreAuthMaxFrameBytes+1024)...)); err != nil {
		t.Fatal(err)
	}
	head := make([]byte, 4)
	if _, err := io.ReadFull(br, head); err != nil {
		t.Fatalf("no close frame: %v", err)
	}
	if head[0] != 0x88 || websocket.StatusCode(binary.BigEndian.Uint16(head[2:4])) != websocket.StatusMessageTooBig {
		t.Fatalf("first frame % x, want a 1009 close", head)
	}
	rest, err := io.ReadAll(br) // the close's reason, then the end
	if err != nil && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("the connection did not end after the close frame: %v (read %d bytes)", err, len(rest))
	}
}
