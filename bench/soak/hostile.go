package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/getfelix/felix-go/internal/quicconf"
	"github.com/getfelix/felix-go/wire"
)

// The hostile clients replay broker/hostile_test.go's probes in a loop, each on its own
// raw QUIC connection speaking wire frames (as broker/hostile_test.go does
// through brokertest, which needs a testing.TB). Each cycle dials,
// attacks, waits for the broker's answer or holds what it pinned, and
// closes; every wait is bounded and ends when the run does. What the
// broker answered is tallied as outcomes: they are the broker's defences
// working, not errors. A cycle that could not even start (a failed dial or
// handshake) is counted apart.

// hostileAttack is one probe.
type hostileAttack struct {
	name string
	what string // one line for the report
	// cycle runs one round on a fresh handshaken connection and reports
	// outcomes.
	cycle func(ctx context.Context, h *hostile, rc *rawConn, out func(string))
}

// Timing of the attacks. The broker's own bounds are frame_read_timeout_ms
// and auth_timeout_ms, both 10 s by default; the waits are longer.
const (
	hostileAnswerWait = 25 * time.Second
	hostileHold       = 15 * time.Second
	hostileIdleHold   = 30 * time.Second
	hostilePause      = time.Second
)

var attacks = []hostileAttack{
	{"frame_headers", "32 streams each sending a frame header announcing max_frame_bytes, no body", attackHeaders},
	{"unread_answers", "4 streams × 300 stream_read requests for a 1 MiB durable stream, answers never read, held 15 s", attackUnreadAnswers},
	{"stalled_frames", "half a publish frame, and one trickling a byte every 500 ms", attackStalled},
	{"idle_streams", "opens bidirectional streams until QUIC refuses, one request each, then holds them idle 30 s", attackIdleStreams},
	{"pre_auth", "half an Auth frame, a unidirectional stream, 16 streams of 64 KiB, then waits", attackPreAuth},
}

// hostileReadStream is the durable stream the unread-answers attack reads:
// 16 records of 64 KiB, so one page answers 1 MiB.
const hostileReadStream = "soak-hostile-read"

// hostile runs the attacks and tallies what happened.
type hostile struct {
	addr  string
	tls   *tls.Config
	token string

	mu       sync.Mutex
	cycles   map[string]int
	outcomes map[string]map[string]int
	failed   map[string]map[string]int // cycles that could not start, by error
	conns    atomic.Int64              // hostile connections open now
}

func newHostile(addr, caFile, token string) (*hostile, error) {
	tlsConf, err := quicconf.ClientTLS(caFile, false)
	if err != nil {
		return nil, err
	}
	return &hostile{addr: addr, tls: tlsConf, token: token, cycles: map[string]int{},
		outcomes: map[string]map[string]int{}, failed: map[string]map[string]int{}}, nil
}

// run loops every attack concurrently until ctx ends.
func (h *hostile) run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, a := range attacks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				h.once(ctx, a)
				select {
				case <-ctx.Done():
				case <-time.After(hostilePause):
				}
			}
		}()
	}
	wg.Wait()
}

func (h *hostile) once(ctx context.Context, a hostileAttack) {
	rc, err := h.dial(ctx)
	if err != nil {
		if ctx.Err() == nil {
			h.fail(a.name, "dial", err)
		}
		return
	}
	defer rc.close()
	if a.name != "pre_auth" {
		if err := rc.handshake(ctx, h.token); err != nil {
			if ctx.Err() == nil {
				h.fail(a.name, "handshake", err)
			}
			return
		}
	}
	a.cycle(ctx, h, rc, func(o string) { h.outcome(a.name, o) })
	h.mu.Lock()
	h.cycles[a.name]++
	h.mu.Unlock()
}

func (h *hostile) outcome(attack, o string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.outcomes[attack] == nil {
		h.outcomes[attack] = map[string]int{}
	}
	h.outcomes[attack][o]++
}

func (h *hostile) fail(attack, step string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.failed[attack] == nil {
		h.failed[attack] = map[string]int{}
	}
	h.failed[attack][step+": "+err.Error()]++
}

// HostileReport is one attack's tally.
type HostileReport struct {
	Attack   string  `json:"attack"`
	What     string  `json:"what"`
	Cycles   int     `json:"cycles"`
	Outcomes []Count `json:"outcomes"`
	Failed   []Count `json:"failed_to_start,omitempty"`
}

func (h *hostile) report() []HostileReport {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []HostileReport
	for _, a := range attacks {
		out = append(out, HostileReport{Attack: a.name, What: a.what, Cycles: h.cycles[a.name],
			Outcomes: sortedCounts(h.outcomes[a.name]), Failed: sortedCounts(h.failed[a.name])})
	}
	return out
}

func sortedCounts(m map[string]int) []Count {
	var out []Count
	for k, n := range m {
		out = append(out, Count{What: k, Count: int64(n)})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return out[i].What < out[j].What
	})
	return out
}

// rawConn is a QUIC connection that speaks wire frames directly.
type rawConn struct {
	h        *hostile
	conn     *quic.Conn
	ctrl     *quic.Stream
	maxFrame int
	stop     func() bool // ends the AfterFunc that closes conn with the run
}

func (h *hostile) dial(ctx context.Context) (*rawConn, error) {
	dctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	conn, err := quic.DialAddr(dctx, h.addr, h.tls, quicconf.QUICConfig())
	if err != nil {
		return nil, err
	}
	h.conns.Add(1)
	// Closing the connection when the run ends unblocks every read, write
	// and open of the attack at once.
	stop := context.AfterFunc(ctx, func() { _ = conn.CloseWithError(0, "soak done") })
	return &rawConn{h: h, conn: conn, stop: stop}, nil
}

func (rc *rawConn) close() {
	rc.stop()
	_ = rc.conn.CloseWithError(0, "hostile cycle done")
	rc.h.conns.Add(-1)
}

// handshake opens the control stream and authenticates.
func (rc *rawConn) handshake(ctx context.Context, token string) error {
	st, err := rc.conn.OpenStreamSync(ctx)
	if err != nil {
		return err
	}
	rc.ctrl = st
	if err := send(st, &wire.Auth{Tenant: "default", Token: token, ClientFlags: wire.SupportedFlags,
		ClientFeatures: wire.SupportedFeatures, ClientName: "soak-hostile"}); err != nil {
		return err
	}
	msg, err := readMessage(st, wire.NewFrameReader(st, 1<<20), requestTimeout)
	if err != nil {
		return err
	}
	ok, isOK := msg.(*wire.AuthOK)
	if !isOK {
		return fmt.Errorf("handshake answered %T %+v", msg, msg)
	}
	rc.maxFrame = ok.MaxFrameBytes
	return nil
}

func send(st *quic.Stream, m wire.Message) error {
	b, err := wire.AppendMessage(nil, m)
	if err != nil {
		return err
	}
	_, err = st.Write(b)
	return err
}

// readMessage reads one control message within d.
func readMessage(st *quic.Stream, fr *wire.FrameReader, d time.Duration) (wire.Message, error) {
	_ = st.SetReadDeadline(time.Now().Add(d))
	h, payload, err := fr.Next()
	if err != nil {
		return nil, err
	}
	if h.Flags != 0 {
		return nil, fmt.Errorf("a frame with flags %#04x, want a control message", h.Flags)
	}
	return wire.DecodeMessageLimit(payload, 16<<20)
}

// answerOf waits for what the broker does about a stream the attack left
// hanging, and names it: an error answer (by code), a reset, the
// connection closing, or nothing within hostileAnswerWait.
func answerOf(ctx context.Context, st *quic.Stream, start time.Time) string {
	msg, err := readMessage(st, wire.NewFrameReader(st, 1<<20), hostileAnswerWait)
	after := fmt.Sprintf(" after %ds", int(time.Since(start).Round(time.Second)/time.Second))
	var se *quic.StreamError
	var ae *quic.ApplicationError
	var ne interface{ Timeout() bool }
	switch {
	case ctx.Err() != nil:
		return "run ended while waiting"
	case err == nil:
		if e, ok := msg.(*wire.ErrorMsg); ok {
			return "answered " + e.Code.String() + after
		}
		return fmt.Sprintf("answered %s%s", msg.Type(), after)
	case errors.As(err, &se):
		return fmt.Sprintf("stream reset by the broker (code %d)%s", se.ErrorCode, after)
	case errors.As(err, &ae):
		return fmt.Sprintf("connection closed by the broker (code %d)%s", ae.ErrorCode, after)
	case errors.As(err, &ne) && ne.Timeout():
		return fmt.Sprintf("no answer within %s", hostileAnswerWait)
	}
	return "read failed: " + err.Error()
}

// attackHeaders: frame headers announcing max_frame_bytes on 32 streams,
// no body. Before the fix each cost 16 MiB at once.
func attackHeaders(ctx context.Context, h *hostile, rc *rawConn, out func(string)) {
	const n = 32
	start := time.Now()
	var wg sync.WaitGroup
	for range n {
		st, err := rc.conn.OpenStreamSync(ctx)
		if err != nil {
			out("open stream: " + err.Error())
			break
		}
		if _, err := st.Write(wire.AppendHeader(nil, wire.FlagPublishBatch, rc.maxFrame)); err != nil {
			out("write header: " + err.Error())
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			out(answerOf(ctx, st, start))
		}()
	}
	wg.Wait()
}

// attackUnreadAnswers: 300 stream_read requests on each of 4 streams,
// answers never read, held hostileHold. Before the fix 4 × 300 took 10.6 GB.
func attackUnreadAnswers(ctx context.Context, h *hostile, rc *rawConn, out func(string)) {
	const streams, requests = 4, 300
	var reqs []byte
	for i := range requests {
		var err error
		reqs, err = wire.AppendMessage(reqs, &wire.StreamRead{RequestID: uint64(i + 1), Tenant: "default", Namespace: "default", Stream: hostileReadStream})
		if err != nil {
			out("encode: " + err.Error())
			return
		}
	}
	var wg sync.WaitGroup
	for range streams {
		st, err := rc.conn.OpenStreamSync(ctx)
		if err != nil {
			out("open stream: " + err.Error())
			break
		}
		_ = st.SetWriteDeadline(time.Now().Add(hostileHold))
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The write may block: the broker stops reading requests once
			// the answers it owes fill their bound.
			if _, err := st.Write(reqs); err != nil {
				var ne interface{ Timeout() bool }
				if errors.As(err, &ne) && ne.Timeout() {
					out(fmt.Sprintf("%d requests not all taken within %s (the broker stopped reading)", requests, hostileHold))
				} else if ctx.Err() == nil {
					out("write requests: " + err.Error())
				}
				return
			}
			out(fmt.Sprintf("%d requests taken, answers left unread", requests))
		}()
	}
	select {
	case <-ctx.Done():
	case <-time.After(hostileHold):
	}
	wg.Wait()
	if ctx.Err() == nil {
		out(servesControl(rc))
	}
}

// attackStalled: half a publish frame, then nothing; and a frame
// trickling a byte every 500 ms. Before the fix such streams were held
// for as long as the client liked.
func attackStalled(ctx context.Context, h *hostile, rc *rawConn, out func(string)) {
	frame := wire.AppendPublish(nil, &wire.Publish{RequestID: 1, Ack: wire.AckPerBatch,
		Scope: wire.Scope{Tenant: "default", Namespace: "default", Stream: "soak-hostile-stall"}, Payloads: [][]byte{bytes.Repeat([]byte("x"), 200)}})
	start := time.Now()
	half, err := rc.conn.OpenStreamSync(ctx)
	if err != nil {
		out("open stream: " + err.Error())
		return
	}
	if _, err := half.Write(frame[:len(frame)/2]); err != nil {
		out("write: " + err.Error())
		return
	}
	trickle, err := rc.conn.OpenStreamSync(ctx)
	if err != nil {
		out("open stream: " + err.Error())
		return
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for _, c := range frame {
			if _, err := trickle.Write([]byte{c}); err != nil {
				return
			}
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	var answers sync.WaitGroup
	answers.Add(2)
	go func() { defer answers.Done(); out("half frame: " + answerOf(ctx, half, start)) }()
	go func() { defer answers.Done(); out("trickle: " + answerOf(ctx, trickle, start)) }()
	answers.Wait()
	close(stop)
	wg.Wait()
	if ctx.Err() == nil {
		out(servesControl(rc))
	}
}

// attackIdleStreams: as many bidirectional streams as QUIC allows, each
// with one request answered, then held idle hostileIdleHold. Before the
// fix a client could hold 10 000 streams.
func attackIdleStreams(ctx context.Context, h *hostile, rc *rawConn, out func(string)) {
	var open []*quic.Stream
	var limited bool
	for ctx.Err() == nil {
		st, err := rc.conn.OpenStream()
		if err != nil {
			var lim *quic.StreamLimitReachedError
			limited = errors.As(err, &lim)
			if !limited {
				out("open stream: " + err.Error())
			}
			break
		}
		// QUIC tells the broker of a stream only once something is
		// written on it: one request, whose answer is read.
		if err := send(st, &wire.StreamGet{RequestID: 1, Tenant: "default", Namespace: "default", Stream: "soak-000"}); err != nil {
			out("write: " + err.Error())
			break
		}
		if _, err := readMessage(st, wire.NewFrameReader(st, 1<<20), requestTimeout); err != nil {
			out("request on stream " + fmt.Sprint(len(open)+2) + ": " + err.Error())
			break
		}
		open = append(open, st)
	}
	if ctx.Err() != nil {
		return
	}
	if limited {
		// +1: the control stream.
		out(fmt.Sprintf("QUIC refused stream %d (the stream limit); %d answered and held idle", len(open)+2, len(open)))
	}
	select {
	case <-ctx.Done():
		return
	case <-time.After(hostileIdleHold):
	}
	out(servesControl(rc))
}

// attackPreAuth: before its handshake the client sends half an Auth frame,
// tries a unidirectional stream and pushes 64 KiB on 16 more streams, then
// waits for the broker to close the connection (auth_timeout_ms).
func attackPreAuth(ctx context.Context, h *hostile, rc *rawConn, out func(string)) {
	auth, err := wire.AppendMessage(nil, &wire.Auth{Tenant: "default", Token: h.token, ClientFlags: wire.SupportedFlags,
		ClientFeatures: wire.SupportedFeatures, ClientName: "soak-hostile"})
	if err != nil {
		out("encode: " + err.Error())
		return
	}
	start := time.Now()
	ctrl, err := rc.conn.OpenStreamSync(ctx)
	if err != nil {
		out("open stream: " + err.Error())
		return
	}
	if _, err := ctrl.Write(auth[:5]); err != nil {
		out("write: " + err.Error())
		return
	}
	if us, err := rc.conn.OpenUniStream(); err == nil {
		us.CancelWrite(0)
		out("the broker let a client open a unidirectional stream")
	}
	chunk := bytes.Repeat([]byte{0xAB}, 64<<10)
	var wg sync.WaitGroup
	var reset atomic.Int64
	for range 16 {
		st, err := rc.conn.OpenStream()
		if err != nil {
			break
		}
		_ = st.SetWriteDeadline(time.Now().Add(3 * time.Second))
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := st.Write(chunk); err != nil {
				var se *quic.StreamError
				if errors.As(err, &se) {
					reset.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	out(fmt.Sprintf("%d of 16 extra streams reset before the handshake", reset.Load()))
	select {
	case <-rc.conn.Context().Done():
		cause := context.Cause(rc.conn.Context())
		var ae *quic.ApplicationError
		after := int(time.Since(start).Round(time.Second) / time.Second)
		switch {
		case ctx.Err() != nil:
		case errors.As(cause, &ae) && ae.Remote:
			out(fmt.Sprintf("connection closed by the broker after %ds (code %d: %s)", after, ae.ErrorCode, firstWords(ae.ErrorMessage, 8)))
		default:
			out(fmt.Sprintf("connection ended after %ds: %s", after, firstWords(cause.Error(), 8)))
		}
	case <-time.After(hostileAnswerWait):
		out(fmt.Sprintf("connection still open after %s without a handshake", hostileAnswerWait))
	}
}

// servesControl checks the attacked connection still answers a request on
// its control stream.
func servesControl(rc *rawConn) string {
	if rc.ctrl == nil {
		return "no control stream"
	}
	if err := send(rc.ctrl, &wire.StreamGet{RequestID: 99, Tenant: "default", Namespace: "default", Stream: "soak-000"}); err != nil {
		return "control stream after the attack: write: " + err.Error()
	}
	msg, err := readMessage(rc.ctrl, wire.NewFrameReader(rc.ctrl, 1<<20), requestTimeout)
	if err != nil {
		return "control stream after the attack: " + err.Error()
	}
	return "control stream still answered (" + string(msg.Type()) + ")"
}

func firstWords(s string, n int) string {
	f := strings.Fields(s)
	if len(f) > n {
		f = append(f[:n], "…")
	}
	return strings.Join(f, " ")
}
