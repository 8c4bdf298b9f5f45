package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/getfelix/felix-go/broker"
)

// felix tree and felix chaos against a broker process, as a user runs them.

// adminBroker is a broker on free ports whose admin address is known.
type adminBroker struct {
	*proc
	addr, admin, ca string
	token           string // its admin.token
}

// startAdminBroker starts a broker with --admin 127.0.0.1:0 (and --chaos
// when chaos is set) and reads both bound addresses from its JSON log:
// "admin endpoint serving ..." carries admin=ADDR and comes before
// "broker accepting connections", which carries addr=ADDR.
func startAdminBroker(t *testing.T, chaos bool) *adminBroker {
	t.Helper()
	dir := t.TempDir()
	args := []string{"broker", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "data"), "--log-format", "json"}
	if chaos {
		args = append(args, "--chaos")
	}
	p := start(t, opts{}, args...)
	b := &adminBroker{proc: p, ca: filepath.Join(dir, "data", "cert.pem")}
	p.waitStderr(t, "the log lines with the bound addresses", func(line string) bool {
		var entry struct{ Message, Addr, Admin string }
		if json.Unmarshal([]byte(line), &entry) != nil {
			return false
		}
		switch {
		case strings.HasPrefix(entry.Message, "admin endpoint serving") && entry.Admin != "":
			b.admin = entry.Admin
		case entry.Message == "broker accepting connections" && entry.Addr != "":
			b.addr = entry.Addr
		}
		return b.addr != "" && b.admin != ""
	})
	b.token = readToken(t, filepath.Join(dir, "data"))
	return b
}

// treeJSON runs felix tree --json and decodes it.
func treeJSON(t *testing.T, b *adminBroker, extra ...string) []broker.ActorInfo {
	t.Helper()
	r := runFelix(t, opts{}, append([]string{"tree", "--admin", b.admin, "--token", b.token, "--json"}, extra...)...)
	r.wantExit(t, 0)
	var res struct {
		Actors []broker.ActorInfo `json:"actors"`
	}
	if err := json.Unmarshal(r.stdout.Bytes(), &res); err != nil {
		t.Fatalf("felix tree --json printed %q: %v", r.stdout, err)
	}
	return res.Actors
}

// TestChaosCLI: felix tree shows the live tree; felix chaos kill crashes a
// feeder, which its supervisor restarts; the subscription never notices.
func TestChaosCLI(t *testing.T) {
	t.Parallel()
	b := startAdminBroker(t, true)
	subA := start(t, opts{}, "sub", "--broker", b.addr, "--ca", b.ca, "--token", b.token, "--stream", "s")
	subB := start(t, opts{}, "sub", "--broker", b.addr, "--ca", b.ca, "--token", b.token, "--stream", "s")
	subA.waitStderrLine(t, "subscribed")
	subB.waitStderrLine(t, "subscribed")
	runFelix(t, opts{}, "pub", "--broker", b.addr, "--ca", b.ca, "--token", b.token, "--stream", "s", "one").wantExit(t, 0)
	for _, s := range []*proc{subA, subB} {
		s.waitStdout(t, "the first message", func(out string) bool { return out == "one\n" })
	}

	// The human tree: every supervisor, the shard, both feeders, the lanes
	// (4 by default) and the connection writers, each with its depth: the
	// two subscribers', and the publisher's unless the broker has already
	// seen its connection close (the process exited; nothing tells us when
	// the broker noticed).
	tree := runFelix(t, opts{}, "tree", "--admin", b.admin, "--token", b.token)
	tree.wantExit(t, 0)
	out := tree.stdout.String()
	count := func(re string) int { return len(regexp.MustCompile(re).FindAllString(out, -1)) }
	for _, want := range []struct {
		re string
		n  int
	}{
		{`(?m)^felix/streams \[supervisor\] depth \d+/\d+`, 1},
		{`(?m)^felix/subscribers \[supervisor\] depth \d+/\d+`, 1},
		{`(?m)^felix/lanes \[supervisor\] depth \d+/\d+`, 1},
		{`(?m)^felix/connections \[supervisor\] depth \d+/\d+`, 1},
		{`(?m)^felix/registry \[registry\] depth \d+/\d+`, 1},
		{`(?m)^  default:default:s:0 \[shard\] depth \d+/64 block .*stream=default/default/s shard=0`, 1},
		{`(?m)^  sub-\d+ \[feeder\] depth \d+/512 drop_new .*stream=default/default/s shard=0 subscription=\d+ conn=\d+ lane=\d`, 2},
		{`(?m)^  lane-\d \[lane\] depth \d+/64 block lane=\d$`, 4},
	} {
		if got := count(want.re); got != want.n {
			t.Errorf("felix tree: %d lines match %s, want %d; it printed:\n%s", got, want.re, want.n, out)
		}
	}
	writers := count(`(?m)^  conn-\d+ \[connection_writer\] depth \d+/4096 block conn=\d+ remote=127\.0\.0\.1:\d+$`)
	if writers != 2 && writers != 3 {
		t.Errorf("felix tree shows %d connection writers, want 2 (the subscribers') or 3 (and the publisher's, not yet gone):\n%s", writers, out)
	}
	sessions := count(`(?m)^  conn-\d+ \[session\] depth \d+/1024 block conn=\d+ remote=127\.0\.0\.1:\d+$`)
	if sessions != writers {
		t.Errorf("felix tree shows %d sessions and %d connection writers, want one of each per connection:\n%s", sessions, writers, out)
	}
	// 7 top-level (6 supervisors, the groups' included, and the
	// registry), a shard, 2 feeders, 4 lanes.
	if got, want := len(lines(out)), 7+1+2+4+writers+sessions; got != want {
		t.Errorf("felix tree printed %d lines, want %d:\n%s", got, want, out)
	}
	if feeders := treeJSON(t, b, "--kind", "feeder"); len(feeders) != 2 {
		t.Fatalf("felix tree --kind feeder --json listed %d actors, want the 2 feeders: %+v", len(feeders), feeders)
	}

	// Crash one feeder at random.
	kill := runFelix(t, opts{}, "chaos", "kill", "--admin", b.admin, "--token", b.token, "--kind", "feeder", "--mode", "panic")
	kill.wantExit(t, 0)
	m := regexp.MustCompile(`^panic (felix/subscribers/sub-\d+)\n$`).FindStringSubmatch(kill.stdout.String())
	if m == nil {
		t.Fatalf("felix chaos kill printed %q, want \"panic felix/subscribers/sub-N\"", kill.stdout)
	}
	killed := m[1]

	// Both subscriptions carry on: the restarted feeder kept its subscription.
	runFelix(t, opts{}, "pub", "--broker", b.addr, "--ca", b.ca, "--token", b.token, "--stream", "s", "two").wantExit(t, 0)
	for _, s := range []*proc{subA, subB} {
		s.waitStdout(t, "the message published after the crash", func(out string) bool { return out == "one\ntwo\n" })
	}

	// The restart shows in the tree. It is recorded when the supervisor
	// decides, before the restarted feeder handles "two", so it is there by
	// now; the poll (each try is one felix tree process) only covers a
	// slow scheduler, under a deadline.
	var restarted broker.ActorInfo
	deadline := time.Now().Add(waitTimeout)
	for {
		for _, a := range treeJSON(t, b) {
			if a.Path == killed {
				restarted = a
			}
		}
		if restarted.Restarts >= 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if restarted.Path != killed || restarted.Restarts != 1 || restarted.LastFailure == nil || !strings.Contains(restarted.LastFailure.Reason, "chaos") {
		t.Errorf("felix tree --json shows %s as %+v, want restarts 1 and a last failure naming chaos", killed, restarted)
	}
	human := runFelix(t, opts{}, "tree", "--admin", b.admin, "--token", b.token)
	human.wantExit(t, 0)
	name := killed[strings.LastIndexByte(killed, '/')+1:]
	if !regexp.MustCompile(`(?m)^  ` + name + ` \[feeder\] .* restarts 1 \(last failure \S+: chaos: `).MatchString(human.stdout.String()) {
		t.Errorf("felix tree does not show %s with restarts 1 and its last failure:\n%s", name, human.stdout)
	}

	for _, s := range []*proc{subA, subB} {
		s.signal(t, syscall.SIGTERM)
		s.wantExitWithin(t, 0, stopWithin)
	}
	b.signal(t, syscall.SIGTERM)
	b.wantExitWithin(t, 0, stopWithin)
	logs := b.stderr.String()
	for _, want := range []string{`"message":"chaos kill"`, `"message":"actor failed; supervisor applied directive"`, `"directive":"RestartDirective"`, killed} {
		if !strings.Contains(logs, want) {
			t.Errorf("broker log has no %s:\n%s", want, logs)
		}
	}
}

// TestChaosCLIRefusals: what felix chaos says when it cannot kill.
func TestChaosCLIRefusals(t *testing.T) {
	t.Parallel()
	t.Run("broker without --chaos", func(t *testing.T) {
		t.Parallel()
		b := startAdminBroker(t, false)
		for _, args := range [][]string{{"--kind", "feeder"}, {"--path", "felix/lanes/lane-0", "--mode", "stop"}} {
			r := runFelix(t, opts{}, append([]string{"chaos", "kill", "--admin", b.admin, "--token", b.token}, args...)...)
			r.wantExit(t, 1)
			if msg := r.stderr.String(); !strings.HasPrefix(msg, "felix: ") || !strings.Contains(msg, "--chaos") {
				t.Errorf("felix chaos kill %q against a broker without --chaos: stderr %q, want a felix: line naming --chaos", args, msg)
			}
		}
		// Nothing was killed: the lanes are all there, none restarted.
		lanes := treeJSON(t, b, "--kind", "lane")
		if len(lanes) != 4 {
			t.Errorf("felix tree --kind lane lists %d lanes after refused kills, want 4", len(lanes))
		}
		for _, l := range lanes {
			if l.Restarts != 0 {
				t.Errorf("%s restarted %d times after refused kills", l.Path, l.Restarts)
			}
		}
	})
	t.Run("no such actor", func(t *testing.T) {
		t.Parallel()
		b := startAdminBroker(t, true)
		r := runFelix(t, opts{}, "chaos", "kill", "--admin", b.admin, "--token", b.token, "--path", "nope")
		r.wantExit(t, 1)
		if msg := r.stderr.String(); !strings.HasPrefix(msg, "felix: ") || !strings.Contains(msg, "no such actor") || !strings.Contains(msg, `"nope"`) {
			t.Errorf("felix chaos kill --path nope: stderr %q, want a felix: line saying no such actor \"nope\"", msg)
		}
		r = runFelix(t, opts{}, "chaos", "kill", "--admin", b.admin, "--token", b.token, "--path", "felix/lanes")
		r.wantExit(t, 1)
		if msg := r.stderr.String(); !strings.Contains(msg, "supervisors cannot be killed") {
			t.Errorf("felix chaos kill --path felix/lanes: stderr %q, want it to say supervisors cannot be killed", msg)
		}
	})
	t.Run("nothing listening", func(t *testing.T) {
		t.Parallel()
		r := runFelix(t, opts{}, "chaos", "kill", "--admin", "127.0.0.1:1", "--kind", "feeder")
		r.wantExit(t, 1)
		if msg := r.stderr.String(); !strings.Contains(msg, "cannot reach the admin endpoint at 127.0.0.1:1") {
			t.Errorf("felix chaos kill against nothing: stderr %q", msg)
		}
	})
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"chaos"}, "chaos needs kill or run"},
		{[]string{"chaos", "explode"}, "chaos needs kill or run"},
		{[]string{"chaos", "kill"}, "kill needs --path or --kind"},
		{[]string{"chaos", "kill", "--path", "p", "--kind", "feeder"}, "kill needs --path or --kind"},
		{[]string{"chaos", "kill", "--kind", "feeder", "--mode", "explode"}, "--mode must be panic or stop"},
		{[]string{"chaos", "run", "--interval", "0s"}, "must be positive"},
	} {
		t.Run(fmt.Sprintf("usage %q", tt.args), func(t *testing.T) {
			t.Parallel()
			// No broker: a usage error is found before any call.
			r := runFelix(t, opts{}, tt.args...)
			r.wantExit(t, 2)
			if msg := r.stderr.String(); !strings.Contains(msg, tt.want) || !strings.Contains(msg, "Run 'felix chaos --help' for usage.") {
				t.Errorf("felix %q: stderr %q, want it to contain %q and point to the help", tt.args, msg, tt.want)
			}
		})
	}
}
