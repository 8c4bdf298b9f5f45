package main

import (
	"debug/buildinfo"
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersionOf(t *testing.T) {
	tests := []struct {
		name string
		give *debug.BuildInfo
		want string
	}{
		{"no build info", nil, "devel commit unknown committed unknown"},
		{"go run: nothing stamped",
			&debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}},
			"devel commit unknown committed unknown go1.26.0"},
		{"checkout",
			&debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
				{Key: "vcs.revision", Value: "c07ef84a1b2c3d4e5f60718293a4b5c6d7e8f901"},
				{Key: "vcs.time", Value: "2026-12-01T21:00:00Z"},
				{Key: "vcs.modified", Value: "true"},
			}},
			"devel commit c07ef84a1b2c (modified) committed 2026-12-01T21:00:00Z go1.26.0"},
		{"release",
			&debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{
				{Key: "vcs.revision", Value: "c07ef84"}, {Key: "vcs.time", Value: "2026-12-01T21:00:00Z"}, {Key: "vcs.modified", Value: "false"},
			}},
			"v1.2.3 commit c07ef84 committed 2026-12-01T21:00:00Z go1.26.0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := versionOf(tt.give); got != tt.want {
				t.Errorf("versionOf = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestVersionCommand runs the binary TestMain built and checks that it
// prints what the toolchain stamped into it, read back with
// debug/buildinfo: the commit and its time from a build in a checkout,
// "unknown" from one with -buildvcs=false.
func TestVersionCommand(t *testing.T) {
	info, err := buildinfo.ReadFile(felixBin)
	if err != nil {
		t.Fatal(err)
	}
	r := runFelix(t, opts{}, "version")
	r.wantExit(t, 0)
	got := strings.TrimSpace(r.stdout.String())
	if want := "felix " + versionOf(info); got != want {
		t.Fatalf("felix version printed %q, want %q (from the binary's build info)", got, want)
	}
}
