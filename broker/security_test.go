package broker_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/getfelix/felix-go/auth"
	"github.com/getfelix/felix-go/broker"
	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/config"
	"github.com/getfelix/felix-go/wire"
)

// victim is tenant a's durable stream a/ns/s with records and a live
// subscriber, and what it looked like before an attack.
type victim struct {
	c       *client.Client
	st      client.Stream
	sub     *client.Subscription
	records int
	info    client.StreamInfo
	subs    float64
}

const victimRecords = 5

func newVictim(t *testing.T, ctx context.Context, b *broker.Broker, cfg config.Config) *victim {
	t.Helper()
	v := &victim{c: brokertest.DialOptions(t, b, cfg, client.Options{Tenant: "a"}), st: client.Stream{Tenant: "a", Namespace: "ns", Name: "s"}}
	var err error
	if v.info, err = v.c.CreateStream(ctx, v.st, client.StreamConfig{Durable: true}); err != nil {
		t.Fatal(err)
	}
	for i := range victimRecords {
		if err := v.c.Publish(ctx, v.st, fmt.Appendf(nil, "r%d", i), client.PublishOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if v.sub, err = v.c.Subscribe(ctx, v.st, client.SubscribeOptions{}); err != nil {
		t.Fatal(err)
	}
	v.records, v.subs = victimRecords, gaugeValue(t, b, "felix_subscriptions")
	return v
}

// unchanged fails unless the victim's stream is as it was: the same
// definition, the same records, the same subscribers, and its subscriber
// still served.
func (v *victim) unchanged(t *testing.T, ctx context.Context, b *broker.Broker, attacks int) {
	t.Helper()
	info, err := v.c.StreamInfo(ctx, v.st)
	if err != nil || info != v.info {
		t.Fatalf("after the attacks the stream is %+v (%v), want %+v", info, err, v.info)
	}
	page, err := v.c.Read(ctx, v.st, 0, client.ReadOptions{})
	if err != nil || len(page.Records) != v.records {
		t.Fatalf("after the attacks the stream holds %d records (%v), want %d", len(page.Records), err, v.records)
	}
	if got := gaugeValue(t, b, "felix_subscriptions"); got != v.subs {
		t.Fatalf("felix_subscriptions = %v after the attacks, want %v: an attack left a subscription", got, v.subs)
	}
	if err := v.c.Publish(ctx, v.st, []byte("after"), client.PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	v.records++
	ev, err := v.sub.Next(ctx)
	if err != nil || string(ev.Payload) != "after" {
		t.Fatalf("the victim's subscriber got %q (%v), want %q: it should only see its own publish", ev.Payload, err, "after")
	}
	if got := brokertest.Value(t, b, "felix_auth_refused_total"); got < float64(attacks) {
		t.Fatalf("felix_auth_refused_total = %v after %d refused operations", got, attacks)
	}
}

// attack is one wire operation aimed at the victim's stream: send writes
// its request on st, and the answer must be an error with code.
type attack struct {
	name string
	send func(st *brokertest.RawStream) error
	// answer reads the refusal; acked publishes answer with an ack.
	answer func(t *testing.T, ctx context.Context, st *brokertest.RawStream, code wire.Code)
	code   wire.Code
}

func errorAnswer(requestID uint64) func(*testing.T, context.Context, *brokertest.RawStream, wire.Code) {
	return func(t *testing.T, ctx context.Context, st *brokertest.RawStream, code wire.Code) {
		t.Helper()
		e := expectErrorMsg(t, ctx, st, requestID, code)
		if strings.Contains(e.Message, "no stream") || strings.Contains(e.Message, "not_found") {
			t.Fatalf("refusal %q tells whether the stream exists", e.Message)
		}
	}
}

// listAnswer accepts a refusal (another tenant) or a listing that does not
// show scope (the tenant itself, without rights on it).
func listAnswer(scope wire.Scope) func(*testing.T, context.Context, *brokertest.RawStream, wire.Code) {
	return func(t *testing.T, ctx context.Context, st *brokertest.RawStream, code wire.Code) {
		t.Helper()
		msg, err := st.ReadMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		switch m := msg.(type) {
		case *wire.ErrorMsg:
			if m.Code != code {
				t.Fatalf("listing refused with %s, want %s", m.Code, code)
			}
		case *wire.StreamInfos:
			for _, s := range m.Streams {
				if s.Stream == scope.Stream {
					t.Fatalf("the listing shows %s to a principal with no right on it", scope)
				}
			}
		default:
			t.Fatalf("listing answered %T %+v", msg, msg)
		}
	}
}

func ackAnswer(t *testing.T, ctx context.Context, st *brokertest.RawStream, code wire.Code) {
	t.Helper()
	a := readAck(t, ctx, st)
	if a.Err == nil || a.Err.Code != code {
		t.Fatalf("ack %+v (err %v), want refused with %s", a, a.Err, code)
	}
}

// attacks lists every request of the wire protocol, aimed at scope.
func attacks(scope wire.Scope, victimSub uint64) []attack {
	end := uint64(3)
	return []attack{
		{"publish acked", func(st *brokertest.RawStream) error {
			return st.Write(wire.AppendPublish(nil, &wire.Publish{RequestID: 1, Ack: wire.AckPerBatch, Scope: scope, Payloads: [][]byte{[]byte("evil")}}))
		}, ackAnswer, wire.CodeForbidden},
		{"publish fire-and-forget", func(st *brokertest.RawStream) error {
			return st.Write(wire.AppendPublish(nil, &wire.Publish{Scope: scope, Payloads: [][]byte{[]byte("evil")}}))
		}, errorAnswer(0), wire.CodeForbidden},
		{"subscribe", func(st *brokertest.RawStream) error {
			return st.Send(&wire.Subscribe{RequestID: 2, Tenant: scope.Tenant, Namespace: scope.Namespace, Stream: scope.Stream, Start: "earliest"})
		}, errorAnswer(2), wire.CodeForbidden},
		{"stream_read", func(st *brokertest.RawStream) error {
			return st.Send(&wire.StreamRead{RequestID: 3, Tenant: scope.Tenant, Namespace: scope.Namespace, Stream: scope.Stream, End: &end})
		}, errorAnswer(3), wire.CodeForbidden},
		{"stream_get", func(st *brokertest.RawStream) error {
			return st.Send(&wire.StreamGet{RequestID: 4, Tenant: scope.Tenant, Namespace: scope.Namespace, Stream: scope.Stream})
		}, errorAnswer(4), wire.CodeForbidden},
		{"stream_create (same settings)", func(st *brokertest.RawStream) error {
			return st.Send(&wire.StreamCreate{RequestID: 5, Tenant: scope.Tenant, Namespace: scope.Namespace, Stream: scope.Stream, Shards: 1, Durable: true})
		}, errorAnswer(5), wire.CodeForbidden},
		{"stream_create (a new stream beside it)", func(st *brokertest.RawStream) error {
			return st.Send(&wire.StreamCreate{RequestID: 6, Tenant: scope.Tenant, Namespace: scope.Namespace, Stream: "planted", Shards: 1})
		}, errorAnswer(6), wire.CodeForbidden},
		{"stream_list", func(st *brokertest.RawStream) error {
			return st.Send(&wire.StreamList{RequestID: 7, Tenant: scope.Tenant})
		}, listAnswer(scope), wire.CodeForbidden},
		{"stream_delete", func(st *brokertest.RawStream) error {
			return st.Send(&wire.StreamDelete{RequestID: 8, Tenant: scope.Tenant, Namespace: scope.Namespace, Stream: scope.Stream})
		}, errorAnswer(8), wire.CodeForbidden},
		{"offset_for_time", func(st *brokertest.RawStream) error {
			return st.Send(&wire.OffsetForTime{RequestID: 10, Tenant: scope.Tenant, Namespace: scope.Namespace, Stream: scope.Stream})
		}, errorAnswer(10), wire.CodeForbidden},
		// A subscription id is the connection's own: another's is unknown.
		{"unsubscribe (the victim's subscription)", func(st *brokertest.RawStream) error {
			return st.Send(&wire.Unsubscribe{RequestID: 9, SubscriptionID: victimSub})
		}, errorAnswer(9), wire.CodeNotFound},
	}
}

// TestTenantIsolation tries every operation of the wire protocol against
// tenant a's stream, from a connection of tenant b and from one of tenant a
// whose token lacks the rights: each is refused, and the stream's records,
// definition and subscribers are as before. It used to succeed: the token
// was never checked and no request's tenant was compared with the
// connection's.
func TestTenantIsolation(t *testing.T) {
	cfg := brokertest.Config(t)
	b := brokertest.Start(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v := newVictim(t, ctx, b, cfg)
	scope := wire.Scope{Tenant: "a", Namespace: "ns", Stream: "s"}

	for _, who := range []struct {
		name, tenant string
		grants       []string
	}{
		{"another tenant with every right", "b", nil},
		{"the tenant, rights elsewhere only", "a", []string{"stream.publish:ns/other", "stream.subscribe:other/*", "stream.manage:ns/s-*"}},
	} {
		t.Run(who.name, func(t *testing.T) {
			rc := brokertest.DialRaw(t, b, cfg)
			ctrl, msg, err := rc.HandshakeToken(ctx, who.tenant, brokertest.Token(t, cfg, who.tenant, who.grants...))
			if _, ok := msg.(*wire.AuthOK); err != nil || !ok {
				t.Fatalf("handshake as %s: %T %+v (%v)", who.tenant, msg, msg, err)
			}
			for _, a := range attacks(scope, v.sub.ID()) {
				t.Run(a.name, func(t *testing.T) {
					st, err := rc.OpenStream(ctx)
					if err != nil {
						t.Fatal(err)
					}
					if err := a.send(st); err != nil {
						t.Fatal(err)
					}
					a.answer(t, ctx, st, a.code)
				})
			}
			// The refusals end nothing: the connection still serves its
			// own tenant's work where it has rights.
			if who.tenant == "b" {
				if err := ctrl.Send(&wire.StreamCreate{RequestID: 10, Tenant: "b", Namespace: "ns", Stream: "mine", Shards: 1}); err != nil {
					t.Fatal(err)
				}
				if msg, err := ctrl.ReadMessage(ctx); err != nil {
					t.Fatal(err)
				} else if _, ok := msg.(*wire.StreamInfo); !ok {
					t.Fatalf("tenant b creating its own stream: %T %+v", msg, msg)
				}
			}
		})
	}
	// Every attack but the two unsubscribes (not_found) and the one listing
	// the tenant itself may see is counted as refused.
	v.unchanged(t, ctx, b, 2*len(attacks(scope, 0))-3)

	// A listing shows a tenant only its own streams.
	bc := brokertest.DialOptions(t, b, cfg, client.Options{Tenant: "b"})
	list, err := bc.ListStreams(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list {
		if s.Stream.Tenant != "b" {
			t.Fatalf("tenant b's listing shows %+v", s.Stream)
		}
	}
}

// TestHandshakeRefusesBadTokens: a missing, malformed, foreign-signed,
// wrong-audience or other-tenant token is refused unauthenticated with a
// message that says which, and the connection is closed; nothing is served.
func TestHandshakeRefusesBadTokens(t *testing.T) {
	cfg := brokertest.Config(t)
	b := brokertest.Start(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	_, foreignKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := auth.NewSigner(foreignKey)
	if err != nil {
		t.Fatal(err)
	}
	foreignToken, _, err := foreign.Mint(auth.Claims{Tenant: "default", Grants: auth.AdminGrants()}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	local, err := auth.LocalSigner(cfg.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	otherAudience, _, err := local.Mint(auth.Claims{Tenant: "default", Grants: auth.AdminGrants(), Audience: []string{"not-felix"}}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, tenant, token, says string
	}{
		{"no token", "default", "", "felix token create"},
		{"garbage", "default", "garbage", "malformed"},
		{"signed by an unknown key", "default", foreignToken, "signature"},
		{"another audience", "default", otherAudience, "audience"},
		{"another tenant's token", "default", brokertest.Token(t, cfg, "b"), `tenant "b"`},
		{"oversize", "default", strings.Repeat("x", 64<<10-512), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := brokertest.DialRaw(t, b, cfg)
			ctrl, msg, err := rc.HandshakeToken(ctx, tc.tenant, tc.token)
			if err != nil {
				t.Fatalf("handshake: %v", err)
			}
			e, ok := msg.(*wire.ErrorMsg)
			if !ok || (e.Code != wire.CodeUnauthenticated && e.Code != wire.CodeInvalidRequest) {
				t.Fatalf("handshake with %s answered %T %+v, want unauthenticated", tc.name, msg, msg)
			}
			if !strings.Contains(e.Message, tc.says) {
				t.Fatalf("refusal %q does not say %q", e.Message, tc.says)
			}
			if _, err := ctrl.ReadMessage(ctx); err == nil {
				t.Fatal("the refused connection answered more")
			}
			if err := rc.CloseError(ctx); err == nil {
				t.Fatal("the refused connection was not closed")
			}
		})
	}
}

// TestQuotas: the tenant limits refuse with their typed errors and count
// the refusals; a tenant's publish rate is held near its limit while
// another tenant's publishes, below the limit, all pass.
func TestQuotas(t *testing.T) {
	cfg := brokertest.Config(t)
	cfg.TenantPublishMsgsPerSec = 2000
	cfg.TenantMaxSubscriptions = 2
	cfg.TenantMaxStreams = 3
	cfg.MaxConnectionsPerIP = 4
	b := brokertest.Start(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a := brokertest.DialOptions(t, b, cfg, client.Options{Tenant: "a"})
	bc := brokertest.DialOptions(t, b, cfg, client.Options{Tenant: "b"})

	t.Run("publish rate", func(t *testing.T) {
		const window = 2 * time.Second
		slow := make(chan error, 1)
		go func() { // tenant b, well below the limit: 10 records every 20 ms
			var err error
			for i := 0; i < int(window/(20*time.Millisecond)) && err == nil; i++ {
				err = bc.PublishBatch(ctx, client.Stream{Tenant: "b", Name: "slow"}, make([][]byte, 10), client.PublishOptions{})
				time.Sleep(20 * time.Millisecond) // pacing the load, not synchronising
			}
			slow <- err
		}()
		batch := make([][]byte, 10)
		for i := range batch {
			batch[i] = []byte("x")
		}
		accepted, refused := 0, 0
		start := time.Now()
		for time.Since(start) < window {
			err := a.PublishBatch(ctx, client.Stream{Tenant: "a", Name: "fast"}, batch, client.PublishOptions{})
			switch {
			case err == nil:
				accepted += len(batch)
			case errors.Is(err, wire.ErrOverloaded) && strings.Contains(err.Error(), "tenant_quota"):
				refused++
			default:
				t.Fatal(err)
			}
		}
		elapsed := time.Since(start)
		// A full bucket (one second's worth) plus the rate over the window.
		limit := 2000 + int(2000*elapsed.Seconds()) + len(batch)
		if accepted > limit || accepted < limit/2 || refused == 0 {
			t.Fatalf("tenant a published %d records in %s with %d refusals; want at most %d (2000/s and a 2000 burst), at least half of it, and refusals", accepted, elapsed, refused, limit)
		}
		if err := <-slow; err != nil {
			t.Fatalf("tenant b, below its limit, was refused beside tenant a at its limit: %v", err)
		}
	})
	t.Run("subscriptions", func(t *testing.T) {
		var subs []*client.Subscription
		for i := range 2 {
			s, err := a.Subscribe(ctx, client.Stream{Tenant: "a", Name: "fast"}, client.SubscribeOptions{QueueCapacity: i + 1})
			if err != nil {
				t.Fatal(err)
			}
			subs = append(subs, s)
		}
		if _, err := a.Subscribe(ctx, client.Stream{Tenant: "a", Name: "fast"}, client.SubscribeOptions{}); !errors.Is(err, wire.ErrLimitExceeded) || !strings.Contains(err.Error(), "tenant_max_subscriptions") {
			t.Fatalf("a third subscription with tenant_max_subscriptions 2: %v, want limit_exceeded", err)
		}
		if err := subs[0].Close(ctx); err != nil {
			t.Fatal(err)
		}
		// The ended subscription's place comes back (the session ends it
		// before it answers the unsubscribe).
		if _, err := a.Subscribe(ctx, client.Stream{Tenant: "a", Name: "fast"}, client.SubscribeOptions{}); err != nil {
			t.Fatalf("subscribe after one of two ended: %v", err)
		}
	})
	t.Run("streams", func(t *testing.T) {
		// Tenant b has "slow" (implicit) from the rate test.
		for _, name := range []string{"s1", "s2"} {
			if _, err := bc.CreateStream(ctx, client.Stream{Tenant: "b", Name: name}, client.StreamConfig{}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := bc.CreateStream(ctx, client.Stream{Tenant: "b", Name: "s3"}, client.StreamConfig{}); !errors.Is(err, wire.ErrLimitExceeded) {
			t.Fatalf("a fourth stream with tenant_max_streams 3: %v, want limit_exceeded", err)
		}
		if err := bc.Publish(ctx, client.Stream{Tenant: "b", Name: "implicit"}, []byte("x"), client.PublishOptions{}); !errors.Is(err, wire.ErrLimitExceeded) {
			t.Fatalf("an implicit fourth stream: %v, want limit_exceeded", err)
		}
	})
	t.Run("connections per IP", func(t *testing.T) {
		// Two clients above, two more fill the limit of 4.
		brokertest.Dial(t, b, cfg)
		brokertest.Dial(t, b, cfg)
		dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
		defer dcancel()
		_, err := client.Dial(dctx, b.Addr().String(), client.Options{CAFile: cfg.DataDir + "/cert.pem", Token: brokertest.Token(t, cfg, "default")})
		if err == nil || !strings.Contains(err.Error(), "max_connections_per_ip") {
			t.Fatalf("a fifth connection from 127.0.0.1 with max_connections_per_ip 4: %v, want refused naming the limit", err)
		}
	})
	for _, limit := range []string{"tenant_publish_msgs_per_sec", "tenant_max_subscriptions", "tenant_max_streams", "max_connections_per_ip"} {
		if got := brokertest.Value(t, b, "felix_quota_refused_total", "limit", limit); got == 0 {
			t.Errorf("felix_quota_refused_total{limit=%q} = 0 after refusals", limit)
		}
	}
}

// TestTenantMaxConnections: one tenant at tenant_max_connections is refused
// a connection naming the limit and its tenant, another tenant on the same
// address is not, and a closed connection gives its tenant the place back.
func TestTenantMaxConnections(t *testing.T) {
	cfg := brokertest.Config(t)
	cfg.TenantMaxConnections = 2
	b := brokertest.Start(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dial := func(tenant string) (*client.Client, error) {
		return client.Dial(ctx, b.Addr().String(), client.Options{CAFile: cfg.DataDir + "/cert.pem", Tenant: tenant, Token: brokertest.Token(t, cfg, tenant)})
	}
	first := brokertest.DialOptions(t, b, cfg, client.Options{Tenant: "a"})
	brokertest.DialOptions(t, b, cfg, client.Options{Tenant: "a"})
	_, err := dial("a")
	if !errors.Is(err, wire.ErrLimitExceeded) || !strings.Contains(err.Error(), `tenant_max_connections 2 reached for tenant "a"`) {
		t.Fatalf("a third connection of tenant a with tenant_max_connections 2: %v, want limit_exceeded naming the limit and the tenant", err)
	}
	other, err := dial("b")
	if err != nil {
		t.Fatalf("tenant b beside a full tenant a: %v", err)
	}
	defer other.Close(ctx)
	if err := first.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// The broker releases the place when it has seen the connection end,
	// which the client's Close does not wait for: the next dial is retried
	// until then, under the test's deadline.
	for {
		again, err := dial("a")
		if err == nil {
			again.Close(ctx)
			break
		}
		if !errors.Is(err, wire.ErrLimitExceeded) || ctx.Err() != nil {
			t.Fatalf("tenant a after one of its connections closed: %v", err)
		}
	}
	if got := brokertest.Value(t, b, "felix_quota_refused_total", "limit", "tenant_max_connections"); got == 0 {
		t.Error(`felix_quota_refused_total{limit="tenant_max_connections"} = 0 after a refusal`)
	}
}

// TestAuthNone: an open broker serves a client with no token on loopback,
// and refuses to start on another address unless told it is meant.
func TestAuthNone(t *testing.T) {
	cfg := brokertest.Config(t)
	cfg.Auth = "none"
	b := brokertest.Start(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, b.Addr().String(), client.Options{CAFile: cfg.DataDir + "/cert.pem"})
	if err != nil {
		t.Fatalf("dial an auth-none broker without a token: %v", err)
	}
	defer c.Close(ctx)
	if err := c.Publish(ctx, client.Stream{Name: "open"}, []byte("x"), client.PublishOptions{}); err != nil {
		t.Fatal(err)
	}

	wide := brokertest.Config(t)
	wide.Auth = "none"
	wide.Listen = "0.0.0.0:0"
	nb, err := broker.New(wide)
	if err != nil {
		t.Fatal(err)
	}
	if err := nb.Start(); err == nil || !strings.Contains(err.Error(), "auth_none_anywhere") {
		_ = nb.Stop(ctx)
		t.Fatalf("auth none on 0.0.0.0 started (%v), want a refusal naming auth_none_anywhere", err)
	}
}

// TestTokenExpiryEndsRights: when a connection's token expires its open
// subscription ends, its event stream reset with StreamCodeUnauthenticated
// (the client tells "your token expired" from other ends), new operations
// are refused unauthenticated, and a fresh token on the same connection
// (a second auth) restores service.
func TestTokenExpiryEndsRights(t *testing.T) {
	cfg := brokertest.Config(t)
	b := brokertest.Start(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rc := brokertest.DialRaw(t, b, cfg)
	ctrl, msg, err := rc.HandshakeToken(ctx, "default", brokertest.TokenFor(t, cfg, "default", 2*time.Second))
	if _, ok := msg.(*wire.AuthOK); err != nil || !ok {
		t.Fatalf("handshake: %T %+v (%v)", msg, msg, err)
	}
	subscribe := func(id uint64) wire.Message {
		t.Helper()
		if err := ctrl.Send(&wire.Subscribe{RequestID: id, Tenant: "default", Namespace: "default", Stream: "expiring"}); err != nil {
			t.Fatal(err)
		}
		msg, err := ctrl.ReadMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return msg
	}
	if m, ok := subscribe(1).(*wire.Subscribed); !ok {
		t.Fatalf("subscribe with a live token: %T %+v", m, m)
	}
	events, _, err := rc.AcceptEventStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The subscription ends when the token expires: the read fails with
	// the broker's reset code, not before.
	_, _, err = events.ReadFrame(ctx)
	var se *quic.StreamError
	if !errors.As(err, &se) || uint64(se.ErrorCode) != wire.StreamCodeUnauthenticated {
		t.Fatalf("the subscription of an expired token ended with %v, want a reset with StreamCodeUnauthenticated", err)
	}
	if e, ok := subscribe(2).(*wire.ErrorMsg); !ok || e.Code != wire.CodeUnauthenticated || !strings.Contains(e.Message, "expired") {
		t.Fatalf("subscribe after expiry: %T %+v, want unauthenticated saying the token expired", e, e)
	}
	if err := ctrl.Send(&wire.Auth{Tenant: "default", Token: brokertest.Token(t, cfg, "default")}); err != nil {
		t.Fatal(err)
	}
	if m, err := ctrl.ReadMessage(ctx); err != nil {
		t.Fatal(err)
	} else if _, ok := m.(*wire.AuthOK); !ok {
		t.Fatalf("re-authentication answered %T %+v, want AuthOK", m, m)
	}
	if m, ok := subscribe(3).(*wire.Subscribed); !ok {
		t.Fatalf("subscribe after re-authentication: %T %+v", m, m)
	}
}

// TestIdleImplicitStreamIsReclaimed: an implicit in-memory stream nobody
// uses is reclaimed after stream_idle_timeout_ms: its shard and ring go,
// and it no longer counts against its tenant's streams.
func TestIdleImplicitStreamIsReclaimed(t *testing.T) {
	cfg := brokertest.Config(t)
	cfg.StreamIdleTimeout = 200 * time.Millisecond
	cfg.TenantMaxStreams = 1
	b := brokertest.Start(t, cfg)
	c := brokertest.Dial(t, b, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.Publish(ctx, client.Stream{Name: "first"}, []byte("x"), client.PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.Publish(ctx, client.Stream{Name: "second"}, []byte("x"), client.PublishOptions{}); !errors.Is(err, wire.ErrLimitExceeded) {
		t.Fatalf("a second stream with tenant_max_streams 1: %v, want limit_exceeded", err)
	}
	// Once "first" was idle for the timeout, its place is free. Polled:
	// the reclaim happens on the shard's own tick, with no event outside.
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if err = c.Publish(ctx, client.Stream{Name: "second"}, []byte("x"), client.PublishOptions{}); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("publish to a second stream after the first was idle for 10 s (timeout 200 ms): %v", err)
	}
	list, err := c.ListStreams(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list {
		if s.Stream.Name == "first" {
			t.Fatalf("the idle implicit stream is still listed: %+v", s)
		}
	}
	// A connection that used the reclaimed stream can use the name again
	// (after the other one is reclaimed in turn: the limit is 1).
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if err = c.Publish(ctx, client.Stream{Name: "first"}, []byte("x"), client.PublishOptions{}); err == nil {
			break
		}
		if !errors.Is(err, wire.ErrLimitExceeded) {
			t.Fatalf("publish to a reclaimed implicit stream: %v", err)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
}
