package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/getfelix/felix-go/wire"
)

// Pacing of a ClusterClient's retries, and how far it follows redirects.
const (
	retryFirstWait = 25 * time.Millisecond
	retryMaxWait   = 500 * time.Millisecond
	// maxRedirects is how many not_leader answers one call follows in a
	// row. Past them the members' views of a moving shard have not
	// converged yet (each names another): the call backs off, asks for the
	// topology again and goes on, until its ctx ends.
	maxRedirects = 3
)

// ClusterClient talks to the members of a Felix cluster. Each shard of a
// stream is owned by one member; the ClusterClient learns the owners
// (ShardOwners, cached per stream), sends each publish, read and subscribe
// to its shard's owner over a Client of its own per broker address, follows
// not_leader redirects and retries what is safe to retry. Against a single
// broker every owner is that broker, so it works there as well. It is safe
// for concurrent use.
//
// A dead member sends nothing: its connections are given up after
// Options.IdleTimeout, which a ClusterClient defaults to 5 s (keep-alive
// 1 s), the lease TTL's default, instead of a Client's 30 s. A call its
// owner leaves unanswered for hedgeAfter (200 ms) need not wait that long:
// while the owner answers nothing, the ClusterClient asks the other
// members every 50 ms who owns the shard, and when one names another
// member it closes the connection to the silent one, failing its calls
// with a *ConnectionLostError (hedge.go). A lookup of the owners likewise
// asks the next member when the one asked has not answered within 200 ms.
//
// What a routed call does with an error, by its retry class:
//   - not_leader naming an owner (RetryRedirect): goes there, at most
//     maxRedirects times in a row, then backs off and asks for the
//     topology again (as below), until ctx ends;
//   - Retry and RetryAfter (shard_unavailable, draining, overloaded), a
//     not_leader without an owner, an owner it cannot dial: asks for the
//     topology again and retries, backing off from 25 ms to 500 ms, until
//     ctx ends;
//   - RetryOutcomeUnknown and a lost connection (also one abandoned as
//     above): a publish returns the error (sending it again could write
//     it twice), but the next call asks for the topology again; a
//     subscribe is retried;
//   - anything else (RetryFatal, not_found, a refused conditional
//     publish): returned.
type ClusterClient struct {
	opts  Options
	seeds []string

	mu struct {
		sync.Mutex
		conns  map[string]*Client // by broker address; a closed one is replaced on next use
		topos  map[wire.Scope]*knownTopology
		closed bool
		// lost is when each address last lost its connection or failed a
		// dial: it is not dialed again within lostPause.
		lost map[string]time.Time
		// overdue are the watches of calls their owner has not answered
		// within hedgeAfter (hedge.go).
		overdue map[overdueKey]*overdue
	}
	// watching counts the watches running; Close waits for them.
	watching sync.WaitGroup
	// dials counts dial attempts (tests).
	dials atomic.Int64

	// testHookRoute, set by tests before the first call, is asked with the
	// address each routed call is about to go to; an error it returns is
	// taken as that broker's answer, and the call is not made.
	testHookRoute func(addr string) error
	// testHookWatch, set by tests before the first call, sees every answer
	// a watch of overdue calls gets (hedge.go): from whom, whether from
	// the owner the calls wait on, its error, and the other owner it names.
	testHookWatch func(from string, owner bool, err error, other string)
}

// knownTopology is a stream's topology as the broker at from told it. When
// that broker refused to tell (err: no right to ask, an older broker
// without wire.FeatureShardOwners), calls go to it: its answer to the call
// itself is the authoritative one.
type knownTopology struct {
	top  Topology
	err  error
	from string
}

// unreachableError is a broker the client could not connect to, or that
// could not answer a lookup now. Nothing of the call was sent, so it may
// be sent elsewhere, or again.
type unreachableError struct{ err error }

func (e *unreachableError) Error() string { return e.err.Error() }
func (e *unreachableError) Unwrap() error { return e.err }

// A ClusterClient's connection timing, when Options leave IdleTimeout zero.
const (
	DefaultClusterIdleTimeout = 5 * time.Second
	DefaultClusterKeepAlive   = time.Second
)

// DialCluster connects to the first of seeds that answers (each attempt
// bounded by o.DialTimeout) and returns a ClusterClient that reaches the
// other members as it needs them. A broker that refuses the credential
// ends the search: the others would too.
func DialCluster(ctx context.Context, seeds []string, o Options) (*ClusterClient, error) {
	if len(seeds) == 0 {
		return nil, errors.New("client: DialCluster needs at least one broker address")
	}
	if o.IdleTimeout == 0 {
		// A member that dies sends nothing more; its shards move within
		// the lease TTL (5 s by default), so a connection to it must be
		// given up about as fast, or a call waits out the 30 s default.
		o.IdleTimeout, o.KeepAlive = DefaultClusterIdleTimeout, DefaultClusterKeepAlive
	}
	cc := &ClusterClient{opts: o.withDefaults(), seeds: slices.Clone(seeds)}
	cc.mu.conns = make(map[string]*Client)
	cc.mu.topos = make(map[wire.Scope]*knownTopology)
	cc.mu.lost = make(map[string]time.Time)
	cc.mu.overdue = make(map[overdueKey]*overdue)
	// Every seed at once: a dead one costs nothing when another answers
	// (dialed in turn, each dead seed ahead of a live one cost a whole
	// DialTimeout: QUIC hears nothing from a dead address).
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make(chan error, len(cc.seeds))
	for _, addr := range cc.seeds {
		go func() {
			_, err := cc.connect(dctx, addr)
			results <- err
		}()
	}
	var errs []error
	for range cc.seeds {
		err := <-results
		switch {
		case err == nil:
			return cc, nil
		case errors.Is(err, wire.ErrUnauthenticated):
			return nil, err // a wrong credential is wrong everywhere
		}
		errs = append(errs, err)
	}
	if len(errs) == 1 {
		return nil, errs[0]
	}
	return nil, fmt.Errorf("client: no broker reachable: %w", errors.Join(errs...))
}

// connect returns the client for addr, dialing one (within DialTimeout)
// when there is none or the one there is closed: its connection was lost.
func (cc *ClusterClient) connect(ctx context.Context, addr string) (*Client, error) {
	cc.mu.Lock()
	if cc.mu.closed {
		cc.mu.Unlock()
		return nil, ErrClosed
	}
	old := cc.mu.conns[addr]
	if old != nil && !old.closed.Load() {
		cc.mu.Unlock()
		return old, nil
	}
	delete(cc.mu.conns, addr)
	now := time.Now()
	if old != nil {
		// Counted from when the connection was lost, not from when a call
		// found it closed: a member killed and restarted long ago must not
		// be skipped for another lostPause when it is the new owner (seen
		// in BenchmarkReplicatedFailover: ~0.8 s added to a failover).
		cc.markLostLocked(addr, old.lostAt(now), now)
	}
	at, recent := cc.mu.lost[addr]
	recent = recent && now.Sub(at) < lostPause
	cc.mu.Unlock()
	if old != nil {
		_ = old.Close(ctx) // its connection is gone: this waits for its goroutines
	}
	if recent {
		return nil, &unreachableError{fmt.Errorf("client: the connection to %s was lost %s ago; not dialed again yet", addr, now.Sub(at).Round(time.Millisecond))}
	}
	cc.dials.Add(1)
	dctx, cancel := context.WithTimeout(ctx, cc.opts.DialTimeout)
	defer cancel()
	c, err := Dial(dctx, addr, cc.opts)
	if err != nil {
		// A dial the caller gave up on says nothing about addr: DialCluster
		// gives up the other seeds' dials once one answers, and marking
		// them lost made the first calls to those members fail for
		// lostPause.
		if ctx.Err() == nil {
			cc.mu.Lock()
			t := time.Now()
			cc.markLostLocked(addr, t, t)
			cc.mu.Unlock()
		}
		return nil, &unreachableError{err}
	}
	return cc.keep(ctx, addr, c)
}

// markLostLocked records addr lost at at, unless that was lostPause or
// more before now or a later loss is recorded, and forgets the addresses
// lost longer ago than lostPause: the map holds only those it may skip.
//
// REQUIRES: cc.mu is held.
func (cc *ClusterClient) markLostLocked(addr string, at, now time.Time) {
	for a, t := range cc.mu.lost {
		if now.Sub(t) >= lostPause {
			delete(cc.mu.lost, a)
		}
	}
	if prev, ok := cc.mu.lost[addr]; now.Sub(at) < lostPause && (!ok || at.After(prev)) {
		cc.mu.lost[addr] = at
	}
}

// lostPause is how long an address whose connection was lost, or whose
// dial failed, is not dialed again: a member that died is named by stale
// owner records and by followers that have not noticed yet, and each dial
// would wait DialTimeout. The caller asks again who owns the shard instead;
// a member restarted on its address is reached a moment later.
const lostPause = time.Second

// keep files c as addr's client, unless another caller dialed addr
// meanwhile (theirs is kept, c closed) or the ClusterClient closed.
func (cc *ClusterClient) keep(ctx context.Context, addr string, c *Client) (*Client, error) {
	cc.mu.Lock()
	cur, closed := cc.mu.conns[addr], cc.mu.closed
	if !closed && (cur == nil || cur.closed.Load()) {
		cc.mu.conns[addr] = c
		cc.mu.Unlock()
		return c, nil
	}
	cc.mu.Unlock()
	_ = c.Close(ctx)
	if closed {
		return nil, ErrClosed
	}
	return cur, nil
}

// candidates are the addresses to try for what any broker can answer:
// those connected now, then the seeds.
func (cc *ClusterClient) candidates() []string {
	cc.mu.Lock()
	var out []string
	for addr, c := range cc.mu.conns {
		if !c.closed.Load() {
			out = append(out, addr)
		}
	}
	cc.mu.Unlock()
	slices.Sort(out)
	for _, s := range cc.seeds {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// any calls do with the client of the first broker that can be reached,
// trying the next while do fails for want of a connection. It returns do's
// first other outcome, or the last error.
func (cc *ClusterClient) any(ctx context.Context, do func(addr string, c *Client) error) error {
	var err error
	for _, addr := range cc.candidates() {
		var c *Client
		if c, err = cc.connect(ctx, addr); err == nil {
			err = do(addr, c)
		}
		if err == nil || ctx.Err() != nil || !cc.unreachable(err) {
			return err
		}
	}
	return err
}

// unreachable says whether err is about reaching a broker (a failed dial,
// a lost connection) rather than a broker's answer.
func (cc *ClusterClient) unreachable(err error) bool {
	var unreached *unreachableError
	var lost *ConnectionLostError
	if errors.As(err, &unreached) || errors.As(err, &lost) {
		return true
	}
	// A client closed under a call, not by this ClusterClient.
	return errors.Is(err, ErrClosed) && !cc.isClosed()
}

func (cc *ClusterClient) isClosed() bool {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.mu.closed
}

func (cc *ClusterClient) scope(s Stream) wire.Scope { return s.scopeIn(cc.opts.Tenant) }

func streamOf(scope wire.Scope) Stream {
	return Stream{Tenant: scope.Tenant, Namespace: scope.Namespace, Name: scope.Stream}
}

// topology returns scope's topology: the cached one unless refresh, else
// a fresh one from the first broker that answers.
func (cc *ClusterClient) topology(ctx context.Context, scope wire.Scope, refresh bool) (*knownTopology, error) {
	if !refresh {
		cc.mu.Lock()
		kt := cc.mu.topos[scope]
		cc.mu.Unlock()
		if kt != nil {
			return kt, nil
		}
	}
	kt, err := cc.lookup(ctx, scope)
	if err != nil {
		return nil, err
	}
	cc.mu.Lock()
	cc.mu.topos[scope] = kt
	cc.mu.Unlock()
	return kt, nil
}

// forget drops scope's cached topology: the next call asks again.
func (cc *ClusterClient) forget(scope wire.Scope) {
	cc.mu.Lock()
	delete(cc.mu.topos, scope)
	cc.mu.Unlock()
}

// final says whether err is a broker's answer that asking again, here or
// elsewhere, would not change.
func final(err error) bool {
	var we *wire.Error
	if !errors.As(err, &we) {
		return false
	}
	switch we.Retry {
	case wire.Retry, wire.RetryAfter, wire.RetryRedirect, wire.RetryOutcomeUnknown:
		return false
	}
	return true
}

// target is the address a call for scope's shard (pick chooses it) goes
// to: the shard's owner, where an empty address is the broker that told
// the topology; that broker itself when it would not tell or the stream
// has no such shard, so its answer to the call decides.
func (cc *ClusterClient) target(ctx context.Context, scope wire.Scope, pick func(Topology) uint32, refresh bool) (string, error) {
	kt, err := cc.topology(ctx, scope, refresh)
	if err != nil {
		return "", err
	}
	if kt.err != nil {
		return kt.from, nil
	}
	shard := pick(kt.top)
	o, ok := kt.top.Owner(shard)
	switch {
	case !ok || o.Available && o.Owner.Addr == "":
		return kt.from, nil
	case !o.Available:
		return "", wire.NewError(wire.CodeShardUnavailable, "shard %d of %s has no owner available now", shard, scope)
	}
	return o.Owner.Addr, nil
}

// verdict is what a routed call does after an attempt.
type verdict uint8

const (
	verdictDone    verdict = iota // return the outcome
	verdictFollow                 // go to the owner a not_leader named
	verdictRetry                  // ask for the topology again, back off, try again
	verdictReroute                // return the error; the next call asks for the topology again
)

// judge decides what a routed call does after err. A safe call (a
// subscribe, a lookup) may be made again whatever became of the last try;
// a publish may not when it may have been written.
func (cc *ClusterClient) judge(err error, safe bool) verdict {
	var unreached *unreachableError
	var we *wire.Error
	switch {
	case err == nil:
		return verdictDone
	case errors.As(err, &unreached):
		if final(err) {
			return verdictDone // the broker refused the connection itself (a credential)
		}
		return verdictRetry // nothing was sent
	case errors.As(err, &we):
		return judgeWire(we, safe)
	case cc.unreachable(err) && safe:
		return verdictRetry
	case cc.unreachable(err), errors.Is(err, context.DeadlineExceeded):
		// No answer in time: the member may be cut off from the shard's
		// group; the next call asks again who owns the shard.
		return verdictReroute
	}
	return verdictDone
}

func judgeWire(we *wire.Error, safe bool) verdict {
	switch {
	case we.Retry == wire.RetryRedirect && we.Owner != nil && we.Owner.Addr != "":
		return verdictFollow
	case we.Retry == wire.RetryRedirect:
		return verdictRetry // no owner named: ask who owns it
	case we.Code == wire.CodeNotFound:
		// Its class is RetryAfter (a stream being made), but a broker
		// says not_found for a shard the stream does not have: retried
		// until the caller's deadline, a mistake would look like a hang.
		return verdictDone
	case we.Retry == wire.Retry || we.Retry == wire.RetryAfter:
		return verdictRetry
	case we.Retry == wire.RetryOutcomeUnknown && safe:
		return verdictRetry
	case we.Retry == wire.RetryOutcomeUnknown:
		return verdictReroute
	}
	return verdictDone
}

// route makes call at the owner of scope's shard (pick chooses it from the
// topology), acting on each answer as judge says (see ClusterClient).
func (cc *ClusterClient) route(ctx context.Context, scope wire.Scope, pick func(Topology) uint32, safe bool, call func(*Client) error) error {
	var (
		pause   backoff
		hops    int
		refresh bool
		via     string // the owner a not_leader named: tried next
		start   = time.Now()
	)
	for {
		err := cc.attempt(ctx, scope, pick, via, refresh, call)
		via, refresh = "", false
		switch cc.judge(err, safe) {
		case verdictDone:
			return err
		case verdictFollow:
			cc.forget(scope)
			if hops == maxRedirects {
				// Members still disagree about a shard that just moved
				// (each names the other until its watch catches up, in
				// milliseconds): stop following, back off, ask again.
				hops, refresh = 0, true
				cc.retrying(scope, start, err)
				if werr := pause.sleep(ctx); werr != nil {
					return fmt.Errorf("client: %w; the last attempt: %w", werr, err)
				}
				continue
			}
			hops++
			var we *wire.Error
			errors.As(err, &we)
			via = we.Owner.Addr
		case verdictReroute:
			cc.forget(scope)
			return err
		case verdictRetry:
			refresh = true
			cc.retrying(scope, start, err)
			if werr := pause.sleep(ctx); werr != nil {
				return fmt.Errorf("client: %w; the last attempt: %w", werr, err)
			}
		}
	}
}

// attempt makes one try of a routed call: at via when set, else at the
// shard's owner.
func (cc *ClusterClient) attempt(ctx context.Context, scope wire.Scope, pick func(Topology) uint32, via string, refresh bool, call func(*Client) error) error {
	addr := via
	if addr == "" {
		var err error
		if addr, err = cc.target(ctx, scope, pick, refresh); err != nil {
			return err
		}
	}
	if h := cc.testHookRoute; h != nil {
		if err := h(addr); err != nil {
			return err
		}
	}
	c, err := cc.connect(ctx, addr)
	if err != nil {
		return err
	}
	finish := cc.hedge(addr, c, scope, pick)
	defer finish()
	return call(c)
}

// retrying tells Options.Retrying of a call for scope retried since start.
func (cc *ClusterClient) retrying(scope wire.Scope, start time.Time, err error) {
	if h := cc.opts.Retrying; h != nil {
		h(Retry{Stream: streamOf(scope), Waited: time.Since(start), Err: err})
	}
}

// backoff paces retries: retryFirstWait, doubling up to retryMaxWait.
type backoff struct{ last time.Duration }

// sleep waits out the next pause, or returns ctx's error when it ends first.
func (b *backoff) sleep(ctx context.Context) error {
	b.last = min(max(2*b.last, retryFirstWait), retryMaxWait)
	t := time.NewTimer(b.last)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func keyShard(key []byte) func(Topology) uint32 {
	return func(t Topology) uint32 { return t.ShardFor(key) }
}

func fixedShard(shard uint32) func(Topology) uint32 {
	return func(Topology) uint32 { return shard }
}

// Publish sends one message to the owner of its key's shard and, unless
// fire-and-forget, waits for its ack (see ClusterClient for retries).
func (cc *ClusterClient) Publish(ctx context.Context, s Stream, payload []byte, o PublishOptions) error {
	_, err := cc.PublishResult(ctx, s, [][]byte{payload}, withDefaultAck(o, wire.AckPerMessage))
	return err
}

// PublishBatch sends payloads as one batch to the owner of its key's shard.
func (cc *ClusterClient) PublishBatch(ctx context.Context, s Stream, payloads [][]byte, o PublishOptions) error {
	_, err := cc.PublishResult(ctx, s, payloads, withDefaultAck(o, wire.AckPerBatch))
	return err
}

// PublishResult publishes a batch at the owner of its key's shard and
// returns what its ack said, as Client.PublishResult.
func (cc *ClusterClient) PublishResult(ctx context.Context, s Stream, payloads [][]byte, o PublishOptions) (PublishResult, error) {
	if len(payloads) == 0 {
		return PublishResult{}, nil
	}
	var res PublishResult
	err := cc.route(ctx, cc.scope(s), keyShard(o.Key), false, func(c *Client) error {
		var err error
		res, err = c.PublishResult(ctx, s, payloads, o)
		return err
	})
	return res, err
}

// PublishIf is Client.PublishIf at the owner of the key's shard.
func (cc *ClusterClient) PublishIf(ctx context.Context, s Stream, payloads [][]byte, expected uint64, o PublishOptions) (uint64, error) {
	var off uint64
	err := cc.route(ctx, cc.scope(s), keyShard(o.Key), false, func(c *Client) error {
		var err error
		off, err = c.PublishIf(ctx, s, payloads, expected, o)
		return err
	})
	return off, err
}

// Read is Client.Read at the owner of shard o.Shard: routed as a
// subscribe is (a read changes nothing, so it is retried whatever became
// of the last try), hedged against a silent owner, following not_leader
// and asking for the topology again when the owner moved. At a replicated
// shard's leader it sees every record acknowledged before it was sent
// (see the README's guarantees).
func (cc *ClusterClient) Read(ctx context.Context, s Stream, from uint64, o ReadOptions) (Page, error) {
	var page Page
	err := cc.route(ctx, cc.scope(s), fixedShard(o.Shard), true, func(c *Client) error {
		var err error
		page, err = c.Read(ctx, s, from, o)
		return err
	})
	return page, err
}

// OffsetForTime is Client.OffsetForTime at the owner of shard, routed and
// retried as Read is.
func (cc *ClusterClient) OffsetForTime(ctx context.Context, s Stream, t time.Time, shard uint32) (uint64, error) {
	var off uint64
	err := cc.route(ctx, cc.scope(s), fixedShard(shard), true, func(c *Client) error {
		var err error
		off, err = c.OffsetForTime(ctx, s, t, shard)
		return err
	})
	return off, err
}

// ClientFor returns the connection to the owner of s's shard, for what
// needs one connection (Produce, an IdempotentProducer). It belongs
// to the ClusterClient: do not close it. It follows no redirect by itself;
// when its connection is lost, ask again.
func (cc *ClusterClient) ClientFor(ctx context.Context, s Stream, shard uint32) (*Client, error) {
	return cc.clientAt(ctx, s, fixedShard(shard))
}

// ClientForKey is ClientFor for the shard key routes to.
func (cc *ClusterClient) ClientForKey(ctx context.Context, s Stream, key []byte) (*Client, error) {
	return cc.clientAt(ctx, s, keyShard(key))
}

func (cc *ClusterClient) clientAt(ctx context.Context, s Stream, pick func(Topology) uint32) (*Client, error) {
	var got *Client
	err := cc.route(ctx, cc.scope(s), pick, true, func(c *Client) error {
		got = c
		return nil
	})
	return got, err
}

// ShardOwners asks a live broker which member owns each shard of s (an
// empty address is the broker that answered) and caches the answer; while
// no broker can answer (members electing a leader, one just lost) it asks
// again, backing off, until ctx ends.
func (cc *ClusterClient) ShardOwners(ctx context.Context, s Stream) (Topology, error) {
	var pause backoff
	start := time.Now()
	for {
		kt, err := cc.topology(ctx, cc.scope(s), true)
		if err == nil {
			return kt.top, kt.err
		}
		var unreached *unreachableError
		if !errors.As(err, &unreached) || final(err) {
			return Topology{}, err
		}
		cc.retrying(cc.scope(s), start, err)
		if werr := pause.sleep(ctx); werr != nil {
			return Topology{}, fmt.Errorf("client: %w; the last attempt: %w", werr, err)
		}
	}
}

// knownOwners is s's cached topology, asked for (as ShardOwners) only
// when none is cached or the cached answer was a refusal. An idempotent
// producer needs only the stream's shard count and routing from it, which
// do not change; asked again for every batch, the lookup cost a round trip
// each, and more while a member that died was still asked first.
func (cc *ClusterClient) knownOwners(ctx context.Context, s Stream) (Topology, error) {
	cc.mu.Lock()
	kt := cc.mu.topos[cc.scope(s)]
	cc.mu.Unlock()
	if kt != nil && kt.err == nil {
		return kt.top, nil
	}
	return cc.ShardOwners(ctx, s)
}

// CreateStream creates a stream on a live broker, as Client.CreateStream.
func (cc *ClusterClient) CreateStream(ctx context.Context, s Stream, cfg StreamConfig) (StreamInfo, error) {
	var info StreamInfo
	err := cc.any(ctx, func(_ string, c *Client) error {
		var err error
		info, err = c.CreateStream(ctx, s, cfg)
		return err
	})
	cc.forget(cc.scope(s))
	return info, err
}

// StreamInfo returns a stream's definition from a live broker.
func (cc *ClusterClient) StreamInfo(ctx context.Context, s Stream) (StreamInfo, error) {
	var info StreamInfo
	err := cc.any(ctx, func(_ string, c *Client) error {
		var err error
		info, err = c.StreamInfo(ctx, s)
		return err
	})
	return info, err
}

// ListStreams lists the tenant's streams from a live broker.
func (cc *ClusterClient) ListStreams(ctx context.Context, namespace string) ([]StreamInfo, error) {
	var infos []StreamInfo
	err := cc.any(ctx, func(_ string, c *Client) error {
		var err error
		infos, err = c.ListStreams(ctx, namespace)
		return err
	})
	return infos, err
}

// DeleteStream deletes a stream on a live broker.
func (cc *ClusterClient) DeleteStream(ctx context.Context, s Stream) error {
	err := cc.any(ctx, func(_ string, c *Client) error { return c.DeleteStream(ctx, s) })
	cc.forget(cc.scope(s))
	return err
}

// Close closes every connection (see Client.Close, bounded by ctx).
func (cc *ClusterClient) Close(ctx context.Context) error {
	cc.mu.Lock()
	cc.mu.closed = true
	conns := cc.mu.conns
	cc.mu.conns = make(map[string]*Client)
	cc.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Go(func() { _ = c.Close(ctx) })
	}
	wg.Wait()
	// Every watch ends now that its connection did.
	cc.watching.Wait()
	return nil
}
