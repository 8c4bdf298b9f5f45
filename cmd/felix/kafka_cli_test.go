package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestKafkaUserCLI: felix kafka user add derives the credential and sends
// it to the admin endpoint, ls lists the user (its keys left out), rm
// removes it; a second rm and a bad --mechanism fail with the reason.
func TestKafkaUserCLI(t *testing.T) {
	t.Parallel()
	b := startAdminBroker(t, false)
	pwFile := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pwFile, []byte("hunter2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	conn := []string{"--admin", b.admin, "--token", b.token}
	add := append([]string{"kafka", "user", "add", "--tenant", "acme", "--user", "billing", "--password-file", pwFile, "--grant", "stream.subscribe:orders/*"}, conn...)
	r := runFelix(t, opts{}, add...)
	r.wantExit(t, 0)
	if !strings.Contains(r.stdout.String(), "added SCRAM-SHA-512 credential of Kafka user acme/billing") {
		t.Fatalf("add: stdout %q", r.stdout)
	}
	runFelix(t, opts{}, append(add, "--mechanism", "scram-sha-256")...).wantExit(t, 0)

	r = runFelix(t, opts{}, append([]string{"kafka", "user", "ls", "--tenant", "acme", "--json"}, conn...)...)
	r.wantExit(t, 0)
	var list struct {
		Users []map[string]any `json:"users"`
	}
	if err := json.Unmarshal(r.stdout.Bytes(), &list); err != nil || len(list.Users) != 2 {
		t.Fatalf("ls --json: %v\n%s", err, r.stdout)
	}
	for _, u := range list.Users {
		if u["user"] != "billing" || u["iterations"] != float64(4096) || u["stored_key"] != nil || u["salt"] != nil {
			t.Errorf("ls --json shows %v; want billing, 4096 iterations, no salt or keys", u)
		}
	}
	r = runFelix(t, opts{}, append([]string{"kafka", "user", "ls"}, conn...)...)
	r.wantExit(t, 0)
	if out := r.stdout.String(); !strings.Contains(out, "acme") || !strings.Contains(out, "SCRAM-SHA-256") || !strings.Contains(out, "stream.subscribe:orders/*") {
		t.Errorf("ls:\n%s", out)
	}

	runFelix(t, opts{}, append([]string{"kafka", "user", "rm", "--tenant", "acme", "--user", "billing"}, conn...)...).wantExit(t, 0)
	r = runFelix(t, opts{}, append([]string{"kafka", "user", "rm", "--tenant", "acme", "--user", "billing"}, conn...)...)
	r.wantExit(t, 1)
	if !strings.Contains(r.stderr.String(), "has no Kafka user billing") {
		t.Errorf("second rm: stderr %q", r.stderr)
	}
	r = runFelix(t, opts{}, append(add, "--mechanism", "scram-sha-1")...)
	r.wantExit(t, 2)
	if !strings.Contains(r.stderr.String(), "SCRAM-SHA-256 or SCRAM-SHA-512") {
		t.Errorf("--mechanism scram-sha-1: stderr %q", r.stderr)
	}
}
