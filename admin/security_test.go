package admin_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/auth"
	"github.com/getfelix/felix-go/broker"
	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/config"
)

// Tests of who may reach the admin routes: the tenant a signing key is
// restricted to, and requests a browser makes on another site's behalf.

// tenantKey writes a JWKS file holding one new Ed25519 public key
// restricted to tenant (felix_tenants) and returns the file and a signer
// of that key.
func tenantKey(t *testing.T, tenant string) (path string, s *auth.Signer) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	jwk, err := jose.JSONWebKey{Key: pub}.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var key map[string]any
	if err := json.Unmarshal(jwk, &key); err != nil {
		t.Fatal(err)
	}
	key["felix_tenants"] = []string{tenant}
	doc, err := json.Marshal(map[string]any{"keys": []any{key}})
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(t.TempDir(), "keys.jwks")
	if err := os.WriteFile(path, doc, 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err = auth.NewSigner(priv); err != nil {
		t.Fatal(err)
	}
	return path, s
}

// mint is a token of s for tenant with grants.
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

// adminDo sends method path to b's admin endpoint with the headers given
// (key, value, …) and body, and returns the status and body.
func adminDo(t *testing.T, b *broker.Broker, method, path, body string, headers ...string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, brokertest.AdminURL(t, b, path), rd)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i] == "Host" {
			req.Host = headers[i+1]
			continue
		}
		req.Header.Set(headers[i], headers[i+1])
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	defer hc.CloseIdleConnections()
	res, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return res.StatusCode, string(data)
}

// tenantStream creates a durable stream of tenant on b and returns the
// path of its shard 0's actor, which a durable stream keeps running.
func tenantStream(t *testing.T, ctx context.Context, b *broker.Broker, cfg config.Config, tenant string) string {
	t.Helper()
	c := brokertest.DialOptions(t, b, cfg, client.Options{Tenant: tenant})
	st := client.Stream{Name: "orders"}
	if _, err := c.CreateStream(ctx, st, client.StreamConfig{Durable: true}); err != nil {
		t.Fatal(err)
	}
	if err := c.Publish(ctx, st, []byte("x"), client.PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, a := range b.Actors() {
		if a.Kind == string(actors.KindShard) && a.Labels["stream"] == tenant+"/default/orders" {
			return a.Path
		}
	}
	t.Fatalf("no shard actor of %s/default/orders in the tree", tenant)
	return ""
}

func tenantStreamPath(tenant string) string {
	return "/debug/stream?" + url.Values{"tenant": {tenant}, "ns": {"default"}, "stream": {"orders"}}.Encode()
}

// TestAdminTenantKeyNodeRights: a token signed by a key restricted to
// tenant acme, granted node.manage and node.view, cannot kill tenant
// globex's shard nor fail the disk (with chaos on), nor read the tree;
// with node.view it reads acme's stream page and not globex's. The
// operator's token (the broker's own, unrestricted key) still reads both.
func TestAdminTenantKeyNodeRights(t *testing.T) {
	keys, signer := tenantKey(t, "acme")
	cfg := brokertest.Config(t)
	cfg.Admin = "127.0.0.1:0"
	cfg.Chaos = true
	cfg.AuthKeys = keys
	b := brokertest.Start(t, cfg)
	ctx := brokertest.Context(t, 30*time.Second)
	tenantStream(t, ctx, b, cfg, "acme")
	victim := tenantStream(t, ctx, b, cfg, "globex")
	before, _ := brokertest.ActorAt(b, victim)

	manage := "Bearer " + mint(t, signer, "acme", "node.manage:*", "node.view:*", "stream.manage:*/*")
	for _, tt := range []struct{ path, body string }{
		{"/debug/chaos/kill", `{"path":"` + victim + `","mode":"stop"}`},
		{"/debug/chaos/kill", `{"kind":"shard","count":10}`},
		{"/debug/chaos/disk", `{"fail":true}`},
		{"/debug/cluster/move-replica?stream=acme/default/orders&shard=0&from=a&to=b", ""},
	} {
		code, body := adminDo(t, b, http.MethodPost, tt.path, tt.body, "Authorization", manage, "Content-Type", "application/json")
		if code != http.StatusForbidden || !strings.Contains(body, "restricted to tenants") {
			t.Errorf("POST %s %s with acme's key's node.manage token = %d %s; want 403 saying the key is restricted to tenants", tt.path, tt.body, code, body)
		}
	}
	if after, ok := brokertest.ActorAt(b, victim); !ok || after.Restarts != before.Restarts {
		t.Errorf("globex's shard %s after the refused kills: running %v, restarts %d -> %d; want it untouched", victim, ok, before.Restarts, after.Restarts)
	}
	if code, body := adminDo(t, b, http.MethodGet, "/debug/actors", "", "Authorization", manage); code != http.StatusForbidden {
		t.Errorf("GET /debug/actors with acme's key's node.view token = %d %.200s; want 403: the tree shows every tenant", code, body)
	}

	view := "Bearer " + mint(t, signer, "acme", "node.view:*")
	if code, body := adminDo(t, b, http.MethodGet, tenantStreamPath("globex"), "", "Authorization", view); code != http.StatusForbidden || strings.Contains(body, "shard_list") {
		t.Errorf("GET globex's stream with acme's key's node.view token = %d %.200s; want 403", code, body)
	}
	code, body := adminDo(t, b, http.MethodGet, tenantStreamPath("acme"), "", "Authorization", view)
	if code != http.StatusOK || !strings.Contains(body, `"stream":"acme/default/orders"`) {
		t.Errorf("GET acme's stream with acme's key's node.view token = %d %.200s; want 200 and the stream", code, body)
	}

	operator := "Bearer " + brokertest.Token(t, cfg, "default", "node.view:*")
	for _, tenant := range []string{"acme", "globex"} {
		if code, body := adminDo(t, b, http.MethodGet, tenantStreamPath(tenant), "", "Authorization", operator); code != http.StatusOK {
			t.Errorf("GET %s's stream with the broker's own key's node.view token = %d %.200s; want 200: its node rights are cluster-wide", tenant, code, body)
		}
	}
}

// TestAdminCrossSiteUnderAuthNone: with auth none and chaos on, no token
// is asked for, yet what a page of another site can send is refused: a
// text/plain form post from http://evil.example to the kill and disk
// routes (403), the same without an Origin (415: not JSON), and JSON with
// the foreign Origin (403). The shard keeps running and the disk keeps
// working; a JSON request from the endpoint's own origin goes through.
func TestAdminCrossSiteUnderAuthNone(t *testing.T) {
	cfg := brokertest.Config(t)
	cfg.Admin = "127.0.0.1:0"
	cfg.Auth = "none"
	cfg.Chaos = true
	b := brokertest.Start(t, cfg)
	ctx := brokertest.Context(t, 30*time.Second)
	shard := tenantStream(t, ctx, b, cfg, "default")
	before, _ := brokertest.ActorAt(b, shard)
	const evil = "http://evil.example"
	kill := `{"path":"` + shard + `","mode":"stop"}`
	for _, tt := range []struct {
		path, body, contentType, origin string
		want                            int
	}{
		{"/debug/chaos/kill", kill, "text/plain", evil, http.StatusForbidden},
		{"/debug/chaos/disk", `{"fail":true}`, "text/plain", evil, http.StatusForbidden},
		{"/debug/chaos/kill", kill, "text/plain", "", http.StatusUnsupportedMediaType},
		{"/debug/chaos/disk", `{"fail":true}`, "application/x-www-form-urlencoded", "", http.StatusUnsupportedMediaType},
		{"/debug/chaos/kill", kill, "application/json", evil, http.StatusForbidden},
		{"/debug/chaos/disk", `{"fail":true}`, "application/json", "null", http.StatusForbidden},
	} {
		headers := []string{"Content-Type", tt.contentType}
		if tt.origin != "" {
			headers = append(headers, "Origin", tt.origin)
		}
		if code, body := adminDo(t, b, http.MethodPost, tt.path, tt.body, headers...); code != tt.want {
			t.Errorf("POST %s (%s, Origin %q) under auth none = %d %s; want %d", tt.path, tt.contentType, tt.origin, code, body, tt.want)
		}
	}
	if after, ok := brokertest.ActorAt(b, shard); !ok || after.Restarts != before.Restarts {
		t.Fatalf("shard %s after the refused posts: running %v, restarts %d -> %d; want it untouched", shard, ok, before.Restarts, after.Restarts)
	}
	c := brokertest.Dial(t, b, cfg)
	if err := c.Publish(ctx, client.Stream{Name: "orders"}, []byte("y"), client.PublishOptions{}); err != nil {
		t.Fatalf("publish to the durable stream after the refused disk failures: %v; want the disk working", err)
	}
	own := "http://" + b.AdminAddr().String()
	if code, body := adminDo(t, b, http.MethodPost, "/debug/chaos/disk", `{"fail":false}`, "Content-Type", "application/json; charset=utf-8", "Origin", own); code != http.StatusOK {
		t.Errorf("POST /debug/chaos/disk, JSON from Origin %s = %d %s; want 200", own, code, body)
	}
}

// TestAdminForeignHost: a request whose Host is a name the endpoint does
// not know, as a DNS-rebinding page sends, is refused 421 on /metrics and
// /debug/actors, token or not; localhost, loopback addresses and a name of
// admin_allowed_hosts are answered, on any port.
func TestAdminForeignHost(t *testing.T) {
	for _, mode := range []string{"none", "jwt"} {
		t.Run("auth="+mode, func(t *testing.T) {
			cfg := brokertest.Config(t)
			cfg.Admin = "127.0.0.1:0"
			cfg.Auth = mode
			cfg.AdminAllowedHosts = "felix-1.internal, other.internal"
			b := brokertest.Start(t, cfg)
			_, port, _ := strings.Cut(b.AdminAddr().String(), ":")
			var authz []string
			if token := brokertest.AdminToken(t, cfg); token != "" {
				authz = []string{"Authorization", "Bearer " + token}
			}
			for _, path := range []string{"/metrics", "/debug/actors"} {
				for _, host := range []string{"evil.example", "evil.example:" + port, "localhost.evil.example", "127.0.0.1.nip.io:" + port} {
					code, body := adminDo(t, b, http.MethodGet, path, "", append([]string{"Host", host}, authz...)...)
					if code != http.StatusMisdirectedRequest || strings.Contains(body, "felix_") || strings.Contains(body, `"actors"`) {
						t.Errorf("GET %s with Host %s = %d %.120s; want 421 and nothing of the broker", path, host, code, body)
					}
				}
				for _, host := range []string{"localhost:" + port, "LocalHost", "127.0.0.1:" + port, "[::1]:" + port, "felix-1.internal:" + port, "OTHER.internal."} {
					if code, body := adminDo(t, b, http.MethodGet, path, "", append([]string{"Host", host}, authz...)...); code != http.StatusOK {
						t.Errorf("GET %s with Host %s = %d %.120s; want 200", path, host, code, body)
					}
				}
			}
		})
	}
}
