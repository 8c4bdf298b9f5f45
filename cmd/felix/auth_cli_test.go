package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/getfelix/felix-go/auth"
)

// Tokens as a user meets them: minted with felix token create, passed with
// --token, refused with a message that says why.

// mintCLI runs felix token create against dataDir and returns the token.
func mintCLI(t *testing.T, dataDir string, args ...string) string {
	t.Helper()
	r := runFelix(t, opts{}, append([]string{"token", "create", "--data-dir", dataDir}, args...)...)
	r.wantExit(t, 0)
	return strings.TrimSpace(r.stdout.String())
}

// TestTokenGrants: a token granting stream.publish on default/x publishes to
// x and nothing else: another stream, a subscription and a read of x are
// each refused forbidden.
func TestTokenGrants(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	token := mintCLI(t, filepath.Dir(b.ca), "--tenant", "default", "--grant", "stream.publish:default/x")
	conn := []string{"--broker", b.addr, "--ca", b.ca, "--token", token}

	runFelix(t, opts{}, append([]string{"pub", "--stream", "x", "allowed"}, conn...)...).wantExit(t, 0)
	refused := []struct {
		args []string
		want string
	}{
		{[]string{"pub", "--stream", "y", "not allowed"}, "forbidden: stream.publish on default/default/y"},
		{[]string{"sub", "--stream", "x", "--count", "1"}, "forbidden: stream.subscribe on default/default/x"},
		{[]string{"read", "--stream", "x", "--from", "0"}, "forbidden: stream.subscribe on default/default/x"},
	}
	for _, tt := range refused {
		r := runFelix(t, opts{}, append(tt.args, conn...)...)
		r.wantExit(t, 1)
		if !strings.Contains(r.stderr.String(), tt.want) {
			t.Errorf("felix %q with a publish-to-x token: stderr = %q, want it to contain %q", tt.args, r.stderr, tt.want)
		}
	}
	// The admin token next to it still has every right.
	runFelix(t, opts{}, append([]string{"pub", "--stream", "y", "admin"}, "--broker", b.addr, "--ca", b.ca, "--token", b.token)...).wantExit(t, 0)
}

// TestAdminCLIAuth: felix tree and felix chaos send --token (or
// FELIX_TOKEN, or ./felix-data/admin.token) as a bearer token, and explain
// a refusal: 401 says how to get a token, 403 which right is missing.
func TestAdminCLIAuth(t *testing.T) {
	t.Parallel()
	b := startAdminBroker(t, true)
	data := filepath.Dir(b.ca)
	view := mintCLI(t, data, "--tenant", "default", "--grant", "node.view:*")
	publish := mintCLI(t, data, "--tenant", "default", "--grant", "stream.publish:*/*")
	elsewhere := opts{dir: t.TempDir()} // no ./felix-data here

	tests := []struct {
		name  string
		o     opts
		args  []string
		code  int
		wants []string
	}{
		{"tree, no token", elsewhere, []string{"tree"}, 1,
			[]string{"refused /debug/actors: unauthenticated", "sent no token", "felix token create"}},
		{"tree, garbage token", elsewhere, []string{"tree", "--token", "garbage"}, 1,
			[]string{"unauthenticated: token refused", "sent the token from --token"}},
		{"tree, stream rights only", elsewhere, []string{"tree", "--token", publish}, 1,
			[]string{"forbidden: node.view", "--grant node.view:*"}},
		{"tree, node.view", elsewhere, []string{"tree", "--token", view}, 0, nil},
		{"tree, node.view from FELIX_TOKEN", opts{dir: elsewhere.dir, env: []string{"FELIX_TOKEN=" + view}}, []string{"tree"}, 0, nil},
		{"chaos, node.view", elsewhere, []string{"chaos", "kill", "--kind", "feeder", "--token", view}, 1,
			[]string{"forbidden: node.manage", "--grant node.manage:*"}},
		// Accepted: the broker has no feeder to kill, and says so (exit 1).
		{"chaos, admin token", elsewhere, []string{"chaos", "kill", "--kind", "feeder", "--token", b.token}, 1,
			[]string{"no live actor of kind feeder to kill"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runFelix(t, tt.o, append(tt.args, "--admin", b.admin)...)
			r.wantExit(t, tt.code)
			for _, want := range tt.wants {
				if !strings.Contains(r.stderr.String(), want) {
					t.Errorf("stderr = %q, want it to contain %q", r.stderr, want)
				}
			}
		})
	}
}

// TestReloadKeysOnSIGHUP: a broker started with --auth-keys FILE refuses a
// token signed by a key not in FILE; once the key is added and the broker
// gets SIGHUP, the token is accepted, and the broker never stopped. A file
// broken later keeps the keys in force.
func TestReloadKeysOnSIGHUP(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys.pem")
	publicPEM := func(pub ed25519.PublicKey) []byte {
		der, err := x509.MarshalPKIXPublicKey(pub)
		if err != nil {
			t.Fatal(err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	}
	oldPub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keys, publicPEM(oldPub), 0o600); err != nil {
		t.Fatal(err)
	}
	newPub, newPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := auth.NewSigner(newPriv)
	if err != nil {
		t.Fatal(err)
	}
	token, _, err := signer.Mint(auth.Claims{Tenant: "default", Grants: []auth.Grant{auth.MustParseGrant("stream.publish:*/*")}}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}

	addrFile := filepath.Join(dir, "addr")
	p := start(t, opts{}, "broker", "--listen", "127.0.0.1:0", "--admin", "", "--data-dir", filepath.Join(dir, "data"),
		"--addr-file", addrFile, "--auth-keys", keys, "--log-format", "json")
	addr := waitForFile(t, p, addrFile)
	pub := []string{"pub", "--broker", addr, "--ca", filepath.Join(dir, "data", "cert.pem"), "--token", token, "--stream", "s", "x"}

	r := runFelix(t, opts{}, pub...)
	r.wantExit(t, 1)
	if want := "token signature not valid"; !strings.Contains(r.stderr.String(), want) {
		t.Errorf("a token of a key not yet in --auth-keys: stderr = %q, want it to contain %q", r.stderr, want)
	}

	hangup := func(wantMsg string) {
		t.Helper()
		// A reload's outcome is logged once per SIGHUP: count them, so the
		// second wait does not see the first's line.
		before := countLogMessages(p.stderr.String(), wantMsg)
		p.signal(t, syscall.SIGHUP)
		p.wait(t, p.stderr, "stderr", "another "+wantMsg, func(s string) bool { return countLogMessages(s, wantMsg) > before })
	}
	if err := os.WriteFile(keys, append(publicPEM(oldPub), publicPEM(newPub)...), 0o600); err != nil {
		t.Fatal(err)
	}
	hangup("reloaded auth keys")
	runFelix(t, opts{}, pub...).wantExit(t, 0)

	if err := os.WriteFile(keys, []byte("not a key file"), 0o600); err != nil {
		t.Fatal(err)
	}
	hangup("reload auth keys; keeping the keys in force")
	runFelix(t, opts{}, pub...).wantExit(t, 0)

	p.signal(t, syscall.SIGTERM)
	p.wantExitWithin(t, 0, stopWithin)
}

// countLogMessages counts the JSON log lines of log whose message is msg.
func countLogMessages(log, msg string) int {
	n := 0
	for _, line := range lines(log) {
		var entry struct{ Message string }
		if json.Unmarshal([]byte(line), &entry) == nil && entry.Message == msg {
			n++
		}
	}
	return n
}
