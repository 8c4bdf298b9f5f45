package main

import (
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// notSnake matches a JSON key that is not snake_case.
var notSnake = regexp.MustCompile(`"([A-Za-z0-9_]*[A-Z][A-Za-z0-9_]*)":`)

// wantSnakeJSON fails when out has a key with a capital letter.
func wantSnakeJSON(t *testing.T, what, out string) {
	t.Helper()
	if m := notSnake.FindStringSubmatch(out); m != nil {
		t.Errorf("%s printed the key %q, want snake_case keys only:\n%s", what, m[1], out)
	}
}

// TestJSONShapes pins the --json style the README documents: lists are
// one JSON array, documents one object, every key snake_case.
func TestJSONShapes(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	conn := []string{"--broker", b.addr, "--ca", b.ca, "--token", b.token}
	felix := felixOK(t, conn)
	felix("stream", "create", "--stream", "jobs", "--durable", "--shards", "2")
	felix("stream", "create", "--stream", "other")

	ls := felix("stream", "ls", "--json").stdout.String()
	var streams []map[string]any
	if err := json.Unmarshal([]byte(ls), &streams); err != nil || len(streams) != 2 || len(lines(ls)) != 1 {
		t.Fatalf("stream ls --json printed %q (%v), want one line holding an array of the 2 streams", ls, err)
	}
	wantSnakeJSON(t, "stream ls --json", ls)
	if streams[0]["stream"] != "default/default/jobs" || streams[0]["durable"] != true {
		t.Errorf("stream ls --json's first stream is %v, want default/default/jobs, durable", streams[0])
	}

	info := felix("stream", "info", "--stream", "jobs", "--json").stdout.String()
	var doc struct {
		Stream      string `json:"stream"`
		ShardOwners []struct {
			Shard     uint32 `json:"shard"`
			Available bool   `json:"available"`
		} `json:"shard_owners"`
	}
	if err := json.Unmarshal([]byte(info), &doc); err != nil || doc.Stream != "default/default/jobs" || len(doc.ShardOwners) != 2 ||
		doc.ShardOwners[1].Shard != 1 || !doc.ShardOwners[1].Available {
		t.Errorf("stream info --json printed %q (%v), want the stream with its 2 shards' owners, available", info, err)
	}
	wantSnakeJSON(t, "stream info --json", info)
	if table := felix("stream", "info", "--stream", "jobs").stdout.String(); !containsLine(table, "1      this broker  -") {
		t.Errorf("stream info printed\n%s\nwant shard 1 owned by this broker", table)
	}

	felix("group", "create", "--stream", "jobs", "--group", "workers")
	desc := felix("group", "describe", "--stream", "jobs", "--group", "workers", "--json").stdout.String()
	wantSnakeJSON(t, "group describe --json", desc)
	var group struct {
		Group  string           `json:"group"`
		Shards []map[string]any `json:"shards"`
	}
	if err := json.Unmarshal([]byte(desc), &group); err != nil || group.Group != "workers" || len(group.Shards) != 2 {
		t.Fatalf("group describe --json printed %q (%v), want group workers on 2 shards", desc, err)
	}
	for _, k := range []string{"shard", "cursor", "lag", "in_flight", "dead_letters", "consumers", "created_at"} {
		if _, ok := group.Shards[0][k]; !ok {
			t.Errorf("group describe --json's shard lacks %q: %v", k, group.Shards[0])
		}
	}
	if got := strings.TrimSpace(felix("group", "ls", "--stream", "jobs", "--json").stdout.String()); got != `["workers"]` {
		t.Errorf("group ls --json printed %s, want [\"workers\"]", got)
	}
}

// TestNothingMatchedExits1: a filter or a kill that finds nothing says so
// and exits 1, so a script notices.
func TestNothingMatchedExits1(t *testing.T) {
	t.Parallel()
	b := startAdminBroker(t, true)
	admin := []string{"--admin", b.admin, "--token", b.token}
	tree := runFelix(t, opts{}, append([]string{"tree", "--kind", "nosuch"}, admin...)...)
	tree.wantExit(t, 1)
	if want := `no actor of kind "nosuch"`; !strings.Contains(tree.stderr.String(), want) {
		t.Errorf("tree --kind nosuch: stderr %q, want %q", tree.stderr, want)
	}
	runFelix(t, opts{}, append([]string{"tree", "--kind", "supervisor"}, admin...)...).wantExit(t, 0)

	kill := runFelix(t, opts{}, append([]string{"chaos", "kill", "--kind", "group"}, admin...)...)
	kill.wantExit(t, 1)
	if want := "no live actor of kind group to kill"; !strings.Contains(kill.stderr.String(), want) {
		t.Errorf("chaos kill --kind group with no group: stderr %q, want %q", kill.stderr, want)
	}
}

// TestUnfinishedExits1: a command cut short (Ctrl-C or --timeout) before
// it did what it was asked exits 1 and says how far it got.
func TestUnfinishedExits1(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	conn := []string{"--broker", b.addr, "--ca", b.ca, "--token", b.token, "--stream", "half"}
	felix := felixOK(t, conn)
	felix("stream", "create", "--durable")
	felix("group", "create", "--group", "g", "--start", "earliest")
	felix("pub", "only-one")

	consume := start(t, opts{}, append([]string{"consume", "--group", "g", "--count", "2"}, conn...)...)
	consume.waitStdout(t, "the first record", func(out string) bool { return out == "only-one\n" })
	consume.signal(t, syscall.SIGINT)
	consume.wantExitWithin(t, 1, stopWithin)
	if want := "felix: interrupted: settled 1 of the 2 records --count asked for"; !strings.Contains(consume.stderr.String(), want) {
		t.Errorf("consume --count 2 interrupted after 1: stderr %q, want %q", consume.stderr, want)
	}

	sub := runFelix(t, opts{}, append([]string{"sub", "--from", "earliest", "--count", "2", "--timeout", "2s"}, conn...)...)
	sub.wantExit(t, 1)
	if want := "felix: gave up after --timeout 2s: 1 of the 2 messages --count asked for arrived"; !strings.Contains(sub.stderr.String(), want) {
		t.Errorf("sub --count 2 --timeout 2s with 1 message: stderr %q, want %q", sub.stderr, want)
	}
	// Without --count, an interrupt is how sub ends: exit 0.
	endless := start(t, opts{}, append([]string{"sub"}, conn...)...)
	endless.waitStderrLine(t, "subscribed")
	endless.signal(t, syscall.SIGINT)
	endless.wantExitWithin(t, 0, stopWithin)
}

// TestWaitSaysWhatItWaitsFor: a member that cannot reach etcd serves no
// shard; a client waiting on it says so after a few seconds, and
// --timeout ends the wait with exit 1.
func TestWaitSaysWhatItWaitsFor(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	noEtcd := "http://" + l.Addr().String()
	l.Close()
	b := startUnjoined(t, "--cluster-etcd", noEtcd, "--cluster-node-id", "lonely")
	conn := []string{"--broker", b.addr, "--ca", b.ca, "--token", b.token, "--stream", "waits", "--timeout", "5s"}
	for _, args := range [][]string{{"pub", "hello"}, {"sub", "--count", "1"}} {
		began := time.Now()
		p := runFelix(t, opts{}, append(args, conn...)...)
		p.wantExit(t, 1)
		stderr := p.stderr.String()
		for _, want := range []string{
			"still waiting after 3s for default/default/waits: no member serves the shard now",
			"member lonely has not joined the cluster yet",
			"it gives up at --timeout 5s",
			"felix: gave up after --timeout 5s",
		} {
			if !strings.Contains(stderr, want) {
				t.Errorf("felix %s against a member without etcd: stderr\n%s\nwant %q", args[0], stderr, want)
			}
		}
		if took := time.Since(began); took > 5*time.Second+stopWithin {
			t.Errorf("felix %s --timeout 5s took %s", args[0], took)
		}
	}
}

// startUnjoined starts a cluster member that will not join (its etcd is
// down): it accepts connections but does not serve, so it writes no
// address file, and its address is read from its accepting line.
func startUnjoined(t *testing.T, extra ...string) *brokerProc {
	t.Helper()
	dir := t.TempDir()
	addrFile := filepath.Join(dir, "addr")
	data := filepath.Join(dir, "data")
	p := start(t, opts{}, append([]string{"broker", "--listen", "127.0.0.1:0", "--admin", "", "--data-dir", data,
		"--addr-file", addrFile, "--log-format", "json"}, extra...)...)
	var addr string
	p.waitStderr(t, "the accepting line", func(line string) bool {
		var ev struct{ Message, Addr string }
		if json.Unmarshal([]byte(line), &ev) == nil && ev.Message == "broker accepting connections" {
			addr = ev.Addr
		}
		return addr != ""
	})
	if _, err := os.Stat(addrFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a member that has not joined wrote its address file (stat: %v)", err)
	}
	return &brokerProc{proc: p, addr: addr, ca: filepath.Join(data, "cert.pem"), token: readToken(t, data)}
}

// TestBrokerConsoleLogNoColourWhenPiped: --log-format console writes
// plain text when standard error is not a terminal.
func TestBrokerConsoleLogNoColourWhenPiped(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := start(t, opts{}, "broker", "--listen", "127.0.0.1:0", "--admin", "", "--data-dir", dir, "--log-format", "console")
	p.waitStderr(t, "the accepting line", func(line string) bool { return strings.Contains(line, "broker accepting connections") })
	p.signal(t, syscall.SIGTERM)
	p.wantExitWithin(t, 0, stopWithin)
	if strings.Contains(p.stderr.String(), "\x1b[") {
		t.Errorf("the console log written to a pipe has colour codes:\n%q", p.stderr)
	}
}
