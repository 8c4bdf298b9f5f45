package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestContexts: a context saved with felix context add serves every client
// and admin command with no flags, from any folder; flags and
// $FELIX_TOKEN override it; --context and $FELIX_CONTEXT pick another;
// use, ls and rm keep the current one.
func TestContexts(t *testing.T) {
	t.Parallel()
	b := startAdminBroker(t, false)
	config := t.TempDir()
	env := []string{"XDG_CONFIG_HOME=" + config, "HOME=" + config}
	elsewhere := opts{dir: t.TempDir(), env: env} // no felix-data here to fall back on
	felix := func(o opts, args ...string) *proc { t.Helper(); return runFelix(t, o, args...) }

	add := felix(elsewhere, "context", "add", "local", "--broker", b.addr, "--admin", b.admin, "--ca", b.ca,
		"--token-file", filepath.Join(filepath.Dir(b.ca), "admin.token"))
	add.wantExit(t, 0)
	path := filepath.Join(config, "felix", "contexts.json")
	if want := "added context local in " + path + "; it is the current context"; strings.TrimSpace(add.stdout.String()) != want {
		t.Errorf("context add printed %q, want %q", add.stdout, want)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("%s: %v, mode %v; want it readable by the user alone (0600)", path, err, fi.Mode())
	}

	felix(elsewhere, "stream", "create", "--stream", "ctx").wantExit(t, 0)
	felix(elsewhere, "pub", "--stream", "ctx", "hello").wantExit(t, 0)
	ls := felix(elsewhere, "stream", "ls", "--json")
	ls.wantExit(t, 0)
	if !strings.Contains(ls.stdout.String(), `"stream":"default/default/ctx"`) {
		t.Errorf("stream ls through the context printed %s, want the stream ctx", ls.stdout)
	}
	felix(elsewhere, "tree", "--kind", "supervisor").wantExit(t, 0)

	// A flag wins over the context, and so does $FELIX_TOKEN.
	dead := freeUDPAddr(t)
	r := felix(elsewhere, "stream", "ls", "--broker", dead, "--connect-timeout", "1s")
	r.wantExit(t, 1)
	if !strings.Contains(r.stderr.String(), "cannot reach broker at "+dead) {
		t.Errorf("stream ls --broker %s with a context: stderr %q, want the flag's broker tried", dead, r.stderr)
	}
	bogus := opts{dir: elsewhere.dir, env: append(env, "FELIX_TOKEN=bogus")}
	r = felix(bogus, "stream", "ls")
	r.wantExit(t, 1)
	if !strings.Contains(r.stderr.String(), "sent the token from FELIX_TOKEN") {
		t.Errorf("stream ls with FELIX_TOKEN=bogus and a context: stderr %q, want FELIX_TOKEN's token sent", r.stderr)
	}

	// Another context, not made current: --context and $FELIX_CONTEXT pick it.
	felix(elsewhere, "context", "add", "gone", "--broker", dead, "--no-use").wantExit(t, 0)
	for _, tt := range []struct {
		o    opts
		args []string
	}{
		{elsewhere, []string{"stream", "ls", "--connect-timeout", "1s", "--context", "gone"}},
		{opts{dir: elsewhere.dir, env: append(env, "FELIX_CONTEXT=gone")}, []string{"stream", "ls", "--connect-timeout", "1s"}},
	} {
		r := felix(tt.o, tt.args...)
		r.wantExit(t, 1)
		if !strings.Contains(r.stderr.String(), "cannot reach broker at "+dead) {
			t.Errorf("felix %q with env %q: stderr %q, want context gone's broker %s tried", tt.args, tt.o.env, r.stderr, dead)
		}
	}
	r = felix(elsewhere, "stream", "ls", "--context", "nosuch")
	r.wantExit(t, 2)
	if !strings.Contains(r.stderr.String(), `no felix context "nosuch" (named by --context)`) {
		t.Errorf("--context nosuch: stderr %q", r.stderr)
	}

	var rows []struct {
		Name    string `json:"name"`
		Current bool   `json:"current"`
		Brokers string `json:"brokers"`
	}
	list := felix(elsewhere, "context", "ls", "--json")
	if err := json.Unmarshal(list.stdout.Bytes(), &rows); err != nil || len(rows) != 2 ||
		rows[0].Name != "gone" || rows[0].Current || rows[1].Name != "local" || !rows[1].Current {
		t.Errorf("context ls --json printed %s (%v), want gone, then local as the current one", list.stdout, err)
	}
	felix(elsewhere, "context", "use", "gone").wantExit(t, 0)
	felix(elsewhere, "context", "rm", "gone").wantExit(t, 0)
	list = felix(elsewhere, "context", "ls")
	if out := list.stdout.String(); strings.Contains(out, "gone") || strings.Contains(out, "*") || !strings.Contains(out, "local") {
		t.Errorf("context ls after rm of the current context printed\n%s\nwant local alone, none current", out)
	}
	r = felix(elsewhere, "context", "use", "gone")
	r.wantExit(t, 1)
	if !strings.Contains(r.stderr.String(), `no felix context "gone"`) {
		t.Errorf("context use of a removed context: stderr %q", r.stderr)
	}
}
