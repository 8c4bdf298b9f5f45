package main

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getfelix/felix-go/auth"
)

// TestTokenCreate mints with the local key of a data directory and checks
// that a Verifier trusting that directory's public key accepts the token
// with the tenant and grants asked for.
func TestTokenCreate(t *testing.T) {
	t.Parallel()
	work := t.TempDir()
	dataDir := filepath.Join(work, "felix-data")
	if _, err := auth.EnsureLocal(dataDir, time.Now()); err != nil {
		t.Fatal(err)
	}
	v, err := auth.NewVerifier(auth.Config{KeyFile: filepath.Join(dataDir, auth.PublicKeyFile)})
	if err != nil {
		t.Fatal(err)
	}
	wantGrants := []string{"stream.publish:orders/eu", "stream.subscribe:orders/*", "node.view:*"}
	grantArgs := func() []string {
		var out []string
		for _, g := range wantGrants {
			out = append(out, "--grant", g)
		}
		return out
	}
	check := func(what, token string, ttl time.Duration) {
		t.Helper()
		p, err := v.Verify(token, time.Now())
		if err != nil {
			t.Fatalf("%s: Verify: %v", what, err)
		}
		var got []string
		for _, g := range p.Grants {
			got = append(got, g.String())
		}
		if p.Tenant != "acme" || !slices.Equal(got, wantGrants) {
			t.Errorf("%s: principal tenant %q, grants %q; want acme, %q", what, p.Tenant, got, wantGrants)
		}
		if left := time.Until(p.Expires); left > ttl || left < ttl-time.Minute {
			t.Errorf("%s: expires in %s, want about %s", what, left, ttl)
		}
	}

	t.Run("json", func(t *testing.T) {
		p := runFelix(t, opts{}, append([]string{"token", "create", "--data-dir", dataDir, "--tenant", "acme", "--ttl", "2h", "--json"}, grantArgs()...)...)
		p.wantExit(t, 0)
		var out struct {
			Token, Tenant, Expires string
			Grants                 []string
		}
		if err := json.Unmarshal(p.stdout.Bytes(), &out); err != nil {
			t.Fatalf("stdout %q: %v", p.stdout, err)
		}
		if out.Tenant != "acme" || !slices.Equal(out.Grants, wantGrants) {
			t.Errorf("--json printed tenant %q, grants %q; want acme, %q", out.Tenant, out.Grants, wantGrants)
		}
		if exp, err := time.Parse(time.RFC3339, out.Expires); err != nil || time.Until(exp) > 2*time.Hour || time.Until(exp) < time.Hour {
			t.Errorf("--json expires %q (%v), want about 2h from now", out.Expires, err)
		}
		check("--json", out.Token, 2*time.Hour)
	})

	t.Run("plain, default data dir", func(t *testing.T) {
		// In the folder holding felix-data, no --data-dir is needed.
		p := runFelix(t, opts{dir: work}, append([]string{"token", "create", "--tenant", "acme"}, grantArgs()...)...)
		p.wantExit(t, 0)
		out := lines(p.stdout.String())
		if len(out) != 1 {
			t.Fatalf("stdout %q, want the token alone on one line", p.stdout)
		}
		check("plain", out[0], time.Hour)
	})

	t.Run("refusals", func(t *testing.T) {
		tests := []struct {
			args []string
			code int
			want string
		}{
			{[]string{"--data-dir", t.TempDir(), "--tenant", "acme", "--grant", "stream.publish:a/b"}, 1, "start `felix broker --data-dir"},
			{[]string{"--data-dir", dataDir, "--tenant", "acme", "--grant", "stream.publish:orders"}, 2, `must be NAMESPACE/STREAM`},
			{[]string{"--data-dir", dataDir, "--tenant", "acme", "--grant", "stream.push:a/b"}, 2, "unknown action"},
			{[]string{"--data-dir", dataDir, "--tenant", "acme"}, 2, "at least one --grant"},
			{[]string{"--data-dir", dataDir, "--grant", "stream.publish:a/b"}, 2, "--tenant is required"},
			{[]string{"--data-dir", dataDir, "--tenant", "a/b", "--grant", "stream.publish:a/b"}, 2, "tenant name"},
			{[]string{"--data-dir", dataDir, "--tenant", "acme", "--grant", "stream.publish:a/b", "--ttl", "0s"}, 2, "--ttl"},
		}
		for _, tt := range tests {
			p := runFelix(t, opts{}, append([]string{"token", "create"}, tt.args...)...)
			p.wantExit(t, tt.code)
			if !strings.Contains(p.stderr.String(), tt.want) || p.stdout.String() != "" {
				t.Errorf("felix token create %q: stdout %q, stderr %q; want nothing on stdout and %q on stderr", tt.args, p.stdout, p.stderr, tt.want)
			}
		}
	})
}
