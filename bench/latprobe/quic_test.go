//go:build felixprobe

package latprobe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/getfelix/felix-go/internal/quicconf"
)

// TestQUICCrossing times what two of TestBreakdown's hops are made of: a
// 132-byte write on a quic-go stream until the peer's Read returns it, on
// loopback with Felix's QUIC settings and TLS, in one process, one message
// at a time at 1000 msg/s; the peer writes it back, timed the same way.
// Each direction is one crossing: the reference for "client write →
// transport read" and "write done → client read".
func TestQUICCrossing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srvTLS, err := quicconf.ServerTLS("", "", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	srvTLS.NextProtos = []string{"latprobe"}
	ln, err := quic.ListenAddr("127.0.0.1:0", srvTLS, quicconf.QUICConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	arrived := make(chan time.Time, 1)
	served := make(chan error, 1)
	go func() { served <- echo(ctx, ln, arrived) }()
	cliTLS, err := quicconf.ClientTLS("", true)
	if err != nil {
		t.Fatal(err)
	}
	cliTLS.NextProtos = []string{"latprobe"}
	conn, err := quic.DialAddr(ctx, ln.Addr().String(), cliTLS, quicconf.QUICConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseWithError(0, "")
	st, err := conn.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	msg, back := make([]byte, 132), make([]byte, 132)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	var there, return_ []int64
	for i := range *warmup + *count {
		<-tick.C
		sent := time.Now()
		if _, err := st.Write(msg); err != nil {
			t.Fatal(err)
		}
		at := <-arrived
		if _, err := io.ReadFull(st, back); err != nil {
			t.Fatal(err)
		}
		if i >= *warmup {
			there = append(there, int64(at.Sub(sent)))
			return_ = append(return_, int64(time.Since(at)))
		}
	}
	st.CancelRead(0)
	_ = st.Close()
	_ = conn.CloseWithError(0, "")
	if err := <-served; err != nil && ctx.Err() == nil && !isClosed(err) {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d round trips, 132 B on one quic-go stream, 1000 msg/s, one in flight\n| crossing (Write to the peer's Read) | p50 µs | p90 µs |\n|---|---|---|\n", len(there))
	fmt.Fprintf(&b, "| client → server | %.1f | %.1f |\n| server → client (its write back) | %.1f | %.1f |\n", pct(there, 50), pct(there, 90), pct(return_, 50), pct(return_, 90))
	t.Log("\n" + b.String())
}

// echo accepts one connection and one stream and writes back every
// 132-byte message it reads, telling arrived when each came.
func echo(ctx context.Context, ln *quic.Listener, arrived chan<- time.Time) error {
	conn, err := ln.Accept(ctx)
	if err != nil {
		return err
	}
	st, err := conn.AcceptStream(ctx)
	if err != nil {
		return err
	}
	buf := make([]byte, 132)
	for {
		if _, err := io.ReadFull(st, buf); err != nil {
			return err
		}
		arrived <- time.Now()
		if _, err := st.Write(buf); err != nil {
			return err
		}
	}
}

// isClosed says err is the end of the test's connection, not a failure.
func isClosed(err error) bool {
	var app *quic.ApplicationError
	var se *quic.StreamError
	return errors.As(err, &app) || errors.As(err, &se) || errors.Is(err, io.EOF)
}
