package broker_test

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/getfelix/felix-go/broker"
	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/wire"
)

// loopback is 127.0.0.n: on Linux every 127.0.0.0/8 address is loopback,
// so a test can be many clients.
func loopback(n int) netip.Addr { return netip.AddrFrom4([4]byte{127, 0, 0, byte(n)}) }

// TestPreAuthFlood: connections that never authenticate, from many
// addresses and five times the pre-auth bound, keep no client with a valid
// token out: the flood is held to max_preauth_connections (the oldest
// displaced by the newest) and an authenticated connection takes a slot of
// its own.
func TestPreAuthFlood(t *testing.T) {
	const addrs, perAddr, bound = 20, 4, 16
	cfg := brokertest.Config(t)
	cfg.MaxClientConnections = bound
	cfg.MaxConnectionsPerIP = perAddr
	cfg.MaxPreAuthConnections = bound
	cfg.MaxPreAuthConnectionsPerIP = perAddr
	cfg.AuthTimeout = time.Minute // the flood stays until the test ends, unless displaced
	b := brokertest.Start(t, cfg)
	ctx := brokertest.Context(t, 60*time.Second)

	for i := range addrs {
		for range perAddr {
			brokertest.DialRawFrom(t, b, cfg, loopback(2+i)) // says nothing
		}
	}
	flood := addrs * perAddr
	brokertest.Eventually(t, ctx, "every flood connection taken in hand", func() bool {
		return brokertest.Value(t, b, "felix_connections_total", "event", "accepted") == float64(flood) &&
			brokertest.Value(t, b, "felix_connections_total", "event", "displaced")+
				brokertest.Value(t, b, "felix_connections_total", "event", "refused") == float64(flood-bound)
	})

	c := brokertest.Dial(t, b, cfg) // from 127.0.0.1, with a token
	st := client.Stream{Tenant: "default", Name: "after-flood"}
	if err := c.Publish(ctx, st, []byte("x"), client.PublishOptions{}); err != nil {
		t.Fatalf("publish from the authenticated client after a pre-auth flood: %v", err)
	}
	if got := brokertest.Value(t, b, "felix_connections_total", "event", "displaced"); got < float64(flood-bound) {
		t.Errorf("felix_connections_total{event=displaced} = %v, want at least %d (the flood past max_preauth_connections %d)", got, flood-bound, bound)
	}
	if got := brokertest.Value(t, b, "felix_connections_preauth"); got > bound {
		t.Errorf("felix_connections_preauth = %v, above max_preauth_connections %d", got, bound)
	}
	if got := brokertest.Value(t, b, "felix_connections_authenticated"); got != 1 {
		t.Errorf("felix_connections_authenticated = %v, want 1", got)
	}
}

// TestAuthBruteForce: wrong tokens from one address are checked until
// auth_failure_burst have failed; after that the address is refused
// overloaded (auth_throttled, retryable, with the wait) without a check,
// even with a valid token, while other addresses are served. The handshake
// and a re-authentication are counted in one allowance, under felix1.
func TestAuthBruteForce(t *testing.T) {
	const burst = 3
	cfg := brokertest.Config(t)
	cfg.AuthFailureBurst = burst
	cfg.AuthFailureInterval = time.Hour // nothing is forgiven during the test
	b := brokertest.Start(t, cfg)
	ctx := brokertest.Context(t, 60*time.Second)

	t.Run("handshake", func(t *testing.T) {
		attacker := loopback(2)
		for i := range burst + 2 {
			rc := brokertest.DialRawFrom(t, b, cfg, attacker)
			_, msg, err := rc.HandshakeToken(ctx, "default", "not-a-token")
			if err != nil {
				t.Fatalf("attempt %d: %v", i+1, err)
			}
			wantAuthAnswer(t, i+1, msg, i < burst)
		}
		valid := brokertest.DialRawFrom(t, b, cfg, attacker)
		_, msg, err := valid.Handshake(ctx, "default")
		if err != nil {
			t.Fatal(err)
		}
		wantAuthAnswer(t, burst+3, msg, false)
		brokertest.Dial(t, b, cfg) // 127.0.0.1 is another address
		wantAuthCounts(t, b, burst, 3)
	})
	t.Run("reauthentication", func(t *testing.T) {
		rc := brokertest.DialRawFrom(t, b, cfg, loopback(3))
		ctrl, _ := rc.MustHandshake(t, ctx)
		for i := range burst + 2 {
			if err := ctrl.Send(&wire.Auth{Tenant: "default", Token: "not-a-token"}); err != nil {
				t.Fatal(err)
			}
			msg, err := ctrl.ReadMessage(ctx)
			if err != nil {
				t.Fatalf("re-authentication %d: %v", i+1, err)
			}
			wantAuthAnswer(t, i+1, msg, i < burst)
		}
		wantAuthCounts(t, b, 2*burst, 3+2)
	})
}

// wantAuthAnswer checks the answer to the n-th attempt with a credential
// the broker must refuse: unauthenticated while checked, else throttled.
func wantAuthAnswer(t *testing.T, n int, msg wire.Message, checked bool) {
	t.Helper()
	em, ok := msg.(*wire.ErrorMsg)
	if !ok {
		t.Fatalf("attempt %d answered %T %+v, want an error", n, msg, msg)
	}
	switch {
	case checked && em.Code != wire.CodeUnauthenticated:
		t.Fatalf("attempt %d (within auth_failure_burst): %s %q, want unauthenticated", n, em.Code, em.Message)
	case !checked && (em.Code != wire.CodeOverloaded || em.Retry != wire.RetryAfter ||
		!strings.HasPrefix(em.Message, "auth_throttled:") || !strings.Contains(em.Message, "retry after")):
		t.Fatalf("attempt %d (past auth_failure_burst): %s (retry %d) %q, want overloaded, retry after, auth_throttled", n, em.Code, em.Retry, em.Message)
	}
}

func wantAuthCounts(t *testing.T, b *broker.Broker, failures, throttled int) {
	t.Helper()
	if got := brokertest.Value(t, b, "felix_auth_failures_total", "frontend", "felix1"); got != float64(failures) {
		t.Errorf("felix_auth_failures_total{frontend=felix1} = %v, want %d", got, failures)
	}
	if got := brokertest.Value(t, b, "felix_auth_throttled_total", "frontend", "felix1"); got != float64(throttled) {
		t.Errorf("felix_auth_throttled_total{frontend=felix1} = %v, want %d", got, throttled)
	}
}
