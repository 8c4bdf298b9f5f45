package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/getfelix/felix-go/wire"
)

// Consumer groups: Client.Group consumes one shard of a
// durable stream through a named group, at least once. Poll claims
// records; Ack, Nack, Extend and DeadLetter settle the claims (a record
// not settled within its visibility is handed out again, with Attempts
// one higher; past the broker's group_max_attempts it becomes a dead
// letter). Consume runs that loop around a handler.
//
// A Group polls on a QUIC stream of its own (a long poll holds it) and
// settles on another, so a waiting poll never holds up a settlement or
// the client's other requests.

// GroupOptions configure a Group.
type GroupOptions struct {
	// Shard is the shard this Group consumes (default 0).
	Shard uint32
	// Consumer names this consumer in the group's describe output.
	Consumer string
	// Visibility is how long a polled record stays claimed (0: the
	// broker's group_visibility_timeout_ms).
	Visibility time.Duration
}

// Group is one consumer of a group on one shard. Its methods may be called
// from several goroutines; Close releases its streams.
type Group struct {
	c *Client
	// cc, for a Group of a ClusterClient (clustergroup.go), routes each
	// call to the member serving the group's shard; c is then nil.
	cc     *ClusterClient
	scope  wire.Scope
	name   string
	opts   GroupOptions
	poller rpcStream
	settle rpcStream
}

// GroupRecord is a record handed out by Poll.
type GroupRecord struct {
	Offset uint64
	Time   time.Time
	// Attempts counts the record's hand-outs, this one included.
	Attempts uint32
	Payload  []byte
}

// Group returns a consumer of group name on stream s (see GroupOptions).
// The group must exist (CreateGroup).
func (c *Client) Group(s Stream, name string, opts GroupOptions) *Group {
	g := &Group{c: c, scope: s.scope(c), name: name, opts: opts}
	g.poller.c, g.settle.c = c, c
	return g
}

// Poll claims up to max records (1 to 1000), waiting up to wait for some
// when none is available (0 answers at once). It may return none.
func (g *Group) Poll(ctx context.Context, max int, wait time.Duration) ([]GroupRecord, error) {
	return g.poll(ctx, max, wait, g.opts.Visibility)
}

// poll is Poll with the visibility to claim for (0: the broker's default).
func (g *Group) poll(ctx context.Context, max int, wait, visibility time.Duration) ([]GroupRecord, error) {
	if max < 1 || max > wire.GroupMaxPollRecords || wait < 0 || wait.Milliseconds() > int64(^uint32(0)) {
		return nil, wire.NewError(wire.CodeInvalidRequest, "poll 1 to %d records, waiting 0 to 2^32 ms (got %d, %s)", wire.GroupMaxPollRecords, max, wait)
	}
	res, err := g.exchange(ctx, &g.poller, &wire.GroupPoll{
		Tenant: g.scope.Tenant, Namespace: g.scope.Namespace, Stream: g.scope.Stream, Group: g.name, Shard: g.opts.Shard,
		MaxRecords: uint32(max), WaitMS: uint32(wait.Milliseconds()), VisibilityMS: uint32(min(visibility.Milliseconds(), int64(^uint32(0)))),
		Consumer: g.opts.Consumer,
	})
	if err != nil {
		return nil, err
	}
	m, ok := res.(*wire.GroupRecords)
	if !ok {
		return nil, fmt.Errorf("%w: group_poll answered with %s", ErrProtocol, res.Type())
	}
	if !m.Valid() {
		return nil, fmt.Errorf("%w: group_records with columns of unequal length", ErrProtocol)
	}
	out := make([]GroupRecord, len(m.Offsets))
	for i, off := range m.Offsets {
		out[i] = GroupRecord{Offset: off, Time: time.UnixMilli(m.TimesMS[i]).UTC(), Attempts: m.Attempts[i], Payload: m.Payloads[i]}
	}
	return out, nil
}

// SettleError lists the claims a settlement did not settle. Each failure
// is a *wire.Error: stale_claim for a claim that expired or was settled
// already, invalid_request for an offset never handed out.
type SettleError struct {
	Failures []wire.ClaimFailure
}

func (e *SettleError) Error() string {
	f := e.Failures[0].Err()
	if len(e.Failures) == 1 {
		return "client: settle: " + f.Error()
	}
	return fmt.Sprintf("client: settle: %d claims failed, the first: %v", len(e.Failures), f)
}

// Unwrap returns each failure, so errors.Is(err, wire.ErrInvalidRequest) and
// errors.As work.
func (e *SettleError) Unwrap() []error {
	out := make([]error, len(e.Failures))
	for i := range e.Failures {
		out[i] = e.Failures[i].Err()
	}
	return out
}

// Ack settles records as done.
func (g *Group) Ack(ctx context.Context, recs ...GroupRecord) error {
	return g.settleOp(ctx, &wire.GroupSettle{Op: wire.SettleAck}, recs)
}

// Nack gives records back, to be handed out again after delay (or made
// dead letters when they had their last attempt).
func (g *Group) Nack(ctx context.Context, delay time.Duration, recs ...GroupRecord) error {
	return g.settleOp(ctx, &wire.GroupSettle{Op: wire.SettleNack, DelayMS: uint32(min(delay.Milliseconds(), int64(^uint32(0))))}, recs)
}

// Extend keeps records claimed for visibility from now.
func (g *Group) Extend(ctx context.Context, visibility time.Duration, recs ...GroupRecord) error {
	return g.settleOp(ctx, &wire.GroupSettle{Op: wire.SettleExtend, VisibilityMS: uint32(min(visibility.Milliseconds(), int64(^uint32(0))))}, recs)
}

// DeadLetter makes records dead letters at once.
func (g *Group) DeadLetter(ctx context.Context, recs ...GroupRecord) error {
	return g.settleOp(ctx, &wire.GroupSettle{Op: wire.SettleDeadLetter}, recs)
}

func (g *Group) settleOp(ctx context.Context, m *wire.GroupSettle, recs []GroupRecord) error {
	m.Tenant, m.Namespace, m.Stream, m.Group, m.Shard = g.scope.Tenant, g.scope.Namespace, g.scope.Stream, g.name, g.opts.Shard
	var failures []wire.ClaimFailure
	for len(recs) > 0 {
		n := min(len(recs), wire.GroupMaxClaims)
		m.Offsets, m.Attempts = make([]uint64, n), make([]uint32, n)
		for i, r := range recs[:n] {
			m.Offsets[i], m.Attempts[i] = r.Offset, r.Attempts
		}
		recs = recs[n:]
		res, err := g.exchange(ctx, &g.settle, m)
		if err != nil {
			return err
		}
		s, ok := res.(*wire.GroupSettled)
		if !ok {
			return fmt.Errorf("%w: group_settle answered with %s", ErrProtocol, res.Type())
		}
		failures = append(failures, s.Failures...)
	}
	if len(failures) > 0 {
		return &SettleError{Failures: failures}
	}
	return nil
}

// Close releases the Group's streams.
func (g *Group) Close() {
	g.poller.close()
	g.settle.close()
}

// ConsumeOptions tune Consume.
type ConsumeOptions struct {
	// Batch is how many records one poll asks for (default 16).
	Batch int
	// Wait is each poll's long-poll wait (default 5 s).
	Wait time.Duration
	// NackDelay is the delay of a nack after a handler error (default 0).
	NackDelay time.Duration
	// Nacked, when set, is called after a handler's error nacked r: the
	// record comes again, or was its last attempt (group_max_attempts)
	// and is a dead letter now (DeadLetters lists it). It runs on
	// Consume's goroutine, before the next record's handler.
	Nacked func(ctx context.Context, r GroupRecord)
}

// Consume polls and runs handler on each record, one at a time: nil acks
// it, an error nacks it (after opts.NackDelay). While a handler runs
// longer than half the visibility, its claim is extended. It returns when
// ctx ends (nil) or on an error other than a stale settlement, which only
// means the record will come again.
func (g *Group) Consume(ctx context.Context, opts ConsumeOptions, handler func(context.Context, GroupRecord) error) error {
	if opts.Batch <= 0 {
		opts.Batch = 16
	}
	if opts.Wait <= 0 {
		opts.Wait = 5 * time.Second
	}
	for ctx.Err() == nil {
		recs, err := g.poll(ctx, opts.Batch, opts.Wait, g.consumeVisibility())
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		for _, r := range recs {
			if ctx.Err() != nil {
				break // the rest come again after their visibility
			}
			if err := g.handle(ctx, r, opts, handler); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
		}
	}
	return nil
}

// handle runs handler on one record, extending its claim meanwhile, and
// settles it.
func (g *Group) handle(ctx context.Context, r GroupRecord, opts ConsumeOptions, handler func(context.Context, GroupRecord) error) error {
	vis := g.consumeVisibility()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(vis / 2)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				_ = g.Extend(ctx, vis, r) // a failed extension: the record may come again
			}
		}
	}()
	herr := handler(ctx, r)
	close(stop)
	wg.Wait()
	// A handler that finished is settled even if ctx ended meanwhile
	// (Consume's caller stopping it): the work is done, say so.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var err error
	if herr == nil {
		err = g.Ack(sctx, r)
	} else {
		err = g.Nack(sctx, opts.NackDelay, r)
	}
	var se *SettleError
	if errors.As(err, &se) {
		return nil // the claim expired meanwhile: the record comes again
	}
	if err == nil && herr != nil && opts.Nacked != nil {
		opts.Nacked(sctx, r)
	}
	return err
}

// consumeVisibility is the visibility Consume claims records for: the
// Group's, else 30 s (the broker's default, stated, so that Consume knows
// when to extend whatever the broker's group_visibility_timeout_ms is).
func (g *Group) consumeVisibility() time.Duration {
	if g.opts.Visibility > 0 {
		return g.opts.Visibility
	}
	return 30 * time.Second
}

// rpcStream is a QUIC stream of one request at a time: a request, then its
// answer. It opens on first use and again after a call broke it.
type rpcStream struct {
	c  *Client
	mu sync.Mutex
	st *quic.Stream
	fr *wire.FrameReader
}

func (r *rpcStream) call(ctx context.Context, m wire.Message) (wire.Message, error) {
	return r.callOn(ctx, nil, m)
}

// callOn is call on c's connection (nil: the stream's client); a stream
// on another client's connection is dropped first (a ClusterGroup that
// moved to another member).
func (r *rpcStream) callOn(ctx context.Context, c *Client, m wire.Message) (wire.Message, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c != nil && c != r.c {
		r.breakLocked()
		r.c = c
	}
	if r.c.closed.Load() {
		return nil, r.c.closedErr()
	}
	if r.st == nil {
		st, err := r.c.conn.OpenStreamSync(ctx)
		if err != nil {
			return nil, r.lost(err)
		}
		r.st, r.fr = st, wire.NewFrameReader(st, 16<<20)
	}
	b, err := wire.AppendMessage(nil, m)
	if err != nil {
		return nil, err
	}
	if _, err := r.st.Write(b); err != nil {
		r.breakLocked()
		return nil, r.lost(err)
	}
	// A call given up leaves its answer in the stream: the stream is
	// dropped rather than read out of step.
	st := r.st
	stop := context.AfterFunc(ctx, func() { st.CancelRead(0) })
	res, err := readMessage(r.fr)
	if !stop() {
		r.breakLocked()
		return nil, ctx.Err()
	}
	if err != nil {
		r.breakLocked()
		return nil, r.lost(err)
	}
	return answerOf(res)
}

// lost is a stream error as the caller sees it: the client's own error
// when the connection is gone.
func (r *rpcStream) lost(err error) error {
	if r.c.closed.Load() {
		return r.c.closedErr()
	}
	return fmt.Errorf("client: group stream: %w", err)
}

// breakLocked drops the stream. REQUIRES: r.mu is held.
func (r *rpcStream) breakLocked() {
	if r.st != nil {
		r.st.CancelRead(0)
		r.st.CancelWrite(0)
		r.st, r.fr = nil, nil
	}
}

func (r *rpcStream) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.st != nil {
		_ = r.st.Close()
		r.st.CancelRead(0)
		r.st, r.fr = nil, nil
	}
}
