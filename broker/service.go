package broker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/auth"
	"github.com/getfelix/felix-go/cluster"
	"github.com/getfelix/felix-go/lanes"
	"github.com/getfelix/felix-go/quota"
	"github.com/getfelix/felix-go/readfront"
	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/sessions"
	"github.com/getfelix/felix-go/streams"
	"github.com/getfelix/felix-go/wire"
)

// The broker implements service.Service: every front end (felix/1 over QUIC,
// the Kafka listener, the browsers') reaches the actors through these
// methods, on its own goroutines. conn is one client's service.Session: it
// resolves streams and shards, admits publishes and runs the subscribe
// handshake; its other calls are the fronts' (fronts.go); the session actor
// it fronts owns the client's subscriptions.

var _ service.Service = (*Broker)(nil)

type shardKey struct {
	scope wire.Scope
	shard uint32
}

// conn serves one client. Its methods run on the client's goroutines; mu
// guards the lookup caches grouped under it (what the registry said, kept
// to spare a round trip per publish).
type conn struct {
	// The connection's stream administration, consumer-group, cache and
	// read calls (fronts.go).
	streamCalls
	groupCalls
	cacheCalls
	readCalls

	b       *Broker
	client  service.Client
	session *actor.PID
	// principal is who the client is and what it may do; a
	// re-authentication replaces it.
	principal atomic.Pointer[auth.Principal]
	// releaseSlot gives back the connection's authenticated slot
	// (quota.Connections.Acquire); nil for the admin routes' conn.
	releaseSlot func()

	mu struct {
		sync.Mutex
		defs   map[wire.Scope]streams.Def
		shards map[shardKey]*streams.ShardRef
	}
}

// Open implements service.Service: it spawns the client's session actor,
// which spawns the connection's writer.
func (b *Broker) Open(ctx context.Context, client service.Client) (service.Session, error) {
	if b.cfg.TLSClientCertBindSubject && client.CertSubject != client.Tenant {
		b.metrics.AuthRefused.WithLabelValues("certificate_subject").Inc()
		return nil, wire.NewError(wire.CodeUnauthenticated, "the client certificate's subject %q is not the tenant %q this connection names (tls_client_cert_bind_subject)", client.CertSubject, client.Tenant)
	}
	p, err := b.gate.Authenticate(client, client.Token, time.Now())
	if err != nil {
		return nil, err
	}
	client.Token = "" // verified; not kept
	return b.openSession(ctx, client, p)
}

// openSession starts the session of a client authenticated as p.
func (b *Broker) openSession(ctx context.Context, client service.Client, p *auth.Principal) (service.Session, error) {
	// Authenticated: the connection now counts against the authenticated
	// bounds, which no unauthenticated one holds a place in; the front end
	// gives back its pre-auth slot once Open returns.
	releaseSlot, err := b.conns.Acquire(quota.RemoteIP(client.Remote), client.Tenant)
	if err != nil {
		return nil, err
	}
	c := b.newConn(client, p)
	c.releaseSlot = releaseSlot
	var mb *actors.Mailbox
	props := actors.Props(func() actor.Actor { return sessions.New(b.sessionConfig(client)) },
		actors.MailboxConfig{Capacity: sessions.MailboxDepth, Policy: actors.Block},
		func(m *actors.Mailbox) { mb = m })
	pid, err := actors.Spawn(ctx, b.system.Root, b.sessions, fmt.Sprintf("conn-%d", client.ID), props, requestTimeout)
	if err != nil {
		releaseSlot()
		return nil, wire.NewError(wire.CodeInternal, "start session: %v", err)
	}
	b.dir.Add(pid, actors.KindSession, mb, map[string]string{"conn": fmt.Sprint(client.ID), "remote": client.Remote.String(), "tenant": client.Tenant})
	c.session = pid
	b.system.Root.Send(pid, &sessions.WatchExpiry{At: p.Expires})
	return c, nil
}

// newConn is client's conn, authenticated as p, with its calls that live
// in the packages of their concern.
func (b *Broker) newConn(client service.Client, p *auth.Principal) *conn {
	c := &conn{b: b, client: client}
	l := connLookups{c}
	c.streamCalls, c.groupCalls, c.cacheCalls = b.streamFront.Session(l), b.groupFront.Session(l), b.cacheFront.Session(l)
	c.readCalls = readfront.New(l)
	c.principal.Store(p)
	c.mu.defs = make(map[wire.Scope]streams.Def)
	c.mu.shards = make(map[shardKey]*streams.ShardRef)
	return c
}

// Reauthenticate implements service.Session: a fresh token for the same
// tenant replaces the principal, and the session's subscriptions end when
// the new one expires instead.
func (c *conn) Reauthenticate(ctx context.Context, token string) error {
	p, err := c.b.gate.Authenticate(c.client, token, time.Now())
	if err != nil {
		return err
	}
	c.principal.Store(p)
	c.b.system.Root.Send(c.session, &sessions.WatchExpiry{At: p.Expires})
	return nil
}

// admitConnection applies the pre-auth connection limits to a connection
// a front end accepted, before it authenticates (the front ends' Admit).
func (b *Broker) admitConnection(remote net.Addr, displace func()) (func(), error) {
	return b.conns.AcquirePreAuth(quota.RemoteIP(remote), displace)
}

// sessionConfig is the session actor's of client's connection.
func (b *Broker) sessionConfig(client service.Client) sessions.Config {
	return sessions.Config{
		Client: client, Root: b.system.Root, Writers: b.connections,
		EgressMaxBytes: b.cfg.SubscriberEgressMaxBytes, OnWritten: b.countWritten,
		OnWriterSpawned: func(ref *lanes.WriterRef, c service.Client) {
			b.dir.Add(ref.PID, actors.KindConnWriter, ref.Mailbox, map[string]string{"conn": fmt.Sprint(c.ID), "remote": c.Remote.String(), "tenant": c.Tenant})
		},
		Subscriptions: b.metrics.Subscriptions, Lagged: b.metrics.SubscriptionsLagged,
		Watches: b.metrics.CacheWatches, WatchesLagged: b.metrics.CacheWatchesLagged, Log: b.log,
	}
}

// Close ends every subscription, then stops the connection's writer (which
// resets what it still had) and the session.
func (c *conn) Close() {
	if c.session == nil {
		return // the admin routes' conn (adminConn): no session to end
	}
	defer c.releaseSlot()
	root := c.b.system.Root
	res, err := actors.Request[*sessions.Closed](context.Background(), c.b.system.Root, c.session, &sessions.Close{}, requestTimeout)
	if err == nil && res.Writer != nil {
		_ = root.StopFuture(res.Writer).Wait()
	}
	_ = root.StopFuture(c.session).Wait()
}

// stream returns scope's definition, from the cache or the registry (which
// makes an implicit in-memory stream on first use).
func (c *conn) stream(ctx context.Context, scope wire.Scope) (streams.Def, error) {
	return c.cachedStream(ctx, scope, true)
}

// cachedStream is scope's definition from the connection's cache, asking
// the registry on a miss; create makes an implicit stream on first use.
func (c *conn) cachedStream(ctx context.Context, scope wire.Scope, create bool) (streams.Def, error) {
	c.mu.Lock()
	d, ok := c.mu.defs[scope]
	c.mu.Unlock()
	if ok {
		return d, nil
	}
	res, err := actors.Request[*streams.StreamResult](actors.Detached(ctx), c.b.system.Root, c.b.registry, &streams.GetStream{Scope: scope, Create: create}, requestTimeout)
	if err != nil {
		return streams.Def{}, err
	}
	if res.Err != nil {
		return streams.Def{}, res.Err
	}
	c.mu.Lock()
	c.mu.defs[scope] = res.Def
	c.mu.Unlock()
	return res.Def, nil
}

// forgetStream drops what the cache holds about a stream that was created,
// changed or deleted.
func (c *conn) forgetStream(scope wire.Scope) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.mu.defs, scope)
	for k := range c.mu.shards {
		if k.scope == scope {
			delete(c.mu.shards, k)
		}
	}
}

// shard returns shard n of scope, asking the registry on a miss or when the
// cached shard has stopped.
func (c *conn) shard(ctx context.Context, scope wire.Scope, n uint32) (*streams.ShardRef, error) {
	key := shardKey{scope: scope, shard: n}
	c.mu.Lock()
	ref, ok := c.mu.shards[key]
	c.mu.Unlock()
	if ok && !ref.Mailbox.IsClosed() {
		return ref, nil
	}
	ref, err := c.lookupShard(ctx, scope, n)
	if errors.Is(err, cluster.ErrNotAssigned) {
		// A new stream's shard is being placed (milliseconds): wait for
		// it here, on the client's goroutine, rather than refuse the
		// first publish or subscribe.
		if node := c.b.node.Load(); node != nil && node.WaitPlaced(ctx, cluster.ShardKey{Scope: scope, Shard: n}) {
			ref, err = c.lookupShard(ctx, scope, n)
		}
	}
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.mu.shards[key] = ref
	c.mu.Unlock()
	return ref, nil
}

// lookupShard asks the registry for shard n of scope.
func (c *conn) lookupShard(ctx context.Context, scope wire.Scope, n uint32) (*streams.ShardRef, error) {
	ref, err := actors.Request[*streams.ShardRef](actors.Detached(ctx), c.b.system.Root, c.b.registry, &streams.GetShard{Scope: scope, Shard: n}, requestTimeout)
	if err == nil && ref.Err != nil {
		err = ref.Err
	}
	return ref, err
}

// Publish implements service.Session: it admits p to its shard's mailbox,
// waiting at most publish_queue_wait_timeout_ms for room.
func (c *conn) Publish(ctx context.Context, p *service.Publish, done func(service.PublishResult)) error {
	m := c.b.metrics
	err := c.admit(ctx, p, c.b.timeAck(p, done)) // latency.go
	switch {
	case err == nil:
		m.PublishRequests.WithLabelValues(p.Scope.Tenant, "ok").Inc()
		m.PublishedMessages.WithLabelValues(p.Scope.Tenant).Add(float64(len(p.Payloads)))
		m.PublishedBytes.WithLabelValues(p.Scope.Tenant).Add(float64(p.Bytes()))
	case errors.Is(err, wire.ErrOverloaded):
		m.PublishRequests.WithLabelValues(p.Scope.Tenant, "overloaded").Inc()
		m.PublishOverloaded.WithLabelValues(p.Scope.Tenant).Inc()
	default:
		m.PublishRequests.WithLabelValues(p.Scope.Tenant, "error").Inc()
	}
	return err
}

func (c *conn) admit(ctx context.Context, p *service.Publish, done func(service.PublishResult)) error {
	if err := c.checkPublish(p); err != nil {
		return err
	}
	if err := c.checkProducer(ctx, p); err != nil {
		return err
	}
	wait := c.b.cfg.PublishQueueWaitTimeout
	if dl, ok := ctx.Deadline(); ok {
		wait = max(0, min(wait, time.Until(dl)))
	}
	for attempt := 0; ; attempt++ {
		def, ref, err := c.publishShard(ctx, p)
		if err != nil {
			// The cached definition may be stale: deleted, or made again
			// with other settings. An implicit one is simply made again.
			if errors.Is(err, wire.ErrNotFound) && attempt == 0 {
				if err := c.refresh(ctx, p.Scope, def); err != nil {
					return err
				}
				continue
			}
			return err
		}
		if p.Producer != nil && !def.Durable {
			return errProducerInMemory
		}
		switch ref.Mailbox.TryPost(shardPublish(p, def, done), wait) {
		case actors.Posted, actors.PostedEvicting:
			return nil
		case actors.Closed:
			if attempt == 0 {
				// The shard stopped, or its stream was deleted: look
				// again. The registry makes a new shard for a stream that
				// is still defined; an implicit stream (one nobody
				// created, in memory by definition) is made again, as a
				// first publish makes it.
				if err := c.refresh(ctx, p.Scope, def); err != nil {
					return err
				}
				continue
			}
			if _, err := ref.Log(ctx); ref.Durable && err != nil {
				return err // its log did not open (a stopped shard has finished opening)
			}
			return wire.NewError(wire.CodeShardUnavailable, "stream %s is not available", p.Scope)
		default:
			return wire.NewError(wire.CodeOverloaded, "publish_queue_full: stream %s did not take the publish within %s", p.Scope, wait)
		}
	}
}

// checkPublish runs the boundary's checks on a publish: its names, the
// principal's right, the tenant's rate.
func (c *conn) checkPublish(p *service.Publish) error {
	if err := p.Scope.Validate(); err != nil {
		return err
	}
	if err := c.authorize(auth.ActionStreamPublish, p.Scope); err != nil {
		return err
	}
	return c.b.tenants.AllowPublish(p.Scope.Tenant, len(p.Payloads), p.Bytes(), time.Now())
}

// publishShard resolves the definition and the shard a publish goes to.
func (c *conn) publishShard(ctx context.Context, p *service.Publish) (streams.Def, *streams.ShardRef, error) {
	def, err := c.stream(ctx, p.Scope)
	if err != nil {
		return def, nil, err
	}
	n := def.Routing.ShardFor(p.Key, def.Shards)
	if p.Shard != nil {
		if *p.Shard >= def.Shards {
			return def, nil, wire.NewError(wire.CodeNotFound, "stream %s has %d shards, no shard %d", p.Scope, def.Shards, *p.Shard)
		}
		n = *p.Shard
	}
	ref, err := c.shard(ctx, p.Scope, n)
	if err == nil && def.Durable && !ref.Durable {
		err = wire.NewError(wire.CodeNotFound, "stream %s was deleted and is now in memory", p.Scope)
	}
	return def, ref, err
}

// refresh drops a stale cached definition: an implicit stream is simply
// made again on the next lookup; a defined one is asked for again (gone).
func (c *conn) refresh(ctx context.Context, scope wire.Scope, old streams.Def) error {
	if old.Implicit {
		c.forgetStream(scope)
		return nil
	}
	return c.gone(ctx, scope, old)
}

// gone refreshes a defined stream's cached definition after its shard
// stopped or vanished, without creating the stream: a durable or
// explicitly created stream that was deleted stays deleted for this
// connection (the stale definition stays cached, so every later
// publish asks again) instead of coming back as an implicit in-memory
// stream (13 120 publishes were acknowledged after the
// delete, persisted nowhere). It returns nil when the stream exists
// (again) as the same kind.
func (c *conn) gone(ctx context.Context, scope wire.Scope, old streams.Def) error {
	res, err := actors.Request[*streams.StreamResult](actors.Detached(ctx), c.b.system.Root, c.b.registry, &streams.GetStream{Scope: scope}, requestTimeout)
	switch {
	case err != nil:
		return err
	case res.Err != nil && !errors.Is(res.Err, wire.ErrNotFound):
		return res.Err
	case res.Err != nil:
		return wire.NewError(wire.CodeNotFound, "stream %s was deleted; publishes to it fail until it is created again", scope)
	case old.Durable && !res.Def.Durable:
		return wire.NewError(wire.CodeNotFound, "durable stream %s was deleted; the stream of that name now is in memory, and this connection does not publish to it in the durable one's place (reconnect to use it)", scope)
	}
	c.mu.Lock()
	c.mu.defs[scope] = res.Def
	c.mu.Unlock()
	return nil
}

// shardPublish is p as its shard takes it.
func shardPublish(p *service.Publish, def streams.Def, done func(service.PublishResult)) *streams.Publish {
	sp := &streams.Publish{Payloads: p.Payloads, ExpectedOffset: p.ExpectedOffset, Attrs: encodeAttrs(p.Attrs, !def.LogAppendTime), Received: time.Now().UnixNano()}
	if p.Producer != nil {
		sp.Producer = &streams.ProducerSeq{ID: p.Producer.ID, Seq: p.Producer.Seq}
	}
	if done != nil {
		// A Duplicate (an idempotent producer's re-send the shard
		// remembers) is answered as the ack it had: its original offset,
		// nothing written. The client cannot tell, and need not.
		sp.Done = func(r streams.PublishResult) {
			done(service.PublishResult{Offset: r.Base, Durable: r.Durable, AppendTime: r.AppendTime, Err: refusal(r.Err)})
		}
	}
	return sp
}

// refusal turns the shard's refusal of a conditional or idempotent publish
// into the service's (the wire's PublishRefused); other errors pass
// unchanged.
func refusal(err error) error {
	if err == nil {
		// The common case, and cheap: the targets errors.As fills escape,
		// two allocations on every accepted publish's answer otherwise.
		return nil
	}
	var mismatch *streams.OffsetMismatchError
	if errors.As(err, &mismatch) {
		return &wire.RefusedError{Reason: wire.ReasonOffsetMismatch, Expected: mismatch.Expected, Tail: mismatch.Tail}
	}
	var producer *streams.ProducerError
	if errors.As(err, &producer) {
		return &wire.RefusedError{Reason: producer.Reason, Expected: producer.Expected}
	}
	return err
}
