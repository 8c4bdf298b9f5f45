package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/wire"
)

// startBrokerOn runs a broker on the data directory data and dials it.
func startBrokerOn(t *testing.T, data, name string) (*proc, *client.Client) {
	t.Helper()
	addrFile := filepath.Join(filepath.Dir(data), "addr-"+name)
	p := start(t, opts{}, "broker", "--listen", "127.0.0.1:0", "--admin", "", "--data-dir", data,
		"--addr-file", addrFile, "--durable-fsync", "on_commit", "--log-format", "json")
	addr := waitForFile(t, p, addrFile)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	c, err := client.Dial(ctx, addr, client.Options{CAFile: filepath.Join(data, "cert.pem"), Token: readToken(t, data)})
	if err != nil {
		t.Fatalf("dial %s: %v", name, err)
	}
	return p, c
}

// stopBroker closes c and stops the broker p cleanly.
func stopBroker(t *testing.T, p *proc, c *client.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	_ = c.Close(ctx)
	p.signal(t, syscall.SIGTERM)
	p.wantExitWithin(t, 0, stopWithin)
}

// frameStarts lists where each batch of a segment file starts and its base
// offset, by the framing the persistence package documents (magic u8,
// length u32, checksum u32, then base u64).
func frameStarts(t *testing.T, path string) (pos []int, base []uint64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for p := 0; p+17 <= len(b); p += 9 + int(binary.BigEndian.Uint32(b[p+1:])) {
		pos, base = append(pos, p), append(base, binary.BigEndian.Uint64(b[p+9:]))
	}
	return pos, base
}

func readDirFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		m[e.Name()] = string(b)
	}
	return m
}

// TestLogVerifyRepair damages a byte in the middle of a stopped broker's
// synced log: felix log verify exits 1 and names the batch, repair without
// --yes changes nothing, repair is refused while a broker runs, repair
// --yes cuts the log, and a broker started again serves the records before
// the damage and continues the offsets at the first lost one.
func TestLogVerifyRepair(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	st := client.Stream{Name: "orders"}
	const n = 40
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitTimeout)
	defer cancel()
	writeRecords(ctx, t, data, st, n)
	runFelix(t, opts{}, "log", "verify", "--data-dir", data).wantExit(t, 0)
	runFelix(t, opts{}, "log", "repair", "--data-dir", data, "--shard", "0").wantExit(t, 2)
	runFelix(t, opts{}, "log", "check", "--data-dir", data).wantExit(t, 2)

	shardDir := filepath.Join(data, "streams", "default", "default", "orders", "0")
	k := n / 2
	at, offset := damageBatch(t, filepath.Join(shardDir, "00000000000000000000.log"), n, k)
	wantVerifyNames(t, data, at, offset)

	before := readDirFiles(t, shardDir)
	plan := runFelix(t, opts{}, "log", "repair", "--data-dir", data, "--stream", "orders", "--shard", "0")
	plan.wantExit(t, 0)
	if out := plan.stdout.String(); !strings.Contains(out, "nothing was changed") || !strings.Contains(out, fmt.Sprintf("offsets %d..%d", k, n-1)) {
		t.Fatalf("repair without --yes:\n%s", out)
	}
	if !maps.Equal(before, readDirFiles(t, shardDir)) {
		t.Fatal("repair without --yes changed the shard's directory")
	}

	p, c := startBrokerOn(t, data, "2")
	refused := runFelix(t, opts{}, "log", "repair", "--data-dir", data, "--stream", "orders", "--shard", "0", "--yes")
	refused.wantExit(t, 1)
	if !strings.Contains(refused.stderr.String(), "a broker is running on") {
		t.Fatalf("repair under a running broker: %s", refused.stderr)
	}
	stopBroker(t, p, c)
	if !maps.Equal(before, readDirFiles(t, shardDir)) {
		t.Fatal("a refused repair changed the shard's directory")
	}

	r := runFelix(t, opts{}, "log", "repair", "--data-dir", data, "--stream", "orders", "--shard", "0", "--yes")
	r.wantExit(t, 0)
	if out := r.stdout.String(); !strings.Contains(out, fmt.Sprintf("lost: offsets %d..%d", k, n-1)) || !strings.Contains(out, "damaged-") {
		t.Fatalf("repair --yes:\n%s", out)
	}
	runFelix(t, opts{}, "log", "verify", "--data-dir", data).wantExit(t, 0)
	wantServedAfterRepair(ctx, t, data, st, k)
}

// writeRecords has a broker write n records "rec-<i>" to a new durable
// stream in data, then stops it.
func writeRecords(ctx context.Context, t *testing.T, data string, st client.Stream, n int) {
	t.Helper()
	p, c := startBrokerOn(t, data, "1")
	if _, err := c.CreateStream(ctx, st, client.StreamConfig{Durable: true}); err != nil {
		t.Fatalf("create: %v", err)
	}
	for i := range n {
		if _, err := c.PublishResult(ctx, st, [][]byte{fmt.Appendf(nil, "rec-%d", i)}, client.PublishOptions{Ack: wire.AckPerBatch}); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	stopBroker(t, p, c)
}

// damageBatch flips a byte inside batch k of seg, which holds n batches,
// and returns the batch's byte position and base offset.
func damageBatch(t *testing.T, seg string, n, k int) (int, uint64) {
	t.Helper()
	starts, bases := frameStarts(t, seg)
	if len(starts) != n {
		t.Fatalf("%d batches in %s, want %d", len(starts), seg, n)
	}
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	b[starts[k]+30] ^= 0x10
	if err := os.WriteFile(seg, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return starts[k], bases[k]
}

// wantVerifyNames checks felix log verify, in text and JSON, exits 1 and
// names the damaged batch at byte at, offset offset.
func wantVerifyNames(t *testing.T, data string, at int, offset uint64) {
	t.Helper()
	v := runFelix(t, opts{}, "log", "verify", "--data-dir", data)
	v.wantExit(t, 1)
	want := fmt.Sprintf("at byte %d (offset %d)", at, offset)
	if out := v.stdout.String(); !strings.Contains(out, "default/default/orders shard 0: DAMAGED") || !strings.Contains(out, want) {
		t.Fatalf("verify output does not name the batch (%q):\n%s", want, out)
	}
	j := runFelix(t, opts{}, "log", "verify", "--data-dir", data, "--stream", "orders", "--json")
	j.wantExit(t, 1)
	var report struct {
		Shards []struct {
			Damaged bool
			Report  struct {
				Segments []struct {
					Problems []struct {
						Kind     string
						Position int
						Offset   uint64
					}
				}
			}
		}
	}
	if err := json.Unmarshal(j.stdout.Bytes(), &report); err != nil {
		t.Fatalf("verify --json: %v\n%s", err, j.stdout)
	}
	if sh := report.Shards; len(sh) != 1 || !sh[0].Damaged || len(sh[0].Report.Segments) != 1 || len(sh[0].Report.Segments[0].Problems) != 1 ||
		sh[0].Report.Segments[0].Problems[0].Position != at || sh[0].Report.Segments[0].Problems[0].Offset != offset {
		t.Fatalf("verify --json does not name the batch at byte %d:\n%s", at, j.stdout)
	}
}

// wantServedAfterRepair starts a broker on data: it serves the k records
// kept, each at its offset, and the next publish lands at offset k.
func wantServedAfterRepair(ctx context.Context, t *testing.T, data string, st client.Stream, k int) {
	t.Helper()
	p, c := startBrokerOn(t, data, "3")
	defer stopBroker(t, p, c)
	var got []string
	for from := uint64(0); ; {
		page, err := c.Read(ctx, st, from, client.ReadOptions{})
		if err != nil {
			t.Fatalf("read from %d: %v", from, err)
		}
		for _, r := range page.Records {
			if want := fmt.Sprintf("rec-%d", r.Offset); string(r.Payload) != want {
				t.Fatalf("offset %d holds %q, want %q", r.Offset, r.Payload, want)
			}
			got = append(got, string(r.Payload))
		}
		if len(page.Records) == 0 || page.Next >= page.Committed {
			break
		}
		from = page.Next
	}
	if len(got) != k {
		t.Fatalf("read %d records after the repair, want the %d before the damage", len(got), k)
	}
	res, err := c.PublishResult(ctx, st, [][]byte{[]byte("after")}, client.PublishOptions{Ack: wire.AckPerBatch})
	if err != nil || res.Offset != uint64(k) {
		t.Fatalf("publish after repair: offset %d, %v; want offset %d", res.Offset, err, k)
	}
}

// TestLogRepairRefusesAReplica: a replicated stream's shard (replica.id in
// its directory) is not cut; the message points to move-replica.
func TestLogRepairRefusesAReplica(t *testing.T) {
	dir := t.TempDir()
	shard := filepath.Join(dir, "streams", "default", "default", "r", "0")
	if err := os.MkdirAll(shard, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(shard, "replica.id"), []byte("2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := runFelix(t, opts{}, "log", "repair", "--data-dir", dir, "--stream", "r", "--shard", "0", "--yes")
	r.wantExit(t, 1)
	if !strings.Contains(r.stderr.String(), "move-replica") {
		t.Fatalf("stderr %q; want it to point to felix cluster move-replica", r.stderr)
	}
}

// TestLogRepairSalvage damages one batch in the middle of a stopped
// broker's synced log: repair --salvage without --yes changes nothing,
// with --yes it loses only that batch's offset and says so (stdout,
// lost-offsets.json), and a broker started again serves every other
// record at its offset, the lost one as an empty record with the
// felix-lost header, and continues the offsets at the old end.
func TestLogRepairSalvage(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	st := client.Stream{Name: "orders"}
	const n = 40
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitTimeout)
	defer cancel()
	writeRecords(ctx, t, data, st, n)
	shardDir := filepath.Join(data, "streams", "default", "default", "orders", "0")
	k := n / 2
	damageBatch(t, filepath.Join(shardDir, "00000000000000000000.log"), n, k)

	before := readDirFiles(t, shardDir)
	args := []string{"log", "repair", "--data-dir", data, "--stream", "orders", "--shard", "0", "--salvage"}
	plan := runFelix(t, opts{}, args...)
	plan.wantExit(t, 0)
	if out := plan.stdout.String(); !strings.Contains(out, "nothing was changed") || !strings.Contains(out, fmt.Sprintf("would lose: offsets %d..%d,", k, k)) {
		t.Fatalf("repair --salvage without --yes:\n%s", out)
	}
	if !maps.Equal(before, readDirFiles(t, shardDir)) {
		t.Fatal("repair --salvage without --yes changed the shard's directory")
	}

	r := runFelix(t, opts{}, append(args, "--yes")...)
	r.wantExit(t, 0)
	wantOut := []string{fmt.Sprintf("lost: offsets %d..%d,", k, k), fmt.Sprintf("kept %d records after the first damage; 1 offsets lost", n-k-1), "lost-offsets.json"}
	for _, want := range wantOut {
		if !strings.Contains(r.stdout.String(), want) {
			t.Fatalf("repair --salvage --yes does not say %q:\n%s", want, r.stdout)
		}
	}
	lost, err := os.ReadFile(filepath.Join(shardDir, "lost-offsets.json"))
	if err != nil || !strings.Contains(string(lost), fmt.Sprintf(`"from":%d,"to":%d`, k, k+1)) {
		t.Fatalf("lost-offsets.json: %v\n%s", err, lost)
	}
	runFelix(t, opts{}, "log", "verify", "--data-dir", data).wantExit(t, 0)

	p, c := startBrokerOn(t, data, "3")
	defer stopBroker(t, p, c)
	seen := 0
	for from := uint64(0); from < n; {
		page, err := c.Read(ctx, st, from, client.ReadOptions{})
		if err != nil || len(page.Records) == 0 {
			t.Fatalf("read from %d: %d records, %v", from, len(page.Records), err)
		}
		for _, r := range page.Records {
			if r.Offset != from {
				t.Fatalf("read offset %d, want %d", r.Offset, from)
			}
			if r.Offset == uint64(k) {
				if len(r.Payload) != 0 || len(r.Headers) != 1 || r.Headers[0].Key != "felix-lost" || string(r.Headers[0].Value) != "salvage" {
					t.Fatalf("lost offset %d: payload %q, headers %v; want an empty record with felix-lost: salvage", k, r.Payload, r.Headers)
				}
			} else if want := fmt.Sprintf("rec-%d", r.Offset); string(r.Payload) != want {
				t.Fatalf("offset %d holds %q, want %q", r.Offset, r.Payload, want)
			}
			from++
			seen++
		}
	}
	if seen != n {
		t.Fatalf("read %d records, want %d", seen, n)
	}
	res, err := c.PublishResult(ctx, st, [][]byte{[]byte("after")}, client.PublishOptions{Ack: wire.AckPerBatch})
	if err != nil || res.Offset != n {
		t.Fatalf("publish after salvage: offset %d, %v; want offset %d", res.Offset, err, n)
	}
}
