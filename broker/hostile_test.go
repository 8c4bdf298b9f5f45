package broker_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/wire"
)

// Hostile clients (what an unauthenticated or hostile client
// can pin): each test plays one probe against an in-process broker and
// checks what it can pin (the broker's heap, measured in this process, so
// the bounds are generous) and that the connection, or the broker, still
// serves afterwards. Every wait is bounded.

// heapAlloc is the live heap after a full collection.
func heapAlloc() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// peakGrowth samples the heap for d and returns the largest growth over
// base; it stops early once the growth passes limit (the test has failed).
func peakGrowth(base int64, d time.Duration, limit int64) int64 {
	var peak int64
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		peak = max(peak, heapAlloc()-base)
		if peak > limit {
			break
		}
	}
	return peak
}

// expectSubscribed proves ctrl still serves a request.
func expectSubscribed(t *testing.T, ctx context.Context, ctrl *brokertest.RawStream, id uint64, when string) {
	t.Helper()
	if err := ctrl.Send(&wire.Subscribe{RequestID: id, Tenant: "default", Namespace: "default", Stream: "hostile"}); err != nil {
		t.Fatalf("subscribe %s: %v", when, err)
	}
	msg, err := ctrl.ReadMessage(ctx)
	if s, ok := msg.(*wire.Subscribed); err != nil || !ok || s.RequestID != id {
		t.Fatalf("subscribe %s answered %T %+v (err %v), want Subscribed{request %d}", when, msg, msg, err, id)
	}
}

// TestHostileFrameHeaders: headers announcing max_frame_bytes
// on many streams, with no body, must not make the broker allocate the
// announced bytes. Before the fix each header cost 16 MiB at once.
func TestHostileFrameHeaders(t *testing.T) {
	cfg := brokertest.Config(t)
	b := brokertest.Start(t, cfg)
	ctx := testCtx(t, 20*time.Second)
	rc := brokertest.DialRaw(t, b, cfg)
	ctrl, _ := rc.MustHandshake(t, ctx)

	const n = 32
	base := heapAlloc()
	for i := range n {
		st, err := rc.OpenStream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Write(rawHeader(wire.FlagPublishBatch, uint32(cfg.MaxFrameBytes))); err != nil {
			t.Fatalf("header %d: %v", i, err)
		}
	}
	announced := int64(n) * int64(cfg.MaxFrameBytes)
	limit := announced / 8
	if peak := peakGrowth(base, 2*time.Second, limit); peak > limit {
		t.Fatalf("%d headers announcing %d bytes each (%d MiB, nothing of the bodies sent) grew the heap by %d MiB, want under %d MiB",
			n, cfg.MaxFrameBytes, announced>>20, peak>>20, limit>>20)
	} else {
		t.Logf("%d headers announcing %d MiB in all: heap grew at most %.1f MiB", n, announced>>20, float64(peak)/(1<<20))
	}
	expectSubscribed(t, ctx, ctrl, 1, "after the headers")
}

// TestHostilePreAuth: before its handshake a client may not
// open unidirectional streams at all, and data it sends on bidirectional
// streams other than the control stream is not kept.
func TestHostilePreAuth(t *testing.T) {
	cfg := brokertest.Config(t)
	cfg.AuthTimeout = 8 * time.Second
	b := brokertest.Start(t, cfg)
	ctx := testCtx(t, 20*time.Second)
	rc := brokertest.DialRaw(t, b, cfg)

	// The control stream: an Auth frame cut short, so the broker waits in
	// its handshake.
	authFrame, err := wire.AppendMessage(nil, &wire.Auth{Tenant: "default", Token: brokertest.Token(t, cfg, "default"),
		ClientFlags: wire.SupportedFlags, ClientFeatures: wire.SupportedFeatures, ClientName: "hostile"})
	if err != nil {
		t.Fatal(err)
	}
	ctrl, err := rc.OpenStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ctrl.Write(authFrame[:5]); err != nil {
		t.Fatal(err)
	}
	awaitPreAuthReset(t, ctx, rc)

	if us, err := rc.Conn.OpenUniStream(); err == nil {
		us.CancelWrite(0)
		t.Errorf("the client opened a unidirectional stream; the broker should allow none")
	}

	// Then 96 more bidirectional streams, each trying to send 1 MiB.
	const streams, each = 96, 1 << 20
	base := heapAlloc()
	chunk := bytes.Repeat([]byte{0xAB}, 64<<10)
	var wg sync.WaitGroup
	for range streams {
		st, err := rc.Conn.OpenStream()
		if err != nil {
			t.Fatalf("open stream: %v", err)
		}
		_ = st.SetWriteDeadline(time.Now().Add(3 * time.Second))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for sent := 0; sent < each; sent += len(chunk) {
				if _, err := st.Write(chunk); err != nil {
					return // reset by the broker, or the deadline
				}
			}
		}()
	}
	const limit = 8 << 20
	peak := peakGrowth(base, 2*time.Second, limit)
	wg.Wait()
	if peak > limit {
		t.Fatalf("before its handshake, a client sending %d MiB on %d extra streams grew the heap by %d MiB, want under %d MiB",
			streams*each>>20, streams, peak>>20, limit>>20)
	}
	t.Logf("pre-auth: %d MiB offered on %d extra streams; heap grew at most %.1f MiB", streams*each>>20, streams, float64(peak)/(1<<20))

	// The handshake still completes.
	if err := ctrl.Write(authFrame[5:]); err != nil {
		t.Fatal(err)
	}
	if msg, err := ctrl.ReadMessage(ctx); err != nil {
		t.Fatalf("handshake after the extra streams: %v", err)
	} else if _, ok := msg.(*wire.AuthOK); !ok {
		t.Fatalf("handshake after the extra streams answered %T %+v, want AuthOK", msg, msg)
	}
	expectSubscribed(t, ctx, ctrl, 1, "after the handshake")
}

// awaitPreAuthReset waits until the broker took the connection's first
// stream as its control stream and refuses every other: it opens a probe
// stream and waits for the broker's pre-auth reset of it, so the streams
// a test opens next meet the refusal it measures whatever the machine's
// timing.
func awaitPreAuthReset(t *testing.T, ctx context.Context, rc *brokertest.RawConn) {
	t.Helper()
	probe, err := rc.Conn.OpenStream()
	if err != nil {
		t.Fatalf("open the probe stream: %v", err)
	}
	if _, err := probe.Write([]byte{0}); err != nil {
		t.Fatalf("write the probe stream: %v", err)
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	stop := context.AfterFunc(rctx, func() { _ = probe.SetReadDeadline(time.Now()) })
	defer stop()
	_, err = io.ReadAll(probe)
	var se *quic.StreamError
	if !errors.As(err, &se) || se.ErrorCode != quic.StreamErrorCode(wire.StreamCodePreAuth) {
		t.Fatalf("a stream opened before the handshake: read ended with %v within 5 s, want the broker's pre-auth reset (code %d)", err, wire.StreamCodePreAuth)
	}
}

// TestHostileUnreadAnswers: stream_read requests whose answers
// the client never reads must not make the broker hold every answer.
// Before the fix 300 requests on one stream held up to 256 pages (and a
// concatenated copy of them).
func TestHostileUnreadAnswers(t *testing.T) {
	cfg := brokertest.Config(t)
	b := brokertest.Start(t, cfg)
	ctx := testCtx(t, 30*time.Second)
	c := brokertest.Dial(t, b, cfg)
	st := client.Stream{Name: "hostile-read"}
	if _, err := c.CreateStream(ctx, st, client.StreamConfig{Shards: 1, Durable: true}); err != nil {
		t.Fatalf("create durable stream: %v", err)
	}
	const recordBytes, records = 64 << 10, 16 // 1 MiB: one page answers it all
	payloads := make([][]byte, records)
	for i := range payloads {
		payloads[i] = bytes.Repeat([]byte{byte(i)}, recordBytes)
	}
	if err := c.PublishBatch(ctx, st, payloads, client.PublishOptions{}); err != nil {
		t.Fatalf("publish: %v", err)
	}

	rc := brokertest.DialRaw(t, b, cfg)
	ctrl, _ := rc.MustHandshake(t, ctx)
	rs, err := rc.OpenStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const requests = 300
	base := heapAlloc()
	var reqs []byte
	for i := range requests {
		reqs, err = wire.AppendMessage(reqs, &wire.StreamRead{RequestID: uint64(i + 1), Tenant: "default", Namespace: "default", Stream: st.Name})
		if err != nil {
			t.Fatal(err)
		}
	}
	go func() { _ = rs.Write(reqs) }() // may block: the broker stops reading
	const limit = 64 << 20
	peak := peakGrowth(base, 4*time.Second, limit)
	if peak > limit {
		t.Fatalf("%d unread stream_read answers of %d MiB each grew the heap by %d MiB, want under %d MiB",
			requests, recordBytes*records>>20, peak>>20, limit>>20)
	}
	t.Logf("%d unread 1 MiB answers: heap grew at most %.1f MiB", requests, float64(peak)/(1<<20))
	expectSubscribed(t, ctx, ctrl, 1, "while another stream owes unread answers")
	rs.St.CancelRead(quic.StreamErrorCode(7))
	rs.St.CancelWrite(quic.StreamErrorCode(7))
}

// TestHostileStalledFrame: a frame that starts and does not
// finish within frame_read_timeout_ms gets its stream reset, whether it
// stalls or trickles, and the connection keeps serving.
func TestHostileStalledFrame(t *testing.T) {
	cfg := brokertest.Config(t)
	cfg.FrameReadTimeout = 300 * time.Millisecond
	b := brokertest.Start(t, cfg)
	ctx := testCtx(t, 20*time.Second)
	rc := brokertest.DialRaw(t, b, cfg)
	ctrl, _ := rc.MustHandshake(t, ctx)
	frame := wire.AppendPublish(nil, &wire.Publish{RequestID: 1, Ack: wire.AckPerBatch,
		Scope: wire.Scope{Tenant: "default", Namespace: "default", Stream: "hostile"}, Payloads: [][]byte{bytes.Repeat([]byte("x"), 200)}})

	// expectReset waits (5 s at most) for the broker's invalid_request and
	// the end of the stream.
	expectReset := func(st *brokertest.RawStream, what string) {
		t.Helper()
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		msg, err := st.ReadMessage(rctx)
		e, ok := msg.(*wire.ErrorMsg)
		if err != nil || !ok || e.Code != wire.CodeInvalidRequest {
			t.Fatalf("%s: got %T %+v (err %v) within 5 s, want an invalid_request error and a reset", what, msg, msg, err)
		}
		t.Logf("%s: %s", what, e.Message)
	}

	stalled, err := rc.OpenStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stalled.Write(frame[:len(frame)/2]); err != nil {
		t.Fatal(err)
	}
	expectReset(stalled, "half a frame, then nothing")

	trickle, err := rc.OpenStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for _, c := range frame {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if trickle.Write([]byte{c}) != nil {
				return
			}
		}
	}()
	expectReset(trickle, "a frame trickling a byte every 50 ms")
	close(stop)
	wg.Wait()

	expectSubscribed(t, ctx, ctrl, 1, "after the resets")
	// The trickling stream's writes now fail: the broker stopped reading it.
	werr := errors.New("no error")
	for range 50 {
		if werr = trickle.Write([]byte{0}); werr != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	var se *quic.StreamError
	if !errors.As(werr, &se) {
		t.Fatalf("writing to the reset stream: %v, want a quic.StreamError (STOP_SENDING)", werr)
	}
}

// TestHostilePreAuthMalformed: before the handshake, input
// the broker cannot decode is invalid_request, like a bad magic; a
// well-formed frame that is not an Auth is unauthenticated.
func TestHostilePreAuthMalformed(t *testing.T) {
	cfg := badInputConfig(t)
	b := brokertest.Start(t, cfg)
	ctx := testCtx(t, 10*time.Second)
	for _, tc := range []struct {
		name    string
		payload []byte
		want    wire.Code
	}{
		{"not msgpack", []byte{0xc1, 0xc1, 0xc1}, wire.CodeInvalidRequest},
		{"truncated array", []byte{0x92, 0xa4}, wire.CodeInvalidRequest},
		{"auth body of the wrong type", mustMarshal(t, []any{"auth", 42}), wire.CodeInvalidRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := brokertest.DialRaw(t, b, cfg)
			ctrl, err := rc.OpenStream(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := ctrl.Write(append(rawHeader(0, uint32(len(tc.payload))), tc.payload...)); err != nil {
				t.Fatal(err)
			}
			expectRefused(t, ctx, rc, ctrl, tc.want)
		})
	}
	t.Run("subscribe first", func(t *testing.T) {
		rc := brokertest.DialRaw(t, b, cfg)
		ctrl, err := rc.OpenStream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := ctrl.Send(&wire.Subscribe{RequestID: 1, Tenant: "default", Namespace: "default", Stream: "x"}); err != nil {
			t.Fatal(err)
		}
		expectRefused(t, ctx, rc, ctrl, wire.CodeUnauthenticated)
	})
}
