package kafka_test

import (
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/getfelix/felix-go/broker"
	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/wire"
)

// loopback is 127.0.0.n: on Linux every 127.0.0.0/8 address is loopback.
func loopback(n int) netip.Addr { return netip.AddrFrom4([4]byte{127, 0, 0, byte(n)}) }

// dialFrom is a raw TCP connection to addr from the local address from,
// its deadline 5 s away, closed when the test ends.
func dialFrom(t *testing.T, addr string, from netip.Addr) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(from, 0)), Timeout: 5 * time.Second}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s from %s: %v", addr, from, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	return conn
}

// TestPreAuthFlood: Kafka connections that never authenticate, from many
// addresses and five times the pre-auth bound, keep no SASL client out.
func TestPreAuthFlood(t *testing.T) {
	const addrs, perAddr, bound = 20, 4, 16
	cfg := kafkaConfig(t)
	cfg.MaxClientConnections = bound
	cfg.MaxConnectionsPerIP = perAddr
	cfg.MaxPreAuthConnections = bound
	cfg.MaxPreAuthConnectionsPerIP = perAddr
	cfg.AuthTimeout = time.Minute
	b := startBroker(t, cfg)
	addr := b.KafkaAddr().String()
	for i := range addrs {
		for range perAddr {
			dialFrom(t, addr, loopback(2+i)) // says nothing
		}
	}
	flood := addrs * perAddr
	ctx := brokertest.Context(t, 30*time.Second)
	brokertest.Eventually(t, ctx, "every flood connection taken in hand", func() bool {
		accepted := brokertest.Value(t, b, "felix_kafka_connections_total", "event", "accepted")
		refused := brokertest.Value(t, b, "felix_kafka_connections_total", "event", "refused")
		displaced := brokertest.Value(t, b, "felix_kafka_connections_total", "event", "displaced")
		return accepted+refused == float64(flood) && displaced+refused == float64(flood-bound)
	})

	conn := saslConn(t, b, cfg) // from 127.0.0.1, logged in
	resp := kmsg.NewPtrMetadataResponse()
	resp.Version = 4
	req := kmsg.NewPtrMetadataRequest()
	req.Version = 4
	exchange(t, conn, req, resp)
	if len(resp.Brokers) != 1 {
		t.Fatalf("metadata after a pre-auth flood lists %d brokers, want 1", len(resp.Brokers))
	}
	if got := brokertest.Value(t, b, "felix_kafka_connections_total", "event", "displaced"); got < float64(flood-bound) {
		t.Errorf("felix_kafka_connections_total{event=displaced} = %v, want at least %d", got, flood-bound)
	}
	if got := brokertest.Value(t, b, "felix_connections_preauth"); got > bound {
		t.Errorf("felix_connections_preauth = %v, above max_preauth_connections %d", got, bound)
	}
}

// TestSASLBruteForce: wrong SASL/PLAIN passwords from one address are
// checked until auth_failure_burst have failed, then refused unchecked
// (auth_throttled) and counted under kafka; the allowance is the
// address's on every front end, so its felix/1 handshake is throttled too.
func TestSASLBruteForce(t *testing.T) {
	const burst = 3
	cfg := kafkaConfig(t)
	cfg.AuthFailureBurst = burst
	cfg.AuthFailureInterval = time.Hour // nothing is forgiven during the test
	b := startBroker(t, cfg)
	attacker := loopback(2)
	for i := range burst + 2 {
		msg := saslAttempt(t, b, attacker, "not-a-token")
		throttled := strings.Contains(msg, "auth_throttled:") && strings.Contains(msg, "retry after")
		if throttled != (i >= burst) {
			t.Fatalf("attempt %d: SASL refused with %q; want auth_throttled only past auth_failure_burst %d", i+1, msg, burst)
		}
	}
	if got := brokertest.Value(t, b, "felix_auth_failures_total", "frontend", "kafka"); got != burst {
		t.Errorf("felix_auth_failures_total{frontend=kafka} = %v, want %d", got, burst)
	}
	if got := brokertest.Value(t, b, "felix_auth_throttled_total", "frontend", "kafka"); got != 2 {
		t.Errorf("felix_auth_throttled_total{frontend=kafka} = %v, want 2", got)
	}

	ctx := brokertest.Context(t, 10*time.Second)
	_, answer, err := brokertest.DialRawFrom(t, b, cfg, attacker).Handshake(ctx, "default")
	if em, ok := answer.(*wire.ErrorMsg); err != nil || !ok || em.Code != wire.CodeOverloaded {
		t.Fatalf("felix/1 handshake from the throttled address: %T %+v (%v), want overloaded auth_throttled", answer, answer, err)
	}
	saslConn(t, b, cfg) // 127.0.0.1 is another address
}

// saslAttempt logs in from from with password pass, which the broker must
// refuse, and returns the refusal's message.
func saslAttempt(t *testing.T, b *broker.Broker, from netip.Addr, pass string) string {
	t.Helper()
	conn := dialFrom(t, b.KafkaAddr().String(), from)
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Version, hs.Mechanism = 1, "PLAIN"
	exchange(t, conn, hs, kmsg.NewPtrSASLHandshakeResponse())
	auth := kmsg.NewPtrSASLAuthenticateRequest()
	auth.Version, auth.SASLAuthBytes = 1, []byte("\x00default\x00"+pass)
	resp := kmsg.NewPtrSASLAuthenticateResponse()
	resp.Version = 1
	exchange(t, conn, auth, resp)
	if resp.ErrorCode != kerr.SaslAuthenticationFailed.Code || resp.ErrorMessage == nil {
		t.Fatalf("SASL/PLAIN with a wrong password: code %d, message %v; want SASL_AUTHENTICATION_FAILED with a message", resp.ErrorCode, resp.ErrorMessage)
	}
	return *resp.ErrorMessage
}
