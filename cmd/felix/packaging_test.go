package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// requireSystemdAnalyzeEnv, set to 1 by .ci/run, makes a missing
// systemd-analyze a failure instead of a skip.
const requireSystemdAnalyzeEnv = "FELIXTEST_REQUIRE_SYSTEMD_ANALYZE"

// unitPath is the systemd unit packaging ships.
var unitPath = filepath.Join("..", "..", "packaging", "felix.service")

// TestSystemdUnitVerifies runs systemd-analyze verify on the shipped unit,
// with its ExecStart binary pointed at this build (verify checks that the
// binary exists), and fails on anything it prints: an unknown directive or
// a bad value is only a warning to systemd.
func TestSystemdUnitVerifies(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv(requireSystemdAnalyzeEnv) == "1" {
			t.Fatalf("no systemd-analyze on PATH and %s=1 (install it: apt-get install -y systemd)", requireSystemdAnalyzeEnv)
		}
		t.Skipf("no systemd-analyze on PATH: the unit check is skipped (apt-get install -y systemd to run it; %s=1 makes this a failure)", requireSystemdAnalyzeEnv)
	}
	unit, err := os.ReadFile(unitPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(unit, []byte("ExecStart=/usr/local/bin/felix ")) {
		t.Fatalf("%s: want ExecStart=/usr/local/bin/felix ..., the path its install notes give", unitPath)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "felix.service")
	local := bytes.ReplaceAll(unit, []byte("/usr/local/bin/felix"), []byte(felixBin))
	if err := os.WriteFile(path, local, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, analyze, "verify", path).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("systemd-analyze verify %s: %v\n%s", unitPath, err, out)
	}
}

// TestSystemdUnitExecStartParses runs the unit's ExecStart command line,
// with --print-config, so a flag the broker does not know fails here
// rather than at the first boot.
func TestSystemdUnitExecStartParses(t *testing.T) {
	unit, err := os.ReadFile(unitPath)
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	for line := range strings.Lines(string(unit)) {
		if rest, ok := strings.CutPrefix(line, "ExecStart="); ok {
			args = strings.Fields(rest)[1:]
		}
	}
	if len(args) == 0 {
		t.Fatalf("%s has no ExecStart line", unitPath)
	}
	r := runFelix(t, opts{}, append(args, "--print-config")...)
	r.wantExit(t, 0)
	if !strings.Contains(r.stdout.String(), "data_dir: /var/lib/felix") {
		t.Errorf("felix %s --print-config printed %q, want data_dir: /var/lib/felix", strings.Join(args, " "), r.stdout)
	}
}

// TestDockerfileEnvAndCommandParse runs the image's command line with its
// ENV settings, with --print-config: a knob renamed under the Dockerfile
// fails here rather than in a container that exits at start.
func TestDockerfileEnvAndCommandParse(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var env, cmd []string
	inEnv := false
	for line := range strings.Lines(string(b)) {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "ENV "):
			line, inEnv = strings.TrimPrefix(line, "ENV "), true
		case strings.HasPrefix(line, "CMD "):
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "CMD ")), &cmd); err != nil {
				t.Fatalf("Dockerfile CMD is not an exec-form JSON array: %v", err)
			}
			continue
		case !inEnv:
			continue
		}
		inEnv = strings.HasSuffix(line, "\\")
		env = append(env, strings.Fields(strings.TrimSuffix(line, "\\"))...)
	}
	if len(env) == 0 || len(cmd) == 0 {
		t.Fatalf("Dockerfile: ENV %q, CMD %q; want both", env, cmd)
	}
	r := runFelix(t, opts{env: env}, append(cmd, "--print-config")...)
	r.wantExit(t, 0)
	for _, want := range []string{"listen: 0.0.0.0:5000", "admin: 0.0.0.0:5080", "data_dir: /var/lib/felix"} {
		if !strings.Contains(r.stdout.String(), want) {
			t.Errorf("felix %q with the Dockerfile's ENV %q printed no %q:\n%s", cmd, env, want, r.stdout)
		}
	}
}
