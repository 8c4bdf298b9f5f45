package main

import (
	"encoding/json"
	"testing"
)

// TestCacheCLI: create a durable cache, put, put-if on the version put
// answered, get, list, delete, and a counter, each printing JSON.
func TestCacheCLI(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	// felixJSON runs cmd with its flags, then "--" and args (so a
	// negative delta is one), and reads what it printed into v.
	felixJSON := func(v any, cmd string, flags []string, args ...string) {
		t.Helper()
		full := append([]string{cmd, "--broker", b.addr, "--ca", b.ca, "--token", b.token, "--cache", "flags"}, flags...)
		full = append(append(full, "--"), args...)
		r := runFelix(t, opts{}, full...)
		r.wantExit(t, 0)
		if err := json.Unmarshal(r.stdout.Bytes(), v); err != nil {
			t.Fatalf("felix %v printed %q: %v", full, r.stdout, err)
		}
	}
	var info struct {
		Shards  uint32 `json:"shards"`
		Durable bool   `json:"durable"`
	}
	felixJSON(&info, "cache", []string{"--shards", "2", "--durable"}, "create")
	if info.Shards != 2 || !info.Durable {
		t.Fatalf("create printed %+v; want 2 durable shards", info)
	}
	var put struct {
		Applied bool   `json:"applied"`
		Reason  string `json:"reason"`
		Version uint64 `json:"version"`
		Prev    string `json:"prev"`
	}
	felixJSON(&put, "cache", nil, "put", "dark-mode", "on")
	if !put.Applied {
		t.Fatalf("put printed %+v", put)
	}
	first := put.Version
	felixJSON(&put, "cache", []string{"--if-version", "999"}, "put", "dark-mode", "off")
	if put.Applied || put.Reason != "condition_failed" || put.Version != first {
		t.Fatalf("put with a wrong version printed %+v; want condition_failed at %d", put, first)
	}
	felixJSON(&put, "cache", []string{"--if-version", jsonNumber(first)}, "put", "dark-mode", "off")
	if !put.Applied || put.Prev != "on" {
		t.Fatalf("put on the right version printed %+v", put)
	}
	var got struct {
		Found bool   `json:"found"`
		Value string `json:"value"`
	}
	felixJSON(&got, "cache", nil, "get", "dark-mode")
	if !got.Found || got.Value != "off" {
		t.Fatalf("get printed %+v; want off", got)
	}
	var keys []struct {
		Key string `json:"key"`
	}
	felixJSON(&put, "cache", nil, "put", "beta", "1")
	felixJSON(&keys, "cache", nil, "ls")
	if len(keys) != 2 {
		t.Fatalf("ls printed %+v; want both keys", keys)
	}
	felixJSON(&put, "cache", nil, "del", "beta")
	if !put.Applied || put.Prev != "1" {
		t.Fatalf("del printed %+v", put)
	}
	var n struct {
		Value int64 `json:"value"`
	}
	felixJSON(&n, "counter", nil, "add", "visits", "5")
	felixJSON(&n, "counter", nil, "add", "visits", "-2")
	felixJSON(&n, "counter", nil, "get", "visits")
	if n.Value != 3 {
		t.Fatalf("counter printed %+v; want 3", n)
	}
	runFelix(t, opts{}, "cache", "put", "only-a-key", "--broker", b.addr, "--cache", "flags").wantExit(t, 2)
}

func jsonNumber(v uint64) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestCacheWatchCLI: felix cache watch --retained prints the current
// value first, then each change as JSON; a second watch resumed with
// --from-version prints exactly the changes from that version on.
func TestCacheWatchCLI(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	base := []string{"--broker", b.addr, "--ca", b.ca, "--token", b.token, "--cache", "flags"}
	felix := func(args ...string) {
		t.Helper()
		r := runFelix(t, opts{}, append(append([]string{"cache"}, base...), args...)...)
		r.wantExit(t, 0)
	}
	felix("--durable", "create")
	felix("put", "dark-mode", "on")
	watch := start(t, opts{}, append(append([]string{"cache", "watch"}, base...), "--prefix", "dark", "--retained", "--json", "--count", "4")...)
	watch.waitStderrLine(t, "watching")
	felix("put", "dark-mode", "off")
	felix("del", "dark-mode")
	watch.wantExit(t, 0)
	type event struct {
		Kind     string `json:"kind"`
		Key      string `json:"key"`
		Value    string `json:"value"`
		Version  uint64 `json:"version"`
		Retained bool   `json:"retained"`
	}
	var got []event
	for _, line := range lines(watch.stdout.String()) {
		var ev event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("watch --json printed %q: %v", line, err)
		}
		got = append(got, ev)
	}
	if len(got) != 4 || !got[0].Retained || got[0].Value != "on" || got[1].Kind != "snapshot_end" || !got[1].Retained ||
		got[2].Kind != "put" || got[2].Value != "off" || got[3].Kind != "delete" {
		t.Fatalf("watch printed %+v; want the retained on, the snapshot's end, then put off, then delete", got)
	}
	got = got[1:]
	resumed := runFelix(t, opts{}, append(append([]string{"cache", "watch"}, base...), "--key", "dark-mode", "--from-version", jsonNumber(got[1].Version), "--count", "2")...)
	resumed.wantExit(t, 0)
	want := "@" + jsonNumber(got[1].Version) + " put dark-mode off\n@" + jsonNumber(got[2].Version) + " delete dark-mode\n"
	if resumed.stdout.String() != want {
		t.Fatalf("resumed watch printed %q; want %q", resumed.stdout.String(), want)
	}
	// A retained watch of an absent key prints its empty snapshot's end.
	absent := runFelix(t, opts{}, append(append([]string{"cache", "watch"}, base...), "--key", "dark-mode", "--retained", "--count", "1")...)
	absent.wantExit(t, 0)
	if want := "@" + jsonNumber(got[2].Version+1) + " snapshot_end\n"; absent.stdout.String() != want {
		t.Fatalf("retained watch of a deleted key printed %q; want %q", absent.stdout.String(), want)
	}
}
