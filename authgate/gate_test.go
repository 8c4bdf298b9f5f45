package authgate

import (
	"errors"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getfelix/felix-go/auth"
	"github.com/getfelix/felix-go/quota"
	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/wire"
)

// counts records what a gate counted, by hook and label.
type counts struct{ refused, failed, throttled []string }

// newGate is a gate under auth jwt over a fresh data directory, with a
// limiter of burst failures an address and the signer of its local key.
func newGate(t *testing.T, burst int) (*Gate, *auth.Signer, *counts) {
	t.Helper()
	dir := t.TempDir()
	c := &counts{}
	g, err := New(Config{
		DataDir:   dir,
		Failures:  quota.NewAuthFailures(quota.Config{AuthFailureBurst: burst, AuthFailureInterval: time.Hour}),
		Refused:   func(r string) { c.refused = append(c.refused, r) },
		Failed:    func(f string) { c.failed = append(c.failed, f) },
		Throttled: func(f string) { c.throttled = append(c.throttled, f) },
	}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	signer, err := auth.LocalSigner(dir)
	if err != nil {
		t.Fatal(err)
	}
	return g, signer, c
}

func mint(t *testing.T, s *auth.Signer, tenant string, grants ...string) string {
	t.Helper()
	c := auth.Claims{Tenant: tenant}
	for _, g := range grants {
		c.Grants = append(c.Grants, auth.MustParseGrant(g))
	}
	token, _, err := s.Mint(c, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return token
}

var client = service.Client{Tenant: "t", Remote: &net.UDPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1}, Frontend: service.FrontendFelix}

// TestAuthenticate: a token for the named tenant is its principal; no
// token, a token that does not verify and another tenant's are refused
// unauthenticated, each counted by its reason and as a failure of the
// front end.
func TestAuthenticate(t *testing.T) {
	g, signer, c := newGate(t, 100)
	now := time.Now()
	p, err := g.Authenticate(client, mint(t, signer, "t", "stream.publish:ns/s"), now)
	if err != nil || p.Tenant != "t" || p.Check(auth.ActionStreamPublish, wire.Scope{Tenant: "t", Namespace: "ns", Stream: "s"}) != nil {
		t.Fatalf("Authenticate with t's token = %+v, %v; want t's principal, allowed to publish to ns/s", p, err)
	}
	for _, token := range []string{"", "not-a-token", mint(t, signer, "other")} {
		if _, err := g.Authenticate(client, token, now); !errors.Is(err, wire.ErrUnauthenticated) {
			t.Errorf("Authenticate with %.20q = %v; want unauthenticated", token, err)
		}
	}
	if want := []string{"no_token", "invalid_token", "wrong_tenant"}; !slices.Equal(c.refused, want) {
		t.Errorf("refusals counted %q, want %q", c.refused, want)
	}
	if want := []string{"felix1", "felix1", "felix1"}; !slices.Equal(c.failed, want) {
		t.Errorf("failures counted %q, want %q", c.failed, want)
	}
}

// TestThrottledBeforeTheCheck: once an address spent its failures, even a
// valid credential is refused auth_throttled without being checked, and
// the refusal is counted as throttled, not failed.
func TestThrottledBeforeTheCheck(t *testing.T) {
	g, signer, c := newGate(t, 1)
	now := time.Now()
	if _, err := g.Authenticate(client, "", now); err == nil {
		t.Fatal("no token authenticated")
	}
	checked := false
	err := g.CheckCredential(client, now, func() error { checked = true; return nil })
	if !errors.Is(err, wire.ErrOverloaded) || !strings.Contains(err.Error(), "auth_throttled") || checked {
		t.Fatalf("CheckCredential after the burst = %v (checked %v); want auth_throttled, unchecked", err, checked)
	}
	if _, err := g.Authenticate(client, mint(t, signer, "t"), now); !errors.Is(err, wire.ErrOverloaded) {
		t.Errorf("a valid token after the burst = %v; want auth_throttled", err)
	}
	if len(c.failed) != 1 || len(c.throttled) != 2 {
		t.Errorf("counted %d failed and %d throttled, want 1 and 2", len(c.failed), len(c.throttled))
	}
	other := client
	other.Remote = &net.UDPAddr{IP: net.IPv4(192, 0, 2, 2), Port: 1}
	if _, err := g.Authenticate(other, mint(t, signer, "t"), now); err != nil {
		t.Errorf("another address is throttled too: %v", err)
	}
}

// TestAuthorizeOrder: a reserved stream is refused before anything else,
// an expired principal before its grants are looked at, then the grant;
// only the last two are counted, each by its reason.
func TestAuthorizeOrder(t *testing.T) {
	g, _, c := newGate(t, 100)
	now := time.Now()
	p := &auth.Principal{Tenant: "t", Grants: []auth.Grant{auth.MustParseGrant("stream.publish:ns/s")}, Expires: now.Add(time.Hour)}
	expired := *p
	expired.Expires = now.Add(-time.Second)
	s := wire.Scope{Tenant: "t", Namespace: "ns", Stream: "s"}
	reserved := wire.Scope{Tenant: "t", Namespace: "ns", Stream: wire.GroupStreamPrefix + "s"}
	check := func(a auth.Action, scope wire.Scope) func(*auth.Principal) error {
		return func(p *auth.Principal) error { return p.Check(a, scope) }
	}
	if err := g.Authorize(&expired, reserved, now, check(auth.ActionStreamPublish, reserved)); !errors.Is(err, wire.ErrInvalidRequest) || !strings.Contains(err.Error(), "reserved") {
		t.Errorf("a reserved stream = %v; want invalid_request naming it reserved", err)
	}
	if err := g.Authorize(&expired, s, now, check(auth.ActionStreamSubscribe, s)); !errors.Is(err, wire.ErrUnauthenticated) || !strings.Contains(err.Error(), "expired") {
		t.Errorf("an expired principal = %v; want unauthenticated saying it expired", err)
	}
	if err := g.Authorize(p, s, now, check(auth.ActionStreamSubscribe, s)); !errors.Is(err, wire.ErrForbidden) {
		t.Errorf("subscribe without the grant = %v; want forbidden", err)
	}
	if err := g.Authorize(p, s, now, check(auth.ActionStreamPublish, s)); err != nil {
		t.Errorf("publish with the grant = %v; want nil", err)
	}
	if want := []string{"expired", "forbidden"}; !slices.Equal(c.refused, want) {
		t.Errorf("refusals counted %q, want %q", c.refused, want)
	}
}

// TestAuthorizeNode: a node route needs a token, and a token with the
// node right (the data directory's admin.token has it).
func TestAuthorizeNode(t *testing.T) {
	g, signer, _ := newGate(t, 100)
	now := time.Now()
	if err := g.AuthorizeNode("", auth.ActionNodeView, "", now); !errors.Is(err, wire.ErrUnauthenticated) {
		t.Errorf("no token = %v; want unauthenticated", err)
	}
	if err := g.AuthorizeNode(mint(t, signer, "t", "stream.publish:*/*"), auth.ActionNodeView, "", now); !errors.Is(err, wire.ErrForbidden) {
		t.Errorf("a token without node.view = %v; want forbidden", err)
	}
	if err := g.AuthorizeNode(mint(t, signer, "t", "node.view:*"), auth.ActionNodeView, "", now); err != nil {
		t.Errorf("a token with node.view = %v; want nil", err)
	}
}

// TestAuthNone: under auth none every client gets every right on the
// tenant it names, never expiring, every node route is open, and there
// are no keys to reload.
func TestAuthNone(t *testing.T) {
	g, err := New(Config{None: true}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	p, err := g.Authenticate(service.Client{Tenant: "t"}, "", time.Now())
	if err != nil || p.Tenant != "t" || !p.Expires.Equal(NoExpiry) || p.Check(auth.ActionStreamManage, wire.Scope{Tenant: "t", Namespace: "a", Stream: "b"}) != nil {
		t.Errorf("auth none's principal = %+v, %v; want every right on t, never expiring", p, err)
	}
	if err := g.AuthorizeNode("", auth.ActionNodeManage, "", time.Now()); err != nil {
		t.Errorf("auth none's node route = %v; want nil", err)
	}
	if g.Tokens() || !errors.Is(g.ReloadKeys(), ErrNoKeys) {
		t.Errorf("auth none: Tokens %v, ReloadKeys %v; want false and ErrNoKeys", g.Tokens(), g.ReloadKeys())
	}
}

func TestIsLoopback(t *testing.T) {
	tests := []struct {
		give string
		want bool
	}{
		{"127.0.0.1:4222", true},
		{"[::1]:4222", true},
		{"localhost:4222", true},
		{":4222", false},
		{"0.0.0.0:4222", false},
		{"192.0.2.1:4222", false},
		{"example.com:4222", false},
		{"127.0.0.1", false},
	}
	for _, tt := range tests {
		if got := IsLoopback(tt.give); got != tt.want {
			t.Errorf("IsLoopback(%q) = %v, want %v", tt.give, got, tt.want)
		}
	}
}
